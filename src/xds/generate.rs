//! From a model snapshot and a proxy to encoded xDS resources.
//!
//! An [`XdsSnapshot`] wraps one model snapshot with caches of what has been generated from it.
//! Every resource is encoded at most once per snapshot and shared by every proxy that receives
//! it: clusters and endpoints per service, route configurations per (namespace, DNS domain),
//! listeners per (namespace, listener placement). Only what depends on one proxy's own
//! addresses (its inbound clusters and `virtualInbound`) is generated per proxy.
//!
//! **Invariant:** a cache key holds every input its generator reads. The generators below read
//! only the model snapshot and the parts of [`Proxy`] named in their key.

mod cluster;
mod domains;
mod endpoint;
mod gateway;
mod grpc;
mod inbound;
mod listener;
mod policy;
mod proto;
mod route;

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use wayfinder_registry::ServiceKey;
use wayfinder_registry::config::{ConfigKey, ConfigMeta, DestinationRule, Kind, Sidecar};

use crate::snapshot::rules::{egress_allows, registry_only};
use crate::snapshot::{MergedService, Snapshot, Visible};
use crate::xds::TypeUrl;
use crate::xds::proxy::{ListenSettings, Proxy, ProxyKind};
use crate::xds::resource::{Resource, ResourceSet, insert};

/// A model snapshot and the resources generated from it so far.
pub struct XdsSnapshot {
    model: Arc<Snapshot>,
    domain: Arc<str>,
    published: Instant,
    sidecar_services: Memo<(ServiceKey, Option<ConfigKey>), ServiceResources>,
    grpc_services: Memo<(ServiceKey, Option<ConfigKey>), ServiceResources>,
    outbound: Memo<ScopeKey, [Arc<ResourceSet>; 2]>,
    grpc_scopes: Memo<Arc<str>, [Arc<ResourceSet>; 4]>,
    listeners: Memo<(ScopeKey, ListenSettings), ResourceSet>,
    gateways: Memo<GatewayKey, [Arc<ResourceSet>; 2]>,
    routes: Memo<(ScopeKey, Arc<str>), ResourceSet>,
    instances: OnceLock<inbound::Index>,
}

/// What a sidecar's outbound view depends on: its namespace and the Sidecar object scoping it.
type ScopeKey = (Arc<str>, Option<ConfigKey>);

/// What a gateway's listeners and routes depend on: its namespace, where it listens, and its
/// labels (which Gateways select it).
type GatewayKey = (Arc<str>, ListenSettings, Vec<(String, String)>);

/// The resources of one type a proxy may receive: shared layers plus, for some types, a layer
/// of its own. Names never repeat across layers.
#[derive(Clone, Debug, Default)]
pub struct Resources {
    layers: Vec<Arc<ResourceSet>>,
}

/// What one service contributes, per type, for one kind of proxy.
#[derive(Debug, Default)]
pub(crate) struct ServiceResources {
    pub(crate) clusters: Vec<Arc<Resource>>,
    pub(crate) endpoints: Vec<Arc<Resource>>,
    pub(crate) listeners: Vec<Arc<Resource>>,
}

impl XdsSnapshot {
    /// Wraps a model snapshot; nothing is generated until a proxy asks. `domain` is the mesh
    /// domain (`--domain`), which short hostnames in configuration are relative to.
    pub fn new(model: Arc<Snapshot>, domain: &str) -> Self {
        Self {
            model,
            domain: domain.into(),
            published: Instant::now(),
            sidecar_services: Memo::default(),
            grpc_services: Memo::default(),
            outbound: Memo::default(),
            grpc_scopes: Memo::default(),
            listeners: Memo::default(),
            gateways: Memo::default(),
            routes: Memo::default(),
            instances: OnceLock::new(),
        }
    }

    /// The model snapshot.
    pub fn model(&self) -> &Arc<Snapshot> {
        &self.model
    }

    /// When this snapshot reached the xDS server.
    pub fn published(&self) -> Instant {
        self.published
    }

    /// Every resource of `type_url` that `proxy` may receive. `requested` are the names it
    /// subscribed to: proxyless gRPC clients may ask for a service by a short name, which is
    /// generated on demand.
    pub fn resources(
        &self,
        proxy: &Proxy,
        type_url: TypeUrl,
        requested: &BTreeSet<Arc<str>>,
    ) -> Resources {
        match proxy.kind {
            ProxyKind::Grpc => self.grpc(proxy, type_url, requested),
            ProxyKind::Sidecar | ProxyKind::Router => self.sidecar(proxy, type_url),
        }
    }

    fn sidecar(&self, proxy: &Proxy, type_url: TypeUrl) -> Resources {
        let ns = &proxy.namespace;
        let is_sidecar = proxy.kind == ProxyKind::Sidecar;
        // Gateways are not scoped by Sidecar objects.
        let scope = if is_sidecar {
            self.model.config.sidecar_for(ns, &proxy.labels)
        } else {
            None
        };
        let scope_key: ScopeKey = (
            ns.clone(),
            scope.map(|(meta, _)| config_key(Kind::Sidecar, meta)),
        );
        let ctx = || Ctx::scoped(&self.model, &self.domain, ns, scope);
        let outbound = || {
            self.outbound.get(scope_key.clone(), || {
                let ctx = ctx();
                let mut clusters = cluster::catch_all();
                let mut endpoints = ResourceSet::new();
                for svc in &ctx.visible {
                    let rule = ctx.rule(svc);
                    let key = (
                        svc.service.key(),
                        rule.map(|(meta, _)| config_key(Kind::DestinationRule, meta)),
                    );
                    let r = self
                        .sidecar_services
                        .get(key, || service_resources(svc, rule.map(|(_, dr)| dr)));
                    clusters.extend(r.clusters.iter().map(|c| (c.name.clone(), c.clone())));
                    endpoints.extend(r.endpoints.iter().map(|e| (e.name.clone(), e.clone())));
                }
                [Arc::new(clusters), Arc::new(endpoints)]
            })
        };
        let layers = match type_url {
            TypeUrl::Cluster if is_sidecar => {
                vec![
                    outbound()[0].clone(),
                    Arc::new(inbound::clusters(self.instances(), proxy)),
                ]
            }
            TypeUrl::Cluster => vec![outbound()[0].clone()],
            TypeUrl::Endpoint => vec![outbound()[1].clone()],
            TypeUrl::Listener if is_sidecar => {
                let shared = self
                    .listeners
                    .get((scope_key.clone(), proxy.listen.clone()), || {
                        listener::outbound(&ctx(), &proxy.listen)
                    });
                vec![shared, Arc::new(inbound::listener(self.instances(), proxy))]
            }
            TypeUrl::Route if is_sidecar => {
                vec![
                    self.routes
                        .get((scope_key.clone(), proxy.dns_domain.clone()), || {
                            route::outbound(&ctx(), &proxy.dns_domain)
                        }),
                ]
            }
            TypeUrl::Listener | TypeUrl::Route => {
                // A gateway's listeners depend on its labels (which Gateways select it) and
                // where it listens; gateways with the same ones share them.
                let labels: Vec<(String, String)> = proxy.labels.clone().into_iter().collect();
                let sets = self
                    .gateways
                    .get((ns.clone(), proxy.listen.clone(), labels), || {
                        gateway::resources(&Ctx::new(&self.model, &self.domain, ns), proxy)
                            .map(Arc::new)
                    });
                vec![sets[usize::from(type_url == TypeUrl::Route)].clone()]
            }
        };
        Resources { layers }
    }

    fn grpc(&self, proxy: &Proxy, type_url: TypeUrl, requested: &BTreeSet<Arc<str>>) -> Resources {
        let ns = &proxy.namespace;
        let scope = self.grpc_scopes.get(ns.clone(), || {
            let ctx = Ctx::new(&self.model, &self.domain, ns);
            let mut sets: [ResourceSet; 4] = Default::default();
            for svc in &ctx.visible {
                let rule = ctx.rule(svc);
                let key = (
                    svc.service.key(),
                    rule.map(|(meta, _)| config_key(Kind::DestinationRule, meta)),
                );
                let r = self
                    .grpc_services
                    .get(key, || grpc::service_resources(svc, rule.map(|(_, dr)| dr)));
                for (set, list) in sets
                    .iter_mut()
                    .zip([&r.clusters, &r.endpoints, &r.listeners])
                {
                    set.extend(list.iter().map(|x| (x.name.clone(), x.clone())));
                }
                for port in svc
                    .service
                    .ports
                    .iter()
                    .filter(|p| cluster::is_proxied(p.protocol))
                {
                    let name = format!("{}:{}", svc.service.hostname, port.number);
                    insert(&mut sets[3], grpc::route(&ctx, &name, svc, port));
                }
            }
            sets.map(Arc::new)
        });
        let index = TypeUrl::PUSH_ORDER
            .iter()
            .position(|t| *t == type_url)
            .unwrap_or_default();
        let mut layers = vec![scope[index].clone()];
        if matches!(type_url, TypeUrl::Listener | TypeUrl::Route) {
            let ctx = Ctx::new(&self.model, &self.domain, ns);
            let aliases = grpc::aliases(&ctx, proxy, type_url, requested, &scope[index]);
            if !aliases.is_empty() {
                layers.push(Arc::new(aliases));
            }
        }
        Resources { layers }
    }

    fn instances(&self) -> &inbound::Index {
        self.instances
            .get_or_init(|| inbound::Index::build(&self.model))
    }
}

fn service_resources(svc: &MergedService, rule: Option<&DestinationRule>) -> ServiceResources {
    let mut out = ServiceResources::default();
    for port in svc
        .service
        .ports
        .iter()
        .filter(|p| cluster::is_proxied(p.protocol))
    {
        for (c, cla) in cluster::outbound(svc, port, rule) {
            out.clusters.push(Arc::new(c));
            out.endpoints.extend(cla.map(Arc::new));
        }
    }
    out
}

fn config_key(kind: Kind, meta: &ConfigMeta) -> ConfigKey {
    ConfigKey {
        kind,
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
    }
}

/// What generators need besides a service: the snapshot, the mesh domain, and the namespace
/// of the proxies being served, with the services they see.
pub(super) struct Ctx<'a> {
    pub(super) model: &'a Snapshot,
    pub(super) domain: &'a str,
    pub(super) namespace: &'a str,
    /// The visible services, in hostname order.
    pub(super) visible: Visible<'a>,
    /// True when traffic to unknown destinations goes nowhere (a Sidecar's `REGISTRY_ONLY`).
    pub(super) registry_only: bool,
}

impl<'a> Ctx<'a> {
    fn new(model: &'a Snapshot, domain: &'a str, namespace: &'a str) -> Self {
        Self::scoped(model, domain, namespace, None)
    }

    /// A context whose services are limited by a Sidecar's egress hosts.
    fn scoped(
        model: &'a Snapshot,
        domain: &'a str,
        namespace: &'a str,
        sidecar: Option<(&ConfigMeta, &Sidecar)>,
    ) -> Self {
        let mut visible = model.visible(namespace);
        if let Some((meta, sc)) = sidecar {
            visible.retain(|s| {
                egress_allows(
                    sc,
                    &meta.namespace,
                    &s.service.namespace,
                    &s.service.hostname,
                )
            });
        }
        let registry_only = registry_only(sidecar.map(|(_, sc)| sc));
        Self {
            model,
            domain,
            namespace,
            visible,
            registry_only,
        }
    }

    /// The visible service with this hostname.
    pub(super) fn service(&self, host: &str) -> Option<&'a MergedService> {
        let i = self
            .visible
            .binary_search_by(|s| (*s.service.hostname).cmp(host))
            .ok()?;
        self.visible.get(i).map(|s| &***s)
    }

    /// The DestinationRule for a service, as seen from this namespace.
    pub(super) fn rule(
        &self,
        svc: &MergedService,
    ) -> Option<(&'a ConfigMeta, &'a DestinationRule)> {
        self.model.config.destination_rule(
            &svc.service.hostname,
            &svc.service.namespace,
            self.namespace,
            self.domain,
        )
    }
}

impl Resources {
    /// The resource with this name, if the proxy may receive it.
    pub fn get(&self, name: &str) -> Option<&Arc<Resource>> {
        self.layers.iter().find_map(|l| l.get(name))
    }

    /// Every resource, layer by layer, each layer in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.layers.iter().flat_map(|l| l.values())
    }

    /// How many resources there are.
    pub fn len(&self) -> usize {
        self.layers.iter().map(|l| l.len()).sum()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A map whose values are computed once, on first use, outside the map's lock: concurrent
/// callers for the same key wait for the one computation; other keys proceed.
struct Memo<K, V> {
    map: Mutex<HashMap<K, Arc<OnceLock<Arc<V>>>>>,
}

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V> Memo<K, V> {
    fn get(&self, key: K, init: impl FnOnce() -> V) -> Arc<V> {
        let cell = {
            // A panic while holding this lock cannot leave the map inconsistent (it only
            // inserts empty cells), so a poisoned lock is safe to use.
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(key).or_default().clone()
        };
        cell.get_or_init(|| Arc::new(init())).clone()
    }
}
