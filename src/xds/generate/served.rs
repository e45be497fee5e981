//! What each kind of proxy is served, generated from an [`XdsSnapshot`]'s memos: a
//! sidecar's or gateway's layers per type (`sidecar`: its scope's clusters and endpoints,
//! listeners and routes, its locality-shaped assignments, its inbound side), a proxyless gRPC
//! client's (`grpc`), and a gateway's secrets (`secrets`).

use std::collections::BTreeSet;
use std::sync::Arc;

use wayfinder_config::{ConfigKey, ConfigMeta, DestinationRule, Kind};

use super::cache::{Layer, Resources};
use super::ctx::Ctx;
use super::declared::ScopeKey;
use super::{
    Outbound, OutboundListeners, ServiceResources, XdsSnapshot, cluster, gateway, grpc, inbound,
    listener, locality, route, sds, security,
};
use crate::snapshot::MergedService;
use crate::xds::TypeUrl;
use crate::xds::proxy::{Proxy, ProxyKind};
use crate::xds::resource::{Resource, ResourceSet, insert};

impl XdsSnapshot {
    pub(super) fn sidecar(&self, proxy: &Proxy, type_url: TypeUrl) -> Resources {
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
        let ctx = || Ctx::scoped(&self.model, &self.domain, ns, scope, &self.mesh);
        let mesh_tls = proxy.mesh_tls();
        let upstreams = cluster::Upstreams {
            mesh: &self.mesh,
            mesh_tls,
            config: &self.model.config,
        };
        let outbound = || {
            self.outbound
                .get_after((scope_key.clone(), mesh_tls), |previous| {
                    let ctx = ctx();
                    let mut clusters = cluster::catch_all(self.mesh.connect_timeout);
                    let mut endpoints = ResourceSet::new();
                    let mut localized = Vec::new();
                    for svc in &ctx.visible {
                        let rule = ctx.rule(svc);
                        let key = (
                            svc.service.key(),
                            rule.map(|(meta, _)| config_key(Kind::DestinationRule, meta)),
                            mesh_tls,
                        );
                        let r = self.sidecar_services.get(key, || {
                            service_resources(svc, rule.map(|(_, dr)| dr), upstreams)
                        });
                        clusters.extend(by_name(&r.clusters));
                        endpoints.extend(by_name(&r.endpoints));
                        localized.extend(r.localized.iter().cloned());
                    }
                    let previous = previous.as_deref();
                    Outbound {
                        layers: [
                            Layer::after(previous.map(|p| &p.layers[0]), clusters),
                            Layer::after(previous.map(|p| &p.layers[1]), endpoints),
                        ],
                        localized: localized.into(),
                    }
                })
        };
        // The endpoints: those every proxy gets, and those locality load balancing shapes for
        // the proxy's place (none when no cluster in scope has it).
        let endpoints = || {
            let out = outbound();
            let mut layers = vec![out.layers[1].clone()];
            if !out.localized.is_empty() {
                let place = self.place(proxy, &out.localized);
                let key = (scope_key.clone(), mesh_tls, place);
                let layer = self.localized.get_after(key.clone(), |previous| {
                    let mut set = ResourceSet::new();
                    for l in out.localized.iter() {
                        let r = l.for_place(&key.2);
                        set.insert(r.name.clone(), r);
                    }
                    Layer::after(previous.as_deref(), set)
                });
                layers.push((*layer).clone());
            }
            layers
        };
        // A gateway's listeners depend on its labels (which Gateways select it), where it
        // listens and its certificate; gateways with the same ones share them.
        let gateway = || {
            let labels: Vec<(String, String)> = proxy.labels.clone().into_iter().collect();
            self.gateways.get_after(
                (ns.clone(), proxy.listen.clone(), labels, mesh_tls),
                |previous| {
                    let ctx = Ctx::new(&self.model, &self.domain, ns, &self.mesh);
                    let [listeners, routes, clusters] =
                        gateway::resources(&ctx, proxy, &self.mesh, &self.jwks);
                    let previous = previous.as_deref();
                    let after = |i: usize, set| Layer::after(previous.map(|p| &p[i]), set);
                    [after(0, listeners), after(1, routes), after(2, clusters)]
                },
            )
        };
        let layers = match type_url {
            TypeUrl::Cluster if is_sidecar => {
                vec![outbound().layers[0].clone(), self.inbound(proxy)[0].clone()]
            }
            TypeUrl::Cluster => vec![outbound().layers[0].clone(), gateway()[2].clone()],
            TypeUrl::Endpoint => endpoints(),
            TypeUrl::Listener if is_sidecar => {
                let mut generated = false;
                let shared = self.listeners.get_after(
                    (scope_key.clone(), proxy.listen.clone()),
                    |previous| {
                        generated = true;
                        let (set, conflicts) = listener::outbound(&ctx(), &proxy.listen);
                        OutboundListeners {
                            layer: Layer::after(previous.as_deref().map(|p| &p.layer), set),
                            conflicts,
                        }
                    },
                );
                if generated {
                    // Now that the memo holds it: the conflicts are counted again when asked.
                    *self.conflicts.lock().unwrap_or_else(|e| e.into_inner()) = None;
                }
                vec![shared.layer.clone(), self.inbound(proxy)[1].clone()]
            }
            TypeUrl::Route if is_sidecar => {
                let routes = self.routes.get_after(
                    (scope_key.clone(), proxy.dns_domain.clone()),
                    |previous| {
                        let set = route::outbound(&ctx(), &proxy.dns_domain);
                        Layer::after(previous.as_deref(), set)
                    },
                );
                vec![(*routes).clone()]
            }
            TypeUrl::Listener | TypeUrl::Route => {
                vec![gateway()[usize::from(type_url == TypeUrl::Route)].clone()]
            }
            // Served by `secrets` and `proxy_config`, before this.
            TypeUrl::Secret | TypeUrl::ProxyConfig => Vec::new(),
        };
        Resources { layers }
    }

    pub(super) fn grpc(
        &self,
        proxy: &Proxy,
        type_url: TypeUrl,
        requested: &BTreeSet<Arc<str>>,
    ) -> Resources {
        let ns = &proxy.namespace;
        let index = TypeUrl::PUSH_ORDER
            .iter()
            .position(|t| *t == type_url)
            .unwrap_or_default();
        // Clusters and endpoints, then listeners and routes, which do not read endpoints and
        // so are carried over an endpoint-only change (see `GRPC_ROUTING`).
        let (memo, first) = if index < 2 {
            (&self.grpc_scopes, 0)
        } else {
            (&self.grpc_routing, 2)
        };
        let pair = memo.get_after(ns.clone(), |previous| {
            let ctx = Ctx::new(&self.model, &self.domain, ns, &self.mesh);
            let mut sets: [ResourceSet; 2] = Default::default();
            for svc in &ctx.visible {
                let rule = ctx.rule(svc);
                let key = (
                    svc.service.key(),
                    rule.map(|(meta, _)| config_key(Kind::DestinationRule, meta)),
                    false,
                );
                let r = self
                    .grpc_services
                    .get(key, || grpc::service_resources(svc, rule.map(|(_, dr)| dr)));
                let [a, b] = &mut sets;
                if first == 0 {
                    a.extend(by_name(&r.clusters));
                    b.extend(by_name(&r.endpoints));
                    continue;
                }
                a.extend(by_name(&r.listeners));
                for port in svc
                    .service
                    .ports
                    .iter()
                    .filter(|p| cluster::is_proxied(p.protocol))
                {
                    let name = format!("{}:{}", svc.service.hostname, port.number);
                    insert(b, grpc::route(&ctx, &name, svc, port));
                }
            }
            let previous = previous.as_deref();
            let [a, b] = sets;
            [
                Layer::after(previous.map(|p| &p[0]), a),
                Layer::after(previous.map(|p| &p[1]), b),
            ]
        });
        let scope = &pair[index - first];
        let mut layers = vec![scope.clone()];
        // Short names are looked up among the visible services, which costs a walk of the
        // mesh: only when some requested name is not a full one.
        let missing = requested.iter().any(|n| !scope.set().contains_key(n));
        if matches!(type_url, TypeUrl::Listener | TypeUrl::Route) && missing {
            let ctx = Ctx::new(&self.model, &self.domain, ns, &self.mesh);
            let aliases = grpc::aliases(&ctx, proxy, type_url, requested, scope.set());
            if !aliases.is_empty() {
                layers.push(Layer::new(aliases));
            }
        }
        Resources { layers }
    }

    /// The SDS secrets of `requested` that `proxy` may read (see `sds`), shared by proxies of
    /// one identity that ask for the same names.
    pub(super) fn secrets(&self, proxy: &Proxy, requested: &BTreeSet<Arc<str>>) -> Resources {
        let Some((identity, access)) = sds::reader(&self.credentials, proxy) else {
            return Resources { layers: Vec::new() };
        };
        let key = (identity, access, requested.clone());
        let layer = self.secrets.get_after(key.clone(), |previous| {
            let set = sds::secrets(&self.credentials, &key.0, key.1, &key.2);
            Layer::after(previous.as_deref(), set)
        });
        Resources {
            layers: vec![(*layer).clone()],
        }
    }

    /// Where `proxy` is for locality load balancing (as Istio's `setTopologyLabels`: its
    /// workload labels' locality, else its registry entry's, else its node's), and its values
    /// of the labels `localized`'s `failoverPriority` name.
    pub(super) fn place(
        &self,
        proxy: &Proxy,
        localized: &[Arc<locality::Localized>],
    ) -> locality::Place {
        let node = wayfinder_registry::Locality::parse(&proxy.locality);
        let labelled = locality::from_labels(&proxy.labels);
        let at = labelled
            .as_ref()
            .or_else(|| self.instances().locality(proxy))
            .unwrap_or(&node);
        let wanted: BTreeSet<&str> = localized
            .iter()
            .flat_map(|l| l.plan().priority_labels())
            .collect();
        locality::place(
            at,
            &proxy.labels,
            &proxy.network,
            &proxy.cluster_id,
            &wanted,
        )
    }

    /// A sidecar's inbound layers: clusters, then the listener.
    pub(super) fn inbound(&self, proxy: &Proxy) -> Arc<[Arc<Layer>; 2]> {
        // A Sidecar's ingress listeners, when it has any, are the inbound side (Istio).
        let sidecar = self
            .model
            .config
            .sidecar_for(&proxy.namespace, &proxy.labels);
        let mut ports = match sidecar.filter(|(_, sc)| !sc.ingress.is_empty()) {
            Some((_, sc)) => inbound::from_ingress(&sc.ingress, proxy),
            None => self.instances().ports(proxy),
        };
        if let Some((_, sc)) = sidecar {
            inbound::apply_pools(&mut ports, sc);
        }
        let mtls = proxy.mesh_tls().then(|| {
            self.model
                .config
                .mtls_for(&self.mesh.root_namespace, &proxy.namespace, &proxy.labels)
        });
        let policies = security::Policies::for_workload(
            &self.model.config,
            &self.mesh,
            &self.jwks,
            &proxy.namespace,
            &proxy.labels,
        );
        let key = (ports, proxy.listen.clone(), mtls, policies);
        // Kept from the previous snapshot when asked for again (see `INBOUND`).
        self.inbound.get(key.clone(), || {
            let filters = security::Filters::new(&key.3, &self.mesh.trust_domain, false);
            [
                Layer::new(inbound::clusters(&key.0)),
                Layer::new(inbound::listener(
                    &key.0,
                    &key.1,
                    key.2.as_ref(),
                    &filters,
                    self.mesh.protocol_detection_timeout,
                )),
            ]
        })
    }

    pub(super) fn instances(&self) -> &inbound::Index {
        self.instances
            .get_or_init(|| inbound::Index::build(&self.model))
    }
}

pub(super) fn service_resources(
    svc: &MergedService,
    rule: Option<&DestinationRule>,
    up: cluster::Upstreams<'_>,
) -> ServiceResources {
    let mut out = ServiceResources::default();
    for port in svc
        .service
        .ports
        .iter()
        .filter(|p| cluster::is_proxied(p.protocol))
    {
        for (c, cla) in cluster::outbound(svc, port, rule, up) {
            out.clusters.push(Arc::new(c));
            match cla {
                Some(cluster::Assignment::Shared(r)) => out.endpoints.push(Arc::new(r)),
                Some(cluster::Assignment::Localized(l)) => out.localized.push(Arc::from(l)),
                None => {}
            }
        }
    }
    out
}

/// Resources as set entries.
pub(super) fn by_name(
    list: &[Arc<Resource>],
) -> impl Iterator<Item = (Arc<str>, Arc<Resource>)> + '_ {
    list.iter().map(|r| (r.name.clone(), r.clone()))
}

pub(super) fn config_key(kind: Kind, meta: &ConfigMeta) -> ConfigKey {
    ConfigKey {
        kind,
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
    }
}
