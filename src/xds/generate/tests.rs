//! What a new snapshot reuses from the previous one, and what its layers say changed.

mod authn;
mod authz;
mod egress;
mod exports;
mod invalidation;
mod mesh_tls;
mod network;
mod proxy_settings;

use std::collections::BTreeSet;
use std::sync::Arc;

use wayfinder_registry::RegistryId;

use super::XdsSnapshot;
use crate::aggregate::snapshot_from;
use crate::xds::TypeUrl;
use crate::xds::fixtures::{DOMAIN, endpoints_changed, grpc_client, model, registration, sidecar};

#[test]
fn an_endpoint_change_keeps_every_layer_but_the_endpoints_and_names_the_one_assignment() {
    let first = XdsSnapshot::new(Arc::new(model(2)), DOMAIN);
    let proxy = sidecar();
    let none = BTreeSet::new();
    let before: Vec<_> = TypeUrl::PUSH_ORDER
        .iter()
        .map(|t| first.resources(&proxy, *t, &none))
        .collect();
    let second = XdsSnapshot::next(Arc::new(endpoints_changed(first.model())), DOMAIN, &first);
    for (t, before) in TypeUrl::PUSH_ORDER.iter().zip(&before) {
        let after = second.resources(&proxy, *t, &none);
        let changed = after
            .changed_since(before.layers())
            .unwrap_or_else(|| panic!("{t}: the new layers replaced the old ones"));
        if *t == TypeUrl::Endpoint {
            assert!(!after.same_as(before.layers()));
            let names: Vec<&str> = changed.iter().map(|n| &**n).collect();
            assert_eq!(names, ["outbound|8080||svc-1.default.svc.cluster.local"]);
            let cla = after.get(names[0]).expect("the assignment");
            assert_ne!(Some(cla.version), before.get(names[0]).map(|r| r.version));
        } else {
            assert!(after.same_as(before.layers()), "{t} did not change");
            assert!(changed.is_empty(), "{t}: {changed:?}");
        }
    }
    // Services that did not change are not generated again: their resources are the same
    // allocations.
    let svc0 = "outbound|8080||svc-0.default.svc.cluster.local";
    let clusters = |s: &XdsSnapshot| {
        s.resources(&proxy, TypeUrl::Cluster, &none)
            .get(svc0)
            .cloned()
            .expect("svc-0's cluster")
    };
    assert!(Arc::ptr_eq(&clusters(&first), &clusters(&second)));
}

#[test]
fn a_layer_from_an_unrelated_snapshot_asks_for_a_full_comparison() {
    let first = XdsSnapshot::new(Arc::new(model(2)), DOMAIN);
    let unrelated = XdsSnapshot::new(Arc::new(model(3)), DOMAIN);
    let proxy = sidecar();
    let none = BTreeSet::new();
    let before = first.resources(&proxy, TypeUrl::Endpoint, &none);
    let after = unrelated.resources(&proxy, TypeUrl::Endpoint, &none);
    assert_eq!(after.changed_since(before.layers()), None);
    assert!(!after.same_as(before.layers()));
}

#[test]
fn a_service_change_regenerates_listeners_and_routes_and_names_what_changed() {
    let first = XdsSnapshot::new(Arc::new(model(2)), DOMAIN);
    let proxy = sidecar();
    let none = BTreeSet::new();
    let routes = first.resources(&proxy, TypeUrl::Route, &none);
    let clusters = first.resources(&proxy, TypeUrl::Cluster, &none);
    // A fourth service: new cluster, and the route configuration of port 8080 gains a host.
    let registrations = (0..4).map(|i| registration(i, 2)).collect();
    let grown =
        snapshot_from(vec![(RegistryId::new("Mock"), registrations)]).expect("a valid model");
    let second = XdsSnapshot::next(Arc::new(grown), DOMAIN, &first);
    let names = |after: &super::Resources, before: &super::Resources| -> Vec<String> {
        let changed = after.changed_since(before.layers()).expect("replaced");
        changed.iter().map(|n| n.to_string()).collect()
    };
    assert_eq!(
        names(&second.resources(&proxy, TypeUrl::Route, &none), &routes),
        ["8080"]
    );
    let cluster_changes = names(
        &second.resources(&proxy, TypeUrl::Cluster, &none),
        &clusters,
    );
    assert!(
        cluster_changes.contains(&"outbound|8080||svc-3.default.svc.cluster.local".to_string()),
        "{cluster_changes:?}"
    );
}

#[test]
fn a_grpc_client_after_an_endpoint_change_keeps_its_listeners_and_routes() {
    let first = XdsSnapshot::new(Arc::new(model(2)), DOMAIN);
    let proxy = grpc_client();
    let requested: BTreeSet<Arc<str>> = ["svc-1.default.svc.cluster.local:8080".into()].into();
    let before: Vec<_> = TypeUrl::PUSH_ORDER
        .iter()
        .map(|t| first.resources(&proxy, *t, &requested))
        .collect();
    assert!(
        before[2]
            .get("svc-1.default.svc.cluster.local:8080")
            .is_some()
    );
    let second = XdsSnapshot::next(Arc::new(endpoints_changed(first.model())), DOMAIN, &first);
    for (t, before) in TypeUrl::PUSH_ORDER.iter().zip(&before) {
        let after = second.resources(&proxy, *t, &requested);
        let changed = after.changed_since(before.layers()).expect("replaced");
        match t {
            TypeUrl::Endpoint => assert_eq!(changed.len(), 1, "{changed:?}"),
            TypeUrl::Listener | TypeUrl::Route => {
                assert!(
                    Arc::ptr_eq(&after.layers()[0], &before.layers()[0]),
                    "{t}: carried as is"
                );
            }
            TypeUrl::Cluster | TypeUrl::ProxyConfig => {
                assert!(changed.is_empty(), "{t}: {changed:?}");
            }
            TypeUrl::Secret => assert!(after.layers().is_empty(), "a gRPC client's secrets"),
        }
    }
}

/// The listeners services could not have are counted once each, as Istio's
/// `pilot_conflict_*` gauges count them, and only once a sidecar's listeners were generated.
#[test]
fn listener_conflicts_count_each_listener_a_service_could_not_have() {
    use wayfinder_registry::{Endpoint, Protocol, Registration, Service};
    let service = |name: &str, port: u16, protocol: Protocol, endpoint: &str| {
        let svc = Service::new(format!("{name}.default.svc.cluster.local"), "default")
            .with_port("p", port, protocol);
        Registration::new(svc, vec![Endpoint::new(endpoint)])
    };
    let registrations = vec![
        // Two TCP services without a VIP on 9000: the second cannot have `0.0.0.0_9000`.
        service("db-a", 9000, Protocol::Tcp, "10.1.0.1"),
        service("db-b", 9000, Protocol::Tcp, "10.1.0.2"),
        // A TCP service without a VIP on a port HTTP services hold.
        service("web", 8080, Protocol::Http, "10.1.0.3"),
        service("raw", 8080, Protocol::Tcp, "10.1.0.4"),
        // One workload whose port two services claim with different protocols.
        service("api-http", 7000, Protocol::Http, "10.1.0.5"),
        service("api-tcp", 7000, Protocol::Tcp, "10.1.0.5"),
    ];
    let model =
        snapshot_from(vec![(RegistryId::new("Mock"), registrations)]).expect("a valid model");
    let snapshot = XdsSnapshot::new(Arc::new(model), DOMAIN);
    let before = snapshot.listener_conflicts();
    assert_eq!((before.tcp_over_tcp, before.tcp_over_http), (0, 0));
    let listeners = snapshot.resources(&sidecar(), TypeUrl::Listener, &BTreeSet::new());
    let names: BTreeSet<&str> = listeners.iter().map(|r| &*r.name).collect();
    assert!(names.contains("0.0.0.0_9000") && names.contains("0.0.0.0_8080"));
    let found = snapshot.listener_conflicts();
    // 0.0.0.0_9000, which db-a holds.
    assert_eq!(found.tcp_over_tcp, 1, "{found:?}");
    assert_eq!(
        found.tcp_over_http, 2,
        "0.0.0.0_8080 and 0.0.0.0_7000: {found:?}"
    );
    assert_eq!(found.inbound, 1, "10.1.0.5: {found:?}");
    assert_eq!(found.http_over_tcp, 0);
    // A second sidecar of the same scope finds the same listeners: still counted once.
    let other = crate::xds::proxy::Proxy::from_node(
        &crate::xds::pb::core::Node {
            id: "sidecar~10.0.0.2~other.default~default.svc.cluster.local".into(),
            ..Default::default()
        },
        DOMAIN,
    )
    .unwrap();
    snapshot.resources(&other, TypeUrl::Listener, &BTreeSet::new());
    assert_eq!(snapshot.listener_conflicts(), found);
}
