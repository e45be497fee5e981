//! Whether a gateway's service account may read Secrets, asked of the API server
//! (`SubjectAccessReview`), as istiod asks before it serves a gateway a `credentialName`
//! (`pilot/pkg/credentials/kube/secrets.go`, `Authorize`).
//!
//! A gateway gets the credentials of Secrets in its namespace only if its own service account
//! could list them there: wayfinder reads Secrets with its own, wider rights, and must not
//! hand a proxy what its identity could not read itself. Each question is one `POST` to
//! `/apis/authorization.k8s.io/v1/subjectaccessreviews` for the user
//! `system:serviceaccount:NAMESPACE:NAME`, verb `list`, resource `secrets` in `NAMESPACE`:
//! the server needs `create` on `subjectaccessreviews` (group `authorization.k8s.io`,
//! cluster-wide), as istiod's ClusterRole has. Nothing is cached here; a caller that asks
//! often keeps the answers (istiod: allowed for 5 minutes, denied for 1).

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// What the API server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// The service account may list Secrets in its namespace.
    Allowed,
    /// It may not: the API server's reason, or, when it gave none (the RBAC authorizer gives
    /// none for a denial), a sentence saying that it did not allow it.
    Denied(String),
}

/// Asks one cluster's API server what service accounts may do.
#[derive(Clone)]
pub struct AccessReviews {
    client: kube::Client,
}

/// Without the client, which says nothing useful.
impl std::fmt::Debug for AccessReviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessReviews").finish_non_exhaustive()
    }
}

impl AccessReviews {
    /// Asks through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// Whether the service account `namespace/service_account` may `list` `secrets` in
    /// `namespace`. `Err` when the API server could not answer.
    pub async fn may_list_secrets(
        &self,
        namespace: &str,
        service_account: &str,
    ) -> Result<Access, kube::Error> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!(
                    "system:serviceaccount:{namespace}:{service_account}"
                )),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_owned()),
                    verb: Some("list".to_owned()),
                    resource: Some("secrets".to_owned()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        let status = answer.status.unwrap_or_default();
        if status.allowed {
            return Ok(Access::Allowed);
        }
        // An authorizer that failed says so in `evaluationError`; the RBAC authorizer's plain
        // "no rule allows it" has neither.
        let why = [status.reason, status.evaluation_error]
            .into_iter()
            .flatten()
            .find(|s| !s.is_empty())
            .unwrap_or_else(|| {
                format!(
                    "the API server did not allow service account {namespace}/{service_account} \
                     to list secrets in namespace {namespace}"
                )
            });
        Ok(Access::Denied(why))
    }
}
