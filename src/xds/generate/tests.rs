//! What a new snapshot reuses from the previous one, and what its layers say changed.

mod authn;
mod authz;
mod invalidation;
mod mesh_tls;

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
            TypeUrl::Cluster => assert!(changed.is_empty(), "{changed:?}"),
            TypeUrl::Secret => assert!(after.layers().is_empty(), "a gRPC client's secrets"),
        }
    }
}
