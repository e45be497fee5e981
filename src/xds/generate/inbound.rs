//! A sidecar's inbound side: clusters and the `virtualInbound` listener for the proxy's own
//! instances, the endpoints whose address is one of the proxy's IPs.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use wayfinder_registry::Protocol;

use super::cluster::discovery;
use super::listener::{blackhole_chain, network_filter, router_filter, tcp_proxy};
use super::proto::{any, seconds, socket_address, u32_value};
use crate::snapshot::Snapshot;
use crate::xds::names;
use crate::xds::pb::cluster::{Cluster, cluster::DiscoveryType};
use crate::xds::pb::core::TrafficDirection;
use crate::xds::pb::endpoint::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use crate::xds::pb::hcm::{HttpConnectionManager, http_connection_manager};
use crate::xds::pb::listener::{
    FilterChain, FilterChainMatch, Listener, ListenerFilter, listener_filter,
};
use crate::xds::pb::original_dst::OriginalDst;
use crate::xds::pb::route::RouteConfiguration;
use crate::xds::proxy::{ListenSettings, Proxy};
use crate::xds::resource::{Resource, ResourceSet, insert};

/// Instances by IP: for each address, the ports its workloads serve and with which protocol.
/// Built once per snapshot, on first use.
#[derive(Debug, Default)]
pub(super) struct Index {
    by_ip: HashMap<IpAddr, BTreeMap<u16, Protocol>>,
}

impl Index {
    pub(super) fn build(model: &Snapshot) -> Self {
        let mut by_ip: HashMap<IpAddr, BTreeMap<u16, Protocol>> = HashMap::new();
        for svc in model.services.values() {
            for view in &svc.endpoints {
                let Some(ip) = view.endpoint.ip() else {
                    continue;
                };
                for port in &svc.service.ports {
                    if let Some(&target) = view.ports.get(&port.number) {
                        // The first service to claim a port decides its protocol.
                        by_ip
                            .entry(ip)
                            .or_default()
                            .entry(target)
                            .or_insert(port.protocol);
                    }
                }
            }
        }
        Self { by_ip }
    }

    /// The ports the proxy's instances serve, with their protocols: all the inbound side
    /// depends on, with where the proxy listens.
    pub(super) fn ports(&self, proxy: &Proxy) -> Ports {
        let mut ports = BTreeMap::new();
        for ip in &proxy.ips {
            for (port, protocol) in self.by_ip.get(ip).into_iter().flatten() {
                ports.entry(*port).or_insert(*protocol);
            }
        }
        ports
    }
}

/// Ports of a proxy's instances and their protocols.
pub(super) type Ports = BTreeMap<u16, Protocol>;

/// `inbound|<port>||` for every port the proxy's instances serve: the workload on localhost.
pub(super) fn clusters(ports: &Ports) -> ResourceSet {
    let mut set = ResourceSet::new();
    for port in ports.keys() {
        let name = names::inbound_cluster(*port);
        let cluster = Cluster {
            name: name.clone(),
            cluster_discovery_type: discovery(DiscoveryType::Static),
            connect_timeout: seconds(10),
            load_assignment: Some(ClusterLoadAssignment {
                cluster_name: name.clone(),
                endpoints: vec![LocalityLbEndpoints {
                    lb_endpoints: vec![LbEndpoint {
                        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                            address: socket_address("127.0.0.1", *port),
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
        insert(&mut set, Resource::encode(name, &cluster));
    }
    set
}

/// `virtualInbound` on the inbound capture port: a filter chain per instance port (HTTP ports
/// through a connection manager, others through `tcp_proxy`), connections to the capture port
/// itself dropped, and anything else passed through.
pub(super) fn listener(ports: &Ports, listen: &ListenSettings) -> ResourceSet {
    let mut chains: Vec<FilterChain> =
        blackhole_chain("virtualInbound-blackhole", listen.inbound_port)
            .into_iter()
            .collect();
    for (&port, &protocol) in ports {
        let cluster = names::inbound_cluster(port);
        let filter = if protocol.is_http() {
            let stat_prefix = format!("inbound_{}", names::listener(&listen.address, port));
            inbound_http(&stat_prefix, &cluster)
        } else {
            tcp_proxy(&cluster, &cluster)
        };
        chains.push(FilterChain {
            name: cluster.clone(),
            filter_chain_match: Some(port_match(port)),
            filters: vec![filter],
            ..Default::default()
        });
    }
    chains.push(FilterChain {
        name: "virtualInbound-catchall-tcp".into(),
        filters: vec![tcp_proxy(
            names::INBOUND_PASSTHROUGH_CLUSTER,
            names::INBOUND_PASSTHROUGH_CLUSTER,
        )],
        ..Default::default()
    });
    let listener = Listener {
        name: names::VIRTUAL_INBOUND.into(),
        address: socket_address(&listen.address, listen.inbound_port),
        listener_filters: vec![ListenerFilter {
            name: "envoy.filters.listener.original_dst".into(),
            config_type: Some(listener_filter::ConfigType::TypedConfig(any(
                &OriginalDst::default(),
            ))),
            ..Default::default()
        }],
        traffic_direction: TrafficDirection::Inbound as i32,
        filter_chains: chains,
        ..Default::default()
    };
    let mut set = ResourceSet::new();
    insert(
        &mut set,
        Resource::encode(names::VIRTUAL_INBOUND, &listener),
    );
    set
}

fn port_match(port: u16) -> FilterChainMatch {
    FilterChainMatch {
        destination_port: u32_value(u32::from(port)),
        ..Default::default()
    }
}

/// An HTTP connection manager with an inline route sending everything to `cluster`.
fn inbound_http(stat_prefix: &str, cluster: &str) -> crate::xds::pb::listener::Filter {
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
    let hcm = HttpConnectionManager {
        stat_prefix: stat_prefix.to_string(),
        route_specifier: Some(http_connection_manager::RouteSpecifier::RouteConfig(
            route_config,
        )),
        http_filters: vec![router_filter()],
        ..Default::default()
    };
    network_filter("envoy.filters.network.http_connection_manager", any(&hcm))
}
