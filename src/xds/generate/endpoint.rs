//! Cluster load assignments: a service port's endpoints grouped by locality.

use std::collections::BTreeMap;

use wayfinder_config::MtlsMode;
use wayfinder_registry::{Health, Locality};

use super::mesh_tls::{SOCKET_MATCH, TLS_MODE_ISTIO, TLS_MODE_KEY, TLS_MODE_LABEL};
use super::network;
use super::proto::{socket_address, u32_value};
use crate::snapshot::{MergedService, TrafficConfig};
use crate::xds::pb::core::{self, HealthStatus, Metadata};
use crate::xds::pb::endpoint::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use crate::xds::pb::protobuf::{Struct, Value, value};

/// Which endpoints a load assignment carries.
#[derive(Clone, Copy)]
pub(super) enum Include<'a> {
    /// Every endpoint with its health status: Envoy sends no traffic to unhealthy or draining
    /// ones but keeps them known. Endpoints that speak mesh mTLS say so in their metadata,
    /// for auto mTLS (see [`Peers`]).
    All(Peers<'a>),
    /// Only healthy endpoints, for gRPC clients (which ignore the others anyway).
    Healthy,
}

/// What tells whether an endpoint speaks mesh mTLS on a port, as Istio decides it: its
/// workload is labelled `security.istio.io/tlsMode: istio` and the PeerAuthentication in
/// force for it (in its service's namespace) does not `DISABLE` mTLS on that port.
#[derive(Clone, Copy)]
pub(super) struct Peers<'a> {
    pub(super) config: &'a TrafficConfig,
    pub(super) root_namespace: &'a str,
}

impl Peers<'_> {
    fn speaks_mtls(
        &self,
        svc: &MergedService,
        ep: &wayfinder_registry::Endpoint,
        port: u16,
    ) -> bool {
        if ep.labels.get(TLS_MODE_LABEL).map(|v| &**v) != Some(TLS_MODE_ISTIO) {
            return false;
        }
        if self.config.peer_authentications().next().is_none() {
            // No policy: PERMISSIVE everywhere.
            return true;
        }
        let mtls = self
            .config
            .mtls_for(self.root_namespace, &svc.service.namespace, &ep.labels);
        mtls.mode_for(port) != MtlsMode::Disable
    }
}

/// Istio's endpoint metadata for auto mTLS: `envoy.transport_socket_match: {tlsMode: istio}`.
pub(super) fn istio_tls_mode() -> Metadata {
    let fields = [(
        TLS_MODE_KEY.to_string(),
        Value {
            kind: Some(value::Kind::StringValue(TLS_MODE_ISTIO.into())),
        },
    )];
    Metadata {
        filter_metadata: [(
            SOCKET_MATCH.to_string(),
            Struct {
                fields: fields.into(),
            },
        )]
        .into(),
        ..Default::default()
    }
}

/// The endpoints of `svc` that serve `port` (and carry every label of `subset`), grouped by locality (in locality order, so equal
/// content encodes equally). A locality's weight is the sum of its endpoints' weights.
/// Endpoints without an address (known only by their network) are left out: nothing can
/// connect to them directly.
pub(super) fn load_assignment(
    name: &str,
    svc: &MergedService,
    port: u16,
    include: Include<'_>,
    subset: Option<&BTreeMap<String, String>>,
) -> ClusterLoadAssignment {
    grouped(name, svc, port, include, subset, false).0
}

/// [`load_assignment`], and the endpoints of each of its groups, in order (what locality load
/// balancing compares with the proxy: see `locality`). With `network_only`, the endpoints
/// known only by their network are in it too, marked for `network::View::apply`, which
/// replaces or removes every one of them: only an assignment made per proxy network may
/// carry them.
pub(super) fn grouped<'a>(
    name: &str,
    svc: &'a MergedService,
    port: u16,
    include: Include<'_>,
    subset: Option<&BTreeMap<String, String>>,
    network_only: bool,
) -> (
    ClusterLoadAssignment,
    Vec<Vec<&'a wayfinder_registry::Endpoint>>,
) {
    let mut by_locality: BTreeMap<&Locality, Vec<(LbEndpoint, &wayfinder_registry::Endpoint)>> =
        BTreeMap::new();
    for view in &svc.endpoints {
        let Some(&endpoint_port) = view.ports.get(&port) else {
            continue;
        };
        let ep = &view.endpoint;
        if matches!(include, Include::Healthy) && ep.health != Health::Healthy {
            continue;
        }
        if ep.network_only() && !network_only {
            continue;
        }
        let in_subset = |labels: &BTreeMap<String, String>| {
            labels
                .iter()
                .all(|(k, v)| ep.labels.get(k.as_str()).is_some_and(|have| **have == **v))
        };
        if subset.is_some_and(|labels| !in_subset(labels)) {
            continue;
        }
        let metadata = match include {
            Include::All(peers) if peers.speaks_mtls(svc, ep, endpoint_port) => {
                Some(istio_tls_mode())
            }
            _ => None,
        };
        let health = match ep.health {
            Health::Healthy => HealthStatus::Healthy,
            Health::Unhealthy => HealthStatus::Unhealthy,
            Health::Draining => HealthStatus::Draining,
        };
        let mut lb_endpoint = LbEndpoint {
            host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                address: socket_address(&ep.address, endpoint_port),
                ..Default::default()
            })),
            health_status: health as i32,
            load_balancing_weight: u32_value(ep.weight),
            metadata,
        };
        if ep.network_only() {
            network::mark(&mut lb_endpoint, &ep.network);
        }
        by_locality
            .entry(&ep.locality)
            .or_default()
            .push((lb_endpoint, ep));
    }
    let mut members = Vec::with_capacity(by_locality.len());
    let endpoints = by_locality
        .into_iter()
        .map(|(locality, group)| {
            let (lb_endpoints, of): (Vec<LbEndpoint>, Vec<_>) = group.into_iter().unzip();
            members.push(of);
            let weight = lb_endpoints
                .iter()
                .map(|e| e.load_balancing_weight.as_ref().map_or(1, |w| w.value))
                .fold(0u32, u32::saturating_add);
            LocalityLbEndpoints {
                locality: Some(core::Locality {
                    region: locality.region.to_string(),
                    zone: locality.zone.to_string(),
                    sub_zone: locality.subzone.to_string(),
                }),
                lb_endpoints,
                load_balancing_weight: u32_value(weight.max(1)),
                ..Default::default()
            }
        })
        .collect();
    let cla = ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints,
        ..Default::default()
    };
    (cla, members)
}

/// Reduces an assignment to its first endpoint (LOGICAL_DNS clusters take exactly one).
pub(super) fn keep_first(cla: &mut ClusterLoadAssignment) {
    cla.endpoints.truncate(1);
    if let Some(group) = cla.endpoints.first_mut() {
        group.lb_endpoints.truncate(1);
    }
}
