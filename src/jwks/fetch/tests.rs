//! Fetches against a local issuer (axum on loopback): keys as served, OpenID discovery, and
//! every refusal with its reason.

use std::future::pending;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::*;

const JWKS: &str = r#"{"keys":[{"kty":"RSA","kid":"a","n":"xAE7eB6q","e":"AQAB"}]}"#;

/// An issuer on loopback: its address.
async fn issuer() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let discovery = format!(r#"{{"issuer":"http://{addr}","jwks_uri":"http://{addr}/jwks"}}"#);
    let app = Router::new()
        .route("/jwks", get(|| async { JWKS }))
        .route(DISCOVERY, get(move || async move { discovery }))
        .route("/big", get(|| async { "x".repeat(10_000) }))
        .route("/html", get(|| async { "<html>not keys</html>" }))
        .route("/no-keys", get(|| async { r#"{"keys":[]}"# }))
        .route("/oops", get(|| async { StatusCode::INTERNAL_SERVER_ERROR }))
        .route(
            "/to-metadata",
            get(|| async {
                (
                    StatusCode::FOUND,
                    [(header::LOCATION, "http://169.254.169.254/latest/meta-data/")],
                )
                    .into_response()
            }),
        )
        .route(
            "/private",
            get(|| async {
                r#"{"keys":[{"kty":"RSA","n":"xAE7eB6q","e":"AQAB","d":"c2VjcmV0","p":"cA"},{"kty":"oct","k":"c2VjcmV0"}]}"#
            }),
        )
        .route("/never", get(pending::<&'static str>));
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn key(issuer: &str, uri: &str) -> JwksKey {
    JwksKey {
        issuer: issuer.into(),
        uri: uri.into(),
    }
}

async fn fetch(uri: String) -> Result<String, FetchError> {
    let client = client().unwrap();
    jwks(
        &client,
        &key("https://issuer", &uri),
        Duration::from_secs(10),
        1024,
    )
    .await
}

#[tokio::test]
async fn the_keys_are_served_verbatim_from_the_uri_or_by_discovery() {
    let addr = issuer().await;
    assert_eq!(fetch(format!("http://{addr}/jwks")).await.unwrap(), JWKS);
    let client = client().unwrap();
    let discovered = jwks(
        &client,
        &key(&format!("http://{addr}/"), ""),
        Duration::from_secs(10),
        1024,
    )
    .await
    .unwrap();
    assert_eq!(discovered, JWKS);
}

#[tokio::test]
async fn what_is_not_keys_is_refused_with_its_reason() {
    let addr = issuer().await;
    let error = |path: &str| {
        let uri = format!("http://{addr}{path}");
        async move { fetch(uri).await.unwrap_err().to_string() }
    };
    assert_eq!(
        error("/big").await,
        format!("GET http://{addr}/big: the answer is larger than 1024 bytes")
    );
    assert_eq!(
        error("/html").await,
        format!("GET http://{addr}/html: not a JSON document")
    );
    assert_eq!(
        error("/no-keys").await,
        format!(
            "GET http://{addr}/no-keys: no public key Envoy can use (RSA, EC or OKP with its \
             members)"
        )
    );
    assert_eq!(
        error("/oops").await,
        format!("GET http://{addr}/oops: status 500")
    );
    let redirected = error("/to-metadata").await;
    assert!(
        redirected.contains("169.254.169.254 is link-local"),
        "{redirected}"
    );
    let client = client().unwrap();
    let never = jwks(
        &client,
        &key("i", &format!("http://{addr}/never")),
        Duration::from_millis(100),
        1024,
    )
    .await
    .unwrap_err();
    assert!(never.to_string().contains("no answer within"), "{never}");
}

#[tokio::test]
async fn blocked_addresses_and_schemes_are_never_asked() {
    for (uri, why) in [
        (
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254 is link-local",
        ),
        ("http://[fe80::1]/keys", "fe80::1 is link-local"),
        (
            "http://100.100.100.200/keys",
            "100.100.100.200 is a cloud metadata address",
        ),
        (
            "http://[fd00:ec2::254]/keys",
            "fd00:ec2::254 is a cloud metadata address",
        ),
        ("file:///etc/passwd", "scheme \"file\" is not supported"),
    ] {
        let error = fetch(uri.into()).await.unwrap_err().to_string();
        assert!(error.contains(why), "{uri}: {error}");
    }
    assert_eq!(blocked("10.0.0.1".parse().unwrap()), None);
    assert_eq!(blocked("127.0.0.1".parse().unwrap()), None);
}

#[tokio::test]
async fn private_key_material_never_leaves_the_fetch() {
    let addr = issuer().await;
    let keys = fetch(format!("http://{addr}/private")).await.unwrap();
    let document: serde_json::Value = serde_json::from_str(&keys).unwrap();
    assert_eq!(
        document,
        serde_json::json!({"keys": [{"kty": "RSA", "n": "xAE7eB6q", "e": "AQAB"}]})
    );
}

#[test]
fn the_fallback_is_a_fresh_public_key_envoy_can_read() {
    let (a, b) = (public_only_jwks().unwrap(), public_only_jwks().unwrap());
    assert_ne!(a, b, "a new key each time");
    check_jwks(a.as_bytes()).unwrap();
    let document: serde_json::Value = serde_json::from_str(&a).unwrap();
    let key = &document["keys"][0];
    assert_eq!((&key["kty"], &key["crv"]), (&"EC".into(), &"P-256".into()));
    assert!(key.get("d").is_none(), "no private key: {key}");
}
