//! The aggregate task: applies every source's items, runs the handler chain, debounces, and
//! publishes.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wayfinder_registry::RegistryError;

use super::build::{Dirty, Model};
use super::source::Store;
use super::{Handler, Input, Origin, Received, Settings, debounce};
use crate::metrics::ModelMetrics;
use crate::snapshot::{Health, Holds, Publisher, Snapshot, SourceStatuses};

pub(super) struct Runner {
    pub(super) model: Model,
    pub(super) handlers: Vec<Box<dyn Handler>>,
    pub(super) settings: Settings,
    pub(super) metrics: Arc<ModelMetrics>,
    pub(super) publisher: Publisher,
    pub(super) batch: debounce::Batch,
    pub(super) dirty: Dirty,
}

impl Runner {
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Input>, shutdown: CancellationToken) {
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
        self.publisher.is_ready()
    }

    fn input(&mut self, input: Input) {
        match input {
            Input::Settled(origin) => {
                // Only the debounce hears of it: no status changes.
                self.batch.settled(origin);
                return;
            }
            Input::Item(i, Received::Registry(Ok(event))) => {
                let store = &mut self.model.stores[i];
                let (changes, refused) = store.apply(event);
                let id = store.state.id.clone();
                for err in &refused {
                    self.handlers.iter_mut().for_each(|h| h.on_error(&id, err));
                }
                for change in &changes {
                    let current = self.model.stores[i].contents.services.get(&change.key);
                    self.handlers
                        .iter_mut()
                        .for_each(|h| h.on_change(&id, change, current));
                }
                self.dirty.note(&changes);
                if !changes.is_empty() {
                    self.record(Origin::Registry(i));
                }
            }
            Input::Item(i, Received::Config(Ok(event))) => {
                let store = &mut self.model.config_stores[i];
                let (changed, refused) = store.apply(event);
                let id = store.state.id.clone();
                for err in &refused {
                    self.handlers.iter_mut().for_each(|h| h.on_error(&id, err));
                }
                for change in &changed {
                    let current = self.model.config_stores[i]
                        .contents
                        .objects
                        .get(&change.key);
                    let current = current.map(|o| &**o);
                    self.handlers
                        .iter_mut()
                        .for_each(|h| h.on_config(&id, change, current));
                }
                self.dirty.note_config(changed.len());
                if !changed.is_empty() {
                    self.record(Origin::Config(i));
                }
            }
            Input::Item(i, Received::Registry(Err(err))) => self.failed(Origin::Registry(i), err),
            Input::Item(i, Received::Config(Err(err))) => self.failed(Origin::Config(i), err),
            // A source that ended sends nothing more: what it sent is complete.
            Input::Ended(origin, reason) => {
                self.batch.settled(origin);
                self.ended(origin, reason);
            }
        }
        self.publish_status();
        if !self.is_ready() && self.model.synced() {
            self.become_ready();
        }
    }

    /// Tells the debounce of a change from `origin`.
    fn record(&mut self, origin: Origin) {
        self.batch
            .record(origin, Instant::now(), self.settings.debounce);
    }

    /// An error item: recorded before the handlers hear of it, as changes are.
    fn failed(&mut self, origin: Origin, err: RegistryError) {
        let state = self.model.state_mut(origin);
        state.events += 1;
        state.fail(err.clone());
        let id = state.id.clone();
        self.handlers.iter_mut().for_each(|h| h.on_error(&id, &err));
    }

    fn ended(&mut self, origin: Origin, reason: String) {
        let state = self.model.state_mut(origin);
        let err = RegistryError::Unavailable {
            origin: format!("source {}", state.id),
            detail: reason,
        };
        state.stop(err.clone());
        let id = state.id.clone();
        self.handlers.iter_mut().for_each(|h| h.on_error(&id, &err));
    }

    fn tick(&mut self, sync_deadline: Instant) {
        let now = Instant::now();
        if !self.is_ready() {
            if now >= sync_deadline {
                let waiting = self.model.waiting();
                tracing::warn!(
                    ?waiting,
                    "sync timeout passed; serving without these sources' state"
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
        self.publisher.set_ready();
        tracing::info!(
            version = self.publisher.current().version,
            "sources synced; serving"
        );
    }

    /// Merges and validates what changed, and publishes.
    fn publish(&mut self) {
        let started = std::time::Instant::now();
        let current = self.publisher.current();
        let snapshot = self.model.next(&current, &self.dirty);
        self.dirty.clear();
        self.record_snapshot(&snapshot, started);
        let snapshot = Arc::new(snapshot);
        self.publisher.publish(snapshot.clone());
        self.handlers
            .iter_mut()
            .for_each(|h| h.on_snapshot(&snapshot));
    }

    fn record_snapshot(&self, snapshot: &Snapshot, started: std::time::Instant) {
        let m = &self.metrics;
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        m.snapshot_build_time
            .observe(started.elapsed().as_secs_f64());
        m.snapshot_version
            .set(i64::try_from(snapshot.version).unwrap_or(i64::MAX));
        m.services.set(count(snapshot.services.len()));
        m.merge_conflicts.set(count(snapshot.conflicts.len()));
        m.config_objects.set(count(snapshot.config.objects.len()));
    }

    pub(super) fn publish_status(&self) {
        let registries: Vec<_> = self.model.stores.iter().map(Store::status).collect();
        let config_sources = self.model.config_stores.iter().map(Store::status).collect();
        let m = &self.metrics;
        for st in &registries {
            let label = ModelMetrics::registry_label(st.id.as_str());
            m.registry_synced
                .get_or_create(&label)
                .set(i64::from(st.synced));
            m.registry_degraded
                .get_or_create(&label)
                .set(i64::from(st.health != Health::Healthy));
            if let Holds::Services { services, .. } = st.holds {
                m.registry_services
                    .get_or_create(&label)
                    .set(i64::try_from(services).unwrap_or(i64::MAX));
            }
        }
        self.publisher.set_statuses(SourceStatuses {
            registries,
            config_sources,
        });
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
