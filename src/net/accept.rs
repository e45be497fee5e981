//! Accepting connections within the process's file descriptors.
//!
//! Every connection is a descriptor, and so is every file the registries read and every
//! connection they make. A port that accepted until the process ran out (27,000 idle sockets
//! once did) would leave `/ready` and `/metrics` unanswered and lose a File-registry change to
//! "Too many open files". So each port has a number of connection slots, all of them together
//! below the descriptor limit ([`Slots::for_limit`]): a connection takes a slot before it is
//! accepted, and while none is free, new connections wait in the kernel's listen backlog and
//! the port says so once in the log. Descriptors beyond the slots stay free for the files and
//! registries. When accepting fails anyway (the descriptors went elsewhere), the loop backs
//! off, doubling from 10 ms to 1 s, instead of spinning.
//!
//! A port may also cap the connections of one peer address; a connection over that cap is
//! closed as soon as it is accepted, with a log line naming the address.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The first and the longest pause after a failed accept.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// Descriptors kept out of the ports' slots, at most: for the HTTP ports, the registries'
/// connections, watched files and the process's own (listeners, epoll, inotify, logs).
const RESERVE_MAX: u64 = 1024;

/// How connections are shared out of a descriptor limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slots {
    /// ADS connections at once.
    pub(crate) ads: usize,
    /// Connections of each HTTP port (debug, monitoring) at once.
    pub(crate) http: usize,
}

impl Slots {
    /// The slots for a soft descriptor limit of `limit`: a reserve of a quarter of it (at
    /// most 1,024) stays out of the ADS port's slots; each HTTP port gets an eighth of the
    /// reserve (at least 4), and the rest of the reserve is left for files, registries and
    /// the process itself.
    pub(crate) fn for_limit(limit: u64) -> Self {
        let reserve = (limit / 4).min(RESERVE_MAX);
        let ads = limit.saturating_sub(reserve).max(1);
        let http = (reserve / 8).max(4);
        Self {
            ads: usize::try_from(ads).unwrap_or(usize::MAX),
            http: usize::try_from(http).unwrap_or(usize::MAX),
        }
    }
}

/// The soft limit on open descriptors, raised to the hard limit first (as Go's runtime
/// does at start since 1.19, and as servers that hold many connections must). Returns the
/// limit before and after; `None` where it cannot be read. Logs what it did.
pub fn raise_descriptor_limit() -> Option<(u64, u64)> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let before = limit.current?;
    // An unlimited hard limit is not allowed for descriptors; keep the kernel's `nr_open`
    // ceiling out of it by taking what the hard limit says only when it is finite.
    let Some(hard) = limit.maximum else {
        return Some((before, before));
    };
    if hard <= before {
        tracing::info!(limit = before, "open descriptor limit");
        return Some((before, before));
    }
    limit.current = Some(hard);
    match setrlimit(Resource::Nofile, limit) {
        Ok(()) => {
            tracing::info!(
                from = before,
                to = hard,
                "raised the open descriptor limit to its hard limit"
            );
            Some((before, hard))
        }
        Err(err) => {
            tracing::warn!(limit = before, hard, %err, "cannot raise the open descriptor limit");
            Some((before, before))
        }
    }
}

/// The current soft limit on open descriptors, if it can be read and is finite.
pub(crate) fn descriptor_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Accepts a port's connections within its slots (see the module docs).
pub(crate) struct Acceptor {
    listener: TcpListener,
    what: &'static str,
    slots: Arc<Semaphore>,
    max: usize,
    per_peer: Option<PerPeer>,
    /// Whether "at the limit" was logged since the port last had a free slot.
    said_full: bool,
}

/// One accepted connection and what it holds until dropped: its slot and its place in its
/// peer's count.
pub(crate) struct Accepted {
    pub(crate) tcp: TcpStream,
    pub(crate) peer: SocketAddr,
    pub(crate) slot: Slot,
}

/// A connection's slot, given back when dropped.
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
    peer: Option<(PerPeer, IpAddr)>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((counts, ip)) = &self.peer {
            counts.leave(*ip);
        }
    }
}

impl Acceptor {
    /// At most `max` connections at once, and `per_peer` from one address (0: no limit).
    pub(crate) fn new(
        listener: TcpListener,
        what: &'static str,
        max: usize,
        per_peer: usize,
    ) -> Self {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            listener,
            what,
            slots: Arc::new(Semaphore::new(max)),
            max,
            per_peer: (per_peer > 0).then(|| PerPeer::new(per_peer)),
            said_full: false,
        }
    }

    /// Accepts until `shutdown`, running each connection as its own task (`connection`),
    /// then waits for every connection to end.
    pub(crate) async fn serve<F, Fut>(mut self, shutdown: &CancellationToken, mut connection: F)
    where
        F: FnMut(Accepted) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut connections = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                accepted = self.accept(shutdown) => accepted,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            let Some(accepted) = accepted else { break };
            connections.spawn(connection(accepted));
        }
        while connections.join_next().await.is_some() {}
    }

    /// The next connection; `None` once `shutdown` is cancelled.
    pub(crate) async fn accept(&mut self, shutdown: &CancellationToken) -> Option<Accepted> {
        let mut pause = BACKOFF.0;
        loop {
            let permit = self.slot(shutdown).await?;
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return None,
                accepted = self.listener.accept() => accepted,
            };
            let (tcp, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    drop(permit);
                    self.failed(&err, pause, shutdown).await?;
                    pause = (pause * 2).min(BACKOFF.1);
                    continue;
                }
            };
            let peer_slot = match &self.per_peer {
                None => None,
                Some(counts) if counts.enter(peer.ip()) => Some((counts.clone(), peer.ip())),
                Some(counts) => {
                    tracing::warn!(listener = self.what, %peer, max = counts.max, "closing a connection: its address has as many as it may (--max-connections-per-peer)");
                    continue;
                }
            };
            return Some(Accepted {
                tcp,
                peer,
                slot: Slot {
                    _permit: permit,
                    peer: peer_slot,
                },
            });
        }
    }

    /// A free slot, waiting for one (and saying so once) when there is none.
    async fn slot(&mut self, shutdown: &CancellationToken) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            self.said_full = false;
            return Some(permit);
        }
        if !self.said_full {
            self.said_full = true;
            tracing::warn!(
                listener = self.what,
                max = self.max,
                "connections at their limit; new ones wait in the listen backlog until one closes"
            );
        }
        tokio::select! {
            () = shutdown.cancelled() => None,
            permit = self.slots.clone().acquire_owned() => permit.ok(),
        }
    }

    /// Waits after a failed accept; `None` on shutdown.
    async fn failed(
        &self,
        err: &std::io::Error,
        pause: Duration,
        shutdown: &CancellationToken,
    ) -> Option<()> {
        use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted};
        if matches!(
            err.kind(),
            ConnectionAborted | ConnectionReset | Interrupted
        ) {
            // The peer gave up before it was accepted: nothing wrong here.
            tracing::debug!(listener = self.what, %err, "a connection closed before it was accepted");
            return Some(());
        }
        if pause == BACKOFF.0 {
            tracing::warn!(listener = self.what, %err, "cannot accept connections (out of descriptors?); backing off");
        }
        tokio::select! {
            () = shutdown.cancelled() => None,
            () = tokio::time::sleep(pause) => Some(()),
        }
    }
}

/// Connections per peer address, shared by a port's connections.
#[derive(Clone)]
struct PerPeer {
    max: usize,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerPeer {
    fn new(max: usize) -> Self {
        Self {
            max,
            counts: Arc::default(),
        }
    }

    /// Counts a connection from `ip`; false (and not counted) when it has `max` already.
    fn enter(&self, ip: IpAddr) -> bool {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(ip).or_default();
        if *n >= self.max {
            return false;
        }
        *n += 1;
        true
    }

    fn leave(&self, ip: IpAddr) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_leave_a_reserve_below_the_descriptor_limit() {
        assert_eq!(
            Slots::for_limit(1_048_576),
            Slots {
                ads: 1_047_552,
                http: 128
            }
        );
        assert_eq!(
            Slots::for_limit(20_000),
            Slots {
                ads: 18_976,
                http: 128
            }
        );
        assert_eq!(Slots::for_limit(1024), Slots { ads: 768, http: 32 });
        assert_eq!(Slots::for_limit(256), Slots { ads: 192, http: 8 });
        let tiny = Slots::for_limit(8);
        assert!(tiny.ads >= 1 && tiny.http >= 4, "{tiny:?}");
    }

    #[test]
    fn a_peer_is_counted_until_its_connections_close() {
        let counts = PerPeer::new(2);
        let ip: IpAddr = [10, 0, 0, 1].into();
        assert!(counts.enter(ip));
        assert!(counts.enter(ip));
        assert!(!counts.enter(ip), "a third is over the cap");
        assert!(counts.enter([10, 0, 0, 2].into()), "another address is not");
        counts.leave(ip);
        assert!(counts.enter(ip));
        counts.leave(ip);
        counts.leave(ip);
        assert!(
            !counts.counts.lock().unwrap().contains_key(&ip),
            "forgotten at zero"
        );
    }

    #[tokio::test]
    async fn over_its_slots_a_port_waits_for_a_connection_to_close() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut acceptor = Acceptor::new(listener, "test", 1, 0);
        let shutdown = CancellationToken::new();
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        let first = acceptor.accept(&shutdown).await.expect("a connection");
        // The second waits for the first's slot.
        let second = tokio::select! {
            accepted = acceptor.accept(&shutdown) => Some(accepted),
            () = tokio::task::yield_now() => None,
        };
        assert!(second.is_none(), "no slot is free");
        drop(first);
        assert!(acceptor.accept(&shutdown).await.is_some());
        shutdown.cancel();
        assert!(acceptor.accept(&shutdown).await.is_none());
    }
}
