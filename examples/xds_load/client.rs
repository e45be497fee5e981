//! What both protocols' clients share: how far a client is with its initial configuration
//! ([`Progress`]), the state machine each protocol implements ([`Machine`]) and the loop that
//! drives one client's stream with it ([`drive`]).

use std::collections::HashSet;
use std::time::Instant;

use tokio::sync::mpsc;
use wayfinder::xds::TypeUrl;
use xxhash_rust::xxh3::xxh3_64;

use crate::fleet::{Event, Fleet};
use crate::stream::Incoming;

/// How far a client is with its initial configuration: which types answered, and which
/// subscribed names have not arrived yet (as hashes, and only until it is complete).
#[derive(Default)]
pub(crate) struct Progress {
    got: [bool; 4],
    missing: [HashSet<u64>; 4],
    done: bool,
}

impl Progress {
    /// True while names of `t` are awaited (never for wildcard subscriptions).
    pub(crate) fn awaits(&self, t: TypeUrl) -> bool {
        !self.missing[t as usize].is_empty()
    }

    pub(crate) fn want<'a>(&mut self, t: TypeUrl, names: impl IntoIterator<Item = &'a String>) {
        if !self.done {
            self.missing[t as usize].extend(names.into_iter().map(|n| xxh3_64(n.as_bytes())));
        }
    }

    /// A name arrived, or is no longer wanted, or was reported as not existing.
    pub(crate) fn settled(&mut self, t: TypeUrl, name: &str) {
        if !self.done {
            self.missing[t as usize].remove(&xxh3_64(name.as_bytes()));
        }
    }

    pub(crate) fn answered(&mut self, t: TypeUrl) {
        self.got[t as usize] = true;
    }

    /// True once, when every type has answered and every name wanted has arrived.
    pub(crate) fn complete(&mut self) -> bool {
        if self.done || !self.got.iter().all(|g| *g) || self.missing.iter().any(|m| !m.is_empty()) {
            return false;
        }
        self.done = true;
        self.missing = Default::default();
        true
    }
}

/// One protocol's client state machine, without I/O.
pub(crate) trait Machine {
    type Request;
    type Response: crate::wire::Streamed;
    /// The requests to send for a response received at `at`.
    fn on_response(&mut self, r: Self::Response, at: Instant) -> Vec<Self::Request>;
    /// True once, when the initial configuration is complete and acknowledged.
    fn complete(&mut self) -> bool;
}

/// Runs a client's stream until the fleet is cancelled or the stream fails.
pub(crate) async fn drive<M: Machine>(
    fleet: &Fleet,
    id: usize,
    started: Instant,
    mut m: M,
    tx: mpsc::Sender<M::Request>,
    mut rx: Incoming<M::Response>,
) -> Result<(), String> {
    loop {
        let r = tokio::select! {
            () = fleet.cancel.cancelled() => return Ok(()),
            r = rx.message() => r,
        };
        let r = match r {
            Ok(Some(r)) => r,
            Ok(None) => return Err("the server closed the stream".into()),
            Err(status) => return Err(format!("stream failed: {status}")),
        };
        for req in m.on_response(r, Instant::now()) {
            tx.send(req)
                .await
                .map_err(|_| "the request stream closed")?;
        }
        if m.complete() {
            fleet.send(Event::Initial {
                client: id,
                started,
                at: Instant::now(),
            });
        }
    }
}

/// `(added, removed)` between two sorted, deduplicated name lists.
pub(crate) fn diff(old: &[String], new: &[String]) -> (Vec<String>, Vec<String>) {
    let added = new
        .iter()
        .filter(|n| old.binary_search(n).is_err())
        .cloned()
        .collect();
    let removed = old
        .iter()
        .filter(|n| new.binary_search(n).is_err())
        .cloned()
        .collect();
    (added, removed)
}
