//! Network-aware endpoints: a proxy reaches its own network's endpoints directly, and those
//! of a network with gateways through the gateways, with mesh mTLS.

use std::collections::BTreeSet;
use std::sync::Arc;

use prost::Message;
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec, mesh_networks};
use wayfinder_registry::{Endpoint, Health, Locality, Protocol, Registration, RegistryId, Service};

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

/// The assignment a proxy gets.
fn assignment(s: &XdsSnapshot, proxy: &Proxy) -> ClusterLoadAssignment {
    let resources = s.resources(proxy, TypeUrl::Endpoint, &BTreeSet::new());
    ClusterLoadAssignment::decode(resources.get(REVIEWS).unwrap().any().value.as_slice()).unwrap()
}

/// The assignment's endpoints as `address:port weight`, sorted; every one has an address
/// (Envoy refuses an endpoint without one).
fn endpoints(s: &XdsSnapshot, proxy: &Proxy) -> Vec<String> {
    let cla = assignment(s, proxy);
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

/// A meshed endpoint of `reviews` known only by `network` (Istio's WorkloadEntry with a
/// network and no address), of `weight`.
fn remote(network: &str, weight: u32) -> Endpoint {
    let mut e = Endpoint::new("")
        .with_label("app", "reviews")
        .with_label("security.istio.io/tlsMode", "istio");
    e.network = network.into();
    e.weight = weight;
    e
}

/// A meshed endpoint of `reviews` at `ip` on `network`.
fn local(ip: &str, network: &str) -> Endpoint {
    let mut e = Endpoint::new(ip)
        .with_label("app", "reviews")
        .with_label("security.istio.io/tlsMode", "istio");
    e.network = network.into();
    e
}

/// `reviews` with `endpoints` and `config` (DestinationRules), in a mesh where `net2` has one
/// gateway and `net1` and `net3` none.
fn mesh_of(endpoints: Vec<Endpoint>, config: Vec<ConfigObject>) -> XdsSnapshot {
    let mut reviews = Service::new("reviews.default.svc.cluster.local", "default").with_port(
        "http",
        9080,
        Protocol::Http,
    );
    reviews.addresses = vec![[10, 96, 0, 1].into()];
    let registrations = vec![Registration::new(reviews, endpoints)];
    let model =
        snapshot_with_config(vec![(RegistryId::new("Mock"), registrations)], config).unwrap();
    let networks = mesh_networks::parse(
        "networks:\n  net1: {}\n  net2:\n    gateways: [{address: 192.0.2.10, port: 15443}]\n  \
         net3: {}\n",
    )
    .unwrap();
    let mesh = MeshSettings {
        networks: Arc::new(networks),
        ..Default::default()
    };
    XdsSnapshot::new(Arc::new(model), DOMAIN).with_mesh(mesh)
}

#[test]
fn an_endpoint_known_only_by_its_network_is_reached_through_its_gateway_from_other_networks() {
    let mut plaintext = remote("net2", 5);
    plaintext.labels.remove("security.istio.io/tlsMode");
    let mut unhealthy = remote("net2", 7);
    unhealthy.health = Health::Unhealthy;
    let s = mesh_of(
        vec![
            local("10.0.0.1", "net1"),
            remote("net2", 3),
            // Neither counts: the gateway routes mTLS only, and traffic goes to healthy ones.
            plaintext,
            unhealthy,
            // Its network has no gateways: nothing reaches it.
            remote("net3", 11),
        ],
        Vec::new(),
    );
    // From net1 and net3 (and from no network): net2's gateway, with the weight of net2's
    // meshed, healthy endpoint, beside net1's own endpoint.
    for network in ["net1", "net3", ""] {
        assert_eq!(
            endpoints(&s, &on(network)),
            ["10.0.0.1:9080 1", "192.0.2.10:15443 3"],
            "{network:?}"
        );
    }
    // On net2, its own endpoints have no address to reach them by: left out.
    assert_eq!(endpoints(&s, &on("net2")), ["10.0.0.1:9080 1"]);
}

#[test]
fn an_endpoint_known_only_by_a_network_without_gateways_is_no_endpoint_anywhere() {
    // Without any gateway, one assignment for every proxy, without it.
    let endpoints_of = |s: &XdsSnapshot| {
        ["net1", "net2", "net3"]
            .map(|network| endpoints(s, &on(network)))
            .to_vec()
    };
    let none = mesh_of(
        vec![local("10.0.0.1", "net1"), remote("net2", 3)],
        Vec::new(),
    )
    .with_mesh(MeshSettings::default());
    assert_eq!(endpoints_of(&none), vec![vec!["10.0.0.1:9080 1"]; 3]);
    // With gateways for net2 only, an endpoint on net3 alone is the same.
    let s = mesh_of(
        vec![local("10.0.0.1", "net1"), remote("net3", 3)],
        Vec::new(),
    );
    assert_eq!(endpoints_of(&s), vec![vec!["10.0.0.1:9080 1"]; 3]);
    let a = s.resources(&on("net1"), TypeUrl::Endpoint, &BTreeSet::new());
    let b = s.resources(&on("net3"), TypeUrl::Endpoint, &BTreeSet::new());
    assert!(Arc::ptr_eq(
        a.get(REVIEWS).unwrap(),
        b.get(REVIEWS).unwrap()
    ));
    // A service whose only endpoint is such an entry has none.
    let s = mesh_of(vec![remote("net3", 3)], Vec::new());
    assert!(assignment(&s, &on("net1")).endpoints.is_empty());
}

#[test]
fn failover_priorities_have_no_gap_where_an_endpoint_known_only_by_its_network_was() {
    let mut near = remote("net2", 2);
    near.locality = Locality::parse("r/z1");
    // Not the proxy's own address (10.0.0.1), whose locality would be the proxy's.
    let mut far = local("10.0.0.2", "net1");
    far.locality = Locality::parse("r/z2");
    let rule = ConfigObject {
        meta: ConfigMeta {
            name: "reviews".into(),
            namespace: "default".into(),
            ..Default::default()
        },
        spec: ConfigSpec::DestinationRule(Box::new(
            serde_saphyr::from_str(
                "{host: reviews, trafficPolicy: {outlierDetection: {consecutive5xxErrors: 3}}}",
            )
            .unwrap(),
        )),
    };
    let s = mesh_of(vec![near, far], vec![rule]);
    let groups = |network: &str| -> Vec<(String, u32, usize)> {
        let mut proxy = on(network);
        proxy.locality = "r/z1".into();
        assignment(&s, &proxy)
            .endpoints
            .iter()
            .map(|g| {
                let zone = g.locality.clone().unwrap_or_default().zone;
                (zone, g.priority, g.lb_endpoints.len())
            })
            .collect()
    };
    // From net1: net2's gateway in the proxy's zone first, then net1's endpoint.
    assert_eq!(
        groups("net1"),
        [("z1".to_string(), 0, 1), ("z2".to_string(), 1, 1)]
    );
    // On net2, the proxy's zone had only its own network's entry: the next zone is first.
    assert_eq!(groups("net2"), [("z2".to_string(), 0, 1)]);
}
