//! Aggregate behaviour on virtual time: sync, debounce, merging, bad input, failing registries.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec, DestinationRule};
use wayfinder_memory::{MemoryHandle, MemoryRegistry};
use wayfinder_registry::{
    CancellationToken, Endpoint, EventStream, Item, Protocol, Registration, Registry,
    RegistryError, RegistryId, Service, ServiceKey, Source,
};

use super::*;
use crate::snapshot::{ErrorRecord, Health, Snapshot, SourceStatus};

/// Each registry's status, as `/debug/registryz` shows it.
fn registries(handle: &SnapshotReader) -> Vec<SourceStatus> {
    handle.statuses().registries.clone()
}

fn reg(name: &str, ips: &[&str]) -> Registration {
    let svc = Service::new(format!("{name}.default.svc.cluster.local"), "default").with_port(
        "http",
        8080,
        Protocol::Http,
    );
    Registration::new(svc, ips.iter().map(|ip| Endpoint::new(*ip)).collect())
}

fn key(name: &str) -> ServiceKey {
    ServiceKey::new("default", format!("{name}.default.svc.cluster.local"))
}

/// Istio's debounce (trailing only), which most tests here pin down; the adaptive default is
/// tested on its own.
fn settings() -> Settings {
    settings_with(false)
}

fn settings_with(leading: bool) -> Settings {
    Settings {
        debounce: Debounce {
            after: Duration::from_millis(100),
            max: Duration::from_secs(10),
            leading,
        },
        sync_timeout: Duration::from_secs(30),
    }
}

fn start(registries: Vec<Box<dyn Registry>>) -> (SnapshotReader, CancellationToken) {
    start_with(registries, |_| {})
}

fn start_with(
    registries: Vec<Box<dyn Registry>>,
    configure: impl FnOnce(&mut Aggregate),
) -> (SnapshotReader, CancellationToken) {
    start_with_settings(registries, settings(), configure)
}

fn start_with_settings(
    registries: Vec<Box<dyn Registry>>,
    settings: Settings,
    configure: impl FnOnce(&mut Aggregate),
) -> (SnapshotReader, CancellationToken) {
    let shutdown = CancellationToken::new();
    let mut aggregate = Aggregate::new(registries, settings, Arc::new(ModelMetrics::default()));
    configure(&mut aggregate);
    (aggregate.start(shutdown.clone()), shutdown)
}

async fn next_version(handle: &SnapshotReader, after: u64) -> Arc<Snapshot> {
    let mut versions = handle.versions();
    versions.wait_for(|v| *v > after).await.unwrap();
    handle.snapshot()
}

/// A registry that never says anything.
struct Silent(RegistryId);

impl Source<Registration> for Silent {
    fn id(&self) -> &RegistryId {
        &self.0
    }
    fn watch(self: Box<Self>, _shutdown: CancellationToken) -> EventStream {
        Box::pin(futures::stream::pending())
    }
}

/// A registry whose adapter panics when polled.
struct Panics(RegistryId);

impl Source<Registration> for Panics {
    fn id(&self) -> &RegistryId {
        &self.0
    }
    fn watch(self: Box<Self>, _shutdown: CancellationToken) -> EventStream {
        Box::pin(futures::stream::poll_fn(|_| panic!("adapter bug")))
    }
}

/// A source whose stream yields each batch the test sends as items one after the other, with
/// nothing to wait for in between: one change of several items, as a config file edit is.
struct Batches<E> {
    id: RegistryId,
    batches: futures::channel::mpsc::UnboundedReceiver<Vec<E>>,
}

/// Sends a [`Batches`] source its changes.
type BatchSender<E> = futures::channel::mpsc::UnboundedSender<Vec<E>>;

fn batches<E>(name: &str) -> (Batches<E>, BatchSender<E>) {
    let (tx, batches) = futures::channel::mpsc::unbounded();
    let id = RegistryId::new(name);
    (Batches { id, batches }, tx)
}

impl<E: Send + 'static> Batches<E> {
    fn items(self) -> impl Stream<Item = Result<E, RegistryError>> + Send {
        self.batches
            .flat_map(|batch| futures::stream::iter(batch.into_iter().map(Ok)))
    }
}

impl<T: Item> Source<T> for Batches<Event<T>> {
    fn id(&self) -> &RegistryId {
        &self.id
    }
    fn watch(self: Box<Self>, _shutdown: CancellationToken) -> EventStream<T> {
        Box::pin(self.items())
    }
}

async fn memory(name: &str, regs: &[Registration]) -> (Box<dyn Registry>, MemoryHandle) {
    let (registry, handle) = MemoryRegistry::new(name);
    for r in regs {
        handle.upsert(r.clone()).await;
    }
    (Box::new(registry), handle)
}

#[tokio::test(start_paused = true)]
async fn publishes_the_union_once_every_registry_synced() {
    let (a, _) = memory("A", &[reg("shared", &["10.0.0.1"]), reg("only-a", &[])]).await;
    let (b, _) = memory("B", &[reg("shared", &["10.0.1.1"])]).await;
    let (handle, _stop) = start(vec![a, b]);
    handle.ready().await;
    let snap = handle.snapshot();
    assert_eq!(snap.version, 1);
    assert_eq!(snap.services.len(), 2);
    let shared = &snap.services[&key("shared")];
    let tags: Vec<&str> = shared
        .endpoints
        .iter()
        .map(|e| e.registry.as_str())
        .collect();
    assert_eq!(tags, ["A", "B"]);
    let statuses = registries(&handle);
    assert!(
        statuses
            .iter()
            .all(|r| r.synced && r.health == Health::Healthy),
        "{statuses:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn serves_after_the_sync_timeout_when_a_registry_never_syncs() {
    let (a, _) = memory("A", &[reg("a", &["10.0.0.1"])]).await;
    let silent: Box<dyn Registry> = Box::new(Silent(RegistryId::new("Slow")));
    let started = Instant::now();
    let (handle, _stop) = start(vec![a, silent]);
    handle.ready().await;
    assert!(
        started.elapsed() >= Duration::from_secs(30),
        "ready before the timeout"
    );
    assert_eq!(
        handle.snapshot().services.len(),
        1,
        "the synced registry is served"
    );
    let statuses = registries(&handle);
    assert!(!statuses[1].synced);
}

#[tokio::test(start_paused = true)]
async fn changes_are_debounced_into_one_snapshot() {
    let (a, handle_a) = memory("A", &[reg("a", &["10.0.0.1"])]).await;
    let (handle, _stop) = start(vec![a]);
    handle.ready().await;
    let t0 = Instant::now();
    for i in 2..=6 {
        handle_a.upsert(reg("a", &[&format!("10.0.0.{i}")])).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let snap = next_version(&handle, 1).await;
    assert_eq!(
        snap.version, 2,
        "five changes 50 ms apart make one snapshot"
    );
    assert_eq!(
        &*snap.services[&key("a")].endpoints[0].endpoint.address,
        "10.0.0.6"
    );
    // The last change came at +200 ms; the quiet period ends 100 ms later.
    assert_eq!(t0.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn adaptive_debounce_publishes_a_lone_change_at_once_and_batches_the_burst_after_it() {
    let (a, handle_a) = memory("A", &[reg("a", &["10.0.0.1"])]).await;
    let (handle, _stop) = start_with_settings(vec![a], settings_with(true), |_| {});
    handle.ready().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    handle_a.upsert(reg("a", &["10.0.0.2"])).await;
    let snap = next_version(&handle, 1).await;
    assert_eq!(
        t0.elapsed(),
        Duration::ZERO,
        "a lone change goes out at once"
    );
    assert_eq!(
        &*snap.services[&key("a")].endpoints[0].endpoint.address,
        "10.0.0.2"
    );
    for i in 3..=6 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        handle_a.upsert(reg("a", &[&format!("10.0.0.{i}")])).await;
    }
    let snap = next_version(&handle, 2).await;
    assert_eq!(snap.version, 3, "the burst that followed is one snapshot");
    assert_eq!(
        &*snap.services[&key("a")].endpoints[0].endpoint.address,
        "10.0.0.6"
    );
    // The burst's last change came at +200 ms; its quiet period ended 100 ms later.
    assert_eq!(t0.elapsed(), Duration::from_millis(300));
}

#[test]
fn the_adaptive_debounce_tested_here_is_the_default() {
    assert_eq!(Settings::default().debounce, settings_with(true).debounce);
}

#[tokio::test(start_paused = true)]
async fn a_steady_stream_of_changes_publishes_at_the_maximum_delay() {
    let (a, handle_a) = memory("A", &[reg("a", &[])]).await;
    let (handle, _stop) = start(vec![a]);
    handle.ready().await;
    let t0 = Instant::now();
    let writer = tokio::spawn(async move {
        for i in 0..400u32 {
            handle_a
                .upsert(reg("a", &[&format!("10.0.{}.{}", i / 200, i % 200 + 1)]))
                .await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    next_version(&handle, 1).await;
    assert_eq!(
        t0.elapsed(),
        Duration::from_secs(10),
        "published at debounce max despite no quiet period"
    );
    writer.abort();
}

#[tokio::test(start_paused = true)]
async fn refused_registrations_and_errors_keep_the_last_good_state() {
    let (a, handle_a) = memory("A", &[reg("a", &["10.0.0.1"])]).await;
    let (handle, _stop) = start(vec![a]);
    handle.ready().await;
    handle_a.upsert(reg("a", &["not-an-ip"])).await;
    handle_a
        .report_error(RegistryError::Unavailable {
            origin: "test".into(),
            detail: "down".into(),
        })
        .await;
    handle_a.upsert(reg("b", &["10.0.0.2"])).await;
    let snap = next_version(&handle, 1).await;
    assert_eq!(
        &*snap.services[&key("a")].endpoints[0].endpoint.address,
        "10.0.0.1"
    );
    assert!(snap.services.contains_key(&key("b")));
    let status = &registries(&handle)[0];
    assert_eq!(
        status.health,
        Health::Healthy,
        "the good upsert after the error recovers it"
    );
    assert!(matches!(
        status.last_error,
        Some(ErrorRecord {
            error: RegistryError::Unavailable { .. },
            ..
        })
    ));

    handle_a
        .report_error(RegistryError::Malformed {
            origin: "x".into(),
            detail: "y".into(),
        })
        .await;
    handle_a.upsert(reg("a", &["also-not-an-ip"])).await;
    let status = eventually(&handle, |s| s[0].events == 6).await;
    assert_eq!(
        status[0].health,
        Health::Degraded,
        "a refused registration leaves it degraded"
    );
    let err = status[0]
        .last_error
        .as_ref()
        .map(|e| e.error.to_string())
        .unwrap_or_default();
    assert!(err.contains("endpoints[0].address"), "{err}");
}

/// Waits (on virtual time) until the registry statuses satisfy `done`.
async fn eventually(
    handle: &SnapshotReader,
    done: impl Fn(&[SourceStatus]) -> bool,
) -> Vec<SourceStatus> {
    for _ in 0..10_000 {
        let status = registries(handle);
        if done(&status) {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("condition not reached; status is {:#?}", registries(handle));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_registry_does_not_stop_the_others() {
    let (a, handle_a) = memory("A", &[reg("a", &["10.0.0.1"])]).await;
    let bad: Box<dyn Registry> = Box::new(Panics(RegistryId::new("Broken")));
    let (handle, _stop) = start(vec![bad, a]);
    handle.ready().await;
    assert_eq!(handle.snapshot().services.len(), 1);
    handle_a.upsert(reg("b", &[])).await;
    let snap = next_version(&handle, 1).await;
    assert_eq!(
        snap.services.len(),
        2,
        "the healthy registry keeps serving changes"
    );
    assert_eq!(registries(&handle)[0].health, Health::Stopped);
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(String, ChangeKind, usize)>>>);

impl Handler for Recorder {
    fn on_change(
        &mut self,
        registry: &RegistryId,
        change: &Change,
        current: Option<&Registration>,
    ) {
        let endpoints = current.map_or(0, |r| r.endpoints.len());
        self.0.lock().unwrap().push((
            format!("{registry}:{}", change.key.hostname),
            change.kind,
            endpoints,
        ));
    }
}

#[tokio::test(start_paused = true)]
async fn handlers_see_classified_changes_in_order_with_the_store_already_updated() {
    let (a, handle_a) = memory("A", &[reg("a", &["10.0.0.1"])]).await;
    let recorder = Recorder::default();
    let (handle, _stop) = start_with(vec![a], |agg| agg.add_handler(recorder.clone()));
    handle.ready().await;
    handle_a.upsert(reg("a", &["10.0.0.1", "10.0.0.2"])).await;
    let mut svc = (*reg("a", &[]).service).clone();
    svc.ports[0].number = 9090;
    handle_a.upsert_service(svc).await;
    handle_a.remove(&key("a")).await;
    let snap = next_version(&handle, 1).await;
    assert_eq!(
        snap.triggers,
        crate::snapshot::Triggers {
            endpoint: 1,
            service: 2,
            config: 0
        },
        "the snapshot counts the changes it carries, by Istio's push reasons"
    );
    let seen = recorder.0.lock().unwrap().clone();
    let host = "A:a.default.svc.cluster.local".to_string();
    assert_eq!(
        seen,
        [
            (host.clone(), ChangeKind::Added, 1),
            (host.clone(), ChangeKind::EndpointsOnly, 2),
            (host.clone(), ChangeKind::Updated, 2),
            (host, ChangeKind::Removed, 0),
        ]
    );
}

mod settled;

#[test]
fn replay_merges_only_what_changed_and_shares_the_rest() {
    let mut replay = Replay::new(vec![RegistryId::new("A"), RegistryId::new("B")]);
    replay.apply(
        0,
        Event::Reset(vec![reg("a", &["10.0.0.1"]), reg("b", &[])]),
    );
    replay.apply(1, Event::Reset(vec![reg("a", &["10.0.0.1", "10.0.0.2"])]));
    let first = replay.publish();
    assert_eq!(first.version, 1);
    let a = &first.services[&key("a")];
    assert_eq!(a.endpoints.len(), 2, "10.0.0.1 is kept once, from A");
    assert_eq!(a.endpoints[0].registry, RegistryId::new("A"));

    let refused = replay.apply(1, Event::Upsert(reg("b", &["10.0.0.3"])));
    assert!(refused.is_empty());
    let second = replay.publish();
    assert_eq!(second.version, 2);
    assert!(Arc::ptr_eq(a, &second.services[&key("a")]), "a is shared");
    assert_eq!(second.services[&key("b")].registries.len(), 2);
    assert!(Arc::ptr_eq(replay.snapshot(), &second));
}
