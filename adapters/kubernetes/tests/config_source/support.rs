//! Starting the sources over an API server, reading their streams, and the objects the tests
//! apply.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use wayfinder_config::{ConfigEvent, ConfigKey, ConfigObject, ConfigSpec, Kind};
use wayfinder_kubernetes::config_source::IstioConfig;
use wayfinder_registry::{
    CancellationToken, Event, Registration, RegistryError, RegistryId, Source,
};

/// How long a test waits for something before failing.
pub const DEADLINE: Duration = Duration::from_secs(20);
/// The cluster's name in origins.
pub const CLUSTER: &str = "test";

/// A source's items, read from its stream by a task of their own as the aggregate reads them
/// (the stream makes progress only while polled: a test that waits for the fake must not stop
/// it), and its shutdown token (cancelled when dropped).
pub struct Items<E> {
    items: mpsc::UnboundedReceiver<Result<E, RegistryError>>,
    shutdown: CancellationToken,
}

impl<E> Drop for Items<E> {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl<E: Send + 'static> Items<E> {
    fn new(
        mut stream: BoxStream<'static, Result<E, RegistryError>>,
        shutdown: CancellationToken,
    ) -> Self {
        let (tx, items) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                if tx.send(item).is_err() {
                    break;
                }
            }
        });
        Self { items, shutdown }
    }
}

/// A client for `fake` that reports 503 answers at once: kube's client retries 429, 503 and
/// 504 itself (15 times over minutes) unless told not to.
pub fn client_without_retries(fake: &wayfinder_kubernetes::fake::FakeApiServer) -> kube::Client {
    let mut config = kube::Config::new(fake.url().parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// The config source over `client`, watching every namespace.
pub fn config_source(client: kube::Client) -> Items<ConfigEvent> {
    config_source_in(client, None)
}

/// The config source over `client`, watching `namespace` (`None`: all).
pub fn config_source_in(client: kube::Client, namespace: Option<&str>) -> Items<ConfigEvent> {
    let namespace = namespace.map(str::to_string);
    let source = IstioConfig::new(client, namespace, CLUSTER).config_source();
    assert_eq!(source.id().as_str(), "Kubernetes");
    let shutdown = CancellationToken::new();
    Items::new(Box::new(source).watch(shutdown.clone()), shutdown)
}

/// The registry of entries over `client`, watching every namespace.
pub fn entries(client: kube::Client) -> Items<Event> {
    let registry = IstioConfig::new(client, None, CLUSTER).entries(RegistryId::new("Kubernetes"));
    assert_eq!(registry.id().as_str(), "Kubernetes");
    let shutdown = CancellationToken::new();
    Items::new(Box::new(registry).watch(shutdown.clone()), shutdown)
}

impl<E: Debug> Items<E> {
    /// The next item, failing the test after [`DEADLINE`].
    pub async fn next(&mut self) -> Result<E, RegistryError> {
        tokio::time::timeout(DEADLINE, self.items.recv())
            .await
            .expect("no item before the deadline")
            .expect("the stream ended")
    }

    /// The next Ok item, and the errors before it.
    pub async fn next_ok(&mut self) -> (E, Vec<RegistryError>) {
        let mut errors = Vec::new();
        loop {
            match self.next().await {
                Ok(event) => return (event, errors),
                Err(err) => errors.push(err),
            }
        }
    }

    /// The next item, which must be an error.
    pub async fn error(&mut self) -> RegistryError {
        match self.next().await {
            Err(err) => err,
            Ok(event) => panic!("expected an error item, got {event:?}"),
        }
    }

    /// Cancels the shutdown token; the stream must end within five seconds.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            while self.items.recv().await.is_some() {}
        })
        .await;
        assert!(ended.is_ok(), "the stream did not end after shutdown");
    }
}

impl Items<ConfigEvent> {
    /// The next item, which must be the source's refused list: the names in it.
    pub async fn refused(&mut self) -> Vec<String> {
        match self.next().await {
            Ok(ConfigEvent::Refused(list)) => list
                .iter()
                .map(|r| r.name.as_deref().unwrap_or_default().to_string())
                .collect(),
            other => panic!("expected a refused list, got {other:?}"),
        }
    }

    /// The first item, which must be a Reset.
    pub async fn reset(&mut self) -> Vec<std::sync::Arc<ConfigObject>> {
        match self.next().await {
            Ok(ConfigEvent::Reset(objects)) => objects,
            other => panic!("expected a Reset first, got {other:?}"),
        }
    }
}

impl Items<Event> {
    /// The first item, which must be a Reset.
    pub async fn reset(&mut self) -> Vec<Registration> {
        match self.next().await {
            Ok(Event::Reset(registrations)) => registrations,
            other => panic!("expected a Reset first, got {other:?}"),
        }
    }
}

/// Waits until `check` holds, polling `probe` (the fake's records have no stream to read).
pub async fn eventually<T: Debug>(
    what: &str,
    mut probe: impl FnMut() -> T,
    check: impl Fn(&T) -> bool,
) -> T {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let value = probe();
        if check(&value) {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: still {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The API path of a VirtualService in `default`, as origins name it.
pub fn vs_origin(name: &str) -> String {
    format!("{CLUSTER}: /apis/networking.istio.io/v1/namespaces/default/virtualservices/{name}")
}

/// A VirtualService in `default` for host `name`, routing to it with `weight` (over 100 is
/// invalid; under 100 is a warning only).
pub fn virtual_service(name: &str, weight: i64) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "hosts": [name],
            "http": [{"route": [{"destination": {"host": name}, "weight": weight}]}],
        },
    })
}

/// A DestinationRule in `default` for host `name` with a subset `v1`.
pub fn destination_rule(name: &str) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"host": name, "subsets": [{"name": "v1", "labels": {"version": "v1"}}]},
    })
}

pub fn key(kind: Kind, name: &str) -> ConfigKey {
    ConfigKey {
        kind,
        namespace: "default".into(),
        name: name.into(),
    }
}

/// The weight of a VirtualService's first destination.
pub fn weight(object: &ConfigObject) -> Option<i32> {
    match &object.spec {
        ConfigSpec::VirtualService(vs) => vs.http[0].route[0].weight,
        other => panic!("not a VirtualService: {other:?}"),
    }
}

/// The Events the fake received about the object `name`.
pub fn events_about(fake: &wayfinder_kubernetes::fake::FakeApiServer, name: &str) -> Vec<Value> {
    fake.events()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .collect()
}
