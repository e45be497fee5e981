use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;
use wayfinder_registry::{Health, Locality, Protocol, Resolution};

use super::*;
use crate::objects::{Name, NamespaceObj, NodeObj, PodObj, SliceObj, SvcObj};

#[derive(Default)]
struct Objects {
    pods: HashMap<Name, PodObj>,
    nodes: HashMap<Arc<str>, NodeObj>,
    namespaces: HashMap<Arc<str>, NamespaceObj>,
}

impl Lookup for Objects {
    fn pod(&self, namespace: &str, name: &str) -> Option<&PodObj> {
        self.pods.get(&(namespace.into(), name.into()))
    }
    fn node(&self, name: &str) -> Option<&NodeObj> {
        self.nodes.get(name)
    }
    fn namespace(&self, name: &str) -> Option<&NamespaceObj> {
        self.namespaces.get(name)
    }
}

fn scope() -> Scope {
    Scope {
        domain: "cluster.local".into(),
        cluster_id: "east".into(),
    }
}

fn svc(spec: serde_json::Value) -> SvcObj {
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                     "annotations": {"networking.istio.io/exportTo": "., istio-system",
                                     "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": spec,
    }))
    .unwrap();
    svc.into()
}

fn slice(
    name: &str,
    family: &str,
    ports: serde_json::Value,
    endpoints: serde_json::Value,
) -> SliceObj {
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": family, "ports": ports, "endpoints": endpoints,
    }))
    .unwrap();
    slice.into()
}

fn port(name: &str, app: Option<&str>, proto: &str) -> Protocol {
    protocol(&SvcPort {
        name: name.into(),
        port: 80,
        protocol: proto.into(),
        app_protocol: app.map(Into::into),
        target_port: None,
    })
}

#[test]
fn protocol_follows_istio_convert_protocol() {
    assert_eq!(port("http-web", None, "TCP"), Protocol::Http);
    assert_eq!(port("HTTP2", None, "TCP"), Protocol::Http2);
    assert_eq!(port("grpc-web-ui", None, "TCP"), Protocol::GrpcWeb);
    assert_eq!(port("grpc", None, "TCP"), Protocol::Grpc);
    assert_eq!(port("web", None, "TCP"), Protocol::Unsupported);
    assert_eq!(port("http", None, "UDP"), Protocol::Udp);
    assert_eq!(port("web", Some("grpc"), "TCP"), Protocol::Grpc);
    assert_eq!(
        port("http", Some("kubernetes.io/h2c"), "TCP"),
        Protocol::Http2
    );
    assert_eq!(port("x", Some("kubernetes.io/wss"), "TCP"), Protocol::Https);
    assert_eq!(port("mongo-main", None, "TCP"), Protocol::Mongo);
}

#[test]
fn endpoints_take_pod_labels_node_locality_and_slice_ports() {
    let svc = svc(json!({
        "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
        "ports": [{"name": "http", "port": 80, "targetPort": "web"},
                  {"port": 9090, "targetPort": 9091, "name": "metrics"}],
    }));
    let slices = [slice(
        "web-abc",
        "IPv4",
        json!([{"name": "http", "port": 8080}, {"name": "metrics", "port": 9091}]),
        json!([
            {"addresses": ["10.0.0.1"], "conditions": {"ready": true}, "nodeName": "n1",
             "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "shop"}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "terminating": true},
             "zone": "z2", "targetRef": {"kind": "Pod", "name": "web-2"}},
            {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
        ]),
    )];
    let mut objects = Objects::default();
    objects.pods.insert(
        ("shop".into(), "web-1".into()),
        PodObj {
            labels: [("version".to_owned(), "v1".to_owned())].into(),
            service_account: Some("web-sa".into()),
            node: Some("n1".into()),
        },
    );
    objects.nodes.insert(
        "n1".into(),
        NodeObj {
            region: Some("us-east1".into()),
            zone: Some("us-east1-b".into()),
            subzone: None,
        },
    );
    let reg = registration(&svc, &slices, &objects, &scope());
    let s = &reg.service;
    assert_eq!(&*s.hostname, "web.shop.svc.cluster.local");
    assert_eq!(
        s.addresses,
        ["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(
        s.export_to.0,
        [Arc::<str>::from("."), "istio-system".into()]
    );
    assert_eq!(s.ports[0].target_port, None);
    assert_eq!(s.ports[1].target_port, Some(9091));
    assert_eq!(
        s.service_accounts,
        [Arc::<str>::from("spiffe://cluster.local/ns/shop/sa/web-sa")]
    );
    let [a, b, c] = &reg.endpoints[..] else {
        panic!("{:?}", reg.endpoints)
    };
    assert_eq!(
        (a.port_for(&s.ports[0]), a.port_for(&s.ports[1])),
        (8080, 9091)
    );
    assert_eq!(a.labels.get("version").map(|v| &**v), Some("v1"));
    assert_eq!(a.labels.get(CLUSTER_LABEL).map(|v| &**v), Some("east"));
    assert_eq!(a.locality, Locality::parse("us-east1/us-east1-b"));
    assert_eq!(a.service_account.as_deref(), Some("web-sa"));
    assert_eq!(&*a.cluster_id, "east");
    assert_eq!(a.health, Health::Healthy);
    assert_eq!(b.health, Health::Draining);
    assert_eq!(
        b.locality,
        Locality::parse("/z2"),
        "zone from the slice, pod unknown"
    );
    assert_eq!(c.health, Health::Unhealthy);
}

#[test]
fn dual_stack_gives_one_endpoint_per_pod_on_the_first_family() {
    let svc = svc(json!({
        "clusterIPs": ["fd00::10", "10.96.0.10"], "ipFamilies": ["IPv6", "IPv4"],
        "ports": [{"name": "http", "port": 80}],
    }));
    let ep = |ip: &str| json!([{"addresses": [ip], "targetRef": {"kind": "Pod", "name": "web-1"}}]);
    let slices = [
        slice(
            "web-v4",
            "IPv4",
            json!([{"name": "http", "port": 80}]),
            ep("10.0.0.1"),
        ),
        slice(
            "web-v6",
            "IPv6",
            json!([{"name": "http", "port": 80}]),
            ep("fd00::1"),
        ),
    ];
    let reg = registration(&svc, &slices, &Objects::default(), &scope());
    assert_eq!(reg.service.addresses.len(), 2);
    let addresses: Vec<&str> = reg.endpoints.iter().map(|e| &*e.address).collect();
    assert_eq!(addresses, ["fd00::1"]);
}

#[test]
fn headless_external_name_and_unnamed_ports() {
    let headless = svc(json!({"clusterIP": "None", "ports": [{"port": 5432}]}));
    let slices = [slice(
        "web-x",
        "IPv4",
        json!([{"port": 5433}]),
        json!([{"addresses": ["10.0.0.9"]}]),
    )];
    let reg = registration(&headless, &slices, &Objects::default(), &scope());
    assert_eq!(reg.service.resolution, Resolution::Passthrough);
    assert!(reg.service.addresses.is_empty());
    assert_eq!(&*reg.service.ports[0].name, "port-5432");
    assert_eq!(reg.endpoints[0].port_for(&reg.service.ports[0]), 5433);
    reg.validate().unwrap();

    let external = svc(
        json!({"type": "ExternalName", "externalName": "db.example.com",
                              "ports": [{"name": "tcp", "port": 5432}]}),
    );
    let reg = registration(&external, &[], &Objects::default(), &scope());
    assert_eq!(reg.service.resolution, Resolution::Dns);
    assert!(reg.service.mesh_external);
    assert_eq!(&*reg.endpoints[0].address, "db.example.com");
    reg.validate().unwrap();
}

#[test]
fn istio_locality_label_wins_and_publish_not_ready_is_healthy() {
    let mut svc = svc(json!({"clusterIP": "10.96.0.1", "ports": [{"name": "http", "port": 80}]}));
    svc.publish_not_ready = true;
    let slices = [slice(
        "web-1",
        "IPv4",
        json!([{"name": "http", "port": 80}]),
        json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": false},
                "targetRef": {"kind": "Pod", "name": "p"}}]),
    )];
    let mut objects = Objects::default();
    objects.pods.insert(
        ("shop".into(), "p".into()),
        PodObj {
            labels: [("istio-locality".to_owned(), "r1.z1.s1".to_owned())].into(),
            ..PodObj::default()
        },
    );
    let reg = registration(&svc, &slices, &objects, &scope());
    assert_eq!(reg.endpoints[0].locality, Locality::parse("r1/z1/s1"));
    assert_eq!(reg.endpoints[0].health, Health::Healthy);
}
