//! Resources for proxyless gRPC clients.
//!
//! A client dialing `xds:///reviews.default.svc.cluster.local:9080` asks for the listener
//! named exactly `reviews.default.svc.cluster.local:9080` and walks on from it: an API listener
//! whose connection manager fetches the route configuration of the same name, whose virtual host
//! sends everything to `outbound|9080||reviews.default.svc.cluster.local`, an EDS cluster with
//! ROUND_ROBIN, and a load assignment holding only healthy endpoints (gRPC ignores the rest and
//! supports no overprovisioning). A client may also dial a short name the way a sidecar's
//! clients may (`reviews:9080`, `reviews.default:9080` from the `default` namespace); those
//! listeners and routes are generated when asked for. A name without a port works for a service
//! with exactly one port.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::endpoint::{self, Include};
use super::listener::router_filter;
use super::proto::{ads, any, seconds};
use super::{ServiceResources, cluster, domains};
use crate::snapshot::{MergedService, Visible};
use crate::xds::TypeUrl;
use crate::xds::names;
use crate::xds::pb::cluster::{
    Cluster, cluster::DiscoveryType, cluster::EdsClusterConfig, cluster::LbPolicy,
};
use crate::xds::pb::hcm::{HttpConnectionManager, Rds, http_connection_manager};
use crate::xds::pb::listener::{ApiListener, Listener};
use crate::xds::pb::route::{RouteConfiguration, VirtualHost};
use crate::xds::proxy::Proxy;
use crate::xds::resource::{Resource, ResourceSet, insert};
use wayfinder_registry::Port;

/// Everything a gRPC client may receive for one service, under its full names.
pub(super) fn service_resources(svc: &MergedService) -> ServiceResources {
    let mut out = ServiceResources::default();
    for port in svc
        .service
        .ports
        .iter()
        .filter(|p| cluster::is_proxied(p.protocol))
    {
        let cluster_name = names::outbound_cluster(port.number, "", &svc.service.hostname);
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
        let cla =
            endpoint::load_assignment(&cluster_name, svc, port.number, Include::Healthy, None);
        out.endpoints
            .push(Arc::new(Resource::encode(cluster_name.as_str(), &cla)));
        let name = format!("{}:{}", svc.service.hostname, port.number);
        out.listeners.push(Arc::new(api_listener(&name)));
        out.routes.push(Arc::new(route(&name, svc, port)));
    }
    out
}

/// Listeners or routes for requested names that are not full names but short ones this proxy
/// may use for a visible service.
pub(super) fn aliases(
    visible: &Visible<'_>,
    proxy: &Proxy,
    type_url: TypeUrl,
    requested: &BTreeSet<Arc<str>>,
    existing: &ResourceSet,
) -> ResourceSet {
    let mut set = ResourceSet::new();
    for name in requested.iter().filter(|n| !existing.contains_key(*n)) {
        let Some((svc, port)) = resolve(visible, proxy, name) else {
            continue;
        };
        let resource = match type_url {
            TypeUrl::Listener => api_listener(name),
            TypeUrl::Route => route(name, svc, port),
            TypeUrl::Cluster | TypeUrl::Endpoint => continue,
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
        http_filters: vec![router_filter()],
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

fn route(name: &str, svc: &MergedService, port: &Port) -> Resource {
    let host = &svc.service.hostname;
    let mut domains = vec![name.to_string()];
    for d in [format!("{host}:{}", port.number), host.to_string()] {
        if !domains.contains(&d) {
            domains.push(d);
        }
    }
    let cluster = names::outbound_cluster(port.number, "", host);
    let config = RouteConfiguration {
        name: name.to_string(),
        virtual_hosts: vec![VirtualHost {
            name: format!("{host}:{}", port.number),
            domains,
            routes: vec![super::route::grpc_route(cluster)],
            ..Default::default()
        }],
        ..Default::default()
    };
    Resource::encode(name, &config)
}
