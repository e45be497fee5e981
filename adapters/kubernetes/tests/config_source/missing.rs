//! Clusters whose API server lacks some of Istio's CRDs. The fake serves every kind in every
//! version, so these tests run a small API server of their own that serves only some kinds in
//! some versions (a list, and a watch that stays open) and answers 404 for the rest, as an
//! API server does for a CRD that is not installed.
//!
//! Not tested: that a CRD installed later is found (the source looks again every 30 seconds,
//! too long for a test, and virtual time does not mix with real sockets).

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use wayfinder_config::Kind;

use crate::support::{CLUSTER, config_source, entries, key, virtual_service};

/// What the server serves: (version, plural, objects).
type Served = Arc<Vec<(&'static str, &'static str, Vec<Value>)>>;

/// Starts the server; it runs until the test's runtime ends.
async fn sparse_api_server(served: Vec<(&'static str, &'static str, Vec<Value>)>) -> kube::Client {
    let app = Router::new()
        .route(
            "/apis/networking.istio.io/{version}/{plural}",
            get(resource),
        )
        .with_state(Arc::new(served));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
}

async fn resource(
    State(served): State<Served>,
    Path((version, plural)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some((_, _, objects)) = served
        .iter()
        .find(|(v, p, _)| *v == version && *p == plural)
    else {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
            "message": "the server could not find the requested resource", "code": 404,
        });
        return (StatusCode::NOT_FOUND, status.to_string()).into_response();
    };
    if query.is_some_and(|q| q.contains("watch=true")) {
        // Nothing ever changes: the watch stays open and silent.
        let silent = futures::stream::pending::<Result<Bytes, Infallible>>();
        return Body::from_stream(silent).into_response();
    }
    let list = json!({
        "apiVersion": format!("networking.istio.io/{version}"),
        "kind": "List",
        "metadata": {"resourceVersion": "1"},
        "items": objects,
    });
    list.to_string().into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_istio_is_empty_and_synced_at_once() {
    let client = sparse_api_server(Vec::new()).await;
    let mut config = config_source(client.clone());
    assert!(config.reset().await.is_empty());
    let mut registry = entries(client);
    assert!(registry.reset().await.is_empty());
    config.stop().await;
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_served_only_in_v1beta1_is_read_there_and_missing_kinds_are_empty() {
    let mut reviews = virtual_service("reviews", 100);
    reviews["apiVersion"] = json!("networking.istio.io/v1beta1");
    reviews["metadata"]["uid"] = json!("u-1");
    reviews["metadata"]["resourceVersion"] = json!("1");
    let client = sparse_api_server(vec![("v1beta1", "virtualservices", vec![reviews])]).await;
    let mut items = config_source(client);
    let objects = items.reset().await;
    let [vs] = objects.as_slice() else {
        panic!("one object expected: {objects:#?}");
    };
    assert_eq!(vs.key(), key(Kind::VirtualService, "reviews"));
    assert_eq!(
        &*vs.meta.origin,
        format!(
            "{CLUSTER}: /apis/networking.istio.io/v1beta1/namespaces/default/virtualservices/reviews"
        )
    );
    items.stop().await;
}
