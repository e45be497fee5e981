//! The aggregate: runs every registry and configuration source, applies their events, and is
//! the only writer of the model snapshot.
//!
//! Build an [`Aggregate`] from the configured registries (in `--registries` order, which is
//! also their precedence, see [`merge`]), add any extra [`Handler`]s, then [`Aggregate::start`]
//! it. It returns a [`SnapshotReader`]: lock-free access to the current snapshot, a version
//! channel that wakes when a new one is published, readiness, and per-source status. The
//! aggregate's task keeps the only [`Publisher`](crate::snapshot::Publisher).
//!
//! **Invariant:** only the aggregate task publishes snapshots, and only snapshots that pass
//! [`Snapshot::validate`](crate::snapshot::Snapshot::validate). A registration that fails
//! validation is refused and the service's last good state stays; so does a merged service
//! that fails [`Snapshot::validate_service`](crate::snapshot::Snapshot::validate_service).
//! Only the services merged again are checked: every other is the previous snapshot's, which
//! passed.
//!
//! **Sync:** the first snapshot is published when every registry and configuration source has
//! delivered its first `Reset`, or when the sync timeout passes, whichever is first; until then
//! the reader reports not ready and the xDS server does not answer.
//!
//! Configuration objects (VirtualService, DestinationRule, …) go through the same chain:
//! validated again, applied to a per-source store, told to the handlers, debounced with
//! registry changes, and published in the same snapshot, so routes and the services they name
//! change together.
//!
//! **One path for every source.** Registries and configuration sources are the same
//! [`Source`](wayfinder_registry::Source) contract over different items, and the aggregate
//! treats them alike: each runs in the one forwarder (`forward`), its items reach the task
//! as one `Input` vocabulary, and it has one store (`source::Store`, with the item's
//! `Contents`) and one status ([`SourceStatus`](crate::snapshot::SourceStatus)). Only what
//! the items mean differs: registrations are merged into services, configuration objects into
//! the traffic configuration.

mod build;
mod config_store;
mod debounce;
mod handler;
pub mod merge;
mod runner;
mod source;
mod store;

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wayfinder_config::{ConfigEvent, ConfigObject, ConfigSource};
use wayfinder_registry::{Event, Item, Registration, Registry, RegistryError};

pub use build::{Replay, snapshot_from, snapshot_with_config};
pub use config_store::ConfigChange;
pub use debounce::Debounce;
pub use handler::{Handler, LogHandler, MetricsHandler};
pub use store::{Change, ChangeKind};

use crate::metrics::ModelMetrics;
use crate::snapshot::{SnapshotReader, published};
use build::Model;
use config_store::ConfigObjects;
use runner::Runner;
use source::Store;
use store::Services;

/// Aggregate settings.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// How changes are batched into snapshots.
    pub debounce: Debounce,
    /// How long to wait for every source's first state before serving anyway.
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

/// The sources to run, with their handler chain, before it starts.
pub struct Aggregate {
    registries: Vec<Box<dyn Registry>>,
    config_sources: Vec<Box<dyn ConfigSource>>,
    handlers: Vec<Box<dyn Handler>>,
    settings: Settings,
    metrics: Arc<ModelMetrics>,
}

/// What the task forwarding a source's stream tells the aggregate: one vocabulary for every
/// source, whatever it carries.
enum Input {
    /// An item of the stream of the source at this position among those of its kind.
    Item(usize, Received),
    /// The source's stream ended (or its adapter panicked), for this reason.
    Ended(Origin, String),
    /// The source has nothing more ready: the items it sent since its last `Settled` are one
    /// complete change (see [`forward`]).
    Settled(Origin),
}

/// An item of a source's stream, by what the source carries: the one place the two kinds
/// differ on the channel.
enum Received {
    /// A registry's.
    Registry(Result<Event<Registration>, RegistryError>),
    /// A configuration source's.
    Config(Result<ConfigEvent, RegistryError>),
}

/// Which source an item came from: its kind and its position among the sources of that kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Registry(usize),
    Config(usize),
}

/// What the aggregate runs sources of: how a source of `Self` is named on the channel.
trait Carried: Item {
    /// The `index`th source of this kind.
    fn origin(index: usize) -> Origin;
    /// One of its items.
    fn received(item: Result<Event<Self>, RegistryError>) -> Received;
}

impl Carried for Registration {
    fn origin(index: usize) -> Origin {
        Origin::Registry(index)
    }

    fn received(item: Result<Event<Self>, RegistryError>) -> Received {
        Received::Registry(item)
    }
}

impl Carried for Arc<ConfigObject> {
    fn origin(index: usize) -> Origin {
        Origin::Config(index)
    }

    fn received(item: Result<Event<Self>, RegistryError>) -> Received {
        Received::Config(item)
    }
}

impl Aggregate {
    /// An aggregate over `registries`, in precedence order, with the built-in log and metrics
    /// handlers at the head of the chain.
    pub fn new(
        registries: Vec<Box<dyn Registry>>,
        settings: Settings,
        metrics: Arc<ModelMetrics>,
    ) -> Self {
        let handlers: Vec<Box<dyn Handler>> = vec![
            Box::new(LogHandler),
            Box::new(MetricsHandler(metrics.clone())),
        ];
        Self {
            registries,
            config_sources: Vec::new(),
            handlers,
            settings,
            metrics,
        }
    }

    /// Adds a configuration source; sources added first win when two hold the same object.
    pub fn add_config_source(&mut self, source: Box<dyn ConfigSource>) {
        self.config_sources.push(source);
    }

    /// Appends a handler to the chain.
    pub fn add_handler(&mut self, handler: impl Handler + 'static) {
        self.handlers.push(Box::new(handler));
    }

    /// Starts every source and the aggregate task. Everything stops when `shutdown` is
    /// cancelled.
    pub fn start(self, shutdown: CancellationToken) -> SnapshotReader {
        let stores = self
            .registries
            .iter()
            .enumerate()
            .map(|(index, r)| Store::new(r.id().clone(), Services::new(index)))
            .collect();
        let config_stores = self
            .config_sources
            .iter()
            .map(|s| Store::new(s.id().clone(), ConfigObjects::default()))
            .collect();
        let (publisher, reader) = published();
        let (tx, rx) = mpsc::channel(1024);
        for (index, registry) in self.registries.into_iter().enumerate() {
            let token = shutdown.child_token();
            let watch = move || registry.watch(token);
            tokio::spawn(forward::<Registration, _>(index, watch, tx.clone()));
        }
        for (index, source) in self.config_sources.into_iter().enumerate() {
            let token = shutdown.child_token();
            let watch = move || source.watch(token);
            tokio::spawn(forward::<Arc<ConfigObject>, _>(index, watch, tx.clone()));
        }
        let runner = Runner {
            model: Model::new(stores, config_stores),
            handlers: self.handlers,
            settings: self.settings,
            metrics: self.metrics,
            publisher,
            batch: debounce::Batch::default(),
            dirty: Default::default(),
        };
        runner.publish_status();
        tokio::spawn(runner.run(rx, shutdown));
        reader
    }
}

/// Feeds the stream of the `index`th source of `T`s to the aggregate and reports how it
/// ended, panics included: the one loop every source runs in, whatever it carries.
///
/// Items the stream yields without waiting in between are one change: after forwarding them,
/// when the stream has nothing more ready, it sends `Input::Settled(origin)` (see
/// [`debounce`]). A source that applies one edit as several items (a config file's Upsert and
/// Removes) thus has them published together.
async fn forward<T: Carried, S>(
    index: usize,
    watch: impl FnOnce() -> S + Send + 'static,
    tx: mpsc::Sender<Input>,
) where
    S: Stream<Item = Result<Event<T>, RegistryError>> + Unpin + Send + 'static,
{
    let origin = T::origin(index);
    let items = tx.clone();
    let task = tokio::spawn(async move {
        let mut stream = watch();
        while let Some(first) = stream.next().await {
            // One change: this item and every one the stream has ready after it.
            let mut next = first;
            loop {
                let item = Input::Item(index, T::received(next));
                if items.send(item).await.is_err() {
                    return;
                }
                match ready_now(&mut stream) {
                    Some(Some(ready)) => next = ready,
                    Some(None) => return,
                    None => break,
                }
            }
            if items.send(Input::Settled(origin)).await.is_err() {
                return;
            }
        }
    });
    let reason = match task.await {
        Ok(()) => "the source's stream ended".to_string(),
        Err(err) if err.is_panic() => "the source's adapter panicked".to_string(),
        Err(err) => err.to_string(),
    };
    let _ = tx.send(Input::Ended(origin, reason)).await;
}

/// The stream's next item if it is ready now (`Some(None)`: the stream ended), else `None`.
///
/// Polled outside Tokio's cooperative budget: a task that used up its budget would see a
/// ready item as pending, and end a change early.
fn ready_now<S: Stream + Unpin>(stream: &mut S) -> Option<Option<S::Item>> {
    tokio::task::coop::unconstrained(stream.next()).now_or_never()
}

#[cfg(test)]
mod tests;
