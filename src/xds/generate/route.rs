//! Outbound route configurations for sidecars: one per HTTP port, named by the port.

mod filters;
pub(crate) mod http;

use std::collections::{BTreeMap, HashSet};

use wayfinder_config::Destination;

use super::Ctx;
use super::domains;
use super::policy::{Policy, add_hash_policies};
use crate::snapshot::MergedService;
use crate::snapshot::rules::resolve_host;
use crate::xds::names;
use crate::xds::pb::route::{
    Route, RouteConfiguration, RouteMatch, VirtualHost, route, route_action,
    route_action::HashPolicy, route_match,
};
use crate::xds::resource::{Resource, ResourceSet, insert};

/// Route configuration `"<port>"` for every HTTP port of the visible services: a virtual host
/// `<host>:<port>` per service with Istio's domain expansion relative to `proxy_domain`, and
/// the catch-all `allow_any` host to `PassthroughCluster`. A service with a VirtualService
/// bound to the mesh gets that VirtualService's rules (those that apply on the port; if none
/// does, the default route); others get the default route. A domain two services would claim
/// goes to the first by hostname: Envoy rejects a configuration that repeats a domain.
pub(super) fn outbound(ctx: &Ctx<'_>, proxy_domain: &str) -> ResourceSet {
    let mut by_port: BTreeMap<u16, Vec<&MergedService>> = BTreeMap::new();
    for svc in &ctx.visible {
        for port in svc.service.ports.iter().filter(|p| p.protocol.is_http()) {
            if ctx.on_port(svc, port.number) {
                by_port.entry(port.number).or_default().push(svc);
            }
        }
    }
    let mut set = ResourceSet::new();
    for (port, services) in by_port {
        let name = port.to_string();
        let mut taken = HashSet::new();
        let mut unordered = false;
        let mut virtual_hosts: Vec<VirtualHost> = services
            .iter()
            .filter_map(|svc| {
                let host = &svc.service.hostname;
                let domains: Vec<String> =
                    domains::expand(host, port, proxy_domain, &svc.service.addresses)
                        .into_iter()
                        .filter(|d| taken.insert(d.clone()))
                        .collect();
                if domains.is_empty() {
                    return None;
                }
                let routes = service_routes(ctx, svc, port);
                unordered |= routes.iter().any(http::has_unordered_maps);
                Some(VirtualHost {
                    name: format!("{host}:{port}"),
                    domains,
                    routes,
                    ..Default::default()
                })
            })
            .collect();
        virtual_hosts.push(catch_all(ctx.registry_only));
        let config = RouteConfiguration {
            name: name.clone(),
            virtual_hosts,
            validate_clusters: Some(crate::xds::pb::protobuf::BoolValue { value: false }),
            ..Default::default()
        };
        let resource = if unordered {
            Resource::encode_unordered(name, &config)
        } else {
            Resource::encode(name, &config)
        };
        insert(&mut set, resource);
    }
    set
}

/// The catch-all virtual host: `allow_any` to `PassthroughCluster`, or under `REGISTRY_ONLY`
/// (the Sidecar's, else MeshConfig's), Istio's `block_all`, answering 502.
fn catch_all(registry_only: bool) -> VirtualHost {
    let routes = if registry_only {
        vec![Route {
            name: "block_all".into(),
            r#match: Some(RouteMatch {
                path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
                ..Default::default()
            }),
            action: Some(route::Action::DirectResponse(
                crate::xds::pb::route::DirectResponseAction {
                    status: 502,
                    ..Default::default()
                },
            )),
            ..Default::default()
        }]
    } else {
        vec![default_route(names::PASSTHROUGH_CLUSTER.into())]
    };
    let name = if registry_only {
        "block_all"
    } else {
        "allow_any"
    };
    VirtualHost {
        name: name.into(),
        domains: vec!["*".into()],
        routes,
        ..Default::default()
    }
}

/// The routes for one service on one port.
fn service_routes(ctx: &Ctx<'_>, svc: &MergedService, port: u16) -> Vec<Route> {
    let host = &svc.service.hostname;
    if let Some((meta, vs)) = ctx.model.config.mesh_virtual_service(
        host,
        &svc.service.namespace,
        ctx.namespace,
        ctx.domain,
        ctx.exports,
    ) {
        let dest = Destinations {
            ctx,
            namespace: &meta.namespace,
            port,
        };
        let routes = http::routes(&vs.http, port, http::Bound::Mesh, &dest);
        if !routes.is_empty() {
            return routes;
        }
    }
    let mut route = default_route(names::outbound_cluster(port, "", host));
    if let Some(route::Action::Route(action)) = &mut route.action {
        let rule = ctx.rule(svc).map(|(_, dr)| dr);
        add_hash_policies(action, Policy::new(rule, port, None).hash_policies());
    }
    vec![route]
}

/// A route for every path to `cluster`, with Istio's defaults: no timeout and its default retry
/// policy.
pub(super) fn default_route(cluster: String) -> Route {
    Route {
        name: "default".into(),
        r#match: Some(RouteMatch {
            path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
            ..Default::default()
        }),
        action: Some(http::default_action(cluster)),
        ..Default::default()
    }
}

/// A route for proxyless gRPC: every path to `cluster`; gRPC applies its own timeouts.
pub(super) fn grpc_route(cluster: String) -> Route {
    Route {
        r#match: Some(RouteMatch {
            path_specifier: Some(route_match::PathSpecifier::Prefix(String::new())),
            ..Default::default()
        }),
        action: Some(route::Action::Route(crate::xds::pb::route::RouteAction {
            cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster)),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// Resolves the destinations of one VirtualService for one listener port: cluster names, and
/// the hash policies consistent hashing in their DestinationRules needs.
pub(crate) struct Destinations<'a> {
    ctx: &'a Ctx<'a>,
    /// Namespace of the VirtualService: short destination hosts are relative to it.
    namespace: &'a str,
    /// Port of the listener: the destination port when neither the rule nor the service says.
    port: u16,
}

impl<'a> Destinations<'a> {
    /// Destinations of a VirtualService of `namespace` served on listener port `port`.
    pub(crate) fn new(ctx: &'a Ctx<'a>, namespace: &'a str, port: u16) -> Self {
        Self {
            ctx,
            namespace,
            port,
        }
    }
}

impl Destinations<'_> {
    /// The same destinations with short hosts relative to `namespace` instead (the rules a
    /// delegate gave, whose hosts are relative to the delegate's namespace).
    pub(crate) fn in_namespace<'b>(&'b self, namespace: &'b str) -> Destinations<'b> {
        Destinations {
            ctx: self.ctx,
            namespace,
            port: self.port,
        }
    }

    /// `outbound|<port>|<subset>|<host>` for a destination. The port is the destination's, else
    /// the service's only port, else the listener's.
    pub(crate) fn cluster(&self, d: &Destination) -> String {
        let (host, port, _) = self.resolve(d);
        names::outbound_cluster(port, &d.subset, &host)
    }

    /// Hash policies from the DestinationRule of a destination's service.
    pub(crate) fn hash_policies(&self, d: &Destination) -> Vec<HashPolicy> {
        let (_, port, svc) = self.resolve(d);
        let Some(svc) = svc else { return Vec::new() };
        let rule = self.ctx.rule(svc).map(|(_, dr)| dr);
        let subset = rule.and_then(|r| r.subsets.iter().find(|s| s.name == d.subset));
        Policy::new(rule, port, subset).hash_policies()
    }

    fn resolve(&self, d: &Destination) -> (String, u16, Option<&MergedService>) {
        let host = resolve_host(&d.host, self.namespace, self.ctx.domain);
        let svc = self.ctx.service(&host);
        let explicit = d
            .port
            .and_then(|p| u16::try_from(p.number).ok())
            .filter(|p| *p != 0);
        let only = svc.and_then(|s| match s.service.ports.as_slice() {
            [one] => Some(one.number),
            _ => None,
        });
        (host, explicit.or(only).unwrap_or(self.port), svc)
    }
}
