//! Network-aware endpoints, as Istio's `EndpointsByNetworkFilter`: a proxy reaches the
//! endpoints of its own network directly, and those of another network that has gateways
//! (`--networksConfig`) through that network's gateways, with mesh mTLS whose SNI
//! (`outbound_.PORT_.SUBSET_.HOST`) the gateway routes by (`AUTO_PASSTHROUGH`).
//!
//! An endpoint's network is its registry's (`Endpoint::network`), else the first of
//! MeshNetworks' networks whose `endpoints` match it (`fromCidr`, `fromRegistry`). An endpoint
//! without a network, or on a network without gateways, is reached directly from everywhere.
//! Across networks, only endpoints that speak mesh mTLS are reachable (the gateway routes by
//! the SNI of mTLS), and only healthy ones count: each of their network's gateways takes
//! their summed weight in their locality, as one endpoint marked for mesh mTLS.
//!
//! An endpoint known only by its network (Istio's WorkloadEntry with a `network` and no
//! address) is, as in Istio's filter, counted towards its network's gateways for proxies on
//! other networks, under the same rules, and left out everywhere else: on its own network
//! and when its network has no gateways, nothing could connect to it. It is in an assignment
//! only as the base of a per-network one ([`mark`]ed, without an address), and [`View::apply`]
//! replaces or removes every such endpoint, so none reaches a proxy.
//!
//! Such an assignment depends on the proxy's network, so it is made per proxy place (see
//! `locality`), and only for clusters with endpoints on a network with gateways.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use wayfinder_config::mesh_networks::MeshNetworks;

use super::mesh_tls::{SOCKET_MATCH, TLS_MODE_KEY};
use super::proto::{socket_address, u32_value};
use crate::snapshot::MergedService;
use crate::xds::pb::core::{HealthStatus, address, socket_address};
use crate::xds::pb::endpoint::{ClusterLoadAssignment, Endpoint, LbEndpoint, lb_endpoint};
use crate::xds::pb::protobuf::{Struct, Value, value};

/// The networks of one cluster's endpoints, and the gateways of those networks.
#[derive(Debug)]
pub(super) struct View {
    /// Each endpoint's network, by the address and port it has in the assignment.
    network_of: HashMap<(String, u32), Arc<str>>,
    /// The gateways of the networks those endpoints are on.
    gateways: BTreeMap<Arc<str>, Vec<(IpAddr, u16)>>,
}

/// The view of `svc`'s endpoints serving `port`, when one of them is on a network with
/// gateways; `None` (every proxy reaches every endpoint directly) otherwise.
pub(super) fn view(networks: &MeshNetworks, svc: &MergedService, port: u16) -> Option<View> {
    let all = networks.gateways();
    if all.is_empty() {
        return None;
    }
    let mut network_of = HashMap::new();
    let mut gateways = BTreeMap::new();
    for v in &svc.endpoints {
        let Some(&at) = v.ports.get(&port) else {
            continue;
        };
        let ep = &v.endpoint;
        if ep.network_only() {
            // Its network is its own (validation requires one); `mark` carries it.
            if let Some(g) = all.get(&*ep.network) {
                gateways.insert(ep.network.clone(), g.clone());
            }
            continue;
        }
        let network: Arc<str> = if ep.network.is_empty() {
            match networks.network_of(&ep.address, v.registry.as_str()) {
                Some(n) => n.into(),
                None => continue,
            }
        } else {
            ep.network.clone()
        };
        if let Some(g) = all.get(&*network) {
            gateways.insert(network.clone(), g.clone());
        }
        network_of.insert((ep.address.to_string(), u32::from(at)), network);
    }
    (!gateways.is_empty()).then_some(View {
        network_of,
        gateways,
    })
}

impl View {
    /// `cla` as a proxy on `network` reaches it: endpoints of other networks with gateways
    /// replaced by those gateways, locality by locality.
    pub(super) fn apply(&self, cla: &mut ClusterLoadAssignment, network: &str) {
        for group in &mut cla.endpoints {
            let mut remote: BTreeMap<&Arc<str>, u32> = BTreeMap::new();
            group.lb_endpoints.retain(|lb| {
                let net = match marked(lb) {
                    // Known only by its network: through another network's gateways, or
                    // not at all.
                    Some(net) => match self.gateways.get_key_value(net) {
                        Some((net, _)) if &**net != network => net,
                        _ => return false,
                    },
                    None => match self.network_of_endpoint(lb) {
                        Some(net) if &**net != network && self.gateways.contains_key(net) => net,
                        _ => return true,
                    },
                };
                let healthy = lb.health_status != HealthStatus::Unhealthy as i32
                    && lb.health_status != HealthStatus::Draining as i32;
                if speaks_mtls(lb) && healthy {
                    let weight = lb.load_balancing_weight.as_ref().map_or(1, |w| w.value);
                    *remote.entry(net).or_default() += weight;
                }
                false
            });
            for (net, weight) in remote {
                for (ip, port) in &self.gateways[net] {
                    group
                        .lb_endpoints
                        .push(gateway_endpoint(*ip, *port, weight));
                }
            }
            let total: u32 = group
                .lb_endpoints
                .iter()
                .map(|lb| lb.load_balancing_weight.as_ref().map_or(1, |w| w.value))
                .sum();
            if group.load_balancing_weight.is_some() {
                group.load_balancing_weight = u32_value(total.max(1));
            }
        }
        cla.endpoints.retain(|g| !g.lb_endpoints.is_empty());
    }

    fn network_of_endpoint(&self, lb: &LbEndpoint) -> Option<&Arc<str>> {
        let Some(lb_endpoint::HostIdentifier::Endpoint(e)) = &lb.host_identifier else {
            return None;
        };
        let Some(address::Address::SocketAddress(s)) =
            e.address.as_ref().and_then(|a| a.address.as_ref())
        else {
            return None;
        };
        let Some(socket_address::PortSpecifier::PortValue(port)) = s.port_specifier else {
            return None;
        };
        self.network_of.get(&(s.address.clone(), port))
    }
}

/// The metadata key under which an endpoint known only by its network carries it, while it
/// is in a base assignment (never in one a proxy receives).
const NETWORK_ONLY: &str = "wayfinder.network_only";
const NETWORK_KEY: &str = "network";

/// Makes `lb` the entry of an endpoint known only by `network`: no address, and its network
/// in its metadata, for [`View::apply`] to find.
pub(super) fn mark(lb: &mut LbEndpoint, network: &str) {
    lb.host_identifier = Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint::default()));
    let fields = [(
        NETWORK_KEY.to_string(),
        Value {
            kind: Some(value::Kind::StringValue(network.into())),
        },
    )];
    lb.metadata
        .get_or_insert_with(Default::default)
        .filter_metadata
        .insert(
            NETWORK_ONLY.into(),
            Struct {
                fields: fields.into(),
            },
        );
}

/// The network of an endpoint [`mark`]ed as known only by it.
pub(super) fn marked(lb: &LbEndpoint) -> Option<&str> {
    match lb
        .metadata
        .as_ref()?
        .filter_metadata
        .get(NETWORK_ONLY)?
        .fields
        .get(NETWORK_KEY)?
        .kind
        .as_ref()?
    {
        value::Kind::StringValue(network) => Some(network),
        _ => None,
    }
}

/// True when an endpoint is marked for mesh mTLS (`tlsMode: istio`).
fn speaks_mtls(lb: &LbEndpoint) -> bool {
    lb.metadata
        .as_ref()
        .and_then(|m| m.filter_metadata.get(SOCKET_MATCH))
        .and_then(|s| s.fields.get(TLS_MODE_KEY))
        .is_some()
}

/// A gateway as an endpoint: mesh mTLS (the SNI says where to), healthy, `weight`.
fn gateway_endpoint(ip: IpAddr, port: u16, weight: u32) -> LbEndpoint {
    LbEndpoint {
        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
            address: socket_address(&ip.to_string(), port),
            ..Default::default()
        })),
        health_status: HealthStatus::Healthy as i32,
        load_balancing_weight: u32_value(weight.max(1)),
        metadata: Some(super::endpoint::istio_tls_mode()),
    }
}
