//! Small models for the xDS layer's unit tests: three HTTP services, and the same model after
//! one service's endpoints changed, built the way the aggregate builds it.

use wayfinder_registry::{Endpoint, Protocol, Registration, RegistryId, Service};

use crate::aggregate::snapshot_from;
use crate::snapshot::Snapshot;
use crate::xds::pb::core::Node;
use crate::xds::proxy::Proxy;

pub(crate) const DOMAIN: &str = "cluster.local";

pub(crate) fn registration(i: usize, endpoints: usize) -> Registration {
    let mut svc = Service::new(format!("svc-{i}.default.svc.cluster.local"), "default").with_port(
        "http",
        8080,
        Protocol::Http,
    );
    svc.addresses = vec![[10, 96, 0, i as u8].into()];
    let endpoints = (0..endpoints)
        .map(|j| Endpoint::new(format!("10.1.{i}.{}", j + 1)))
        .collect();
    Registration::new(svc, endpoints)
}

pub(crate) fn model(endpoints_of_svc_1: usize) -> Snapshot {
    let registrations = (0..3)
        .map(|i| registration(i, if i == 1 { endpoints_of_svc_1 } else { 2 }))
        .collect();
    snapshot_from(vec![(RegistryId::new("Mock"), registrations)]).expect("a valid model")
}

/// The model after `before` in which only service 1's endpoints changed, sharing every other
/// service and the configuration, as the aggregate builds it.
pub(crate) fn endpoints_changed(before: &Snapshot) -> Snapshot {
    let changed = model(3);
    let mut services = before.services.clone();
    let key = changed
        .services
        .keys()
        .find(|k| k.hostname.starts_with("svc-1."))
        .expect("svc-1")
        .clone();
    services.insert(key.clone(), changed.services[&key].clone());
    Snapshot::new(
        before.version + 1,
        services,
        Vec::new(),
        Vec::new(),
        before.config.clone(),
    )
}

pub(crate) fn sidecar() -> Proxy {
    let node = Node {
        id: "sidecar~10.0.0.1~app.default~default.svc.cluster.local".into(),
        ..Default::default()
    };
    Proxy::from_node(&node, DOMAIN).expect("a valid node")
}

/// A proxyless gRPC client in namespace `default`.
pub(crate) fn grpc_client() -> Proxy {
    let node = Node {
        id: "grpc-1".into(),
        user_agent_name: "gRPC test client".into(),
        ..Default::default()
    };
    Proxy::from_node(&node, DOMAIN).expect("a valid node")
}
