//! Cluster load assignments: a service port's endpoints grouped by locality.

use std::collections::BTreeMap;

use wayfinder_registry::{Health, Locality};

use super::proto::{socket_address, u32_value};
use crate::snapshot::MergedService;
use crate::xds::pb::core::{self, HealthStatus};
use crate::xds::pb::endpoint::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};

/// Which endpoints a load assignment carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Include {
    /// Every endpoint with its health status: Envoy sends no traffic to unhealthy or draining
    /// ones but keeps them known.
    All,
    /// Only healthy endpoints, for gRPC clients (which ignore the others anyway).
    Healthy,
}

/// The endpoints of `svc` that serve `port` (and carry every label of `subset`), grouped by locality (in locality order, so equal
/// content encodes equally). A locality's weight is the sum of its endpoints' weights.
pub(super) fn load_assignment(
    name: &str,
    svc: &MergedService,
    port: u16,
    include: Include,
    subset: Option<&BTreeMap<String, String>>,
) -> ClusterLoadAssignment {
    let mut by_locality: BTreeMap<&Locality, Vec<LbEndpoint>> = BTreeMap::new();
    for view in &svc.endpoints {
        let Some(&endpoint_port) = view.ports.get(&port) else {
            continue;
        };
        let ep = &view.endpoint;
        if include == Include::Healthy && ep.health != Health::Healthy {
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
        let health = match ep.health {
            Health::Healthy => HealthStatus::Healthy,
            Health::Unhealthy => HealthStatus::Unhealthy,
            Health::Draining => HealthStatus::Draining,
        };
        by_locality
            .entry(&ep.locality)
            .or_default()
            .push(LbEndpoint {
                host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                    address: socket_address(&ep.address, endpoint_port),
                    ..Default::default()
                })),
                health_status: health as i32,
                load_balancing_weight: u32_value(ep.weight),
                ..Default::default()
            });
    }
    let endpoints = by_locality
        .into_iter()
        .map(|(locality, lb_endpoints)| {
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
    ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints,
        ..Default::default()
    }
}

/// Reduces an assignment to its first endpoint (LOGICAL_DNS clusters take exactly one).
pub(super) fn keep_first(cla: &mut ClusterLoadAssignment) {
    cla.endpoints.truncate(1);
    if let Some(group) = cla.endpoints.first_mut() {
        group.lb_endpoints.truncate(1);
    }
}
