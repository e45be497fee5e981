#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Checks of the fake Kubernetes API server itself, mostly through the real kube client:
//! lists and selectors (`lists`), watches (`watches`), writes (`writes`), faults and the
//! server's lifecycle (`faults`), discovery and kubeconfig (`discovery`), the helper methods
//! (`helpers`), TokenReview (`token_reviews`), SubjectAccessReview (`access_reviews`),
//! Secrets and their `type` field selector (`secrets`) and a scale check (`scale`), with a
//! small HTTP/1.1 client for what kube hides (`raw`).

#[path = "fake_api/access_reviews.rs"]
mod access_reviews;
#[path = "fake_api/discovery.rs"]
mod discovery;
#[path = "fake_api/faults.rs"]
mod faults;
#[path = "fake_api/helpers.rs"]
mod helpers;
#[path = "fake_api/lists.rs"]
mod lists;
#[path = "fake_api/raw.rs"]
mod raw;
#[path = "fake_api/scale.rs"]
mod scale;
#[path = "fake_api/secrets.rs"]
mod secrets;
#[path = "fake_api/token_reviews.rs"]
mod token_reviews;
#[path = "fake_api/watches.rs"]
mod watches;
#[path = "fake_api/writes.rs"]
mod writes;

use std::future::Future;
use std::time::Duration;

use serde_json::{Value, json};
use wayfinder_kubernetes::fake::FakeApiServer;

/// A bound on waits that should end at once, so a broken fake fails instead of hanging.
pub(crate) const GUARD: Duration = Duration::from_secs(20);

/// Awaits `f`, failing the test after [`GUARD`].
pub(crate) async fn guard<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, f).await.expect("timed out")
}

/// A client that does not retry 429/503/504 itself (kube's default client does, for minutes).
pub(crate) fn client_without_retries(fake: &FakeApiServer) -> kube::Client {
    let mut config = kube::Config::new(fake.url().parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> Value {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

pub(crate) fn service(ns: &str, name: &str, label: &[(&str, &str)]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": ns, "labels": labels(label) },
        "spec": { "clusterIP": "10.0.0.1", "ports": [{ "name": "http", "port": 80, "protocol": "TCP" }] },
    })
}

pub(crate) fn pod(ns: &str, name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "labels": { "app": "web" } },
        "spec": { "nodeName": node, "containers": [{ "name": "c", "image": "nginx" }] },
        "status": { "phase": "Running", "podIP": "10.1.0.1" },
    })
}

pub(crate) fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "labels": { "topology.kubernetes.io/zone": "z1" } },
        "spec": {},
    })
}

/// An EndpointSlice of Service `svc` with `n` ready endpoints.
pub(crate) fn slice(ns: &str, name: &str, svc: &str, n: usize) -> Value {
    let endpoints: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "addresses": [format!("10.{}.{}.{}", i / 65536 % 256, i / 256 % 256, i % 256)],
                "conditions": { "ready": true, "serving": true, "terminating": false },
                "nodeName": "node-1",
                "zone": "z1",
                "targetRef": { "kind": "Pod", "namespace": ns, "name": format!("{svc}-{i}") },
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": { "name": name, "namespace": ns, "labels": { "kubernetes.io/service-name": svc } },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
    })
}

pub(crate) fn virtual_service(ns: &str, name: &str, host: &str) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "hosts": [host], "http": [{ "route": [{ "destination": { "host": host } }] }] },
    })
}
