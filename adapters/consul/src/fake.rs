//! An in-process fake of the Consul HTTP API, for tests and load runs (feature `fake`).
//!
//! [`FakeConsul`] serves, on `127.0.0.1` and a port the system picks, the part of Consul's HTTP
//! API that a service-discovery client reads, plus the catalog writes that let a script outside
//! the process drive it:
//!
//! - `GET /v1/catalog/services`, `GET /v1/health/service/:service` (blocking queries),
//! - `GET /v1/catalog/datacenters`, `GET /v1/status/leader`,
//! - `PUT /v1/catalog/register`, `PUT /v1/catalog/deregister`.
//!
//! The facts it follows come from Consul's HTTP API documentation: "Blocking Queries" (`index`,
//! `wait` as a Go duration with a 5m default and a 10m cap, a random jitter of up to wait/16,
//! `X-Consul-Index` never 0, an index that may go backwards after a snapshot restore),
//! "Health: List Service Instances for Service" (`/v1/health/service/:service` with `dc`,
//! `passing`, `tag`, `stale`), "Catalog: List Services" (`/v1/catalog/services`, which lists
//! Consul's own `consul` service), "Catalog: List Datacenters", "Catalog: Register Entity",
//! "Catalog: Deregister Entity", "Status: Get Raft Leader" (`/v1/status/leader`: the leader's
//! address as a JSON string, `""` without one), the `X-Consul-KnownLeader` and
//! `X-Consul-LastContact` headers of reads, and the ACL token carriers (`X-Consul-Token`,
//! `Authorization: Bearer`, `?token=`). Field names, the extra fields of a health entry and the
//! text bodies of errors are those a Consul 1.x server sends.
//!
//! The model: one raft index; per datacenter a services-table index (bumped when a service
//! instance is added, changed or removed) and per service an index (bumped when one of its
//! instances, their checks or their nodes change; kept after its last instance goes). Each
//! instance lives on a node with a `serfHealth` check and has at most one service check.
//! Every datacenter starts with Consul's own server registered as service `consul`; that
//! server (`127.0.0.1:8300`) is the leader.
//!
//! Two outages leave parked blocking queries parked while new requests fail, as they do in a
//! real cluster (where a failure is noticed only when a parked query returns, minutes later):
//! - [`FakeConsul::set_leader`]`(false)`, a cluster that lost its quorum: `/v1/status/leader`
//!   answers `""`; reads that need a leader (all but `?stale`) get 500 `No cluster leader`,
//!   as do writes; `?stale` reads answer from the fake's state with `X-Consul-KnownLeader:
//!   false` and `X-Consul-LastContact` counting the milliseconds since the leader was lost;
//!   parked queries wait on (no write commits) and answer the same way when their `wait` runs
//!   out;
//! - [`FakeConsul::set_new_request_fault`], an agent that lost its servers (a 500 for every
//!   new request) or a partition (a hang): the fault applies to requests that arrive while it
//!   is set, and only to them.
//!
//! Where it departs from Consul, on purpose:
//! - a request without a token, when ACLs are on, gets 403 `Permission denied` (Consul filters
//!   the results of reads for the anonymous token instead); `/v1/catalog/datacenters` needs no
//!   token, as in Consul;
//! - `filter`, `near`, `node-meta`, `ns`, `partition` and `peer` are accepted and ignored;
//! - a check status of `maintenance` is shown the way Consul shows maintenance mode: an extra
//!   critical check `_service_maintenance:<id>` next to the service's own check;
//! - a node made by `PUT /v1/catalog/register` gets a passing `serfHealth` check unless the
//!   request sets one; node checks other than `serfHealth` are ignored;
//! - instances are keyed by (datacenter, service, ID): Consul keeps a service ID unique per
//!   node instead, so there two services on one node cannot share an ID;
//! - [`FakeConsul::register`] into a datacenter the fake does not know adds that datacenter.
//!
//! Clients must not rely on the order of health entries; the fake sorts them by node name
//! (then service ID), as Consul happens to.

mod catalog;
mod dc;
mod http;
mod json;
mod params;
mod reply;
mod state;
mod write;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use state::{Shared, State};

/// A fake Consul server on `127.0.0.1`; it stops serving when dropped.
#[derive(Debug)]
pub struct FakeConsul {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// One service instance, with the node it runs on and the status of its checks.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Datacenter; `""` means the fake's local datacenter. Default `"dc1"`.
    pub datacenter: String,
    /// Node name; default `"node-<address>"`.
    pub node: String,
    /// The node's address; default the service address (or `127.0.0.1` when that is empty).
    pub node_address: String,
    /// Service name.
    pub service: String,
    /// Service ID, unique within the service in its datacenter.
    pub id: String,
    /// Service address; may be `""`, and clients then use the node address.
    pub address: String,
    /// Service port.
    pub port: u16,
    /// Tags.
    pub tags: Vec<String>,
    /// Service metadata.
    pub meta: BTreeMap<String, String>,
    /// Weights `(Passing, Warning)`; default `(1, 1)`.
    pub weights: (u32, u32),
    /// Consul's service `Kind` (`connect-proxy`, `mesh-gateway`, …); default `""`, a typical
    /// service, whose answers have no `Kind` field (as Consul omits it).
    pub kind: String,
    /// Status of the instance's service check: `"passing"`, `"warning"`, `"critical"` or
    /// `"maintenance"`. Default `"passing"`.
    pub check_status: String,
    /// Status of the node's `serfHealth` check. Default `"passing"`.
    pub node_status: String,
}

impl Instance {
    /// An instance of `service` with ID `id` at `address:port`, with the defaults above.
    pub fn new(service: &str, id: &str, address: &str, port: u16) -> Instance {
        let node_address = if address.is_empty() {
            "127.0.0.1"
        } else {
            address
        };
        Instance {
            datacenter: "dc1".to_owned(),
            node: format!("node-{node_address}"),
            node_address: node_address.to_owned(),
            service: service.to_owned(),
            id: id.to_owned(),
            address: address.to_owned(),
            port,
            tags: Vec::new(),
            meta: BTreeMap::new(),
            weights: (1, 1),
            kind: String::new(),
            check_status: "passing".to_owned(),
            node_status: "passing".to_owned(),
        }
    }

    /// Adds a tag.
    pub fn tag(mut self, t: &str) -> Self {
        self.tags.push(t.to_owned());
        self
    }

    /// Adds a metadata entry.
    pub fn meta(mut self, k: &str, v: &str) -> Self {
        self.meta.insert(k.to_owned(), v.to_owned());
        self
    }

    /// Puts the instance in datacenter `dc`.
    pub fn in_datacenter(mut self, dc: &str) -> Self {
        self.datacenter = dc.to_owned();
        self
    }
}

/// A failure the fake answers read (GET) requests with (`/v1/status/leader` included).
/// `Status` and `Hang` act before the blocking wait; the others shape the answer a request gets
/// after it.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// No fault.
    None,
    /// This status at once, with a Consul-like text body (500: `rpc error making call: No
    /// cluster leader`; 429: Consul's too-many-connections text).
    Status(u16),
    /// Hold the request without answering until the fault changes; then answer as usual.
    Hang,
    /// Answer 200 with headers and part of the body, then break the connection.
    Reset,
    /// Answer 200 with the usual headers (`X-Consul-Index` included) and exactly this body.
    Malformed(String),
    /// Answer as usual but without `X-Consul-Index`.
    MissingIndex,
    /// Answer as usual with `X-Consul-Index: 0`.
    IndexZero,
    /// Delay the answer by this long (after the blocking wait).
    Slow(Duration),
}

/// Read requests answered so far (fault and error answers included; blocked ones not).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `GET /v1/catalog/services`, all datacenters.
    pub catalog_services: u64,
    /// `GET /v1/catalog/datacenters`.
    pub datacenters: u64,
    /// `GET /v1/status/leader`.
    pub status_leader: u64,
    /// `GET /v1/health/service/<name>` by name, all datacenters.
    pub health: BTreeMap<String, u64>,
}

impl Counts {
    /// All `GET /v1/health/service/...` answers.
    pub fn health_total(&self) -> u64 {
        self.health.values().sum()
    }
}

impl FakeConsul {
    /// Starts a fake with the one datacenter `dc1`.
    pub async fn start() -> std::io::Result<FakeConsul> {
        Self::start_with_datacenters(&["dc1"]).await
    }

    /// Starts a fake with these datacenters; the first is the local one (`dc1` if none).
    pub async fn start_with_datacenters(dcs: &[&str]) -> std::io::Result<FakeConsul> {
        // A deep accept queue: load runs open a thousand blocking requests at once, and the
        // usual 128 would drop SYNs (each then retried a second later).
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((std::net::Ipv4Addr::LOCALHOST, 0).into())?;
        let tcp = socket.listen(4096)?;
        let addr = tcp.local_addr()?;
        let shared = Arc::new(Shared::new(State::new(dcs)));
        let (stop, stop_rx) = watch::channel(false);
        let app = http::router(shared.clone());
        let listener = wayfinder_registry::fake_listener::StopListener::new(tcp, stop_rx);
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, "fake Consul stopped serving");
            }
        });
        Ok(FakeConsul {
            shared,
            addr,
            stop,
            task,
        })
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds or replaces the instance `(datacenter, service, id)` and its node (one raft index).
    pub fn register(&self, instance: Instance) {
        self.register_many(vec![instance]);
    }

    /// Adds or replaces all these instances under one raft index.
    pub fn register_many(&self, instances: Vec<Instance>) {
        if instances.is_empty() {
            return;
        }
        let mut st = self.shared.lock();
        let idx = st.next_index();
        for instance in instances {
            st.register_instance(idx, instance);
        }
    }

    /// Removes one instance; false if there was none.
    pub fn deregister(&self, datacenter: &str, service: &str, id: &str) -> bool {
        self.shared.lock().deregister(datacenter, service, id)
    }

    /// Sets the status of the instance's service check (`"maintenance"` turns maintenance mode
    /// on; any other status turns it off). Nothing changes for an unknown instance.
    pub fn set_check_status(&self, datacenter: &str, service: &str, id: &str, status: &str) {
        self.shared
            .lock()
            .set_check_status(datacenter, service, id, status);
    }

    /// Sets the fault of every read request ([`Fault::None`] clears it).
    pub fn set_fault(&self, fault: Fault) {
        self.shared.lock().fault = fault;
        self.shared.wake_all();
    }

    /// Sets the fault of `GET /v1/health/service/<service>` only, which wins over the one of
    /// [`FakeConsul::set_fault`]; [`Fault::None`] clears it.
    pub fn set_service_fault(&self, service: &str, fault: Fault) {
        {
            let mut st = self.shared.lock();
            if fault == Fault::None {
                st.service_faults.remove(service);
            } else {
                st.service_faults.insert(service.to_owned(), fault);
            }
        }
        self.shared.wake_all();
    }

    /// Sets the fault of requests that arrive from now on, for their whole life, while
    /// requests already held (parked blocking queries) keep waiting as they were: an agent
    /// that lost its servers (`Fault::Status(500)`) or a partition that new connections do not
    /// cross (`Fault::Hang`: such a request is never answered). It wins over
    /// [`FakeConsul::set_fault`] for the requests it applies to; [`Fault::None`] clears it.
    pub fn set_new_request_fault(&self, fault: Fault) {
        self.shared.lock().new_request_fault = fault;
    }

    /// Loses the cluster's leader (`false`), as when a quorum of servers is gone, or elects it
    /// again (`true`); see the module documentation for what each request then gets.
    /// [`FakeConsul::register`] and the other methods still change the state: they are the
    /// test's hand on it, not Consul writes.
    pub fn set_leader(&self, elected: bool) {
        let mut st = self.shared.lock();
        match (elected, st.leader_lost) {
            (true, _) => st.leader_lost = None,
            (false, None) => st.leader_lost = Some(tokio::time::Instant::now()),
            (false, Some(_)) => {}
        }
    }

    /// Turns ACLs on with this token as the only valid one, or off with `None`.
    pub fn require_token(&self, token: Option<&str>) {
        self.shared.lock().token = token.map(str::to_owned);
    }

    /// Simulates a snapshot restore: the raft index and every table and service index become
    /// at most `index`, and blocked requests answer at once with the lower indexes.
    pub fn restore_snapshot(&self, index: u64) {
        self.shared.lock().restore(index);
        self.shared.wake_all();
    }

    /// Read requests answered so far.
    pub fn counts(&self) -> Counts {
        self.shared.lock().counts.clone()
    }

    /// Requests held right now by a blocking wait or by [`Fault::Hang`].
    pub fn waiting(&self) -> usize {
        *self.shared.held().borrow()
    }

    /// Resolves once at least `n` requests are held (see [`FakeConsul::waiting`]): a test
    /// knows then that its request reached the fake and is blocked.
    pub async fn until_waiting(&self, n: usize) {
        let mut held = self.shared.held();
        let _ = held.wait_for(|held| *held >= n).await;
    }

    /// The current raft index.
    pub fn index(&self) -> u64 {
        self.shared.lock().raft
    }
}

impl Drop for FakeConsul {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        self.task.abort();
        self.shared.lock().closed = true;
        self.shared.wake_all();
    }
}
