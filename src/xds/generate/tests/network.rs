//! Network-aware endpoints: a proxy reaches its own network's endpoints directly, and those
//! of a network with gateways through the gateways, with mesh mTLS.

use std::collections::BTreeSet;
use std::sync::Arc;

use prost::Message;
use wayfinder_config::mesh_networks;
use wayfinder_registry::{Endpoint, Protocol, Registration, RegistryId, Service};

use crate::aggregate::snapshot_with_config;
use crate::xds::fixtures::{DOMAIN, sidecar};
use crate::xds::pb::core::{address, socket_address};
use crate::xds::pb::endpoint::{ClusterLoadAssignment, lb_endpoint};
use crate::xds::proxy::Proxy;
use crate::xds::{MeshSettings, TypeUrl, XdsSnapshot};

const REVIEWS: &str = "outbound|9080||reviews.default.svc.cluster.local";

/// `reviews` with an endpoint on `net1` (10.0.0.1), two on `net2` (10.0.0.2 and 10.0.0.3,
/// the latter without a sidecar), and one with no network (10.0.0.4); `net2` has two
/// gateways.
fn snapshot() -> XdsSnapshot {
    let mut reviews = Service::new("reviews.default.svc.cluster.local", "default").with_port(
        "http",
        9080,
        Protocol::Http,
    );
    reviews.addresses = vec![[10, 96, 0, 1].into()];
    let endpoint = |ip: &str, network: &str, meshed: bool| {
        let mut e = Endpoint::new(ip).with_label("app", "reviews");
        if meshed {
            e = e.with_label("security.istio.io/tlsMode", "istio");
        }
        e.network = network.into();
        e
    };
    let registrations = vec![Registration::new(
        reviews,
        vec![
            endpoint("10.0.0.1", "net1", true),
            endpoint("10.0.0.2", "net2", true),
            endpoint("10.0.0.3", "net2", false),
            endpoint("10.0.0.4", "", true),
        ],
    )];
    let model =
        snapshot_with_config(vec![(RegistryId::new("Mock"), registrations)], Vec::new()).unwrap();
    let networks = mesh_networks::parse(
        "networks:\n  net2:\n    gateways: [{address: 192.0.2.10, port: 15443}, \
         {address: 192.0.2.11, port: 15443}]\n  net1: {}\n",
    )
    .unwrap();
    let mesh = MeshSettings {
        networks: Arc::new(networks),
        ..Default::default()
    };
    XdsSnapshot::new(Arc::new(model), DOMAIN).with_mesh(mesh)
}

fn on(network: &str) -> Proxy {
    let mut proxy = sidecar();
    proxy.network = network.into();
    proxy
}

/// The assignment's endpoints as `address:port weight`, sorted.
fn endpoints(s: &XdsSnapshot, proxy: &Proxy) -> Vec<String> {
    let resources = s.resources(proxy, TypeUrl::Endpoint, &BTreeSet::new());
    let cla = ClusterLoadAssignment::decode(resources.get(REVIEWS).unwrap().any().value.as_slice())
        .unwrap();
    let mut out: Vec<String> = cla
        .endpoints
        .iter()
        .flat_map(|g| &g.lb_endpoints)
        .map(|lb| {
            let Some(lb_endpoint::HostIdentifier::Endpoint(e)) = &lb.host_identifier else {
                panic!("an endpoint")
            };
            let Some(address::Address::SocketAddress(a)) =
                e.address.as_ref().and_then(|a| a.address.as_ref())
            else {
                panic!("a socket address")
            };
            let Some(socket_address::PortSpecifier::PortValue(port)) = a.port_specifier else {
                panic!("a port")
            };
            let weight = lb.load_balancing_weight.as_ref().map_or(1, |w| w.value);
            format!("{}:{port} {weight}", a.address)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_proxy_reaches_another_network_s_endpoints_through_its_gateways() {
    let s = snapshot();
    // On net1: its own endpoint and the one without a network directly; net2's meshed one
    // through each of net2's gateways; net2's plaintext one not at all.
    assert_eq!(
        endpoints(&s, &on("net1")),
        [
            "10.0.0.1:9080 1",
            "10.0.0.4:9080 1",
            "192.0.2.10:15443 1",
            "192.0.2.11:15443 1"
        ]
    );
    // On net2: its own endpoints directly; net1 has no gateways, so its endpoint too.
    assert_eq!(
        endpoints(&s, &on("net2")),
        [
            "10.0.0.1:9080 1",
            "10.0.0.2:9080 1",
            "10.0.0.3:9080 1",
            "10.0.0.4:9080 1"
        ]
    );
    // Without a network: every network with gateways is another one.
    assert!(endpoints(&s, &on("")).contains(&"192.0.2.10:15443 1".to_string()));
}

#[test]
fn without_gateways_every_endpoint_is_reached_directly_and_shared() {
    let s = snapshot().with_mesh(MeshSettings::default());
    assert_eq!(endpoints(&s, &on("net1")).len(), 4);
    let a = s.resources(&on("net1"), TypeUrl::Endpoint, &BTreeSet::new());
    let b = s.resources(&on("net2"), TypeUrl::Endpoint, &BTreeSet::new());
    assert!(Arc::ptr_eq(
        a.get(REVIEWS).unwrap(),
        b.get(REVIEWS).unwrap()
    ));
}
