//! Gateways' Secrets watched from the in-process API server through the real kube client
//! (`secrets::watch`): the `Reset`/`Upsert`/`Remove` contract, Istio's field selector, one
//! namespace, a compacted watch and a failing server. Every wait has a deadline; nothing
//! sleeps to synchronize.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret as ApiSecret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use tokio::sync::mpsc;
use wayfinder_config::credentials::Secret;
use wayfinder_kubernetes::fake::{FakeApiServer, Fault};
use wayfinder_kubernetes::secrets;
use wayfinder_registry::{Event, RegistryError};

/// How long a test waits for an item before failing.
const DEADLINE: Duration = Duration::from_secs(20);
/// The cluster's name in origins.
const CLUSTER: &str = "test";

/// The watch's items, read by a task of their own as a consumer reads them: the watch makes
/// progress only while polled, and a test that waits for the fake must not stop it.
struct Items(mpsc::UnboundedReceiver<Result<Event<Secret>, RegistryError>>);

impl Items {
    fn watch(client: kube::Client, namespace: Option<&str>) -> Self {
        let mut stream = secrets::watch(client, CLUSTER, namespace.map(str::to_owned));
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                if tx.send(item).is_err() {
                    break;
                }
            }
        });
        Self(rx)
    }

    async fn next(&mut self) -> Result<Event<Secret>, RegistryError> {
        tokio::time::timeout(DEADLINE, self.0.recv())
            .await
            .expect("no item before the deadline")
            .expect("the stream ended")
    }

    /// The next item, which must be a `Reset`: its Secrets by key.
    async fn reset(&mut self) -> Vec<Secret> {
        match self.next().await {
            Ok(Event::Reset(secrets)) => secrets,
            other => panic!("expected a Reset, got {other:?}"),
        }
    }

    /// The next item, which must be an `Upsert`.
    async fn upsert(&mut self) -> Secret {
        match self.next().await {
            Ok(Event::Upsert(secret)) => secret,
            other => panic!("expected an Upsert, got {other:?}"),
        }
    }
}

/// A client that reports 503 answers at once (kube's default client retries them itself).
fn client_without_retries(fake: &FakeApiServer) -> kube::Client {
    let mut config = kube::Config::new(fake.url().parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// A Secret of `type_` (none when empty) with `data` given as text, as JSON: k8s-openapi
/// writes `data` in base64 as the API carries it.
fn secret(ns: &str, name: &str, type_: &str, data: &[(&str, &str)]) -> Value {
    let secret = ApiSecret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        type_: (!type_.is_empty()).then(|| type_.to_owned()),
        ..ApiSecret::default()
    };
    serde_json::to_value(secret).unwrap()
}

fn tls(ns: &str, name: &str, cert: &str) -> Value {
    secret(
        ns,
        name,
        "kubernetes.io/tls",
        &[("tls.crt", cert), ("tls.key", "KEY")],
    )
}

fn key(ns: &str, name: &str) -> (Arc<str>, Arc<str>) {
    (ns.into(), name.into())
}

fn keys(secrets: &[Secret]) -> Vec<(Arc<str>, Arc<str>)> {
    let mut keys: Vec<_> = secrets
        .iter()
        .map(|s| (s.namespace.clone(), s.name.clone()))
        .collect();
    keys.sort();
    keys
}

fn bytes<'a>(secret: &'a Secret, key: &str) -> &'a [u8] {
    secret.get(key).map_or(&[], |b| &**b)
}

/// A gateway's Secrets in `a` and `b`, and the two kinds the field selector leaves out.
fn cluster_secrets() -> Vec<Value> {
    vec![
        tls("a", "ingress-cert", "CERT-1"),
        secret(
            "b",
            "generic",
            "Opaque",
            &[("cert", "C"), ("key", "K"), ("cacert", "CA"), ("note", "x")],
        ),
        secret("b", "untyped", "", &[("ca.crt", "CA")]),
        secret(
            "a",
            "default-token-x1",
            "kubernetes.io/service-account-token",
            &[("token", "T")],
        ),
        secret(
            "a",
            "sh.helm.release.v1.app.v1",
            "helm.sh/release.v1",
            &[("release", "R")],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_a_reset_then_upserts_and_removes() {
    let fake = FakeApiServer::start().await;
    fake.apply_many(cluster_secrets());
    let mut items = Items::watch(fake.client(), None);

    // The first item: every Secret the field selector admits, cut to a gateway's keys.
    let reset = items.reset().await;
    assert_eq!(
        keys(&reset),
        [
            key("a", "ingress-cert"),
            key("b", "generic"),
            key("b", "untyped")
        ]
    );
    let generic = reset.iter().find(|s| &*s.name == "generic").unwrap();
    assert_eq!(bytes(generic, "cert"), b"C");
    assert_eq!(bytes(generic, "cacert"), b"CA");
    assert!(generic.get("note").is_none(), "a key no gateway reads");
    let ingress = reset.iter().find(|s| &*s.name == "ingress-cert").unwrap();
    assert_eq!(bytes(ingress, "tls.crt"), b"CERT-1");

    // A create; a token Secret before it is not sent at all.
    fake.apply(secret(
        "b",
        "builder-token-y2",
        "kubernetes.io/service-account-token",
        &[("token", "T")],
    ));
    fake.apply(tls("b", "shop-cert", "CERT-2"));
    let created = items.upsert().await;
    assert_eq!(
        (&*created.namespace, &*created.name),
        ("b", "shop-cert"),
        "the token Secret was sent"
    );
    assert_eq!(bytes(&created, "tls.crt"), b"CERT-2");

    // An update carries the new bytes.
    fake.apply(tls("a", "ingress-cert", "CERT-3"));
    let updated = items.upsert().await;
    assert_eq!((&*updated.namespace, &*updated.name), ("a", "ingress-cert"));
    assert_eq!(bytes(&updated, "tls.crt"), b"CERT-3");

    // A delete.
    assert!(fake.delete("v1", "Secret", Some("b"), "generic"));
    match items.next().await {
        Ok(Event::Remove(removed)) => assert_eq!(removed, key("b", "generic")),
        other => panic!("expected generic's Remove, got {other:?}"),
    }
    let lists = fake.counts().lists;
    assert_eq!(lists.get("secrets"), Some(&1), "{lists:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_of_one_namespace_sees_only_its_secrets() {
    let fake = FakeApiServer::start().await;
    fake.apply_many(cluster_secrets());
    let mut items = Items::watch(fake.client(), Some("b"));
    assert_eq!(
        keys(&items.reset().await),
        [key("b", "generic"), key("b", "untyped")]
    );
    fake.apply(tls("a", "elsewhere", "CERT"));
    fake.apply(tls("b", "here", "CERT"));
    let created = items.upsert().await;
    assert_eq!((&*created.namespace, &*created.name), ("b", "here"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_watch_relists_without_an_error() {
    let fake = FakeApiServer::start().await;
    // No bookmarks: the watch's resourceVersion stays the list's, older than the compaction.
    fake.set_bookmark_interval(Duration::from_secs(3600));
    fake.apply(tls("a", "ingress-cert", "CERT-1"));
    let mut items = Items::watch(fake.client(), None);
    assert_eq!(items.reset().await.len(), 1);
    fake.until_watching("secrets", 1).await;
    // Writes the watch does not see (a token Secret), then etcd compacts and the watch breaks.
    fake.apply(secret(
        "a",
        "default-token-x1",
        "kubernetes.io/service-account-token",
        &[("token", "T")],
    ));
    fake.compact();
    fake.cut_watches();
    let reset = items.reset().await;
    assert_eq!(keys(&reset), [key("a", "ingress-cert")]);
    assert!(
        fake.counts().gone > 0,
        "the watch was not resumed from a compacted version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_api_server_is_an_error_item_then_a_fresh_reset() {
    let fake = FakeApiServer::start().await;
    fake.apply(tls("a", "ingress-cert", "CERT-1"));
    let mut items = Items::watch(client_without_retries(&fake), None);
    assert_eq!(items.reset().await.len(), 1);
    fake.until_watching("secrets", 1).await;
    fake.set_fault(Fault::Status(503));
    fake.cut_watches();
    let err = match items.next().await {
        Err(err) => err,
        Ok(event) => panic!("expected an error item, got {event:?}"),
    };
    let RegistryError::Unavailable { origin, detail } = &err else {
        panic!("expected Unavailable, got {err:?}");
    };
    assert_eq!(origin, "cluster test: list/watch v1 secrets");
    assert!(detail.contains("503"), "{detail}");

    // What changed meanwhile is in the Reset of the fresh list once the server answers.
    fake.apply(tls("a", "ingress-cert", "CERT-2"));
    fake.apply(tls("b", "shop-cert", "CERT-3"));
    fake.set_fault(Fault::None);
    let reset = loop {
        match items.next().await {
            Ok(Event::Reset(secrets)) => break secrets,
            Err(RegistryError::Unavailable { .. }) => continue,
            other => panic!("expected a Reset after the failure, got {other:?}"),
        }
    };
    assert_eq!(
        keys(&reset),
        [key("a", "ingress-cert"), key("b", "shop-cert")]
    );
    let ingress = reset.iter().find(|s| &*s.name == "ingress-cert").unwrap();
    assert_eq!(bytes(ingress, "tls.crt"), b"CERT-2");
}
