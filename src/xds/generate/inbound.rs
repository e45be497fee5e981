//! A sidecar's inbound side: clusters and the `virtualInbound` listener for the proxy's own
//! instances, the endpoints whose address is one of the proxy's IPs.

mod sidecar;

pub(super) use sidecar::apply as apply_pools;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use wayfinder_registry::{Locality, Protocol};

use wayfinder_config::{EffectiveMtls, MtlsMode};

use super::cluster::discovery;
use super::listener::{
    HCM_FILTER, blackhole_chain, network_filter, router_filter, tcp_proxy, tls_inspector,
};
use super::mesh_tls;
use super::proto::{any, seconds, socket_address, u32_value};
use super::security::Filters as Authz;
use crate::snapshot::Snapshot;
use crate::xds::names;
use crate::xds::pb::cluster::{Cluster, cluster::DiscoveryType};
use crate::xds::pb::core::TrafficDirection;
use crate::xds::pb::endpoint::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use crate::xds::pb::hcm::http_connection_manager::{
    self, ForwardClientCertDetails, SetCurrentClientCertDetails,
};
use crate::xds::pb::hcm::{HttpConnectionManager, HttpFilter};
use crate::xds::pb::listener::{
    Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter, listener_filter,
};
use crate::xds::pb::original_dst::OriginalDst;
use crate::xds::pb::protobuf::BoolValue;
use crate::xds::pb::route::RouteConfiguration;
use crate::xds::proxy::{ListenSettings, Proxy};
use crate::xds::resource::{Resource, ResourceSet, insert};

/// Instances by IP: for each address, the ports its workloads serve and with which protocol,
/// and the locality the registry gives it. Built once per snapshot, on first use.
#[derive(Debug, Default)]
pub(super) struct Index {
    by_ip: HashMap<IpAddr, BTreeMap<u16, Protocol>>,
    localities: HashMap<IpAddr, Locality>,
    /// Addresses where two services claim one port with different protocols (the first
    /// decides; Istio's `pilot_conflict_inbound_listener`).
    conflicting: HashSet<IpAddr>,
}

impl Index {
    pub(super) fn build(model: &Snapshot) -> Self {
        let mut by_ip: HashMap<IpAddr, BTreeMap<u16, Protocol>> = HashMap::new();
        let mut localities: HashMap<IpAddr, Locality> = HashMap::new();
        let mut conflicting = HashSet::new();
        for svc in model.services.values() {
            for view in &svc.endpoints {
                let Some(ip) = view.endpoint.ip() else {
                    continue;
                };
                if !view.endpoint.locality.region.is_empty() {
                    localities
                        .entry(ip)
                        .or_insert_with(|| view.endpoint.locality.clone());
                }
                for port in &svc.service.ports {
                    if let Some(&target) = view.ports.get(&port.number) {
                        // The first service to claim a port decides its protocol.
                        let claimed = by_ip
                            .entry(ip)
                            .or_default()
                            .entry(target)
                            .or_insert(port.protocol);
                        if *claimed != port.protocol {
                            conflicting.insert(ip);
                        }
                    }
                }
            }
        }
        Self {
            by_ip,
            localities,
            conflicting,
        }
    }

    /// How many addresses have a port two services claim with different protocols.
    pub(super) fn conflicts(&self) -> usize {
        self.conflicting.len()
    }

    /// The locality the registry gives one of the proxy's instances, if any: it wins over the
    /// node's, as in Istio.
    pub(super) fn locality(&self, proxy: &Proxy) -> Option<&Locality> {
        proxy.ips.iter().find_map(|ip| self.localities.get(ip))
    }

    /// The ports the proxy's instances serve, with their protocols: all the inbound side
    /// depends on, with where the proxy listens.
    pub(super) fn ports(&self, proxy: &Proxy) -> Ports {
        let mut ports = BTreeMap::new();
        for ip in &proxy.ips {
            for (port, protocol) in self.by_ip.get(ip).into_iter().flatten() {
                ports.entry(*port).or_insert(InboundPort {
                    protocol: *protocol,
                    target: None,
                    pool: None,
                    tls: None,
                    bind: None,
                });
            }
        }
        ports
    }
}

/// The inbound ports of a proxy: its instances' ports, or its Sidecar's `ingress` listeners.
pub(super) type Ports = BTreeMap<u16, InboundPort>;

/// One inbound port: its protocol, where its traffic goes, and the connection pool its
/// Sidecar sets for it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct InboundPort {
    pub(super) protocol: Protocol,
    /// A Sidecar ingress listener's `defaultEndpoint`; `None`: the workload on 127.0.0.1 at
    /// the same port.
    pub(super) target: Option<Target>,
    /// The Sidecar's connection pool for the port ([`apply_pools`]).
    pub(super) pool: Option<sidecar::Pool>,
    /// The TLS its Sidecar ingress listener terminates, for clients outside the mesh.
    pub(super) tls: Option<sidecar::Keyed<wayfinder_config::ServerTlsSettings>>,
    /// With its Sidecar ingress listener's `captureMode: NONE`, the address the port's own
    /// listener binds; `None`: the port is served on the inbound capture port.
    pub(super) bind: Option<String>,
}

/// Where an ingress listener's traffic goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Target {
    Address(IpAddr, u16),
    Unix(String),
}

/// A proxy's inbound ports as its Sidecar's `ingress` listeners give them (Istio: then only
/// those), each to its `defaultEndpoint` (`0.0.0.0:PORT`: the proxy's own address). A
/// listener validation would refuse is left out.
pub(super) fn from_ingress(
    listeners: &[wayfinder_config::IngressListener],
    proxy: &Proxy,
) -> Ports {
    use wayfinder_config::DefaultEndpoint;
    let own = proxy
        .ips
        .first()
        .copied()
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    listeners
        .iter()
        .filter_map(|l| {
            let port = l.port.as_ref()?;
            let number = u16::try_from(port.number).ok()?;
            let target = match wayfinder_config::parse_default_endpoint(&l.default_endpoint).ok()? {
                DefaultEndpoint::Loopback(ip, p) => Target::Address(ip, p),
                DefaultEndpoint::Instance(p) => Target::Address(own, p),
                DefaultEndpoint::Unix(path) => Target::Unix(path),
            };
            // Terminated here, the port's traffic is what TLS carried (Istio: HTTPS as HTTP).
            let protocol = match Protocol::parse(&port.protocol) {
                Protocol::Https if l.tls.is_some() => Protocol::Http,
                Protocol::Tls if l.tls.is_some() => Protocol::Tcp,
                other => other,
            };
            Some((
                number,
                InboundPort {
                    protocol,
                    target: Some(target),
                    pool: None,
                    tls: l.tls.as_ref().map(sidecar::Keyed::new),
                    bind: (l.capture_mode.as_deref() == Some("NONE")).then(|| {
                        if l.bind.is_empty() {
                            "0.0.0.0".to_string()
                        } else {
                            l.bind.clone()
                        }
                    }),
                },
            ))
        })
        .collect()
}

/// `inbound|<port>||` for every inbound port: the workload on localhost (or the Sidecar
/// ingress listener's endpoint), shaped by the port's connection pool, if it has one.
pub(super) fn clusters(ports: &Ports) -> ResourceSet {
    let mut set = ResourceSet::new();
    for (port, inbound) in ports {
        let address = match &inbound.target {
            None => socket_address("127.0.0.1", *port),
            Some(Target::Address(ip, p)) => socket_address(&ip.to_string(), *p),
            Some(Target::Unix(path)) => Some(crate::xds::pb::core::Address {
                address: Some(crate::xds::pb::core::address::Address::Pipe(
                    crate::xds::pb::core::Pipe {
                        path: path.clone(),
                        ..Default::default()
                    },
                )),
            }),
        };
        let name = names::inbound_cluster(*port);
        let mut cluster = Cluster {
            name: name.clone(),
            cluster_discovery_type: discovery(DiscoveryType::Static),
            connect_timeout: seconds(10),
            load_assignment: Some(ClusterLoadAssignment {
                cluster_name: name.clone(),
                endpoints: vec![LocalityLbEndpoints {
                    lb_endpoints: vec![LbEndpoint {
                        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                            address,
                            ..Default::default()
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        if let Some(pool) = &inbound.pool {
            super::cluster::shape_by_pool(&mut cluster, &pool.settings, inbound.protocol);
        }
        insert(&mut set, Resource::encode(name, &cluster));
    }
    set
}

/// `virtualInbound` on the inbound capture port: filter chains per instance port (HTTP ports
/// through a connection manager, others through `tcp_proxy`), connections to the capture port
/// itself dropped, and anything else passed through.
///
/// `mtls` is the PeerAuthentication in force for a proxy that holds a mesh certificate (none
/// for a proxy without one: plaintext only). Then a TLS inspector tells TLS from plaintext
/// and each port's chains follow its mode, as in Istio:
/// - `STRICT`: only mesh mTLS (a client certificate of the mesh is required); plaintext to
///   the port matches no chain, and Envoy closes the connection;
/// - `PERMISSIVE`: mesh mTLS (TLS with Istio's ALPN), plaintext, and other TLS passed through
///   to the workload as TCP;
/// - `DISABLE`: plaintext (and anything else) as without a certificate.
///
/// The catch-all for other ports follows the workload's mode: under `STRICT` it also requires
/// mesh mTLS. Behind mesh mTLS, HTTP chains append the client's identity to
/// `x-forwarded-client-cert` (`APPEND_FORWARD` with URI, DNS and subject, as Istio's inbound
/// does); plaintext chains remove any such header a client sends (Envoy's `SANITIZE`).
///
/// `authz` are the workload's AuthorizationPolicies as RBAC filters: HTTP chains run the HTTP
/// filters before the router, every other chain (TCP ports, TLS passed through, the
/// catch-all) the network filters before `tcp_proxy`.
///
/// A port whose Sidecar ingress listener has `captureMode: NONE` gets a listener of its own,
/// `<bind>_<port>`, which binds that address and port, with the port's chains (Istio's
/// `bindToPort`); it is then not served on the capture port.
///
/// `detection` is MeshConfig's `protocolDetectionTimeout`: how long the TLS inspector waits
/// for a client's first bytes before the connection is taken as plaintext (Istio sets it on
/// the inbound listener; `0` waits for ever). Without it Envoy's own 15 s apply.
pub(super) fn listener(
    ports: &Ports,
    listen: &ListenSettings,
    mtls: Option<&EffectiveMtls>,
    authz: &Authz,
    detection: Option<std::time::Duration>,
) -> ResourceSet {
    let mut chains: Vec<FilterChain> =
        blackhole_chain("virtualInbound-blackhole", listen.inbound_port)
            .into_iter()
            .collect();
    let mut user_tls = false;
    // Ports with a listener of their own (`captureMode: NONE`).
    let mut own = Vec::new();
    for (&port, inbound) in ports {
        let mut port_chains = Vec::new();
        let mut port_tls = false;
        let protocol = inbound.protocol;
        let cluster = names::inbound_cluster(port);
        let http = protocol.is_http();
        let stat_prefix = format!("inbound_{}", names::listener(&listen.address, port));
        let tcp = tcp_to(authz, &cluster);
        let filter = |mtls: bool| {
            if http {
                vec![inbound_http(&stat_prefix, &cluster, mtls, &authz.http)]
            } else {
                tcp.clone()
            }
        };
        let mode = mtls.map(|m| m.mode_for(port));
        // A Sidecar ingress listener's own TLS, where mesh mTLS is off for the port (Istio:
        // mesh mTLS wins where it is on).
        match inbound.tls.as_ref() {
            Some(tls) if matches!(mode, None | Some(MtlsMode::Disable)) => {
                port_tls = true;
                port_chains.push(FilterChain {
                    name: cluster.clone(),
                    filter_chain_match: Some(FilterChainMatch {
                        destination_port: u32_value(u32::from(port)),
                        transport_protocol: "tls".into(),
                        ..Default::default()
                    }),
                    filters: filter(false),
                    transport_socket: Some(super::gateway::terminating_tls(&tls.settings)),
                    ..Default::default()
                });
            }
            _ => port_chains.extend(by_mode(mode, &cluster, Some(port), http, filter, &tcp)),
        }
        match &inbound.bind {
            Some(address) => own.push(sidecar::own_listener(
                address,
                port,
                port_chains,
                mtls.is_some() || port_tls,
                detection,
            )),
            None => {
                chains.extend(port_chains);
                user_tls |= port_tls;
            }
        }
    }
    let passthrough = tcp_to(authz, names::INBOUND_PASSTHROUGH_CLUSTER);
    // Other ports: plaintext and any TLS passed through, unless the workload is STRICT.
    let catch_all = mtls.map(|m| m.mode).filter(|m| *m == MtlsMode::Strict);
    chains.extend(by_mode(
        catch_all,
        "virtualInbound-catchall-tcp",
        None,
        false,
        |_| passthrough.clone(),
        &passthrough,
    ));
    let mut listener_filters = vec![ListenerFilter {
        name: "envoy.filters.listener.original_dst".into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(any(
            &OriginalDst::default(),
        ))),
        ..Default::default()
    }];
    // TLS is told from plaintext where mesh mTLS or an ingress listener's TLS is served.
    let inspects = mtls.is_some() || user_tls;
    if inspects {
        listener_filters.push(tls_inspector());
    }
    let listener = Listener {
        name: names::VIRTUAL_INBOUND.into(),
        address: socket_address(&listen.address, listen.inbound_port),
        listener_filters,
        // A client that sends nothing first (a server-first protocol) is not held by the TLS
        // inspector forever: after Envoy's listener filter timeout (15 s) it is plaintext.
        continue_on_listener_filters_timeout: inspects,
        listener_filters_timeout: detection.filter(|_| inspects).map(super::policy::duration),
        traffic_direction: TrafficDirection::Inbound as i32,
        filter_chains: chains,
        ..Default::default()
    };
    // RBAC policies are a protobuf map, whose encoding varies with its order.
    let encode = |l: &Listener| {
        if authz.is_empty() {
            Resource::encode(l.name.clone(), l)
        } else {
            Resource::encode_unordered(l.name.clone(), l)
        }
    };
    let mut set = ResourceSet::new();
    for l in std::iter::once(&listener).chain(&own) {
        insert(&mut set, encode(l));
    }
    set
}

/// The network filters of `authz`, then `tcp_proxy` to `cluster`.
fn tcp_to(authz: &Authz, cluster: &str) -> Vec<Filter> {
    let mut filters = authz.tcp.clone();
    filters.push(tcp_proxy(cluster, cluster));
    filters
}

/// The filter chains of one port (`None`: the catch-all) under `mode` (`None`: a proxy without
/// a mesh certificate). `filters(mtls)` are the port's filters behind mesh mTLS or plaintext,
/// `tls_passthrough` what other TLS goes to under PERMISSIVE.
fn by_mode(
    mode: Option<MtlsMode>,
    name: &str,
    port: Option<u16>,
    http: bool,
    filters: impl Fn(bool) -> Vec<Filter>,
    tls_passthrough: &[Filter],
) -> Vec<FilterChain> {
    let matching = |transport: &str, alpn: &[&str]| FilterChainMatch {
        destination_port: port.and_then(|p| u32_value(u32::from(p))),
        transport_protocol: transport.into(),
        application_protocols: alpn.iter().map(ToString::to_string).collect(),
        ..Default::default()
    };
    let mesh = |alpn: &[&str]| FilterChain {
        name: format!("{name}-mtls"),
        filter_chain_match: Some(matching("tls", alpn)),
        filters: filters(true),
        transport_socket: Some(mesh_tls::downstream(http)),
        ..Default::default()
    };
    match mode {
        None | Some(MtlsMode::Disable) => vec![FilterChain {
            name: name.into(),
            // The catch-all matches everything: no match at all, as before mesh mTLS.
            filter_chain_match: Some(matching("", &[]))
                .filter(|m| *m != FilterChainMatch::default()),
            filters: filters(false),
            ..Default::default()
        }],
        Some(MtlsMode::Strict) => vec![mesh(&[])],
        Some(MtlsMode::Permissive | MtlsMode::Unset) => vec![
            mesh(&mesh_tls::ALPN_MESH),
            FilterChain {
                name: name.into(),
                filter_chain_match: Some(matching("raw_buffer", &[])),
                filters: filters(false),
                ..Default::default()
            },
            FilterChain {
                name: format!("{name}-tls"),
                filter_chain_match: Some(matching("tls", &[])),
                filters: tls_passthrough.to_vec(),
                ..Default::default()
            },
        ],
    }
}

/// An HTTP connection manager with an inline route sending everything to `cluster`, after the
/// `authz` filters; behind mesh mTLS (`mtls`), it appends the client's identity to
/// `x-forwarded-client-cert`.
fn inbound_http(stat_prefix: &str, cluster: &str, mtls: bool, authz: &[HttpFilter]) -> Filter {
    let route_config = RouteConfiguration {
        name: cluster.to_string(),
        virtual_hosts: vec![crate::xds::pb::route::VirtualHost {
            name: format!(
                "inbound|http|{}",
                cluster
                    .trim_start_matches("inbound|")
                    .trim_end_matches("||")
            ),
            domains: vec!["*".into()],
            routes: vec![super::route::default_route(cluster.to_string())],
            ..Default::default()
        }],
        validate_clusters: Some(crate::xds::pb::protobuf::BoolValue { value: false }),
        ..Default::default()
    };
    let mut hcm = HttpConnectionManager {
        stat_prefix: stat_prefix.to_string(),
        route_specifier: Some(http_connection_manager::RouteSpecifier::RouteConfig(
            route_config,
        )),
        http_filters: authz.iter().cloned().chain([router_filter()]).collect(),
        ..Default::default()
    };
    if mtls {
        hcm.forward_client_cert_details = ForwardClientCertDetails::AppendForward as i32;
        hcm.set_current_client_cert_details = Some(SetCurrentClientCertDetails {
            subject: Some(BoolValue { value: true }),
            dns: true,
            uri: true,
            ..Default::default()
        });
    }
    network_filter(HCM_FILTER, any(&hcm))
}
