//! The resolver over published snapshots and a local issuer whose answer the test changes:
//! keys fetched when a policy names them, refreshed, kept when a refresh fails, and dropped
//! when no policy names them. Each step waits for the table to change, within a deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec, RequestAuthentication};

use super::*;
use crate::aggregate::snapshot_with_config;
use crate::snapshot::published;
use crate::testing::until;

/// What the issuer answers: keys, or a status.
type Answer = Arc<Mutex<Result<String, u16>>>;

fn keys(kid: &str) -> String {
    format!(r#"{{"keys":[{{"kty":"RSA","kid":"{kid}","n":"xAE7eB6q","e":"AQAB"}}]}}"#)
}

async fn issuer(answer: Answer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route(
            "/jwks",
            get(|State(answer): State<Answer>| async move {
                let now = answer.lock().unwrap().clone();
                let response: Response = match now {
                    Ok(body) => body.into_response(),
                    Err(status) => StatusCode::from_u16(status).unwrap().into_response(),
                };
                response
            }),
        )
        .with_state(answer);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/jwks")
}

/// A model with a RequestAuthentication whose rules are `rules` (flow YAML).
fn model(rules: &str) -> Arc<Snapshot> {
    let spec: RequestAuthentication =
        serde_saphyr::from_str(&format!("{{jwtRules: {rules}}}")).unwrap();
    let object = ConfigObject {
        meta: ConfigMeta {
            name: "jwt".into(),
            namespace: "default".into(),
            ..Default::default()
        },
        spec: ConfigSpec::RequestAuthentication(Box::new(spec)),
    };
    let model = snapshot_with_config(Vec::new(), vec![object]).unwrap();
    assert_eq!(model.config.objects.len(), 1, "the policy is valid");
    Arc::new(model)
}

#[tokio::test]
async fn keys_are_fetched_refreshed_kept_on_failure_and_dropped_when_no_longer_named() {
    let answer: Answer = Arc::new(Mutex::new(Ok(keys("a"))));
    let uri = issuer(answer.clone()).await;
    let (publisher, reader) = published();
    let shutdown = CancellationToken::new();
    let settings = Settings {
        refresh: Duration::from_millis(100),
        retry: Duration::from_millis(50),
        max_retry: Duration::from_millis(200),
        max_bytes: 4096,
    };
    let mut rx = spawn(reader, settings, shutdown.clone());
    let fallback = rx.borrow().jwks("https://issuer", &uri).unwrap();

    // Named: fetched. An inline rule names nothing to fetch.
    publisher.publish(model(&format!(
        "[{{issuer: https://issuer, jwksUri: '{uri}'}}, {{issuer: inline, jwks: '{}'}}]",
        keys("inline")
    )));
    let table = until(&mut rx, "the first keys", |t| {
        t.jwks("https://issuer", &uri).as_deref() == Some(keys("a").as_str())
    })
    .await;
    assert_eq!(table.entries().len(), 1, "{table:?}");
    let fetched = &table.entries().values().next().unwrap();
    assert!(fetched.error.is_none() && fetched.fetched_at.is_some());

    // Refreshed.
    *answer.lock().unwrap() = Ok(keys("b"));
    until(&mut rx, "the refreshed keys", |t| {
        t.jwks("https://issuer", &uri).as_deref() == Some(keys("b").as_str())
    })
    .await;

    // A failure keeps the last good keys, with the error beside them.
    *answer.lock().unwrap() = Err(503);
    let table = until(&mut rx, "the failure", |t| {
        t.entries().values().any(|f| f.error.is_some())
    })
    .await;
    let failed = table.entries().values().next().unwrap();
    assert_eq!(
        failed.error.as_deref(),
        Some(format!("GET {uri}: status 503").as_str())
    );
    assert_eq!(
        table.jwks("https://issuer", &uri).as_deref(),
        Some(keys("b").as_str())
    );

    // And the next good answer replaces them.
    *answer.lock().unwrap() = Ok(keys("c"));
    until(&mut rx, "the recovery", |t| {
        t.jwks("https://issuer", &uri).as_deref() == Some(keys("c").as_str())
            && t.entries().values().all(|f| f.error.is_none())
    })
    .await;

    // No longer named: dropped, and its issuer's tokens meet the fallback again.
    publisher.publish(model("[]"));
    let table = until(&mut rx, "the keys dropped", |t| t.entries().is_empty()).await;
    assert_eq!(table.jwks("https://issuer", &uri), Some(fallback));
    shutdown.cancel();
}

#[tokio::test]
async fn keys_never_fetched_are_the_fallback_which_no_token_matches() {
    let (publisher, reader) = published();
    let shutdown = CancellationToken::new();
    let mut rx = spawn(reader, Settings::default(), shutdown.clone());
    // Nothing listens there: connection refused.
    let uri = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/jwks", listener.local_addr().unwrap())
    };
    publisher.publish(model(&format!(
        "[{{issuer: https://issuer, jwksUri: '{uri}'}}]"
    )));
    let table = until(&mut rx, "the failed fetch", |t| {
        t.entries().values().any(|f| f.error.is_some())
    })
    .await;
    let fallback = table.jwks("https://issuer", &uri).unwrap();
    fetch::check_jwks(fallback.as_bytes()).unwrap();
    assert!(table.entries().values().all(|f| f.jwks.is_none()));
    shutdown.cancel();
}

#[test]
fn wanted_keys_come_from_rules_without_inline_keys_with_their_longest_timeout() {
    let model = model(&format!(
        "[{{issuer: a, jwksUri: 'https://a/jwks', timeout: 2s}}, \
          {{issuer: a, jwksUri: 'https://a/jwks', timeout: 7s}}, \
          {{issuer: 'https://b'}}, \
          {{issuer: c, jwks: '{}'}}]",
        keys("c")
    ));
    let wanted: Vec<(String, String, Duration)> = wanted(&model)
        .into_iter()
        .map(|(k, t)| (k.issuer.to_string(), k.uri.to_string(), t))
        .collect();
    assert_eq!(
        wanted,
        [
            ("a".into(), "https://a/jwks".into(), Duration::from_secs(7)),
            ("https://b".into(), String::new(), DEFAULT_TIMEOUT),
        ]
    );
}
