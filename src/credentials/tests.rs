//! The task over published snapshots and a store whose Secrets and answers the test gives:
//! Secrets read once a Gateway names one, changes followed, a failure keeping the last good
//! Secrets, and the API server asked once per identity while its answer is fresh. Each step
//! waits for the table to change, within a deadline.

use std::sync::atomic::{AtomicUsize, Ordering};

use futures::{FutureExt, StreamExt, stream};
use tokio::sync::mpsc;
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec, Gateway};

use super::*;
use crate::aggregate::snapshot_with_config;
use crate::snapshot::published;
use crate::testing::until;

/// One Secret event as a store's watch yields it.
type Item = Result<Event<Secret>, RegistryError>;

/// A cluster whose Secret events the test sends, and whose API server allows `allowed`.
struct Store {
    events: Mutex<Option<mpsc::UnboundedReceiver<Item>>>,
    watches: AtomicUsize,
    reviews: AtomicUsize,
    allowed: Vec<(&'static str, &'static str)>,
}

impl SecretStore for Store {
    fn watch(&self) -> BoxStream<'static, Item> {
        self.watches.fetch_add(1, Ordering::SeqCst);
        let rx = self.events.lock().unwrap().take().expect("watched once");
        tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
            .chain(stream::pending())
            .boxed()
    }

    fn may_read(
        &self,
        namespace: &str,
        account: &str,
    ) -> BoxFuture<'static, Result<Result<(), String>, String>> {
        self.reviews.fetch_add(1, Ordering::SeqCst);
        let answer = if namespace == "broken" {
            Err("connection refused".to_owned())
        } else if self.allowed.contains(&(namespace, account)) {
            Ok(Ok(()))
        } else {
            Ok(Err(String::new()))
        };
        futures::future::ready(answer).boxed()
    }
}

fn store(allowed: Vec<(&'static str, &'static str)>) -> (Arc<Store>, mpsc::UnboundedSender<Item>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let store = Store {
        events: Mutex::new(Some(rx)),
        watches: AtomicUsize::new(0),
        reviews: AtomicUsize::new(0),
        allowed,
    };
    (Arc::new(store), tx)
}

fn secret(name: &str, cert: &str) -> Secret {
    Secret::new(
        "shop",
        name,
        [
            ("tls.crt", cert.as_bytes().to_vec()),
            ("tls.key", b"k".to_vec()),
        ],
    )
}

/// A model whose Gateway names `credential` (none: a plain HTTP Gateway).
fn model(credential: Option<&str>) -> Arc<Snapshot> {
    let tls = credential.map_or(String::new(), |c| {
        format!(", tls: {{mode: SIMPLE, credentialName: {c}}}")
    });
    let protocol = if credential.is_some() {
        "HTTPS"
    } else {
        "HTTP"
    };
    let spec: Gateway = serde_saphyr::from_str(&format!(
        "{{servers: [{{port: {{number: 443, protocol: {protocol}}}, hosts: ['*']{tls}}}]}}"
    ))
    .unwrap();
    let object = ConfigObject {
        meta: ConfigMeta {
            name: "ingress".into(),
            namespace: "shop".into(),
            ..Default::default()
        },
        spec: ConfigSpec::Gateway(spec),
    };
    let model = snapshot_with_config(Vec::new(), vec![object]).unwrap();
    assert_eq!(model.config.objects.len(), 1, "the Gateway is valid");
    Arc::new(model)
}

fn cert(table: &Credentials, name: &str) -> Option<String> {
    let s = table.secret("Kubernetes", "shop", name)?;
    Some(String::from_utf8_lossy(s.get("tls.crt")?).into_owned())
}

#[tokio::test]
async fn secrets_are_read_once_a_gateway_names_one_and_followed_through_failures() {
    let (publisher, reader) = published();
    let (store, events) = store(Vec::new());
    let shutdown = CancellationToken::new();
    let stores: Vec<(String, Arc<dyn SecretStore>)> = vec![("Kubernetes".into(), store.clone())];
    let mut rx = spawn(reader, stores, shutdown.clone());

    // A Gateway without credentials reads nothing; one naming a credential starts the watch.
    publisher.publish(model(None));
    publisher.publish(model(Some("www")));
    until(&mut rx, "the watch", |t| {
        t.clusters()["Kubernetes"].watching
    })
    .await;
    assert_eq!(store.watches.load(Ordering::SeqCst), 1);
    assert_eq!(
        referenced(&model(Some("www"))),
        BTreeMap::from([(
            "kubernetes://www".to_string(),
            vec!["shop/ingress".to_string()]
        )])
    );

    events
        .send(Ok(Event::Reset(vec![secret("www", "v1")])))
        .unwrap();
    until(&mut rx, "the list", |t| {
        cert(t, "www").as_deref() == Some("v1")
    })
    .await;

    // A rotation replaces the Secret.
    events.send(Ok(Event::Upsert(secret("www", "v2")))).unwrap();
    until(&mut rx, "the rotation", |t| {
        cert(t, "www").as_deref() == Some("v2")
    })
    .await;

    // A failure keeps the last good Secrets, with the error beside them.
    let failure = RegistryError::Unavailable {
        origin: "cluster Kubernetes: list/watch v1 secrets".into(),
        detail: "HTTP 503".into(),
    };
    events.send(Err(failure)).unwrap();
    let table = until(&mut rx, "the failure", |t| {
        t.clusters()["Kubernetes"].error.is_some()
    })
    .await;
    assert_eq!(cert(&table, "www").as_deref(), Some("v2"));

    // The next list replaces everything and clears the error.
    events
        .send(Ok(Event::Reset(vec![secret("api", "a1")])))
        .unwrap();
    let table = until(&mut rx, "the relist", |t| cert(t, "api").is_some()).await;
    assert_eq!(cert(&table, "www"), None);
    assert_eq!(table.clusters()["Kubernetes"].error, None);
    events
        .send(Ok(Event::Remove(("shop".into(), "api".into()))))
        .unwrap();
    until(&mut rx, "the removal", |t| {
        t.clusters()["Kubernetes"].secrets.is_empty()
    })
    .await;
    shutdown.cancel();
}

#[tokio::test]
async fn the_api_server_is_asked_once_per_identity_while_its_answer_is_fresh() {
    let (_publisher, reader) = published();
    let (store, _events) = store(vec![("shop", "ingress")]);
    let shutdown = CancellationToken::new();
    let stores: Vec<(String, Arc<dyn SecretStore>)> = vec![("Kubernetes".into(), store.clone())];
    let mut rx = spawn(reader, stores, shutdown.clone());
    let identity = |cluster: &str, namespace: &str, account: &str| Identity {
        cluster: cluster.into(),
        namespace: namespace.into(),
        service_account: account.into(),
    };
    let ingress = identity("Kubernetes", "shop", "ingress");
    let other = identity("Kubernetes", "shop", "web");
    let broken = identity("Kubernetes", "broken", "ingress");
    let remote = identity("remote", "shop", "ingress");
    for id in [&ingress, &other, &broken, &remote] {
        rx.borrow().ask(id);
    }
    // An ask also starts reading Secrets: a proxy asks for a credential no Gateway names.
    let table = until(&mut rx, "four answers", |t| t.decisions().len() == 4).await;
    assert!(table.clusters()["Kubernetes"].watching);
    let allowed = |id: &Identity| table.decision(id).map(|d| d.allowed.clone());
    assert_eq!(allowed(&ingress), Some(Ok(())));
    assert_eq!(allowed(&other), Some(Err(String::new())));
    assert_eq!(
        allowed(&broken),
        Some(Err(
            "the API server did not answer whether it may read Secrets: connection refused".into()
        ))
    );
    assert_eq!(
        allowed(&remote),
        Some(Err("wayfinder reads no Secrets of this cluster".into()))
    );
    assert_eq!(
        store.reviews.load(Ordering::SeqCst),
        3,
        "the remote cluster is not asked"
    );

    // Asked again while fresh: no question. Another ask after it proves the first was taken.
    rx.borrow().ask(&ingress);
    let late = identity("Kubernetes", "shop", "late");
    rx.borrow().ask(&late);
    until(&mut rx, "the late answer", |t| t.decision(&late).is_some()).await;
    assert_eq!(store.reviews.load(Ordering::SeqCst), 4);
    shutdown.cancel();
}
