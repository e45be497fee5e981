//! MeshConfig's `default*ExportTo`: objects without `exportTo` are exported where the mesh
//! says, and an object's own `exportTo` still wins.

use std::collections::BTreeSet;
use std::sync::Arc;

use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec};
use wayfinder_registry::{Endpoint, Protocol, Registration, RegistryId, Service};

use crate::aggregate::snapshot_with_config;
use crate::snapshot::rules::ExportDefaults;
use crate::xds::fixtures::DOMAIN;
use crate::xds::pb::core::Node;
use crate::xds::proxy::Proxy;
use crate::xds::{MeshSettings, TypeUrl, XdsSnapshot};

/// `reviews` of `shop` with a DestinationRule (subset `v1`, no `exportTo`), and `ratings` of
/// `shop` with `exportTo: ['*']` of its own.
fn snapshot(exports: ExportDefaults) -> XdsSnapshot {
    let service = |name: &str, export: &[&str]| {
        let mut s = Service::new(format!("{name}.shop.svc.cluster.local"), "shop").with_port(
            "http",
            9080,
            Protocol::Http,
        );
        s.export_to = wayfinder_registry::ExportTo(export.iter().map(|e| (*e).into()).collect());
        Registration::new(
            s,
            vec![Endpoint::new("10.0.0.7").with_label("version", "v1")],
        )
    };
    let rule = ConfigObject {
        meta: ConfigMeta {
            name: "reviews".into(),
            namespace: "shop".into(),
            ..Default::default()
        },
        spec: ConfigSpec::DestinationRule(Box::new(
            serde_saphyr::from_str("host: reviews\nsubsets: [{name: v1, labels: {version: v1}}]\n")
                .unwrap(),
        )),
    };
    let model = snapshot_with_config(
        vec![(
            RegistryId::new("Mock"),
            vec![service("reviews", &[]), service("ratings", &["*"])],
        )],
        vec![rule],
    )
    .unwrap();
    let mesh = MeshSettings {
        exports,
        ..Default::default()
    };
    XdsSnapshot::new(Arc::new(model), DOMAIN).with_mesh(mesh)
}

fn in_namespace(ns: &str) -> Proxy {
    let node = Node {
        id: format!("sidecar~10.0.0.1~app.{ns}~{ns}.svc.cluster.local"),
        ..Default::default()
    };
    Proxy::from_node(&node, DOMAIN).unwrap()
}

fn clusters(s: &XdsSnapshot, proxy: &Proxy) -> Vec<String> {
    let r = s.resources(proxy, TypeUrl::Cluster, &BTreeSet::new());
    let mut names: Vec<String> = r
        .iter()
        .map(|c| c.name.to_string())
        .filter(|n| n.starts_with("outbound|"))
        .collect();
    names.sort();
    names
}

#[test]
fn services_and_rules_without_export_to_follow_the_mesh_s_defaults() {
    let everywhere = snapshot(ExportDefaults::default());
    let other = in_namespace("other");
    assert_eq!(
        clusters(&everywhere, &other),
        [
            "outbound|9080|v1|reviews.shop.svc.cluster.local",
            "outbound|9080||ratings.shop.svc.cluster.local",
            "outbound|9080||reviews.shop.svc.cluster.local",
        ]
    );
    // Services stay in their namespace, but one that says otherwise.
    let services = snapshot(ExportDefaults {
        services: vec![".".into()],
        ..Default::default()
    });
    assert_eq!(
        clusters(&services, &other),
        ["outbound|9080||ratings.shop.svc.cluster.local"]
    );
    assert_eq!(clusters(&services, &in_namespace("shop")).len(), 3);
    // Rules stay in their namespace: another namespace sees reviews without its subset.
    let rules = snapshot(ExportDefaults {
        destination_rules: vec![".".into()],
        ..Default::default()
    });
    assert_eq!(
        clusters(&rules, &other),
        [
            "outbound|9080||ratings.shop.svc.cluster.local",
            "outbound|9080||reviews.shop.svc.cluster.local",
        ]
    );
}
