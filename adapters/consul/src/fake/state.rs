//! The fake's whole state behind one lock, so that every answer is built from one consistent
//! view, and the wake-ups blocked requests wait on.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;
use tokio::time::Instant;

use super::dc::{Dc, NodeSpec, ServiceSpec};
use super::{Counts, Fault, Instance};

/// The raft index right after setup.
const START_INDEX: u64 = 10;
/// The address of every datacenter's one server, and so of its leader.
const SERVER_ADDRESS: &str = "127.0.0.1";
/// Consul's server RPC port, the port `/v1/status/leader` names.
const SERVER_PORT: u16 = 8300;

/// State plus the channel that wakes every waiting request (faults, restores, shutdown) and
/// the number of requests held.
pub(super) struct Shared {
    state: Mutex<State>,
    control: watch::Sender<()>,
    held: watch::Sender<usize>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    pub(super) fn new(state: State) -> Shared {
        Shared {
            state: Mutex::new(state),
            control: watch::channel(()).0,
            held: watch::channel(0).0,
        }
    }

    /// Counts a request as held until the guard drops.
    pub(super) fn hold(&self) -> Held<'_> {
        self.held.send_modify(|n| *n += 1);
        Held(&self.held)
    }

    /// A receiver of the number of requests held.
    pub(super) fn held(&self) -> watch::Receiver<usize> {
        self.held.subscribe()
    }

    /// Locks the state; a panic elsewhere while it was held does not poison it for the fake.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A receiver woken by [`Shared::wake_all`].
    pub(super) fn control(&self) -> watch::Receiver<()> {
        self.control.subscribe()
    }

    /// Wakes every waiting request, to look at faults, restores and shutdown again.
    pub(super) fn wake_all(&self) {
        self.control.send_replace(());
    }
}

/// A request held by a blocking wait or a hang; counted while it lives.
pub(super) struct Held<'a>(&'a watch::Sender<usize>);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Everything the fake knows.
#[derive(Debug)]
pub(super) struct State {
    /// The raft index.
    pub(super) raft: u64,
    /// Datacenter names, the local one first.
    pub(super) dcs: Vec<String>,
    /// Datacenters by name.
    pub(super) dc: BTreeMap<String, Dc>,
    /// Fault of every read.
    pub(super) fault: Fault,
    /// Fault of reads that arrive while it is set, for their whole life.
    pub(super) new_request_fault: Fault,
    /// When the cluster lost its leader; `None` while it has one.
    pub(super) leader_lost: Option<Instant>,
    /// Faults of `/v1/health/service/<name>`, by name.
    pub(super) service_faults: BTreeMap<String, Fault>,
    /// The one valid ACL token; `None`: ACLs off.
    pub(super) token: Option<String>,
    /// Number of snapshot restores so far.
    pub(super) restores: u64,
    /// Answered reads.
    pub(super) counts: Counts,
    /// Set when the fake is dropped.
    pub(super) closed: bool,
}

impl State {
    /// A state with these datacenters, each with Consul's own server registered.
    pub(super) fn new(dcs: &[&str]) -> State {
        let mut st = State {
            raft: 0,
            dcs: Vec::new(),
            dc: BTreeMap::new(),
            fault: Fault::None,
            new_request_fault: Fault::None,
            leader_lost: None,
            service_faults: BTreeMap::new(),
            token: None,
            restores: 0,
            counts: Counts::default(),
            closed: false,
        };
        let mut names: Vec<&str> = dcs.iter().copied().filter(|d| !d.is_empty()).collect();
        if names.is_empty() {
            names.push("dc1");
        }
        for name in names {
            if !st.dc.contains_key(name) {
                let idx = st.next_index();
                st.add_dc(name, idx);
            }
        }
        st.raft = st.raft.max(START_INDEX);
        st
    }

    /// The local datacenter.
    pub(super) fn local(&self) -> &str {
        self.dcs.first().map_or("dc1", String::as_str)
    }

    /// The datacenter a request names (`None` or `""`: the local one), if it exists.
    pub(super) fn find_dc(&self, name: Option<&str>) -> Option<(&str, &Dc)> {
        let name = name.filter(|n| !n.is_empty()).unwrap_or(self.local());
        self.dc.get_key_value(name).map(|(k, v)| (k.as_str(), v))
    }

    /// Whether the datacenter exists (`""`: the local one, which always does).
    pub(super) fn has_dc(&self, name: &str) -> bool {
        name.is_empty() || self.dc.contains_key(name)
    }

    /// The datacenter `name` (`""`: the local one), made with its Consul server if new.
    pub(super) fn dc_mut(&mut self, name: &str) -> &mut Dc {
        let name = if name.is_empty() {
            self.local().to_owned()
        } else {
            name.to_owned()
        };
        if !self.dc.contains_key(&name) {
            // Made by a registration: it shares that registration's raft index.
            let idx = self.raft;
            self.add_dc(&name, idx);
        }
        self.dc.entry(name).or_insert_with(|| Dc::new(0))
    }

    fn add_dc(&mut self, name: &str, idx: u64) {
        let mut dc = Dc::new(idx);
        register_server(&mut dc, idx);
        self.dcs.push(name.to_owned());
        self.dc.insert(name.to_owned(), dc);
    }

    /// Bumps the raft index and returns it.
    pub(super) fn next_index(&mut self) -> u64 {
        self.raft += 1;
        self.raft
    }

    /// The fault of a read: for `Some(service)` a health read, whose own fault wins.
    pub(super) fn fault_for(&self, service: Option<&str>) -> Fault {
        service
            .and_then(|s| self.service_faults.get(s))
            .unwrap_or(&self.fault)
            .clone()
    }

    /// The leader's address as `/v1/status/leader` answers it: `""` without a leader.
    pub(super) fn leader(&self) -> String {
        if self.leader_lost.is_some() {
            String::new()
        } else {
            format!("{SERVER_ADDRESS}:{SERVER_PORT}")
        }
    }

    /// `X-Consul-KnownLeader` and `X-Consul-LastContact` (milliseconds): the fake answers as
    /// the leader, in contact with itself, until the leader is lost.
    pub(super) fn leadership(&self) -> (bool, u64) {
        match self.leader_lost {
            None => (true, 0),
            Some(lost) => {
                let ms = u64::try_from(lost.elapsed().as_millis()).unwrap_or(u64::MAX);
                (false, ms)
            }
        }
    }

    /// Adds or replaces an instance and its node at raft index `idx`.
    pub(super) fn register_instance(&mut self, idx: u64, i: Instance) {
        let dc = self.dc_mut(&i.datacenter);
        dc.upsert_node(
            idx,
            NodeSpec {
                name: i.node.clone(),
                address: i.node_address,
                status: Some(i.node_status),
            },
        );
        dc.upsert_service(
            idx,
            &i.node,
            ServiceSpec {
                service: i.service,
                id: i.id,
                address: i.address,
                port: i.port,
                tags: i.tags,
                meta: i.meta,
                weights: i.weights,
                kind: i.kind,
                check: Some(i.check_status),
            },
        );
    }

    /// Removes an instance (one raft index if there was one).
    pub(super) fn deregister(&mut self, dc: &str, service: &str, id: &str) -> bool {
        let idx = self.raft + 1;
        let found = self.has_dc(dc) && self.dc_mut(dc).remove_service(idx, service, id);
        if found {
            self.raft = idx;
        }
        found
    }

    /// Sets a service-check status (one raft index if it changed anything).
    pub(super) fn set_check_status(&mut self, dc: &str, service: &str, id: &str, status: &str) {
        let idx = self.raft + 1;
        if self.has_dc(dc) && self.dc_mut(dc).set_check(idx, service, id, status) {
            self.raft = idx;
        }
    }

    /// Lowers the raft index and every table and service index to at most `index`.
    pub(super) fn restore(&mut self, index: u64) {
        self.raft = self.raft.min(index);
        for dc in self.dc.values_mut() {
            dc.restore(index);
        }
        self.restores += 1;
    }
}

/// Registers Consul's own server (service `consul`, port 8300, no service check).
fn register_server(dc: &mut Dc, idx: u64) {
    let node = "consul-server-1";
    dc.upsert_node(
        idx,
        NodeSpec {
            name: node.to_owned(),
            address: SERVER_ADDRESS.to_owned(),
            status: Some("passing".to_owned()),
        },
    );
    dc.upsert_service(
        idx,
        node,
        ServiceSpec {
            service: "consul".to_owned(),
            id: "consul".to_owned(),
            address: String::new(),
            port: SERVER_PORT,
            tags: Vec::new(),
            meta: BTreeMap::new(),
            weights: (1, 1),
            kind: String::new(),
            check: None,
        },
    );
}
