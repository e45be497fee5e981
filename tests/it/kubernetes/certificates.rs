//! A pod's first certificate with its service-account token: the certificate API asks the
//! (fake) API server's TokenReview, for the `istio-ca` audience, as istiod does.

use wayfinder_kubernetes::fake::FakeApiServer;

use crate::secure::{channel, create, csr, verify};

#[tokio::test]
async fn a_service_account_token_for_istio_ca_gets_its_service_account_s_certificate() {
    let fake = FakeApiServer::start().await;
    fake.add_token("projected-token", "shop", "cart", &["istio-ca"]);
    fake.add_token("legacy-token", "shop", "cart", &[]);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let w = super::start(&fake, dir.path(), &[]).await;
    let root = std::fs::read_to_string(w.ca_dir().join("root-cert.pem")).expect("the root");
    let anonymous = channel(w.secure_grpc().await, &root, None).await;
    let (csr, _) = csr();

    let chain = create(anonymous.clone(), &csr, Some("projected-token"))
        .await
        .expect("a certificate");
    let leaf = verify(&chain, &root);
    assert_eq!(
        leaf.identities[0].to_string(),
        "spiffe://cluster.local/ns/shop/sa/cart"
    );
    for (token, why) in [
        ("legacy-token", "audiences"),
        ("forged-token", "invalid bearer token"),
    ] {
        let refused = create(anonymous.clone(), &csr, Some(token))
            .await
            .expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        assert!(refused.message().contains(why), "{refused:?}");
    }
    assert_eq!(
        fake.counts().token_reviews,
        3,
        "one review per token presented"
    );
}
