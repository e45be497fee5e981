//! What one Envoy proxy receives, checked for references to what it does not receive, as
//! go-control-plane's `Snapshot.Consistent()` does: every cluster a route or a TCP proxy
//! names is among the proxy's clusters, every endpoint name of an EDS cluster has its
//! assignment, and every route configuration a listener names through RDS exists. A proxy
//! whose configuration fails this gets 503s (a missing cluster) or warming clusters and
//! listeners that never finish (a missing assignment or route configuration).
//!
//! A route to a destination the mesh does not have (a host or port no visible service has, a
//! subset no DestinationRule defines) is the configuration's doing, not the generator's: Istio
//! serves it as written and Envoy answers 503 for it, so [`examine`] lists it apart, as an
//! unknown destination (`istioctl analyze`'s IST0101), and [`check`] does not count it.
//!
//! The special clusters (`BlackHoleCluster`, `PassthroughCluster`,
//! `InboundPassthroughCluster`) are generated as clusters too, so they need no exception.
//! Proxyless gRPC clients are checked the same way, from every listener they may ask for by a
//! service's full name (`host:port`): its API listener's route configuration, that
//! configuration's clusters, and their assignments.
//!
//! Debug builds run the check at generation time: each stream, before it sends listeners,
//! checks what its proxy receives ([`debug_assert_consistent`]). On an inconsistency the
//! stream's task panics with every problem in the server's log, and the proxy never gets the
//! listeners, so every test that runs a debug server against a real client checks the
//! configuration it serves. The golden tests run the check over every proxy of their meshes.

use std::collections::BTreeSet;
use std::sync::Arc;

use prost::Message;

use crate::xds::pb::cluster::Cluster;
use crate::xds::pb::cluster::cluster::{ClusterDiscoveryType, DiscoveryType};
use crate::xds::pb::endpoint::ClusterLoadAssignment;
use crate::xds::pb::hcm::HttpConnectionManager;
use crate::xds::pb::hcm::http_connection_manager::RouteSpecifier;
use crate::xds::pb::listener::filter::ConfigType;
use crate::xds::pb::listener::{Filter, Listener};
use crate::xds::pb::route::RouteConfiguration;
use crate::xds::pb::route::route::Action;
use crate::xds::pb::route::route_action::ClusterSpecifier;
use crate::xds::pb::tcp_proxy::TcpProxy;
use crate::xds::pb::tcp_proxy::tcp_proxy::ClusterSpecifier as TcpClusterSpecifier;
use crate::xds::{Proxy, Resource, TypeUrl, XdsSnapshot};

/// What [`examine`] found in what one proxy receives, one line each.
#[derive(Debug, Default)]
pub struct Findings {
    /// References to what the proxy does not receive, and resources that do not decode: the
    /// generator's mistakes. Envoy would warm such clusters and listeners forever, or answer
    /// 503 for routes to a cluster it was never sent.
    pub problems: Vec<String>,
    /// Routes to a destination the mesh does not have: a host and port no service visible to
    /// the proxy has, or a subset its DestinationRule does not define. They come from the
    /// configuration, not the generator, and are served as Istio serves them (the route names
    /// the cluster, and Envoy answers 503, "no cluster"); `istioctl analyze` reports them as
    /// IST0101.
    pub unknown_destinations: Vec<String>,
}

/// The generator's mistakes in what `proxy` receives from `snap` (empty: consistent); see
/// [`Findings::problems`].
pub fn check(snap: &XdsSnapshot, proxy: &Proxy) -> Vec<String> {
    examine(snap, proxy).problems
}

/// Every reference in what `proxy` receives from `snap` to something it does not receive,
/// sorted into the generator's mistakes and the configuration's unknown destinations.
pub fn examine(snap: &XdsSnapshot, proxy: &Proxy) -> Findings {
    let mut findings = Findings::default();
    let none = BTreeSet::new();

    let mut clusters = BTreeSet::new();
    let mut eds_names = BTreeSet::new();
    for r in snap.resources(proxy, TypeUrl::Cluster, &none).iter() {
        let Ok(c) = Cluster::decode(&*value(r)) else {
            findings
                .problems
                .push(format!("cluster {} does not decode", r.name));
            continue;
        };
        let eds = matches!(
            c.cluster_discovery_type,
            Some(ClusterDiscoveryType::Type(t)) if t == DiscoveryType::Eds as i32
        );
        if eds {
            let service = c
                .eds_cluster_config
                .map(|e| e.service_name)
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| c.name.clone());
            eds_names.insert(Arc::<str>::from(service));
        }
        clusters.insert(c.name);
    }

    let assignments = snap.resources(proxy, TypeUrl::Endpoint, &eds_names);
    for name in &eds_names {
        match assignments.get(name) {
            Some(r) if ClusterLoadAssignment::decode(&*value(r)).is_ok() => {}
            Some(_) => findings
                .problems
                .push(format!("endpoints {name} do not decode")),
            None => findings
                .problems
                .push(format!("EDS cluster {name} has no assignment")),
        }
    }

    let known = Known {
        clusters,
        defined: &|host, port, subset| defined(snap, proxy, host, port, subset),
    };
    let mut route_names = BTreeSet::new();
    for r in snap.resources(proxy, TypeUrl::Listener, &none).iter() {
        let Ok(l) = Listener::decode(&*value(r)) else {
            findings
                .problems
                .push(format!("listener {} does not decode", r.name));
            continue;
        };
        let chains = l.filter_chains.iter().chain(l.default_filter_chain.iter());
        for filter in chains.flat_map(|c| &c.filters) {
            let place = format!("listener {} filter {}", l.name, filter.name);
            references(filter, &place, &known, &mut route_names, &mut findings);
        }
        // A proxyless gRPC client's listener: its connection manager is the API listener.
        if let Some(any) = l.api_listener.and_then(|a| a.api_listener) {
            let filter = Filter {
                name: "api_listener".into(),
                config_type: Some(ConfigType::TypedConfig(any)),
            };
            let place = format!("listener {} api_listener", l.name);
            references(&filter, &place, &known, &mut route_names, &mut findings);
        }
    }

    let routes = snap.resources(proxy, TypeUrl::Route, &route_names);
    for name in &route_names {
        let Some(r) = routes.get(name) else {
            findings.problems.push(format!(
                "route configuration {name} named by a listener does not exist"
            ));
            continue;
        };
        match RouteConfiguration::decode(&*value(r)) {
            Ok(rc) => route_clusters(&rc, &known, &mut findings),
            Err(_) => findings
                .problems
                .push(format!("route configuration {name} does not decode")),
        }
    }
    findings
}

/// The clusters a proxy receives, and whether a destination exists in the mesh.
struct Known<'a> {
    clusters: BTreeSet<String>,
    /// Whether a service visible to the proxy has this host and port, and (for a subset) its
    /// DestinationRule defines it.
    defined: &'a dyn Fn(&str, u16, &str) -> bool,
}

impl Known<'_> {
    /// Files a reference at `place` to cluster `c`, unless the proxy receives it.
    fn reference(&self, place: &str, c: &str, findings: &mut Findings) {
        if self.clusters.contains(c) {
            return;
        }
        let line = format!("{place} names cluster {c}, which the proxy does not receive");
        match crate::xds::names::parse_outbound_cluster(c) {
            Some((port, subset, host)) if !(self.defined)(host, port, subset) => {
                findings.unknown_destinations.push(line);
            }
            _ => findings.problems.push(line),
        }
    }
}

/// Whether `host:port` is a service `proxy` sees in `snap`'s model and, for a `subset`, the
/// DestinationRule that applies defines it.
fn defined(snap: &XdsSnapshot, proxy: &Proxy, host: &str, port: u16, subset: &str) -> bool {
    let model = snap.model();
    let exports = &snap.inputs().mesh.exports;
    let visible = model.visible_with(&proxy.namespace, &exports.services);
    let Some(svc) = visible.iter().find(|s| &*s.service.hostname == host) else {
        return false;
    };
    if !svc.service.ports.iter().any(|p| p.number == port) {
        return false;
    }
    subset.is_empty()
        || model
            .config
            .destination_rule(
                host,
                &svc.service.namespace,
                &proxy.namespace,
                snap.domain(),
                exports,
            )
            .is_some_and(|(_, dr)| dr.subsets.iter().any(|s| s.name == subset))
}

/// In debug builds, checks what `proxy` receives from `snap` and panics, naming the proxy and
/// every problem, if it is inconsistent. The ADS server calls it before a stream sends
/// listeners. Release builds skip it: it decodes everything a proxy receives.
pub fn debug_assert_consistent(snap: &XdsSnapshot, proxy: &Proxy) {
    if cfg!(debug_assertions) {
        let problems = check(snap, proxy);
        assert!(
            problems.is_empty(),
            "inconsistent xDS configuration for {proxy} at model version {}:\n{}",
            snap.model().version,
            problems.join("\n")
        );
    }
}

/// The message inside a resource's `Any`.
fn value(r: &Resource) -> Vec<u8> {
    r.any().value
}

/// The clusters and route configurations one network filter names.
fn references(
    filter: &Filter,
    place: &str,
    known: &Known<'_>,
    route_names: &mut BTreeSet<Arc<str>>,
    findings: &mut Findings,
) {
    let Some(ConfigType::TypedConfig(any)) = &filter.config_type else {
        return;
    };
    if any.type_url.ends_with(".HttpConnectionManager") {
        match HttpConnectionManager::decode(&*any.value) {
            Ok(hcm) => match hcm.route_specifier {
                Some(RouteSpecifier::Rds(rds)) => {
                    route_names.insert(rds.route_config_name.into());
                }
                Some(RouteSpecifier::RouteConfig(rc)) => route_clusters(&rc, known, findings),
                _ => {}
            },
            Err(_) => findings.problems.push(format!("{place} does not decode")),
        }
    } else if any.type_url.ends_with(".TcpProxy") {
        let Ok(tcp) = TcpProxy::decode(&*any.value) else {
            findings.problems.push(format!("{place} does not decode"));
            return;
        };
        let named: Vec<String> = match tcp.cluster_specifier {
            Some(TcpClusterSpecifier::Cluster(c)) => vec![c],
            Some(TcpClusterSpecifier::WeightedClusters(w)) => {
                w.clusters.into_iter().map(|c| c.name).collect()
            }
            None => Vec::new(),
        };
        for c in &named {
            known.reference(place, c, findings);
        }
    }
}

/// The clusters a route configuration's routes name, checked against `clusters`.
fn route_clusters(rc: &RouteConfiguration, known: &Known<'_>, findings: &mut Findings) {
    for vh in &rc.virtual_hosts {
        for route in &vh.routes {
            let Some(Action::Route(action)) = &route.action else {
                continue;
            };
            let named: Vec<&str> = match &action.cluster_specifier {
                Some(ClusterSpecifier::Cluster(c)) => vec![c.as_str()],
                Some(ClusterSpecifier::WeightedClusters(w)) => {
                    w.clusters.iter().map(|c| c.name.as_str()).collect()
                }
                _ => Vec::new(),
            };
            let place = format!("route configuration {} virtual host {}", rc.name, vh.name);
            for c in named {
                known.reference(&place, c, findings);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::fixtures::{DOMAIN, grpc_client, model, sidecar};
    use crate::xds::pb::hcm::Rds;
    use crate::xds::pb::protobuf::Any;
    use crate::xds::pb::route::route_action::ClusterSpecifier;
    use crate::xds::pb::route::{
        Route, RouteAction, VirtualHost, WeightedCluster, weighted_cluster,
    };

    /// The proxy receives `names`, and every destination exists in the mesh but `unknown`'s
    /// host.
    fn known(names: &[&str], unknown: &'static str) -> Known<'static> {
        Known {
            clusters: names.iter().map(|n| n.to_string()).collect(),
            defined: Box::leak(Box::new(move |host: &str, _: u16, _: &str| host != unknown)),
        }
    }

    fn routing(specifier: ClusterSpecifier) -> RouteConfiguration {
        RouteConfiguration {
            name: "80".into(),
            virtual_hosts: vec![VirtualHost {
                name: "svc:80".into(),
                routes: vec![Route {
                    action: Some(Action::Route(RouteAction {
                        cluster_specifier: Some(specifier),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_fixture_mesh_is_consistent_for_a_sidecar() {
        let snap = XdsSnapshot::new(Arc::new(model(3)), DOMAIN);
        assert_eq!(check(&snap, &sidecar()), Vec::<String>::new());
    }

    #[test]
    fn the_fixture_mesh_is_consistent_for_a_proxyless_grpc_client() {
        let snap = XdsSnapshot::new(Arc::new(model(3)), DOMAIN);
        let client = grpc_client();
        let listeners = snap.resources(&client, TypeUrl::Listener, &BTreeSet::new());
        assert_eq!(listeners.len(), 3, "one API listener per service");
        assert_eq!(check(&snap, &client), Vec::<String>::new());
    }

    #[test]
    fn an_api_listeners_route_configuration_is_followed() {
        let snap = XdsSnapshot::new(Arc::new(model(3)), DOMAIN);
        let client = grpc_client();
        // A gRPC client's listener carries its connection manager as the API listener; the
        // check follows it to its RDS name as it follows a filter chain's.
        let listener = snap
            .resources(&client, TypeUrl::Listener, &BTreeSet::new())
            .iter()
            .next()
            .map(|r| Listener::decode(&*value(r)).expect("a listener"))
            .expect("a listener");
        let api = listener
            .api_listener
            .and_then(|a| a.api_listener)
            .expect("an API listener");
        let filter = Filter {
            name: "api_listener".into(),
            config_type: Some(ConfigType::TypedConfig(api)),
        };
        let (mut routes, mut findings) = (BTreeSet::new(), Findings::default());
        references(&filter, "l", &known(&[], ""), &mut routes, &mut findings);
        assert_eq!(routes.len(), 1, "{routes:?}");
        assert!(findings.problems.is_empty(), "{findings:?}");
    }

    #[test]
    fn a_route_to_a_cluster_the_proxy_lacks_is_reported() {
        let mut findings = Findings::default();
        let known = known(&["a", "b"], "");
        route_clusters(
            &routing(ClusterSpecifier::Cluster("a".into())),
            &known,
            &mut findings,
        );
        assert!(findings.problems.is_empty());
        let weighted = WeightedCluster {
            clusters: ["a", "missing"]
                .into_iter()
                .map(|n| weighted_cluster::ClusterWeight {
                    name: n.into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        route_clusters(
            &routing(ClusterSpecifier::WeightedClusters(weighted)),
            &known,
            &mut findings,
        );
        assert_eq!(findings.problems.len(), 1, "{findings:?}");
        assert!(
            findings.problems[0].contains("names cluster missing"),
            "{findings:?}"
        );
    }

    #[test]
    fn a_route_to_a_host_the_mesh_lacks_is_the_configurations_not_the_generators() {
        let mut findings = Findings::default();
        // The proxy receives reviews' clusters; a route names a host no service has.
        let gone = "outbound|8089||gone.example.com";
        let known = known(&["outbound|9080||reviews"], "gone.example.com");
        route_clusters(
            &routing(ClusterSpecifier::Cluster(gone.into())),
            &known,
            &mut findings,
        );
        // A cluster of a host the mesh has, missing: the generator's mistake.
        route_clusters(
            &routing(ClusterSpecifier::Cluster("outbound|9080|v1|reviews".into())),
            &known,
            &mut findings,
        );
        assert_eq!(findings.unknown_destinations.len(), 1, "{findings:?}");
        assert!(findings.unknown_destinations[0].contains(gone));
        assert_eq!(findings.problems.len(), 1, "{findings:?}");
        assert!(findings.problems[0].contains("outbound|9080|v1|reviews"));
    }

    #[test]
    fn a_destination_exists_when_a_visible_service_has_its_port_and_its_rule_the_subset() {
        let snap = XdsSnapshot::new(Arc::new(model(3)), DOMAIN);
        let proxy = sidecar();
        let host = "svc-1.default.svc.cluster.local";
        assert!(defined(&snap, &proxy, host, 8080, ""));
        assert!(!defined(&snap, &proxy, host, 9999, ""), "no such port");
        assert!(!defined(&snap, &proxy, "nowhere.example.com", 8080, ""));
        assert!(
            !defined(&snap, &proxy, host, 8080, "v1"),
            "no DestinationRule defines v1"
        );
    }

    #[test]
    fn a_listeners_rds_name_and_tcp_cluster_are_followed() {
        let filter = |type_url: &str, value: Vec<u8>| Filter {
            name: "f".into(),
            config_type: Some(ConfigType::TypedConfig(Any {
                type_url: type_url.into(),
                value,
            })),
        };
        let hcm = HttpConnectionManager {
            route_specifier: Some(RouteSpecifier::Rds(Rds {
                route_config_name: "8080".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let tcp = TcpProxy {
            cluster_specifier: Some(TcpClusterSpecifier::Cluster("gone".into())),
            ..Default::default()
        };
        let (mut routes, mut findings) = (BTreeSet::new(), Findings::default());
        let known = known(&["a"], "");
        let hcm_url = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
        references(
            &filter(hcm_url, hcm.encode_to_vec()),
            "l",
            &known,
            &mut routes,
            &mut findings,
        );
        let tcp_url = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";
        references(
            &filter(tcp_url, tcp.encode_to_vec()),
            "l",
            &known,
            &mut routes,
            &mut findings,
        );
        assert_eq!(
            routes.into_iter().collect::<Vec<_>>(),
            [Arc::<str>::from("8080")]
        );
        assert_eq!(findings.problems.len(), 1, "{findings:?}");
        assert!(
            findings.problems[0].contains("names cluster gone"),
            "{findings:?}"
        );
    }
}
