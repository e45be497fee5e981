//! TokenReview through the real kube client: the fake answers as the API server does, and
//! `token_review::TokenReviews` reads it.

use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::token_review::{TokenReviews, Verdict};

#[tokio::test]
async fn a_service_account_token_is_accepted_only_for_its_audience() {
    let fake = FakeApiServer::start().await;
    fake.add_token("pod-token", "a", "web", &["istio-ca"]);
    fake.add_token("api-token", "a", "web", &[]);
    let istio = TokenReviews::new(fake.client(), vec!["istio-ca".into()]);
    let web = Verdict::ServiceAccount {
        namespace: "a".into(),
        name: "web".into(),
    };
    assert_eq!(istio.review("pod-token").await.unwrap(), web);
    let Verdict::Refused(why) = istio.review("api-token").await.unwrap() else {
        panic!("a token for the API server's audience only");
    };
    assert!(why.contains("audiences"), "{why}");
    let Verdict::Refused(why) = istio.review("forged").await.unwrap() else {
        panic!("an unknown token");
    };
    assert!(why.contains("invalid bearer token"), "{why}");
    let default = TokenReviews::new(fake.client(), vec![]);
    assert_eq!(default.review("api-token").await.unwrap(), web);
    assert_eq!(fake.counts().token_reviews, 4);
}
