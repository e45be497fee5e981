//! Outbound listeners for sidecars: `virtualOutbound` and one listener per service port.

use std::collections::BTreeMap;

use super::Ctx;
use super::proto::{ads, any, bool_value, socket_address, u32_value};
use crate::snapshot::MergedService;
use crate::xds::names;
use crate::xds::pb::core::TrafficDirection;
use crate::xds::pb::hcm::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager, http_filter,
};
use crate::xds::pb::listener::{Filter, FilterChain, FilterChainMatch, Listener, filter};
use crate::xds::pb::router::Router;
use crate::xds::pb::tcp_proxy::{TcpProxy, tcp_proxy};
use crate::xds::proxy::ListenSettings;
use crate::xds::resource::{Resource, ResourceSet, insert};

/// `virtualOutbound` on the capture port (original destination; unknown destinations pass
/// through, traffic to the capture port itself is dropped to avoid loops), and per port:
///
/// - a port with an HTTP service: `<addr>_<port>`, an HTTP connection manager with RDS
///   `"<port>"`, shared by every HTTP service on that port;
/// - a TCP service with VIPs: `<vip>_<port>` per VIP, `tcp_proxy` to its cluster;
/// - a TCP service without VIPs: `<addr>_<port>` unless the port is already taken (by an HTTP
///   service or an earlier TCP service by hostname; Envoy cannot have two listeners on one
///   address and port, so the first wins).
///
/// Per-port listeners do not bind (`bind_to_port: false`): `virtualOutbound` hands them the
/// connections it captures.
pub(super) fn outbound(ctx: &Ctx<'_>, listen: &ListenSettings) -> ResourceSet {
    let visible = &ctx.visible;
    let mut set = ResourceSet::new();
    insert(&mut set, virtual_outbound(listen, ctx.registry_only));
    let mut http_ports: BTreeMap<u16, ()> = BTreeMap::new();
    for svc in visible {
        for port in svc.service.ports.iter().filter(|p| p.protocol.is_http()) {
            http_ports.insert(port.number, ());
        }
    }
    for &port in http_ports.keys() {
        let name = names::listener(&listen.address, port);
        let listener = Listener {
            name: name.clone(),
            address: socket_address(&listen.address, port),
            filter_chains: vec![FilterChain {
                filters: vec![http_manager(&name, port)],
                ..Default::default()
            }],
            bind_to_port: bool_value(false),
            traffic_direction: TrafficDirection::Outbound as i32,
            ..Default::default()
        };
        insert(&mut set, Resource::encode(name, &listener));
    }
    for svc in visible {
        for port in svc
            .service
            .ports
            .iter()
            .filter(|p| !p.protocol.is_http() && super::cluster::is_proxied(p.protocol))
        {
            tcp_listeners(
                &mut set,
                svc,
                port.number,
                listen,
                http_ports.contains_key(&port.number),
            );
        }
    }
    set
}

fn tcp_listeners(
    set: &mut ResourceSet,
    svc: &MergedService,
    port: u16,
    listen: &ListenSettings,
    http_taken: bool,
) {
    let cluster = names::outbound_cluster(port, "", &svc.service.hostname);
    let addresses: Vec<String> = if svc.service.addresses.is_empty() {
        if http_taken {
            tracing::debug!(service = %svc.service.key(), port, "TCP port without a VIP shadowed by HTTP services");
            return;
        }
        vec![listen.address.to_string()]
    } else {
        svc.service
            .addresses
            .iter()
            .map(|a| a.to_string())
            .collect()
    };
    for address in addresses {
        let name = names::listener(&address, port);
        if set.contains_key(name.as_str()) {
            tracing::debug!(service = %svc.service.key(), listener = %name, "listener already taken by another service");
            continue;
        }
        let listener = Listener {
            name: name.clone(),
            address: socket_address(&address, port),
            filter_chains: vec![FilterChain {
                filters: vec![tcp_proxy(&name, &cluster)],
                ..Default::default()
            }],
            bind_to_port: bool_value(false),
            traffic_direction: TrafficDirection::Outbound as i32,
            ..Default::default()
        };
        insert(set, Resource::encode(name, &listener));
    }
}

/// `virtualOutbound`; unknown destinations pass through, or, under a Sidecar's
/// `REGISTRY_ONLY`, go to `BlackHoleCluster`.
fn virtual_outbound(listen: &ListenSettings, registry_only: bool) -> Resource {
    let catch_all = if registry_only {
        names::BLACKHOLE_CLUSTER
    } else {
        names::PASSTHROUGH_CLUSTER
    };
    let listener = Listener {
        name: names::VIRTUAL_OUTBOUND.into(),
        address: socket_address(&listen.address, listen.outbound_port),
        use_original_dst: bool_value(true),
        traffic_direction: TrafficDirection::Outbound as i32,
        filter_chains: blackhole_chain("virtualOutbound-blackhole", listen.outbound_port)
            .into_iter()
            .chain([FilterChain {
                name: "virtualOutbound-catchall-tcp".into(),
                filters: vec![tcp_proxy(catch_all, catch_all)],
                ..Default::default()
            }])
            .collect(),
        ..Default::default()
    };
    Resource::encode(names::VIRTUAL_OUTBOUND, &listener)
}

/// A chain dropping connections whose original destination is the capture port itself, which
/// would loop. None for port 0 (an ephemeral port in tests), which no destination can match.
pub(super) fn blackhole_chain(name: &str, port: u16) -> Option<FilterChain> {
    (port != 0).then(|| FilterChain {
        name: name.into(),
        filter_chain_match: Some(FilterChainMatch {
            destination_port: u32_value(u32::from(port)),
            ..Default::default()
        }),
        filters: vec![tcp_proxy(
            names::BLACKHOLE_CLUSTER,
            names::BLACKHOLE_CLUSTER,
        )],
        ..Default::default()
    })
}

/// An HTTP connection manager fetching route configuration `"<port>"` over ADS.
fn http_manager(stat_prefix: &str, port: u16) -> Filter {
    let hcm = HttpConnectionManager {
        stat_prefix: format!("outbound_{stat_prefix}"),
        route_specifier: Some(http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: ads(),
            route_config_name: port.to_string(),
        })),
        http_filters: mesh_http_filters(),
        ..Default::default()
    };
    network_filter("envoy.filters.network.http_connection_manager", any(&hcm))
}

/// The HTTP filters of sidecar and gateway connection managers, as Istio orders them: CORS,
/// fault injection, then the router. CORS and fault do nothing unless a route configures them
/// (VirtualService `corsPolicy`, `fault`).
pub(super) fn mesh_http_filters() -> Vec<HttpFilter> {
    let filter = |name: &str, config: crate::xds::pb::protobuf::Any| HttpFilter {
        name: name.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(config)),
        ..Default::default()
    };
    vec![
        filter(
            super::route::http::CORS_FILTER,
            any(&crate::xds::pb::cors::Cors::default()),
        ),
        filter(
            super::route::http::FAULT_FILTER,
            any(&crate::xds::pb::fault::HttpFault::default()),
        ),
        router_filter(),
    ]
}

/// The router filter, last in every HTTP filter chain.
pub(super) fn router_filter() -> HttpFilter {
    HttpFilter {
        name: "envoy.filters.http.router".into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(
            any(&Router::default()),
        )),
        ..Default::default()
    }
}

/// A `tcp_proxy` filter to `cluster`.
pub(super) fn tcp_proxy(stat_prefix: &str, cluster: &str) -> Filter {
    let proxy = TcpProxy {
        stat_prefix: stat_prefix.to_string(),
        cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster.to_string())),
        ..Default::default()
    };
    network_filter("envoy.filters.network.tcp_proxy", any(&proxy))
}

pub(super) fn network_filter(name: &str, config: crate::xds::pb::protobuf::Any) -> Filter {
    Filter {
        name: name.into(),
        config_type: Some(filter::ConfigType::TypedConfig(config)),
    }
}
