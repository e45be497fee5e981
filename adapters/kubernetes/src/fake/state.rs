//! The fake's state behind one lock, and the channels that wake waiting requests and watches.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::kinds::KINDS;
use super::store::Store;
use super::{Counts, Fault};

/// The resourceVersion the fake starts at: like a real cluster, never at 0 or 1.
const START_RV: u64 = 100;

/// How long a list or watch naming a future resourceVersion waits for it before the 504, as
/// the real server's watch cache does.
pub(super) const FRESHNESS_WAIT: Duration = Duration::from_secs(3);

/// Everything the fake knows.
#[derive(Debug)]
pub(super) struct State {
    /// The latest resourceVersion handed out (global, like etcd's revision).
    pub(super) rv: u64,
    /// One store per row of [`KINDS`].
    pub(super) stores: Vec<Store>,
    /// The fault every HTTP request meets.
    pub(super) fault: Fault,
    /// Requests answered.
    pub(super) counts: Counts,
    /// Events created through HTTP, with `apiVersion` and `kind`.
    pub(super) events: Vec<Value>,
    /// Server-side cap on a watch's duration.
    pub(super) watch_cap: Option<Duration>,
    /// How often watches that allow them get a bookmark.
    pub(super) bookmark_every: Duration,
    /// Service-account tokens TokenReview knows, by token.
    pub(super) tokens: BTreeMap<String, super::token_review::Token>,
    /// What SubjectAccessReview allows, in the order granted.
    pub(super) grants: Vec<super::access_review::Grant>,
}

impl State {
    fn new() -> State {
        State {
            rv: START_RV,
            stores: KINDS.iter().map(|_| Store::default()).collect(),
            fault: Fault::None,
            counts: Counts::default(),
            events: Vec::new(),
            watch_cap: None,
            bookmark_every: Duration::from_secs(1),
            tokens: BTreeMap::new(),
            grants: Vec::new(),
        }
    }

    /// Forgets every kind's history up to now.
    pub(super) fn compact(&mut self) {
        let rv = self.rv;
        for store in &mut self.stores {
            store.compact(rv);
        }
    }
}

/// The state, and the wake-ups: writes, fault changes, cut watches, stops, open watches.
#[derive(Debug)]
pub(super) struct Shared {
    state: Mutex<State>,
    /// The resourceVersion after the latest write; watches wait on it.
    written: watch::Sender<u64>,
    /// Bumped when the fault changes; held requests look again.
    control: watch::Sender<u64>,
    /// Bumped by `cut_watches` and `stop`: every open watch ends.
    cuts: watch::Sender<u64>,
    /// Bumped by `stop`: every held request ends.
    stops: watch::Sender<u64>,
    /// Open watch streams by plural.
    open: watch::Sender<BTreeMap<String, usize>>,
}

impl Shared {
    pub(super) fn new() -> Shared {
        let state = State::new();
        Shared {
            written: watch::channel(state.rv).0,
            state: Mutex::new(state),
            control: watch::channel(0).0,
            cuts: watch::channel(0).0,
            stops: watch::channel(0).0,
            open: watch::channel(BTreeMap::new()).0,
        }
    }

    /// Locks the state; a panic elsewhere while it was held does not poison it for the fake.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a write under the lock, then wakes the watches if the resourceVersion moved.
    pub(super) fn commit<R>(&self, write: impl FnOnce(&mut State) -> R) -> R {
        let (result, before, after) = {
            let mut st = self.lock();
            let before = st.rv;
            let result = write(&mut st);
            (result, before, st.rv)
        };
        if after != before {
            self.written.send_replace(after);
        }
        result
    }

    /// A receiver of the latest resourceVersion, woken by every write.
    pub(super) fn written(&self) -> watch::Receiver<u64> {
        self.written.subscribe()
    }

    /// Waits up to [`FRESHNESS_WAIT`] for the resourceVersion to reach `rv`; false if it did not.
    pub(super) async fn wait_for_rv(&self, rv: u64) -> bool {
        let mut written = self.written();
        let reached = written.wait_for(|now| *now >= rv);
        matches!(
            tokio::time::timeout(FRESHNESS_WAIT, reached).await,
            Ok(Ok(_))
        )
    }

    /// A receiver woken when the fault changes.
    pub(super) fn control(&self) -> watch::Receiver<u64> {
        self.control.subscribe()
    }

    /// Sets the fault and wakes the held requests.
    pub(super) fn set_fault(&self, fault: Fault) {
        self.lock().fault = fault;
        self.control.send_modify(|n| *n += 1);
    }

    /// A receiver woken when watches are cut.
    pub(super) fn cuts(&self) -> watch::Receiver<u64> {
        self.cuts.subscribe()
    }

    /// Ends every open watch.
    pub(super) fn cut_watches(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// A receiver woken when the server stops.
    pub(super) fn stops(&self) -> watch::Receiver<u64> {
        self.stops.subscribe()
    }

    /// Ends every open watch and every held request.
    pub(super) fn stop_all(&self) {
        self.cut_watches();
        self.stops.send_modify(|n| *n += 1);
    }

    /// Counts a watch on `plural` as open until the guard drops.
    pub(super) fn open_watch(self: &Arc<Self>, plural: &'static str) -> OpenWatch {
        self.open
            .send_modify(|m| *m.entry(plural.to_owned()).or_insert(0) += 1);
        OpenWatch {
            shared: self.clone(),
            plural,
        }
    }

    /// Resolves once at least `n` watches on `plural` are open.
    pub(super) async fn until_watching(&self, plural: &str, n: usize) {
        let mut open = self.open.subscribe();
        let _ = open
            .wait_for(|m| m.get(plural).copied().unwrap_or(0) >= n)
            .await;
    }
}

/// An open watch, counted while it lives.
#[derive(Debug)]
pub(super) struct OpenWatch {
    shared: Arc<Shared>,
    plural: &'static str,
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.shared.open.send_modify(|m| {
            if let Some(n) = m.get_mut(self.plural) {
                *n = n.saturating_sub(1);
            }
        });
    }
}
