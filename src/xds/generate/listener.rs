//! Outbound listeners for sidecars: `virtualOutbound` and one listener per service port.

use std::collections::{BTreeMap, BTreeSet};

use super::Ctx;
use super::proto::{ads, any, bool_value, socket_address, u32_value};
use super::route::Destinations;
use crate::snapshot::MergedService;
use crate::xds::names;
use crate::xds::pb::core::{CidrRange, TrafficDirection};
use crate::xds::pb::hcm::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager, http_filter,
};
use crate::xds::pb::listener::{
    Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter, filter, listener_filter,
};
use crate::xds::pb::router::Router;
use crate::xds::pb::tcp_proxy::{TcpProxy, tcp_proxy};
use crate::xds::proxy::ListenSettings;
use crate::xds::resource::{Resource, ResourceSet, insert};
use wayfinder_config::RouteDestination;
use wayfinder_registry::Protocol;

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
/// connections it captures. What was left out is returned as [`Conflicts`].
pub(super) fn outbound(ctx: &Ctx<'_>, listen: &ListenSettings) -> (ResourceSet, Conflicts) {
    let visible = &ctx.visible;
    let mut set = ResourceSet::new();
    let mut conflicts = Conflicts::default();
    insert(&mut set, virtual_outbound(listen, ctx.registry_only));
    let mut http_ports: BTreeMap<u16, ()> = BTreeMap::new();
    for svc in visible {
        for port in svc.service.ports.iter().filter(|p| p.protocol.is_http()) {
            if ctx.on_port(svc, port.number) {
                http_ports.insert(port.number, ());
            }
        }
    }
    for &port in http_ports.keys() {
        let (address, binds) = at(ctx, listen, port);
        let name = names::listener(address, port);
        let listener = Listener {
            name: name.clone(),
            address: socket_address(address, port),
            filter_chains: vec![FilterChain {
                filters: vec![http_manager(&name, port)],
                ..Default::default()
            }],
            bind_to_port: bool_value(binds),
            traffic_direction: TrafficDirection::Outbound as i32,
            ..Default::default()
        };
        insert(&mut set, Resource::encode(name, &listener));
    }
    let mut opaque: BTreeMap<String, Opaque> = BTreeMap::new();
    for svc in visible {
        for port in svc
            .service
            .ports
            .iter()
            .filter(|p| !p.protocol.is_http() && super::cluster::is_proxied(p.protocol))
            .filter(|p| ctx.on_port(svc, p.number))
        {
            opaque_chains(
                ctx,
                &mut opaque,
                &mut conflicts,
                svc,
                port,
                listen,
                http_ports.contains_key(&port.number),
            );
        }
    }
    for (name, o) in opaque {
        let listener = Listener {
            name: name.clone(),
            address: socket_address(&o.address, o.port),
            filter_chains: o.chains,
            listener_filters: if o.tls {
                vec![tls_inspector()]
            } else {
                Vec::new()
            },
            bind_to_port: bool_value(o.binds),
            traffic_direction: TrafficDirection::Outbound as i32,
            ..Default::default()
        };
        insert(&mut set, Resource::encode(name, &listener));
    }
    (set, conflicts)
}

/// Where a port's listener is and whether it binds it itself: its Sidecar egress listener's
/// `bind` and `captureMode` (see `Ctx::bind`), else the capture address, taking captured
/// connections.
fn at<'a>(ctx: &Ctx<'a>, listen: &'a ListenSettings, port: u16) -> (&'a str, bool) {
    ctx.bind(port)
        .map_or((&*listen.address, false), |b| (b.address, b.binds))
}

/// The listeners a scope's services could not have, by Istio's kinds of conflict
/// (`pilot_conflict_outbound_listener_*`), each named by its listener, as Istio keys them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Conflicts {
    /// Opaque listeners, or filter chains, another opaque service already holds
    /// (`tcp_over_current_tcp`).
    pub(super) tcp_over_tcp: BTreeSet<String>,
    /// Wildcard opaque listeners HTTP services already hold (`tcp_over_current_http`).
    pub(super) tcp_over_http: BTreeSet<String>,
}

/// A listener for opaque (non-HTTP) traffic being assembled.
struct Opaque {
    address: String,
    port: u16,
    tls: bool,
    /// The listener binds its address itself (`captureMode: NONE`).
    binds: bool,
    chains: Vec<FilterChain>,
}

/// The filter chains of one service port on its listeners (`<vip>_<port>` per VIP; for each
/// address range, `<addr>_<port>` with chains matched by the range, as Istio does; with
/// neither, `<addr>_<port>`). TCP: one chain to the service, or to the destinations of the
/// first VirtualService `tcp` rule for the port; a second TCP service with the same match on
/// one listener is left out (Envoy cannot tell them apart). TLS and HTTPS: chains matched by
/// SNI (the service's host, or the `sniHosts` of VirtualService `tls` rules), so services share
/// the listener.
fn opaque_chains(
    ctx: &Ctx<'_>,
    listeners: &mut BTreeMap<String, Opaque>,
    conflicts: &mut Conflicts,
    svc: &MergedService,
    port: &wayfinder_registry::Port,
    listen: &ListenSettings,
    http_taken: bool,
) {
    let tls = matches!(port.protocol, Protocol::Tls | Protocol::Https);
    let host = &svc.service.hostname;
    let (capture, binds) = at(ctx, listen, port.number);
    // Where the chains go: each VIP's listener, the capture address's for each range (its
    // chains matched by the range), else the capture address's.
    let mut targets: Vec<(String, Option<CidrRange>)> = svc
        .service
        .addresses
        .iter()
        .map(|a| (a.to_string(), None))
        .collect();
    let ranges = &svc.service.address_ranges;
    let wildcard = ranges.is_empty() && targets.is_empty();
    if (wildcard || !ranges.is_empty()) && http_taken {
        tracing::debug!(service = %svc.service.key(), port = port.number, "opaque port without a VIP shadowed by HTTP services");
        let name = names::listener(capture, port.number);
        conflicts.tcp_over_http.insert(name);
    } else if wildcard {
        targets.push((capture.to_string(), None));
    } else {
        targets.extend(
            ranges
                .iter()
                .map(|r| (capture.to_string(), Some(cidr_range(r)))),
        );
    }
    if targets.is_empty() {
        return;
    }
    let vs = ctx.model.config.mesh_virtual_service(
        host,
        &svc.service.namespace,
        ctx.namespace,
        ctx.domain,
        ctx.exports,
    );
    let chains = match vs {
        Some((meta, vs)) if tls && !vs.tls.is_empty() => {
            let dest = Destinations::new(ctx, &meta.namespace, port.number);
            vs.tls
                .iter()
                .flat_map(|rule| {
                    let dest = &dest;
                    rule.matches
                        .iter()
                        .filter(|m| m.port.is_none_or(|p| p == u32::from(port.number)))
                        .map(move |m| {
                            sni_chain(m.sni_hosts.clone(), tcp_route(host, &rule.route, dest))
                        })
                })
                .collect()
        }
        Some((meta, vs)) if !tls => {
            let dest = Destinations::new(ctx, &meta.namespace, port.number);
            let rule = vs.tcp.iter().find(|r| {
                r.matches.is_empty()
                    || r.matches
                        .iter()
                        .any(|m| m.port.is_none_or(|p| p == u32::from(port.number)))
            });
            let filter = match rule {
                Some(rule) => tcp_route(host, &rule.route, &dest),
                None => tcp_proxy(host, &names::outbound_cluster(port.number, "", host)),
            };
            vec![FilterChain {
                filters: vec![filter],
                ..Default::default()
            }]
        }
        _ => {
            let filter = tcp_proxy(host, &names::outbound_cluster(port.number, "", host));
            if tls {
                vec![sni_chain(vec![host.to_string()], filter)]
            } else {
                vec![FilterChain {
                    filters: vec![filter],
                    ..Default::default()
                }]
            }
        }
    };
    for (address, range) in targets {
        let name = names::listener(&address, port.number);
        let binds = binds && address == capture;
        let entry = listeners.entry(name.clone()).or_insert_with(|| Opaque {
            address,
            port: port.number,
            tls,
            binds,
            chains: Vec::new(),
        });
        if entry.tls != tls {
            tracing::debug!(service = %svc.service.key(), listener = %name, "listener already taken by another service");
            conflicts.tcp_over_tcp.insert(name);
            continue;
        }
        for chain in &chains {
            let mut chain = chain.clone();
            if let Some(range) = &range {
                let matched = chain
                    .filter_chain_match
                    .get_or_insert_with(Default::default);
                matched.prefix_ranges = vec![range.clone()];
            }
            // Envoy refuses two chains with one match: the first service keeps it.
            let taken = entry
                .chains
                .iter()
                .any(|c| c.filter_chain_match == chain.filter_chain_match);
            if taken {
                tracing::debug!(service = %svc.service.key(), listener = %name, "filter chain already taken by another service");
                conflicts.tcp_over_tcp.insert(name.clone());
            } else {
                entry.chains.push(chain);
            }
        }
    }
}

/// A range as Envoy matches a destination: its network address and prefix length.
fn cidr_range(range: &ipnet::IpNet) -> CidrRange {
    CidrRange {
        address_prefix: range.network().to_string(),
        prefix_len: u32_value(u32::from(range.prefix_len())),
    }
}

fn sni_chain(server_names: Vec<String>, filter: Filter) -> FilterChain {
    FilterChain {
        filter_chain_match: Some(FilterChainMatch {
            server_names,
            ..Default::default()
        }),
        filters: vec![filter],
        ..Default::default()
    }
}

/// A `tcp_proxy` to one destination, or weighted among several (zero weights dropped).
pub(super) fn tcp_route(
    stat_prefix: &str,
    route: &[RouteDestination],
    dest: &Destinations<'_>,
) -> Filter {
    use crate::xds::pb::tcp_proxy::tcp_proxy as tp;
    let specifier = match route {
        [one] => tp::ClusterSpecifier::Cluster(dest.cluster(&one.destination)),
        many => tp::ClusterSpecifier::WeightedClusters(tp::WeightedCluster {
            clusters: many
                .iter()
                .filter(|d| d.weight.unwrap_or(0) > 0)
                .map(|d| tp::weighted_cluster::ClusterWeight {
                    name: dest.cluster(&d.destination),
                    weight: u32::try_from(d.weight.unwrap_or(0)).unwrap_or(0),
                    ..Default::default()
                })
                .collect(),
        }),
    };
    let proxy = TcpProxy {
        stat_prefix: stat_prefix.to_string(),
        cluster_specifier: Some(specifier),
        ..Default::default()
    };
    network_filter("envoy.filters.network.tcp_proxy", any(&proxy))
}

/// The TLS inspector, which reads the SNI that filter chains match on.
pub(super) fn tls_inspector() -> ListenerFilter {
    ListenerFilter {
        name: "envoy.filters.listener.tls_inspector".into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(any(
            &crate::xds::pb::tls_inspector::TlsInspector::default(),
        ))),
        ..Default::default()
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
    network_filter(HCM_FILTER, any(&hcm))
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

/// The HTTP connection manager's network filter name.
pub(super) const HCM_FILTER: &str = "envoy.filters.network.http_connection_manager";

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
