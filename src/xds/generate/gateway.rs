//! Listeners and routes for gateway proxies (Istio's `router` type), from `Gateway` objects.
//!
//! A Gateway applies to a gateway proxy when every label of its `selector` is among the
//! proxy's labels (node metadata `LABELS`); an empty selector applies to every gateway proxy.
//! Its servers are grouped by port; each port becomes one listener `<bind>_<port>` that binds
//! (the server's `bind`, else the proxy's listen address, `0.0.0.0` by default):
//!
//! - HTTP, HTTP2, GRPC, GRPC-WEB: an HTTP connection manager with route configuration
//!   `http.<port>`, holding a virtual host per host of the VirtualServices bound to a Gateway
//!   of that port whose hosts the server accepts (domains `host` and `host:port`). Several
//!   VirtualServices for one host are merged, rules in namespace and name order, as Istio
//!   merges them for gateways. `tls.httpsRedirect` makes the virtual hosts require TLS.
//! - HTTPS and TLS with `mode: SIMPLE`, `MUTUAL` or `OPTIONAL_MUTUAL`: the same, behind TLS
//!   termination with the server's certificate files, or with the Kubernetes Secrets its
//!   `credentialName(s)` name, served by the control plane over SDS on the ADS stream
//!   (`kubernetes://NAME`, and `kubernetes://NAME-cacert` for the client CA: see `sds`), one
//!   filter chain per server (by SNI), route configuration
//!   `https.<port>.<server index>.<gateway>.<namespace>`. With `mode: ISTIO_MUTUAL`, the same
//!   behind mesh mTLS: the gateway's own workload certificate, clients with one of the mesh
//!   (see `mesh_tls`). A gateway without a mesh certificate has none to offer, so it gets no
//!   chain for such a server: connections are refused rather than served without mTLS.
//! - TLS with `mode: PASSTHROUGH`: a filter chain per VirtualService `tls` rule, by SNI, to its
//!   destinations, unterminated.
//! - TLS with `mode: AUTO_PASSTHROUGH` (Istio's east-west gateway): one filter chain for the
//!   server's hosts, unterminated, whose SNI names the cluster (`sni_cluster`): mesh clients
//!   send Istio's `outbound_.PORT_.SUBSET_.HOST`, and the gateway has an SNI-DNAT cluster of
//!   that name for each port and subset of the services it sees (`cluster::sni_dnat`). No
//!   VirtualService is involved; the client's mTLS reaches the workload's sidecar as sent.
//! - TCP and MONGO: the VirtualService `tcp` rules bound to the Gateway, to their destinations.
//!
//! A VirtualService is bound to a Gateway by naming it in `gateways` (`name` in the
//! VirtualService's namespace, or `namespace/name`).

mod tls;

pub(super) use tls::terminating as terminating_tls;

use std::collections::BTreeMap;

use wayfinder_config::{ConfigMeta, Gateway, Server, ServerTlsMode, VirtualService};

use super::cluster::{is_proxied, sni_dnat};
use super::listener::{
    HCM_FILTER, mesh_http_filters, network_filter, tcp_proxy, tcp_route, tls_inspector,
};
use super::proto::{ads, any, socket_address};
use super::route::Destinations;
use super::route::http::{Bound, routes};
use super::security::{Filters, Policies};
use super::{Ctx, MeshSettings};
use crate::jwks::JwksTable;
use crate::snapshot::rules::{host_matches, resolve_host};
use crate::xds::names;
use crate::xds::pb::core::TrafficDirection;
use crate::xds::pb::hcm::{HttpConnectionManager, HttpFilter, Rds, http_connection_manager};
use crate::xds::pb::listener::{FilterChain, FilterChainMatch, Listener};
use crate::xds::pb::route::{RouteConfiguration, VirtualHost, virtual_host};
use crate::xds::proxy::Proxy;
use crate::xds::resource::{Resource, ResourceSet, insert};

/// One server with the Gateway it belongs to and its position there.
struct GatewayServer<'a> {
    meta: &'a ConfigMeta,
    index: usize,
    server: &'a Server,
}

/// Listeners, route configurations and SNI-DNAT clusters for a gateway proxy.
pub(super) fn resources(
    ctx: &Ctx<'_>,
    proxy: &Proxy,
    mesh: &MeshSettings,
    jwks: &JwksTable,
) -> [ResourceSet; 3] {
    let mut by_port: BTreeMap<u32, Vec<GatewayServer<'_>>> = BTreeMap::new();
    for (meta, gw) in ctx
        .model
        .config
        .gateways()
        .filter(|(_, gw)| selects(gw, proxy))
    {
        for (index, server) in gw.servers.iter().enumerate() {
            by_port
                .entry(server.port.number)
                .or_default()
                .push(GatewayServer {
                    meta,
                    index,
                    server,
                });
        }
    }
    let policies = Policies::for_workload(
        &ctx.model.config,
        mesh,
        jwks,
        &proxy.namespace,
        &proxy.labels,
    );
    let authz = Filters::new(&policies, &mesh.trust_domain, true);
    let mut listeners = ResourceSet::new();
    let mut route_configs = ResourceSet::new();
    let mut auto_passthrough = false;
    for (number, servers) in &by_port {
        let Ok(port) = u16::try_from(*number) else {
            continue;
        };
        let bind = servers
            .iter()
            .map(|b| b.server.bind.as_str())
            .find(|b| !b.is_empty())
            .unwrap_or(&proxy.listen.address);
        let name = names::listener(bind, port);
        let mut chains = Vec::new();
        let mut inspect_tls = false;
        for b in servers {
            let protocol = b.server.port.protocol.to_ascii_uppercase();
            let tls_mode = b.server.tls.as_ref().and_then(|t| t.mode);
            match (protocol.as_str(), tls_mode) {
                ("HTTPS" | "TLS", Some(ServerTlsMode::Passthrough)) => {
                    inspect_tls = true;
                    chains.extend(passthrough_chains(ctx, b, port));
                }
                ("HTTPS" | "TLS", Some(ServerTlsMode::AutoPassthrough)) => {
                    inspect_tls = true;
                    auto_passthrough = true;
                    chains.push(FilterChain {
                        filter_chain_match: server_names(&b.server.hosts),
                        filters: vec![
                            network_filter(
                                "envoy.filters.network.sni_cluster",
                                any(&crate::xds::pb::sni_cluster::SniCluster {}),
                            ),
                            // The cluster is the SNI's; this one is never used.
                            tcp_proxy(names::BLACKHOLE_CLUSTER, names::BLACKHOLE_CLUSTER),
                        ],
                        ..Default::default()
                    });
                }
                ("HTTPS" | "TLS", Some(ServerTlsMode::IstioMutual)) if !proxy.mesh_tls() => {}
                (
                    "HTTPS" | "TLS",
                    Some(
                        ServerTlsMode::Simple
                        | ServerTlsMode::Mutual
                        | ServerTlsMode::OptionalMutual
                        | ServerTlsMode::IstioMutual,
                    ),
                ) => {
                    inspect_tls = true;
                    let rds = format!(
                        "https.{port}.{}.{}.{}",
                        b.index, b.meta.name, b.meta.namespace
                    );
                    insert(
                        &mut route_configs,
                        route_config(ctx, &rds, port, std::slice::from_ref(b)),
                    );
                    let mut chain = http_chain(&name, &rds, &authz.http);
                    chain.filter_chain_match = server_names(&b.server.hosts);
                    chain.transport_socket = tls::tls_termination(b.server);
                    chains.push(chain);
                }
                ("TCP" | "MONGO", _) => chains.extend(tcp_chain(ctx, b, port)),
                _ => {}
            }
        }
        let http: Vec<&GatewayServer<'_>> = servers
            .iter()
            .filter(|b| {
                matches!(
                    b.server.port.protocol.to_ascii_uppercase().as_str(),
                    "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB"
                )
            })
            .collect();
        if !http.is_empty() {
            let rds = format!("http.{port}");
            let plain: Vec<GatewayServer<'_>> = http
                .iter()
                .map(|b| GatewayServer {
                    meta: b.meta,
                    index: b.index,
                    server: b.server,
                })
                .collect();
            insert(&mut route_configs, route_config(ctx, &rds, port, &plain));
            chains.push(http_chain(&name, &rds, &authz.http));
        }
        if chains.is_empty() {
            continue;
        }
        // Every chain but the HTTP ones checks connections with the network RBAC filters.
        for chain in chains.iter_mut().filter(|c| !is_http(c)) {
            chain.filters.splice(0..0, authz.tcp.iter().cloned());
        }
        let listener = Listener {
            name: name.clone(),
            address: socket_address(bind, port),
            filter_chains: chains,
            listener_filters: if inspect_tls {
                vec![tls_inspector()]
            } else {
                Vec::new()
            },
            traffic_direction: TrafficDirection::Outbound as i32,
            ..Default::default()
        };
        // RBAC policies are a protobuf map, whose encoding varies with its order.
        let resource = if authz.is_empty() {
            Resource::encode(name, &listener)
        } else {
            Resource::encode_unordered(name, &listener)
        };
        insert(&mut listeners, resource);
    }
    let mut clusters = ResourceSet::new();
    if auto_passthrough {
        for svc in &ctx.visible {
            let rule = ctx.rule(svc).map(|(_, dr)| dr);
            for port in svc.service.ports.iter().filter(|p| is_proxied(p.protocol)) {
                for cluster in sni_dnat(svc, port, rule, mesh) {
                    insert(&mut clusters, cluster);
                }
            }
        }
    }
    [listeners, route_configs, clusters]
}

/// True when every selector label is among the proxy's labels.
fn selects(gw: &Gateway, proxy: &Proxy) -> bool {
    gw.selector
        .iter()
        .all(|(k, v)| proxy.labels.get(k) == Some(v))
}

/// The names a VirtualService may use for a Gateway: `ns/name`, and `name` from its namespace.
fn gateway_names(meta: &ConfigMeta, vs_namespace: &str) -> Vec<String> {
    let mut names = vec![format!("{}/{}", meta.namespace, meta.name)];
    if *meta.namespace == *vs_namespace {
        names.push(meta.name.to_string());
    }
    names
}

/// VirtualServices bound to the Gateway of `b`, with the names that bind them.
fn bound_services<'a>(
    ctx: &'a Ctx<'a>,
    b: &GatewayServer<'_>,
) -> impl Iterator<Item = (&'a ConfigMeta, &'a VirtualService, Vec<String>)> {
    let gw = b.meta.clone();
    ctx.model
        .config
        .virtual_services()
        .filter_map(move |(meta, vs)| {
            let names = gateway_names(&gw, &meta.namespace);
            vs.gateways
                .iter()
                .any(|g| names.contains(g))
                .then_some((meta, vs, names))
        })
}

/// True when a server's `hosts` (`[namespace/]host`) accept `host` of a VirtualService in `ns`.
fn accepts(server: &Server, gateway_ns: &str, vs_ns: &str, host: &str) -> bool {
    server.hosts.iter().any(|entry| {
        let (ns, pattern) = entry.split_once('/').unwrap_or(("*", entry));
        let ns_ok = match ns {
            "*" => true,
            "." => vs_ns == gateway_ns,
            other => other == vs_ns,
        };
        ns_ok && (host_matches(pattern, host) || host_matches(host, pattern))
    })
}

fn route_config(ctx: &Ctx<'_>, name: &str, port: u16, servers: &[GatewayServer<'_>]) -> Resource {
    let mut hosts: BTreeMap<String, (Vec<crate::xds::pb::route::Route>, bool)> = BTreeMap::new();
    for b in servers {
        let redirect = b.server.tls.as_ref().is_some_and(|t| t.https_redirect);
        for (meta, vs, names) in bound_services(ctx, b) {
            for host in vs
                .hosts
                .iter()
                .map(|h| resolve_host(h, &meta.namespace, ctx.domain))
            {
                if !accepts(b.server, &b.meta.namespace, &meta.namespace, &host) {
                    continue;
                }
                let dest = Destinations::new(ctx, &meta.namespace, port);
                let found = routes(&vs.http, port, Bound::Gateway(&names), &dest);
                if found.is_empty() {
                    // A VirtualService with only TLS or TCP rules, or none for this port.
                    continue;
                }
                let entry = hosts.entry(host).or_default();
                entry.0.extend(found);
                entry.1 |= redirect;
            }
        }
    }
    let mut unordered = false;
    let virtual_hosts = hosts
        .into_iter()
        .map(|(host, (routes, redirect))| {
            unordered |= routes.iter().any(super::route::http::has_unordered_maps);
            let domains = if host == "*" {
                vec!["*".to_string()]
            } else {
                vec![host.clone(), format!("{host}:{port}")]
            };
            VirtualHost {
                name: format!("{host}:{port}"),
                domains,
                routes,
                require_tls: if redirect {
                    virtual_host::TlsRequirementType::All as i32
                } else {
                    0
                },
                ..Default::default()
            }
        })
        .collect();
    let config = RouteConfiguration {
        name: name.to_string(),
        virtual_hosts,
        validate_clusters: Some(crate::xds::pb::protobuf::BoolValue { value: false }),
        ..Default::default()
    };
    if unordered {
        Resource::encode_unordered(name, &config)
    } else {
        Resource::encode(name, &config)
    }
}

/// A chain through an HTTP connection manager routed by `rds`, checking requests with the
/// `authz` filters first.
fn http_chain(listener: &str, rds: &str, authz: &[HttpFilter]) -> FilterChain {
    let hcm = HttpConnectionManager {
        stat_prefix: format!("outbound_{listener}"),
        route_specifier: Some(http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: ads(),
            route_config_name: rds.to_string(),
        })),
        http_filters: authz.iter().cloned().chain(mesh_http_filters()).collect(),
        ..Default::default()
    };
    FilterChain {
        filters: vec![network_filter(HCM_FILTER, any(&hcm))],
        ..Default::default()
    }
}

/// The chain ends in an HTTP connection manager.
fn is_http(chain: &FilterChain) -> bool {
    chain.filters.iter().any(|f| f.name == HCM_FILTER)
}

fn server_names(hosts: &[String]) -> Option<FilterChainMatch> {
    let names: Vec<String> = hosts
        .iter()
        .map(|h| h.split_once('/').map_or(h.as_str(), |(_, h)| h).to_string())
        .filter(|h| h != "*")
        .collect();
    (!names.is_empty()).then(|| FilterChainMatch {
        server_names: names,
        ..Default::default()
    })
}

fn passthrough_chains(ctx: &Ctx<'_>, b: &GatewayServer<'_>, port: u16) -> Vec<FilterChain> {
    let mut chains = Vec::new();
    for (meta, vs, names) in bound_services(ctx, b) {
        for rule in &vs.tls {
            for m in rule
                .matches
                .iter()
                .filter(|m| m.port.is_none_or(|p| p == u32::from(port)))
            {
                if !(m.gateways.is_empty() || m.gateways.iter().any(|g| names.contains(g))) {
                    continue;
                }
                let dest = Destinations::new(ctx, &meta.namespace, port);
                let stat = format!("{}.{}", meta.namespace, meta.name);
                chains.push(FilterChain {
                    filter_chain_match: Some(FilterChainMatch {
                        server_names: m.sni_hosts.clone(),
                        ..Default::default()
                    }),
                    filters: vec![tcp_route(&stat, &rule.route, &dest)],
                    ..Default::default()
                });
            }
        }
    }
    chains
}

fn tcp_chain(ctx: &Ctx<'_>, b: &GatewayServer<'_>, port: u16) -> Option<FilterChain> {
    for (meta, vs, names) in bound_services(ctx, b) {
        let rule = vs.tcp.iter().find(|r| {
            r.matches.is_empty()
                || r.matches.iter().any(|m| {
                    m.port.is_none_or(|p| p == u32::from(port))
                        && (m.gateways.is_empty() || m.gateways.iter().any(|g| names.contains(g)))
                })
        });
        if let Some(rule) = rule {
            let dest = Destinations::new(ctx, &meta.namespace, port);
            let stat = format!("{}.{}", meta.namespace, meta.name);
            return Some(FilterChain {
                filters: vec![tcp_route(&stat, &rule.route, &dest)],
                ..Default::default()
            });
        }
    }
    None
}
