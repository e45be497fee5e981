//! The snapshot's two sides, kube-style: one [`Publisher`], which only the aggregate holds, and
//! any number of [`SnapshotReader`]s for everyone who serves what it publishes.
//!
//! kube-rs' reflector splits its cache the same way (`reflector::store()` gives a `Writer` and
//! a `Store`): the writer is moved into the one task that applies events, and readers never
//! learn where the data comes from. Here the xDS server, the debug pages and metrics take a
//! reader and never name the aggregate; the aggregate is the only code that can publish.
//!
//! What is published: the current [`Snapshot`] (lock-free, through an `ArcSwap`), its version
//! (a `watch` channel that wakes readers), readiness, and how each source is doing
//! ([`SourceStatuses`]).

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::Snapshot;
use super::status::SourceStatus;

/// A new publisher and the first reader of what it publishes. The snapshot starts as
/// [`Snapshot::empty`] (version 0), not ready, with no source statuses.
pub fn published() -> (Publisher, SnapshotReader) {
    let shared = Arc::new(Shared {
        snapshot: ArcSwap::from_pointee(Snapshot::empty()),
        statuses: ArcSwap::from_pointee(SourceStatuses::default()),
    });
    let (versions_tx, versions) = watch::channel(0);
    let (ready_tx, ready) = watch::channel(false);
    let reader = SnapshotReader {
        shared: shared.clone(),
        versions,
        ready,
    };
    let publisher = Publisher {
        shared,
        versions_tx,
        ready_tx,
    };
    (publisher, reader)
}

/// How every source is doing, for `/debug/registryz`, `/debug/configz` and `/ready`.
#[derive(Clone, Debug, Default)]
pub struct SourceStatuses {
    /// Each registry, in precedence order.
    pub registries: Vec<SourceStatus>,
    /// Each configuration source, in precedence order.
    pub config_sources: Vec<SourceStatus>,
}

struct Shared {
    snapshot: ArcSwap<Snapshot>,
    statuses: ArcSwap<SourceStatuses>,
}

/// The write side: publishes snapshots, readiness and source statuses. Not `Clone`: one
/// writer, the aggregate's task.
pub struct Publisher {
    shared: Arc<Shared>,
    versions_tx: watch::Sender<u64>,
    ready_tx: watch::Sender<bool>,
}

impl Publisher {
    /// The snapshot in force, which the next one is built from.
    pub fn current(&self) -> Arc<Snapshot> {
        self.shared.snapshot.load_full()
    }

    /// Puts `snapshot` in force and wakes every reader waiting for a new version. The caller
    /// validated it: readers serve it as is.
    pub fn publish(&self, snapshot: Arc<Snapshot>) {
        let version = snapshot.version;
        self.shared.snapshot.store(snapshot);
        self.versions_tx.send_replace(version);
    }

    /// Marks the snapshot ready to serve (every source synced, or the sync timeout passed).
    /// Readiness never goes back.
    pub fn set_ready(&self) {
        self.ready_tx.send_replace(true);
    }

    /// True once [`Publisher::set_ready`] was called.
    pub fn is_ready(&self) -> bool {
        *self.ready_tx.borrow()
    }

    /// Replaces the source statuses readers see.
    pub fn set_statuses(&self, statuses: SourceStatuses) {
        self.shared.statuses.store(Arc::new(statuses));
    }
}

/// The read side: the current snapshot, its version changes, readiness and source statuses.
/// Cheap to clone; never blocks.
#[derive(Clone)]
pub struct SnapshotReader {
    shared: Arc<Shared>,
    versions: watch::Receiver<u64>,
    ready: watch::Receiver<bool>,
}

impl SnapshotReader {
    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.snapshot.load_full()
    }

    /// A receiver that wakes with the version of each newly published snapshot.
    pub fn versions(&self) -> watch::Receiver<u64> {
        self.versions.clone()
    }

    /// True once every source synced or the sync timeout passed.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until ready. Returns at once if the publisher is gone (the aggregate stopped):
    /// nothing will become ready then.
    pub async fn ready(&self) {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
    }

    /// How every source is doing now.
    pub fn statuses(&self) -> Arc<SourceStatuses> {
        self.shared.statuses.load_full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readers_see_each_publication_and_readiness() {
        let (publisher, reader) = published();
        let other = reader.clone();
        assert_eq!(reader.snapshot().version, 0);
        assert!(!reader.is_ready());
        let mut versions = other.versions();
        let mut next = Snapshot::empty();
        next.version = 7;
        publisher.publish(Arc::new(next));
        versions.changed().await.expect("publisher alive");
        assert_eq!(*versions.borrow(), 7);
        assert_eq!(other.snapshot().version, 7);
        assert_eq!(publisher.current().version, 7);
        publisher.set_ready();
        other.ready().await;
        assert!(reader.is_ready());
    }

    #[tokio::test]
    async fn ready_returns_when_the_publisher_is_gone() {
        let (publisher, reader) = published();
        drop(publisher);
        reader.ready().await;
        assert!(!reader.is_ready());
    }
}
