//! Outbound route configurations for sidecars: one per HTTP port, named by the port.

use std::collections::{BTreeMap, HashSet};

use super::domains;
use super::proto::{any, seconds, u32_value};
use crate::snapshot::{MergedService, Visible};
use crate::xds::names;
use crate::xds::pb::previous_hosts::PreviousHostsPredicate;
use crate::xds::pb::route::{
    RetryPolicy, Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost, retry_policy,
    route, route_action, route_match,
};
use crate::xds::resource::{Resource, ResourceSet, insert};

/// Istio's default retry policy (`MeshConfig.defaultHttpRetryPolicy` unset).
const RETRY_ON: &str =
    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";

/// Route configuration `"<port>"` for every HTTP port of the visible services: a virtual host
/// `<host>:<port>` per service with Istio's domain expansion relative to `proxy_domain`, and
/// the catch-all `allow_any` host to `PassthroughCluster`. A domain two services would claim
/// goes to the first by hostname: Envoy rejects a configuration that repeats a domain.
pub(super) fn outbound(visible: &Visible<'_>, proxy_domain: &str) -> ResourceSet {
    let mut by_port: BTreeMap<u16, Vec<&MergedService>> = BTreeMap::new();
    for svc in visible {
        for port in svc.service.ports.iter().filter(|p| p.protocol.is_http()) {
            by_port.entry(port.number).or_default().push(svc);
        }
    }
    let mut set = ResourceSet::new();
    for (port, services) in by_port {
        let name = port.to_string();
        let mut taken = HashSet::new();
        let mut virtual_hosts: Vec<VirtualHost> = services
            .iter()
            .filter_map(|svc| {
                let host = &svc.service.hostname;
                let domains: Vec<String> =
                    domains::expand(host, port, proxy_domain, &svc.service.addresses)
                        .into_iter()
                        .filter(|d| taken.insert(d.clone()))
                        .collect();
                if domains.is_empty() {
                    return None;
                }
                let cluster = names::outbound_cluster(port, "", host);
                Some(VirtualHost {
                    name: format!("{host}:{port}"),
                    domains,
                    routes: vec![default_route(cluster)],
                    ..Default::default()
                })
            })
            .collect();
        virtual_hosts.push(VirtualHost {
            name: "allow_any".into(),
            domains: vec!["*".into()],
            routes: vec![default_route(names::PASSTHROUGH_CLUSTER.into())],
            ..Default::default()
        });
        let config = RouteConfiguration {
            name: name.clone(),
            virtual_hosts,
            validate_clusters: Some(crate::xds::pb::protobuf::BoolValue { value: false }),
            ..Default::default()
        };
        insert(&mut set, Resource::encode(name, &config));
    }
    set
}

/// A route for every path to `cluster`, with Istio's defaults: no timeout and its default retry
/// policy.
pub(super) fn default_route(cluster: String) -> Route {
    Route {
        name: "default".into(),
        r#match: Some(RouteMatch {
            path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
            ..Default::default()
        }),
        action: Some(route::Action::Route(RouteAction {
            cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster)),
            timeout: seconds(0),
            retry_policy: Some(RetryPolicy {
                retry_on: RETRY_ON.into(),
                num_retries: u32_value(2),
                retry_host_predicate: vec![retry_policy::RetryHostPredicate {
                    name: "envoy.retry_host_predicates.previous_hosts".into(),
                    config_type: Some(retry_policy::retry_host_predicate::ConfigType::TypedConfig(
                        any(&PreviousHostsPredicate {}),
                    )),
                }],
                host_selection_retry_max_attempts: 5,
                retriable_status_codes: vec![503],
                ..Default::default()
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// A route for proxyless gRPC: every path to `cluster`; gRPC applies its own timeouts.
pub(super) fn grpc_route(cluster: String) -> Route {
    Route {
        r#match: Some(RouteMatch {
            path_specifier: Some(route_match::PathSpecifier::Prefix(String::new())),
            ..Default::default()
        }),
        action: Some(route::Action::Route(RouteAction {
            cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster)),
            ..Default::default()
        })),
        ..Default::default()
    }
}
