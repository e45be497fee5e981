//! What the simulated clients share: the server's address, their nodes, counters per type,
//! the changes being waited for, and the channel on which they report to the coordinator.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::wire::{Names, SotwResponse};
use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::pb::protobuf::{Struct, Value, value::Kind as ValueKind};
use xxhash_rust::xxh3::Xxh3;

use crate::args::{Args, Kind, Protocol};
use crate::{decode, delta, mesh, sotw};

/// What clients tell the coordinator.
pub(crate) enum Event {
    /// The client has acknowledged its whole initial configuration.
    Initial {
        client: usize,
        started: Instant,
        at: Instant,
    },
    /// The client received the endpoints of change `change`.
    Converged {
        change: usize,
        client: usize,
        at: Instant,
    },
    /// The client's connection or stream failed; it stopped.
    Failed { client: usize, error: String },
}

/// A change clients are watched for: the load assignment `cluster` holding `address`.
pub(crate) struct Pending {
    pub(crate) change: usize,
    pub(crate) cluster: String,
    pub(crate) address: String,
}

/// Responses, resources, bytes (`Any.value` lengths) and removed names of one type.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) responses: AtomicU64,
    pub(crate) resources: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) removed: AtomicU64,
}

pub(crate) struct Fleet {
    pub(crate) args: Args,
    pub(crate) addr: SocketAddr,
    /// With `--secure`: each client namespace's TLS (its certificate), by namespace index.
    tls: Vec<ClientTlsConfig>,
    pub(crate) cancel: CancellationToken,
    /// Per type, in `TypeUrl::PUSH_ORDER`.
    pub(crate) counters: [Counters; 4],
    pending: RwLock<Vec<Pending>>,
    any_pending: AtomicBool,
    /// EDS names of a state-of-the-world cluster response, by a hash of its content: every
    /// sidecar receives the same clusters, and one list is shared instead of one per client.
    eds_lists: Mutex<HashMap<u64, Arc<Names>>>,
    events: mpsc::UnboundedSender<Event>,
}

impl Fleet {
    pub(crate) fn new(
        args: Args,
        addr: SocketAddr,
        tls: Vec<ClientTlsConfig>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<Event>) {
        let (events, rx) = mpsc::unbounded_channel();
        let fleet = Self {
            args,
            addr,
            tls,
            cancel: CancellationToken::new(),
            counters: Default::default(),
            pending: RwLock::default(),
            any_pending: AtomicBool::new(false),
            eds_lists: Mutex::default(),
            events,
        };
        (Arc::new(fleet), rx)
    }

    /// Starts clients `ids` at `--connect-rate`, each on its own HTTP/2 connection.
    pub(crate) fn spawn(self: &Arc<Self>, ids: Range<usize>) {
        let fleet = self.clone();
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            for (n, id) in ids.enumerate() {
                if let Some(rate) = fleet.args.connect_rate {
                    tokio::time::sleep_until(start + Duration::from_secs_f64(n as f64 / rate))
                        .await;
                }
                let fleet = fleet.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let result = match fleet.args.protocol {
                        Protocol::Sotw => sotw::run(&fleet, id, started).await,
                        Protocol::Delta => delta::run(&fleet, id, started).await,
                    };
                    if let Err(error) = result {
                        fleet.send(Event::Failed { client: id, error });
                    }
                });
            }
        });
    }

    /// Client `id`'s connection: plaintext, or with `--secure` mutual TLS with its
    /// namespace's certificate.
    pub(crate) async fn connect(&self, id: usize) -> Result<Channel, String> {
        let scheme = if self.tls.is_empty() { "http" } else { "https" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", self.addr))
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_secs(10));
        if !self.tls.is_empty() {
            let tls = self.tls[id % self.tls.len()].clone();
            endpoint = endpoint.tls_config(tls).map_err(|e| e.to_string())?;
        }
        endpoint
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))
    }

    /// Client `id`'s node: an Envoy sidecar at 10.9.x.y, or a proxyless gRPC client (told
    /// apart by its user agent, as gRPC's own is), in its namespace ([`mesh::client_namespace`]).
    pub(crate) fn node(&self, id: usize) -> Node {
        let ns = &mesh::client_namespace(id, self.args.namespaces);
        match self.args.kind {
            Kind::Sidecar => Node {
                id: format!(
                    "sidecar~10.9.{}.{}~load-{id}.{ns}~{ns}.svc.cluster.local",
                    id / 256 % 256,
                    id % 256
                ),
                ..Default::default()
            },
            Kind::Grpc => Node {
                id: format!("grpc-load-{id}"),
                user_agent_name: "gRPC load client".into(),
                metadata: Some(Struct {
                    fields: [(
                        "NAMESPACE".to_string(),
                        Value {
                            kind: Some(ValueKind::StringValue(ns.into())),
                        },
                    )]
                    .into(),
                }),
                ..Default::default()
            },
        }
    }

    /// The services gRPC client `id` dials: `--grpc-targets` consecutive ones from `id × K`.
    pub(crate) fn window(&self, id: usize) -> impl Iterator<Item = usize> + use<> {
        let (k, n) = (self.args.grpc_targets, self.args.services);
        (0..k.min(n)).map(move |j| (id * k + j) % n)
    }

    /// Whether client `id` receives the endpoints of service `s`.
    pub(crate) fn subscribes(&self, id: usize, s: usize) -> bool {
        match self.args.kind {
            Kind::Sidecar if self.args.sidecar_hosts > 0 => {
                let ns = id % self.args.namespaces;
                mesh::scope(ns, self.args.sidecar_hosts, self.args.services).any(|h| h == s)
            }
            Kind::Sidecar => true,
            Kind::Grpc => self.window(id).any(|w| w == s),
        }
    }

    /// Counts a response.
    pub(crate) fn count(&self, t: TypeUrl, resources: usize, bytes: usize, removed: usize) {
        let c = &self.counters[t as usize];
        c.responses.fetch_add(1, Ordering::Relaxed);
        c.resources.fetch_add(resources as u64, Ordering::Relaxed);
        c.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        c.removed.fetch_add(removed as u64, Ordering::Relaxed);
    }

    /// Watches for a change; call before writing it.
    pub(crate) fn expect(&self, p: Pending) {
        self.pending.write().unwrap().push(p);
        self.any_pending.store(true, Ordering::SeqCst);
    }

    /// Stops watching change `change`.
    pub(crate) fn forget(&self, change: usize) {
        let mut pending = self.pending.write().unwrap();
        pending.retain(|p| p.change != change);
        self.any_pending
            .store(!pending.is_empty(), Ordering::SeqCst);
    }

    /// Stops watching every change.
    pub(crate) fn forget_all(&self) {
        self.pending.write().unwrap().clear();
        self.any_pending.store(false, Ordering::SeqCst);
    }

    /// True while some change is watched for: clients then look at load assignments.
    pub(crate) fn watching(&self) -> bool {
        self.any_pending.load(Ordering::SeqCst)
    }

    /// Called for every load assignment a client receives while [`Fleet::watching`].
    pub(crate) fn endpoints(&self, client: usize, name: &str, bytes: &[u8], at: Instant) {
        let pending = self.pending.read().unwrap();
        for p in pending.iter().filter(|p| p.cluster == name) {
            if decode::has_endpoint(bytes, &p.address) {
                self.send(Event::Converged {
                    change: p.change,
                    client,
                    at,
                });
            }
        }
    }

    /// The EDS names of a state-of-the-world cluster response (sorted), shared by content.
    pub(crate) fn eds_list(&self, r: &SotwResponse) -> Arc<Names> {
        let mut h = Xxh3::new();
        for any in &r.resources {
            h.update(&(any.value.len() as u64).to_le_bytes());
            h.update(&any.value);
        }
        let key = h.digest();
        if let Some(list) = self.eds_lists.lock().unwrap().get(&key) {
            return list.clone();
        }
        let mut names: Vec<String> = r
            .resources
            .iter()
            .filter_map(|a| decode::eds_name(&a.value))
            .collect();
        names.sort();
        names.dedup();
        let list = Arc::new(Names::new(names));
        self.eds_lists.lock().unwrap().insert(key, list.clone());
        list
    }

    pub(crate) fn send(&self, e: Event) {
        let _ = self.events.send(e);
    }
}
