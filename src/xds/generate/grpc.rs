//! Resources for proxyless gRPC clients.
//!
//! A client dialing `xds:///reviews.default.svc.cluster.local:9080` asks for the listener
//! named exactly `reviews.default.svc.cluster.local:9080` and walks on from it: an API listener
//! whose connection manager fetches the route configuration of the same name, whose virtual host
//! sends everything to `outbound|9080||reviews.default.svc.cluster.local`, an EDS cluster with
//! ROUND_ROBIN, and a load assignment holding only healthy endpoints (gRPC ignores the rest and
//! supports no overprovisioning). A VirtualService bound to the mesh shapes the route as gRPC
//! supports it (matches, weighted destinations and DestinationRule subsets, faults, timeouts);
//! subsets get clusters of their own. A client may also dial a short name the way a sidecar's
//! clients may (`reviews:9080`, `reviews.default:9080` from the `default` namespace); those
//! listeners and routes are generated when asked for. A name without a port works for a service
//! with exactly one port.

use std::collections::BTreeSet;
use std::sync::Arc;

use wayfinder_config::DestinationRule;

use super::endpoint::{self, Include};
use super::listener::router_filter;
use super::proto::{ads, any, seconds};
use super::route::{Destinations, http};
use super::{Ctx, ServiceResources, cluster, domains};
use crate::snapshot::{MergedService, Visible};
use crate::xds::TypeUrl;
use crate::xds::names;
use crate::xds::pb::cluster::{
    Cluster, cluster::DiscoveryType, cluster::EdsClusterConfig, cluster::LbPolicy,
};
use crate::xds::pb::hcm::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager, http_filter,
};
use crate::xds::pb::listener::{ApiListener, Listener};
use crate::xds::pb::route::{Route, RouteConfiguration, VirtualHost};
use crate::xds::proxy::Proxy;
use crate::xds::resource::{Resource, ResourceSet, insert};
use wayfinder_registry::Port;

/// Clusters, endpoints and listeners a gRPC client may receive for one service, under their
/// full names: per port, the service's cluster and one per subset of the DestinationRule that
/// applies (ROUND_ROBIN, healthy endpoints of the subset), and the API listener `host:port`.
pub(super) fn service_resources(
    svc: &MergedService,
    rule: Option<&DestinationRule>,
) -> ServiceResources {
    let mut out = ServiceResources::default();
    let subsets = rule.map(|r| r.subsets.as_slice()).unwrap_or_default();
    for port in svc
        .service
        .ports
        .iter()
        .filter(|p| cluster::is_proxied(p.protocol))
    {
        for subset in std::iter::once(None).chain(subsets.iter().map(Some)) {
            let subset_name = subset.map_or("", |s| s.name.as_str());
            let cluster_name =
                names::outbound_cluster(port.number, subset_name, &svc.service.hostname);
            let c = Cluster {
                name: cluster_name.clone(),
                cluster_discovery_type: cluster::discovery(DiscoveryType::Eds),
                eds_cluster_config: Some(EdsClusterConfig {
                    eds_config: ads(),
                    service_name: cluster_name.clone(),
                }),
                lb_policy: LbPolicy::RoundRobin as i32,
                connect_timeout: seconds(10),
                ..Default::default()
            };
            out.clusters
                .push(Arc::new(Resource::encode(cluster_name.as_str(), &c)));
            let labels = subset.map(|s| &s.labels);
            let cla = endpoint::load_assignment(
                &cluster_name,
                svc,
                port.number,
                Include::Healthy,
                labels,
            );
            out.endpoints
                .push(Arc::new(Resource::encode(cluster_name.as_str(), &cla)));
        }
        out.listeners.push(Arc::new(api_listener(&format!(
            "{}:{}",
            svc.service.hostname, port.number
        ))));
    }
    out
}

/// The route configuration `name` for a service port: the service's VirtualService rules as
/// gRPC supports them (matches, weighted destinations with subsets, fault injection, timeouts
/// as `max_stream_duration`), or one route to the service.
pub(super) fn route(ctx: &Ctx<'_>, name: &str, svc: &MergedService, port: &Port) -> Resource {
    let host = &svc.service.hostname;
    let mut domains = vec![name.to_string()];
    for d in [format!("{host}:{}", port.number), host.to_string()] {
        if !domains.contains(&d) {
            domains.push(d);
        }
    }
    let mut routes = Vec::new();
    if let Some((meta, vs)) = ctx.model.config.mesh_virtual_service(
        host,
        &svc.service.namespace,
        ctx.namespace,
        ctx.domain,
        ctx.exports,
    ) {
        let dest = Destinations::new(ctx, &meta.namespace, port.number);
        routes = http::routes(&vs.http, port.number, http::Bound::Mesh, &dest)
            .into_iter()
            .map(for_grpc)
            .collect();
    }
    if routes.is_empty() {
        routes.push(super::route::grpc_route(names::outbound_cluster(
            port.number,
            "",
            host,
        )));
    }
    let config = RouteConfiguration {
        name: name.to_string(),
        virtual_hosts: vec![VirtualHost {
            name: format!("{host}:{}", port.number),
            domains,
            routes,
            ..Default::default()
        }],
        ..Default::default()
    };
    Resource::encode(name, &config)
}

/// Keeps what gRPC's xDS client acts on: matches, destinations, fault injection; a timeout
/// becomes `max_stream_duration` (gRPC ignores `timeout`). Retry policies, rewrites, mirrors,
/// header changes, hash policies and CORS are dropped: gRPC ignores or rejects them.
fn for_grpc(mut route: Route) -> Route {
    route
        .typed_per_filter_config
        .retain(|k, _| k == http::FAULT_FILTER);
    route.request_headers_to_add.clear();
    route.request_headers_to_remove.clear();
    route.response_headers_to_add.clear();
    route.response_headers_to_remove.clear();
    if let Some(crate::xds::pb::route::route::Action::Route(action)) = &mut route.action {
        action.retry_policy = None;
        action.hash_policy.clear();
        action.request_mirror_policies.clear();
        action.prefix_rewrite.clear();
        action.regex_rewrite = None;
        action.host_rewrite_specifier = None;
        if let Some(timeout) = action
            .timeout
            .take()
            .filter(|t| t.seconds > 0 || t.nanos > 0)
        {
            action.max_stream_duration =
                Some(crate::xds::pb::route::route_action::MaxStreamDuration {
                    max_stream_duration: Some(timeout),
                    ..Default::default()
                });
        }
        if let Some(crate::xds::pb::route::route_action::ClusterSpecifier::WeightedClusters(w)) =
            &mut action.cluster_specifier
        {
            for c in &mut w.clusters {
                c.request_headers_to_add.clear();
                c.request_headers_to_remove.clear();
                c.response_headers_to_add.clear();
                c.response_headers_to_remove.clear();
            }
        }
    }
    route
}

/// Listeners or routes for requested names that are not full names but short ones this proxy
/// may use for a visible service.
pub(super) fn aliases(
    ctx: &Ctx<'_>,
    proxy: &Proxy,
    type_url: TypeUrl,
    requested: &BTreeSet<Arc<str>>,
    existing: &ResourceSet,
) -> ResourceSet {
    let mut set = ResourceSet::new();
    for name in requested.iter().filter(|n| !existing.contains_key(*n)) {
        let Some((svc, port)) = resolve(&ctx.visible, proxy, name) else {
            continue;
        };
        let resource = match type_url {
            TypeUrl::Listener => api_listener(name),
            TypeUrl::Route => route(ctx, name, svc, port),
            TypeUrl::Cluster | TypeUrl::Endpoint | TypeUrl::Secret | TypeUrl::ProxyConfig => {
                continue;
            }
        };
        insert(&mut set, resource);
    }
    set
}

/// Finds the service and port a `host[:port]` name means to this proxy.
fn resolve<'a>(
    visible: &Visible<'a>,
    proxy: &Proxy,
    name: &str,
) -> Option<(&'a MergedService, &'a Port)> {
    let (host, port) = match name.rsplit_once(':') {
        Some((host, port)) => (host, Some(port.parse::<u16>().ok()?)),
        None => (name, None),
    };
    visible.iter().find_map(|svc| {
        let port = match port {
            Some(n) => svc.service.ports.iter().find(|p| p.number == n)?,
            None if svc.service.ports.len() == 1 => &svc.service.ports[0],
            None => return None,
        };
        let names = domains::expand(&svc.service.hostname, port.number, &proxy.dns_domain, &[]);
        names.iter().any(|d| d == host).then_some((&***svc, port))
    })
}

fn api_listener(name: &str) -> Resource {
    let hcm = HttpConnectionManager {
        route_specifier: Some(http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: ads(),
            route_config_name: name.to_string(),
        })),
        http_filters: vec![fault_filter(), router_filter()],
        ..Default::default()
    };
    let listener = Listener {
        name: name.to_string(),
        api_listener: Some(ApiListener {
            api_listener: Some(any(&hcm)),
        }),
        ..Default::default()
    };
    Resource::encode(name, &listener)
}

/// The fault filter, so that VirtualService faults reach gRPC clients (gRFC A33).
fn fault_filter() -> HttpFilter {
    HttpFilter {
        name: http::FAULT_FILTER.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(any(
            &crate::xds::pb::fault::HttpFault::default(),
        ))),
        ..Default::default()
    }
}
