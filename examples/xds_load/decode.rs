//! Just enough decoding for a simulated client: the names that lead from one type to the next,
//! and whether a load assignment holds a given address.
//!
//! A sidecar receives every cluster and every load assignment of the mesh, and thousands of
//! clients share two cores with the server, so the hot paths decode cut-down messages: prost
//! skips the fields a cut-down message does not declare without decoding them.

use prost::{Message, Name};
use wayfinder::xds::pb::core::address::Address;
use wayfinder::xds::pb::endpoint::{ClusterLoadAssignment, lb_endpoint::HostIdentifier};
use wayfinder::xds::pb::hcm::{HttpConnectionManager, http_connection_manager::RouteSpecifier};
use wayfinder::xds::pb::listener::{FilterChain, Listener, filter::ConfigType};
use wayfinder::xds::pb::protobuf::Any;
use wayfinder::xds::pb::route::{
    RouteConfiguration, route::Action, route_action::ClusterSpecifier,
};

/// The name of a resource of any of the four types: field 1 of `Cluster`, `Listener`,
/// `RouteConfiguration` and `ClusterLoadAssignment` (`cluster_name`).
#[derive(Clone, PartialEq, Message)]
struct Named {
    #[prost(string, tag = "1")]
    name: String,
}

/// A `Cluster` cut to its name, discovery type and EDS service name.
#[derive(Clone, PartialEq, Message)]
struct ClusterHead {
    #[prost(string, tag = "1")]
    name: String,
    /// `DiscoveryType` (`type`, in a oneof; absent means STATIC).
    #[prost(int32, tag = "2")]
    kind: i32,
    #[prost(message, optional, tag = "3")]
    eds: Option<EdsConfig>,
}

/// `Cluster.EdsClusterConfig` cut to its service name.
#[derive(Clone, PartialEq, Message)]
struct EdsConfig {
    #[prost(string, tag = "2")]
    service_name: String,
}

/// `Cluster.DiscoveryType.EDS`.
const EDS: i32 = 3;

/// The name of a resource of any served type (empty if it does not decode). A resource cut
/// to its first bytes (`stream::KEEP`) still has its name: prost writes field 1 first.
pub(crate) fn name(bytes: &[u8]) -> String {
    let mut rest = bytes;
    if let Ok((1, prost::encoding::WireType::LengthDelimited)) =
        prost::encoding::decode_key(&mut rest)
        && let Ok(len) = prost::encoding::decode_varint(&mut rest)
        && let Some(name) = rest.get(..len as usize)
    {
        return String::from_utf8_lossy(name).into_owned();
    }
    Named::decode(bytes).map(|n| n.name).unwrap_or_default()
}

/// The EDS resource a cluster fetches (its service name, else its own), if it is an EDS
/// cluster.
pub(crate) fn eds_name(bytes: &[u8]) -> Option<String> {
    let c = ClusterHead::decode(bytes).ok()?;
    if c.kind != EDS {
        return None;
    }
    Some(match c.eds {
        Some(e) if !e.service_name.is_empty() => e.service_name,
        _ => c.name,
    })
}

/// The route configurations a listener's HTTP connection managers fetch by RDS: in its filter
/// chains, its default chain and its API listener (proxyless gRPC).
pub(crate) fn route_names(bytes: &[u8]) -> Vec<String> {
    let Ok(l) = Listener::decode(bytes) else {
        return Vec::new();
    };
    let chains = l
        .filter_chains
        .iter()
        .chain(l.default_filter_chain.as_ref());
    let filters = chains.flat_map(|c: &FilterChain| &c.filters);
    let typed = filters.filter_map(|f| match &f.config_type {
        Some(ConfigType::TypedConfig(any)) => Some(any),
        _ => None,
    });
    let api = l
        .api_listener
        .as_ref()
        .and_then(|a| a.api_listener.as_ref());
    typed.chain(api).filter_map(rds_name).collect()
}

fn rds_name(any: &Any) -> Option<String> {
    if any.type_url != HttpConnectionManager::type_url() {
        return None;
    }
    match HttpConnectionManager::decode(any.value.as_slice())
        .ok()?
        .route_specifier?
    {
        RouteSpecifier::Rds(rds) => Some(rds.route_config_name),
        _ => None,
    }
}

/// The clusters a route configuration's routes send to (single and weighted).
pub(crate) fn route_clusters(bytes: &[u8]) -> Vec<String> {
    let Ok(rc) = RouteConfiguration::decode(bytes) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let actions = rc
        .virtual_hosts
        .into_iter()
        .flat_map(|vh| vh.routes)
        .filter_map(|r| match r.action {
            Some(Action::Route(a)) => a.cluster_specifier,
            _ => None,
        });
    for spec in actions {
        match spec {
            ClusterSpecifier::Cluster(c) => out.push(c),
            ClusterSpecifier::WeightedClusters(w) => {
                out.extend(w.clusters.into_iter().map(|c| c.name))
            }
            _ => {}
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether a load assignment holds an endpoint at `address`.
pub(crate) fn has_endpoint(bytes: &[u8], address: &str) -> bool {
    let Ok(cla) = ClusterLoadAssignment::decode(bytes) else {
        return false;
    };
    cla.endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .filter_map(|e| match &e.host_identifier {
            Some(HostIdentifier::Endpoint(e)) => e.address.as_ref()?.address.as_ref(),
            _ => None,
        })
        .any(|a| matches!(a, Address::SocketAddress(s) if s.address == address))
}
