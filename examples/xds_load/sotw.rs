//! A state-of-the-world ADS client (`StreamAggregatedResources`).
//!
//! Every request of a type carries the whole subscription; an ACK repeats it with the
//! response's version and nonce. Listener and cluster responses hold the full set, so the
//! route names a client wants are those of its latest listeners, and its EDS names those of its
//! latest clusters (one list shared by every client that received the same clusters).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::core::Node;

use crate::args::Kind;
use crate::client::{Machine, Progress, diff, drive};
use crate::decode;
use crate::fleet::Fleet;
use crate::mesh;
use crate::wire::{
    self, Names, SotwRequest as DiscoveryRequest, SotwResponse as DiscoveryResponse,
};

/// Connects client `id` and runs its stream.
pub(crate) async fn run(fleet: &Arc<Fleet>, id: usize, started: Instant) -> Result<(), String> {
    let channel = fleet.connect(id).await?;
    let mut m = Sotw::new(fleet.clone(), id);
    let (tx, rx) = mpsc::channel(16);
    for req in m.start() {
        tx.send(req)
            .await
            .map_err(|_| "the request stream closed")?;
    }
    let stream = crate::stream::open(channel, wire::SOTW, ReceiverStream::new(rx)).await?;
    drive(fleet, id, started, m, tx, stream).await
}

/// One type's side of the stream.
#[derive(Default)]
struct Type {
    version: String,
    nonce: String,
    /// The subscription (sorted); empty for a wildcard one.
    names: Arc<Names>,
}

struct Sotw {
    fleet: Arc<Fleet>,
    id: usize,
    node: Option<Node>,
    types: [Type; 4],
    listeners_asked: bool,
    /// gRPC: the clusters each route configuration sends to.
    route_clusters: BTreeMap<String, Vec<String>>,
    progress: Progress,
}

impl Sotw {
    fn new(fleet: Arc<Fleet>, id: usize) -> Self {
        let node = Some(fleet.node(id));
        Self {
            fleet,
            id,
            node,
            types: Default::default(),
            listeners_asked: false,
            route_clusters: BTreeMap::new(),
            progress: Progress::default(),
        }
    }

    /// Sidecar: wildcard clusters (listeners follow the first clusters, as Envoy asks for
    /// them once its clusters are known). gRPC: the listeners it dials.
    fn start(&mut self) -> Vec<DiscoveryRequest> {
        match self.fleet.args.kind {
            Kind::Sidecar => vec![self.request(TypeUrl::Cluster)],
            Kind::Grpc => {
                let mut names: Vec<String> = self
                    .fleet
                    .window(self.id)
                    .map(|s| format!("{}:{}", mesh::hostname(s), mesh::PORT))
                    .collect();
                names.sort();
                names.dedup();
                self.progress.want(TypeUrl::Listener, &names);
                self.types[TypeUrl::Listener as usize].names = Arc::new(Names::new(names));
                self.listeners_asked = true;
                vec![self.request(TypeUrl::Listener)]
            }
        }
    }

    /// A request for type `t` with its current subscription, version and nonce.
    fn request(&mut self, t: TypeUrl) -> DiscoveryRequest {
        let ty = &self.types[t as usize];
        DiscoveryRequest {
            node: self.node.take(),
            type_url: t.as_str().into(),
            version_info: ty.version.clone(),
            response_nonce: ty.nonce.clone(),
            resource_names: ty.names.clone(),
        }
    }

    /// Replaces the subscription of `t`; a request if it changed.
    fn subscribe(&mut self, t: TypeUrl, names: Arc<Names>) -> Option<DiscoveryRequest> {
        let old = &self.types[t as usize].names;
        if Arc::ptr_eq(old, &names) || **old == *names {
            return None;
        }
        let (added, removed) = diff(old, &names);
        self.progress.want(t, &added);
        for n in &removed {
            self.progress.settled(t, n);
        }
        self.types[t as usize].names = names;
        Some(self.request(t))
    }
}

impl Machine for Sotw {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;

    fn on_response(&mut self, r: DiscoveryResponse, at: Instant) -> Vec<DiscoveryRequest> {
        let Some(t) = TypeUrl::parse(&r.type_url) else {
            return Vec::new();
        };
        let bytes = r.resources.iter().map(|a| a.len).sum();
        self.fleet.count(t, r.resources.len(), bytes, 0);
        let watching = t == TypeUrl::Endpoint && self.fleet.watching();
        if self.progress.awaits(t) || watching {
            for any in &r.resources {
                let name = decode::name(&any.value);
                self.progress.settled(t, &name);
                if watching {
                    self.fleet.endpoints(self.id, &name, &any.value, at);
                }
            }
        }
        self.progress.answered(t);
        let ty = &mut self.types[t as usize];
        ty.version = r.version_info.clone();
        ty.nonce = r.nonce.clone();
        let mut out = vec![self.request(t)];
        match t {
            TypeUrl::Cluster => {
                let eds = self.fleet.eds_list(&r);
                out.extend(self.subscribe(TypeUrl::Endpoint, eds));
                if !self.listeners_asked {
                    self.listeners_asked = true;
                    out.push(self.request(TypeUrl::Listener));
                }
            }
            TypeUrl::Listener => {
                let mut routes: Vec<String> = r
                    .resources
                    .iter()
                    .flat_map(|a| decode::route_names(&a.value))
                    .collect();
                routes.sort();
                routes.dedup();
                out.extend(self.subscribe(TypeUrl::Route, Arc::new(Names::new(routes))));
            }
            TypeUrl::Route if self.fleet.args.kind == Kind::Grpc => {
                for any in &r.resources {
                    let clusters = decode::route_clusters(&any.value);
                    self.route_clusters
                        .insert(decode::name(&any.value), clusters);
                }
                let wanted = &self.types[TypeUrl::Route as usize].names;
                self.route_clusters
                    .retain(|name, _| wanted.binary_search(name).is_ok());
                let mut clusters: Vec<String> =
                    self.route_clusters.values().flatten().cloned().collect();
                clusters.sort();
                clusters.dedup();
                out.extend(self.subscribe(TypeUrl::Cluster, Arc::new(Names::new(clusters))));
            }
            // The load asks for no secrets.
            TypeUrl::Route | TypeUrl::Endpoint | TypeUrl::Secret | TypeUrl::ProxyConfig => {}
        }
        out
    }

    fn complete(&mut self) -> bool {
        self.progress.complete()
    }
}
