//! The aggregate: runs every registry, applies their events, and is the only writer of the
//! model snapshot.
//!
//! Build an [`Aggregate`] from the configured registries (in `--registries` order, which is
//! also their precedence, see [`merge`]), add any extra [`Handler`]s, then [`Aggregate::start`]
//! it. The returned [`AggregateHandle`] gives lock-free access to the current snapshot, a
//! version channel that wakes when a new one is published, readiness, and per-registry status.
//!
//! **Invariant:** only the aggregate task publishes snapshots, and only snapshots that pass
//! [`Snapshot::validate`]. A registration that fails validation is refused and the service's
//! last good state stays.
//!
//! **Sync:** the first snapshot is published when every registry has delivered its first
//! `Reset`, or when the sync timeout passes, whichever is first; until then the handle reports
//! not ready and the xDS server does not answer.

mod build;
mod debounce;
mod handler;
pub mod merge;
mod store;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wayfinder_registry::{Event, Registry, RegistryError, RegistryId, ServiceKey};

pub use build::snapshot_from;
pub use debounce::Debounce;
pub use handler::{Handler, LogHandler, MetricsHandler};
pub use store::{Change, ChangeKind, ErrorRecord, Health};

use crate::metrics::Metrics;
use crate::snapshot::Snapshot;
use build::Model;
use store::Store;

/// Aggregate settings.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// How changes are batched into snapshots.
    pub debounce: Debounce,
    /// How long to wait for every registry's first state before serving anyway.
    pub sync_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            debounce: Debounce::default(),
            sync_timeout: Duration::from_secs(30),
        }
    }
}

/// The registries to run, with their handler chain, before it starts.
pub struct Aggregate {
    registries: Vec<Box<dyn Registry>>,
    handlers: Vec<Box<dyn Handler>>,
    settings: Settings,
    metrics: Arc<Metrics>,
}

/// Read access to what the aggregate publishes. Cheap to clone.
#[derive(Clone)]
pub struct AggregateHandle {
    shared: Arc<Shared>,
    versions: watch::Receiver<u64>,
    ready: watch::Receiver<bool>,
}

/// How one registry is doing, for `/debug/registryz` and `/ready`.
#[derive(Clone, Debug, Serialize)]
pub struct RegistryStatus {
    /// The registry.
    pub registry: RegistryId,
    /// True once its first state arrived.
    pub synced: bool,
    /// Whether its last item was good.
    pub health: Health,
    /// Services it reports.
    pub services: usize,
    /// Endpoints it reports.
    pub endpoints: usize,
    /// Items received from it.
    pub events: u64,
    /// The most recent error, kept after recovery for reference.
    pub last_error: Option<ErrorRecord>,
}

struct Shared {
    snapshot: ArcSwap<Snapshot>,
    registries: ArcSwap<Vec<RegistryStatus>>,
}

enum Input {
    Item(usize, Result<Event, RegistryError>),
    Ended(usize, String),
}

impl Aggregate {
    /// An aggregate over `registries`, in precedence order, with the built-in log and metrics
    /// handlers at the head of the chain.
    pub fn new(
        registries: Vec<Box<dyn Registry>>,
        settings: Settings,
        metrics: Arc<Metrics>,
    ) -> Self {
        let handlers: Vec<Box<dyn Handler>> = vec![
            Box::new(LogHandler),
            Box::new(MetricsHandler(metrics.clone())),
        ];
        Self {
            registries,
            handlers,
            settings,
            metrics,
        }
    }

    /// Appends a handler to the chain.
    pub fn add_handler(&mut self, handler: impl Handler + 'static) {
        self.handlers.push(Box::new(handler));
    }

    /// Starts every registry and the aggregate task. Everything stops when `shutdown` is
    /// cancelled.
    pub fn start(self, shutdown: CancellationToken) -> AggregateHandle {
        let stores: Vec<Store> = self
            .registries
            .iter()
            .map(|r| Store::new(r.id().clone()))
            .collect();
        let shared = Arc::new(Shared {
            snapshot: ArcSwap::from_pointee(Snapshot::empty()),
            registries: ArcSwap::from_pointee(Vec::new()),
        });
        let (versions_tx, versions) = watch::channel(0);
        let (ready_tx, ready) = watch::channel(false);
        let (tx, rx) = mpsc::channel(1024);
        for (index, registry) in self.registries.into_iter().enumerate() {
            tokio::spawn(forward(index, registry, tx.clone(), shutdown.child_token()));
        }
        let runner = Runner {
            model: Model::new(stores),
            handlers: self.handlers,
            settings: self.settings,
            metrics: self.metrics,
            shared: shared.clone(),
            versions_tx,
            ready_tx,
            batch: debounce::Batch::default(),
            dirty: BTreeSet::new(),
        };
        runner.publish_status();
        tokio::spawn(runner.run(rx, shutdown));
        AggregateHandle {
            shared,
            versions,
            ready,
        }
    }
}

impl AggregateHandle {
    /// The current snapshot (never blocks).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.snapshot.load_full()
    }

    /// A receiver that wakes with the version of each newly published snapshot.
    pub fn versions(&self) -> watch::Receiver<u64> {
        self.versions.clone()
    }

    /// True once every registry synced or the sync timeout passed.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until ready.
    pub async fn ready(&self) {
        let mut ready = self.ready.clone();
        // An error means the aggregate stopped; nothing will become ready then.
        let _ = ready.wait_for(|r| *r).await;
    }

    /// Status of every registry, in precedence order.
    pub fn registries(&self) -> Arc<Vec<RegistryStatus>> {
        self.shared.registries.load_full()
    }
}

/// Feeds one registry's stream to the aggregate and reports how it ended, panics included.
async fn forward(
    index: usize,
    registry: Box<dyn Registry>,
    tx: mpsc::Sender<Input>,
    token: CancellationToken,
) {
    let items = tx.clone();
    let task = tokio::spawn(async move {
        let mut stream = registry.watch(token);
        while let Some(item) = stream.next().await {
            if items.send(Input::Item(index, item)).await.is_err() {
                return;
            }
        }
    });
    let reason = match task.await {
        Ok(()) => "the registry's stream ended".to_string(),
        Err(err) if err.is_panic() => "the registry's adapter panicked".to_string(),
        Err(err) => err.to_string(),
    };
    let _ = tx.send(Input::Ended(index, reason)).await;
}

struct Runner {
    model: Model,
    handlers: Vec<Box<dyn Handler>>,
    settings: Settings,
    metrics: Arc<Metrics>,
    shared: Arc<Shared>,
    versions_tx: watch::Sender<u64>,
    ready_tx: watch::Sender<bool>,
    batch: debounce::Batch,
    dirty: BTreeSet<ServiceKey>,
}

impl Runner {
    async fn run(mut self, mut rx: mpsc::Receiver<Input>, shutdown: CancellationToken) {
        let sync_deadline = Instant::now() + self.settings.sync_timeout;
        let mut inputs_open = true;
        loop {
            let wake = if self.is_ready() {
                self.batch.deadline(self.settings.debounce)
            } else {
                Some(sync_deadline)
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                input = rx.recv(), if inputs_open => match input {
                    Some(input) => self.input(input),
                    None => inputs_open = false,
                },
                () = sleep_until(wake), if wake.is_some() => self.tick(sync_deadline),
            }
        }
    }

    fn is_ready(&self) -> bool {
        *self.ready_tx.borrow()
    }

    fn input(&mut self, input: Input) {
        match input {
            Input::Item(i, Ok(event)) => {
                let (changes, refused) = self.model.stores[i].apply(i, event);
                let id = self.model.stores[i].id.clone();
                for err in &refused {
                    self.handlers.iter_mut().for_each(|h| h.on_error(&id, err));
                }
                for change in &changes {
                    let current = self.model.stores[i].services.get(&change.key);
                    self.handlers
                        .iter_mut()
                        .for_each(|h| h.on_change(&id, change, current));
                    self.dirty.insert(change.key.clone());
                }
                if !changes.is_empty() {
                    self.batch.record(Instant::now());
                }
            }
            Input::Item(i, Err(err)) => {
                let store = &mut self.model.stores[i];
                store.events += 1;
                store.fail(err.clone());
                let id = store.id.clone();
                self.handlers.iter_mut().for_each(|h| h.on_error(&id, &err));
            }
            Input::Ended(i, reason) => {
                let store = &mut self.model.stores[i];
                let err = RegistryError::Unavailable {
                    origin: format!("registry {}", store.id),
                    detail: reason,
                };
                let id = store.id.clone();
                store.fail(err.clone());
                store.health = Health::Stopped;
                self.handlers.iter_mut().for_each(|h| h.on_error(&id, &err));
            }
        }
        self.publish_status();
        if !self.is_ready() && self.model.stores.iter().all(|s| s.synced) {
            self.become_ready();
        }
    }

    fn tick(&mut self, sync_deadline: Instant) {
        let now = Instant::now();
        if !self.is_ready() {
            if now >= sync_deadline {
                let waiting: Vec<&str> = self
                    .model
                    .stores
                    .iter()
                    .filter(|s| !s.synced)
                    .map(|s| s.id.as_str())
                    .collect();
                tracing::warn!(
                    ?waiting,
                    "sync timeout passed; serving without these registries' state"
                );
                self.become_ready();
            }
            return;
        }
        if let Some(started) = self.batch.take_due(self.settings.debounce, now) {
            self.metrics
                .debounce_time
                .observe(now.duration_since(started).as_secs_f64());
            self.publish();
        }
    }

    fn become_ready(&mut self) {
        self.batch.clear();
        self.publish();
        self.ready_tx.send_replace(true);
        tracing::info!(
            version = self.versions_tx.borrow().to_owned(),
            "registries synced; serving"
        );
    }

    /// Merges the dirty services, validates, and publishes.
    fn publish(&mut self) {
        let started = std::time::Instant::now();
        let current = self.shared.snapshot.load_full();
        let snapshot = self.model.build(&current, &self.dirty);
        if let Err(err) = snapshot.validate() {
            self.metrics.snapshots_rejected.inc();
            tracing::error!(%err, "snapshot not published; the previous one stays in force");
            return;
        }
        self.dirty.clear();
        self.record_snapshot(&snapshot, started);
        let snapshot = Arc::new(snapshot);
        self.shared.snapshot.store(snapshot.clone());
        self.versions_tx.send_replace(snapshot.version);
        self.handlers
            .iter_mut()
            .for_each(|h| h.on_snapshot(&snapshot));
    }

    fn record_snapshot(&self, snapshot: &Snapshot, started: std::time::Instant) {
        let m = &self.metrics;
        m.snapshot_build_time
            .observe(started.elapsed().as_secs_f64());
        m.snapshot_version
            .set(i64::try_from(snapshot.version).unwrap_or(i64::MAX));
        m.services
            .set(i64::try_from(snapshot.services.len()).unwrap_or(i64::MAX));
        m.merge_conflicts
            .set(i64::try_from(snapshot.conflicts.len()).unwrap_or(i64::MAX));
    }

    fn publish_status(&self) {
        let statuses: Vec<RegistryStatus> = self
            .model
            .stores
            .iter()
            .map(|s| RegistryStatus {
                registry: s.id.clone(),
                synced: s.synced,
                health: s.health,
                services: s.services.len(),
                endpoints: s.services.values().map(|r| r.endpoints.len()).sum(),
                events: s.events,
                last_error: s.last_error.clone(),
            })
            .collect();
        for st in &statuses {
            let label = Metrics::registry_label(st.registry.as_str());
            self.metrics
                .registry_synced
                .get_or_create(&label)
                .set(i64::from(st.synced));
            self.metrics
                .registry_degraded
                .get_or_create(&label)
                .set(i64::from(st.health != Health::Healthy));
            self.metrics
                .registry_services
                .get_or_create(&label)
                .set(i64::try_from(st.services).unwrap_or(i64::MAX));
        }
        self.shared.registries.store(Arc::new(statuses));
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
