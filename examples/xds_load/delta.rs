//! A delta (incremental) ADS client (`DeltaAggregatedResources`).
//!
//! Requests carry only subscription changes; an ACK carries the nonce alone. Responses hold
//! only what changed, so the client keeps, per listener, the route names it references and
//! (gRPC) per route configuration the clusters it sends to. EDS names are not kept: each
//! cluster received subscribes its load assignment (a repeat is harmless) and each cluster
//! removed unsubscribes it, so a sidecar holds no per-cluster state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::pb::discovery::DeltaDiscoveryRequest;

use crate::args::Kind;
use crate::client::{Machine, Progress, diff, drive};
use crate::decode;
use crate::fleet::Fleet;
use crate::mesh;
use crate::wire::{self, DeltaResponse as DeltaDiscoveryResponse};

/// Connects client `id` and runs its stream.
pub(crate) async fn run(fleet: &Arc<Fleet>, id: usize, started: Instant) -> Result<(), String> {
    let channel = fleet.connect(id).await?;
    let mut m = Delta::new(fleet.clone(), id);
    let (tx, rx) = mpsc::channel(16);
    for req in m.start() {
        tx.send(req)
            .await
            .map_err(|_| "the request stream closed")?;
    }
    let stream = crate::stream::open(channel, wire::DELTA, ReceiverStream::new(rx)).await?;
    drive(fleet, id, started, m, tx, stream).await
}

struct Delta {
    fleet: Arc<Fleet>,
    id: usize,
    node: Option<Node>,
    listeners_asked: bool,
    /// The route names each listener references.
    listener_routes: BTreeMap<String, Vec<String>>,
    /// gRPC: the clusters each route configuration sends to.
    route_clusters: BTreeMap<String, Vec<String>>,
    /// Explicit subscriptions derived from the maps above (routes; gRPC clusters), sorted.
    subscribed: [Vec<String>; 4],
    progress: Progress,
}

impl Delta {
    fn new(fleet: Arc<Fleet>, id: usize) -> Self {
        let node = Some(fleet.node(id));
        Self {
            fleet,
            id,
            node,
            listeners_asked: false,
            listener_routes: BTreeMap::new(),
            route_clusters: BTreeMap::new(),
            subscribed: Default::default(),
            progress: Progress::default(),
        }
    }

    /// Sidecar: legacy wildcard clusters (an empty first request), listeners after the first
    /// clusters. gRPC: the listeners it dials.
    fn start(&mut self) -> Vec<DeltaDiscoveryRequest> {
        match self.fleet.args.kind {
            Kind::Sidecar => vec![self.change(TypeUrl::Cluster, Vec::new(), Vec::new())],
            Kind::Grpc => {
                self.listeners_asked = true;
                let mut names: Vec<String> = self
                    .fleet
                    .window(self.id)
                    .map(|s| format!("{}:{}", mesh::hostname(s), mesh::PORT))
                    .collect();
                names.sort();
                names.dedup();
                self.progress.want(TypeUrl::Listener, &names);
                vec![self.change(TypeUrl::Listener, names, Vec::new())]
            }
        }
    }

    fn change(
        &mut self,
        t: TypeUrl,
        subscribe: Vec<String>,
        unsubscribe: Vec<String>,
    ) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            node: self.node.take(),
            type_url: t.as_str().into(),
            resource_names_subscribe: subscribe,
            resource_names_unsubscribe: unsubscribe,
            ..Default::default()
        }
    }

    /// Sets the explicit subscription of `t` to the children in `by_parent`; a request if it
    /// changed.
    fn follow(
        &mut self,
        t: TypeUrl,
        by_parent: &BTreeMap<String, Vec<String>>,
    ) -> Option<DeltaDiscoveryRequest> {
        let mut names: Vec<String> = by_parent.values().flatten().cloned().collect();
        names.sort();
        names.dedup();
        let (added, removed) = diff(&self.subscribed[t as usize], &names);
        if added.is_empty() && removed.is_empty() {
            return None;
        }
        self.progress.want(t, &added);
        for n in &removed {
            self.progress.settled(t, n);
        }
        self.subscribed[t as usize] = names;
        Some(self.change(t, added, removed))
    }
}

impl Machine for Delta {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;

    fn on_response(
        &mut self,
        r: DeltaDiscoveryResponse,
        at: Instant,
    ) -> Vec<DeltaDiscoveryRequest> {
        let Some(t) = TypeUrl::parse(&r.type_url) else {
            return Vec::new();
        };
        let bodies = || {
            r.resources
                .iter()
                .filter_map(|res| Some((&res.name, res.resource.as_ref()?)))
        };
        let bytes = bodies().map(|(_, any)| any.len).sum();
        self.fleet
            .count(t, r.resources.len(), bytes, r.removed_resources.len());
        let watching = t == TypeUrl::Endpoint && self.fleet.watching();
        for (name, body) in bodies() {
            self.progress.settled(t, name);
            if watching {
                self.fleet.endpoints(self.id, name, &body.value, at);
            }
        }
        for name in &r.removed_resources {
            self.progress.settled(t, name);
        }
        self.progress.answered(t);
        let ack = DeltaDiscoveryRequest {
            node: self.node.take(),
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            ..Default::default()
        };
        let mut out = vec![ack];
        match t {
            TypeUrl::Cluster => {
                let eds: Vec<String> = bodies()
                    .filter_map(|(_, any)| decode::eds_name(&any.value))
                    .collect();
                self.progress.want(TypeUrl::Endpoint, &eds);
                let gone = r.removed_resources.clone();
                if !eds.is_empty() || !gone.is_empty() {
                    out.push(self.change(TypeUrl::Endpoint, eds, gone));
                }
                if !self.listeners_asked {
                    self.listeners_asked = true;
                    out.push(self.change(TypeUrl::Listener, Vec::new(), Vec::new()));
                }
            }
            TypeUrl::Listener => {
                for (name, body) in bodies() {
                    self.listener_routes
                        .insert(name.clone(), decode::route_names(&body.value));
                }
                for name in &r.removed_resources {
                    self.listener_routes.remove(name);
                }
                let by_parent = std::mem::take(&mut self.listener_routes);
                out.extend(self.follow(TypeUrl::Route, &by_parent));
                self.listener_routes = by_parent;
            }
            TypeUrl::Route if self.fleet.args.kind == Kind::Grpc => {
                for (name, body) in bodies() {
                    self.route_clusters
                        .insert(name.clone(), decode::route_clusters(&body.value));
                }
                for name in &r.removed_resources {
                    self.route_clusters.remove(name);
                }
                let by_parent = std::mem::take(&mut self.route_clusters);
                out.extend(self.follow(TypeUrl::Cluster, &by_parent));
                self.route_clusters = by_parent;
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
