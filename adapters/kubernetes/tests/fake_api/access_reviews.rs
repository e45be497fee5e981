//! SubjectAccessReview through the real kube client: the fake answers as the RBAC authorizer
//! does for what a test granted, and `access_review::AccessReviews` reads it.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use wayfinder_kubernetes::access_review::{Access, AccessReviews};
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::raw;

const INGRESS: &str = "system:serviceaccount:gw:ingress";

#[tokio::test]
async fn a_service_account_may_list_secrets_only_where_it_was_granted() {
    let fake = FakeApiServer::start().await;
    fake.allow(INGRESS, "gw", "list", "secrets");
    fake.allow("system:serviceaccount:gw:reader", "gw", "get", "secrets");
    fake.allow("system:serviceaccount:shop:web", "shop", "list", "pods");
    let reviews = AccessReviews::new(fake.client());
    assert_eq!(
        reviews.may_list_secrets("gw", "ingress").await.unwrap(),
        Access::Allowed
    );
    for (namespace, account) in [("gw", "reader"), ("shop", "web"), ("gw", "other")] {
        let Access::Denied(why) = reviews.may_list_secrets(namespace, account).await.unwrap()
        else {
            panic!("{namespace}/{account} was allowed");
        };
        assert_eq!(
            why,
            format!(
                "the API server did not allow service account {namespace}/{account} to list \
                 secrets in namespace {namespace}"
            )
        );
    }
    // A grant in every namespace.
    fake.allow("system:serviceaccount:shop:web", "", "list", "secrets");
    assert_eq!(
        reviews.may_list_secrets("shop", "web").await.unwrap(),
        Access::Allowed
    );
    assert_eq!(fake.counts().access_reviews, 5);
    assert_eq!(fake.counts().writes, 0, "a review is not a write");
}

fn review(user: &str, namespace: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                verb: Some("list".to_owned()),
                resource: Some("secrets".to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

#[tokio::test]
async fn the_answer_echoes_the_spec_and_names_the_binding_that_allowed_it() {
    let fake = FakeApiServer::start().await;
    fake.allow(INGRESS, "gw", "list", "secrets");
    let api: Api<SubjectAccessReview> = Api::all(fake.client());
    let asked = review(INGRESS, "gw");
    let answer = api.create(&PostParams::default(), &asked).await.unwrap();
    assert_eq!(answer.spec, asked.spec);
    let status = answer.status.unwrap();
    assert!(status.allowed);
    assert_eq!(
        status.reason.as_deref(),
        Some(
            "RBAC: allowed by RoleBinding \"list-secrets/gw\" of Role \"list-secrets\" to \
             ServiceAccount \"ingress/gw\""
        )
    );
    // Denied: RBAC gives no reason.
    let answer = api
        .create(&PostParams::default(), &review(INGRESS, "shop"))
        .await
        .unwrap();
    let status = answer.status.unwrap();
    assert!(!status.allowed);
    assert_eq!(status.reason, None);
    assert_eq!(fake.counts().access_reviews, 2);
}

#[tokio::test]
async fn a_body_that_is_not_a_valid_review_is_refused() {
    let fake = FakeApiServer::start().await;
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let post = |body: &'static str| {
        let url = fake.url();
        async move { raw::request(&url, "POST", path, Some(("application/json", body))).await }
    };
    let answer = post(
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"t"}}"#,
    )
    .await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json().await["reason"], "BadRequest");
    let answer = post(r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"list","resource":"secrets"}}}"#).await;
    assert_eq!(answer.status, 422);
    let status = answer.json().await;
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "spec.user");
    let answer = post(r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice"}}"#).await;
    assert_eq!(answer.status, 422);
    assert_eq!(
        answer.json().await["details"]["causes"][0]["field"],
        "spec.resourceAttributes"
    );
    assert_eq!(post("{}").await.status, 400);
    let answer = raw::get(&fake.url(), path).await;
    assert_eq!(answer.status, 405);
    assert_eq!(fake.counts().access_reviews, 0, "refusals are not answers");
}
