//! A Sidecar's egress listeners with ports (hosts imported on their port only, the listener
//! without a port taking the other ports, `bind` and `captureMode: NONE`), and its ingress
//! listeners (each to its endpoint, with its connection pool).

use std::collections::BTreeSet;
use std::sync::Arc;

use prost::Message;
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec};
use wayfinder_registry::{Endpoint, Protocol, Registration, RegistryId, Service};

use crate::aggregate::snapshot_with_config;
use crate::xds::fixtures::{DOMAIN, sidecar};
use crate::xds::pb::listener::Listener;
use crate::xds::pb::route::RouteConfiguration;
use crate::xds::{TypeUrl, XdsSnapshot};

/// `reviews` and `ratings` (HTTP 9080) and `db` (TCP 5432) in `default`, and a Sidecar whose
/// egress listeners are `egress` (YAML).
fn snapshot(egress: &str) -> XdsSnapshot {
    snapshot_with(&format!("egress:\n{egress}"))
}

/// [`snapshot`] with the Sidecar's whole spec (YAML).
fn snapshot_with(spec: &str) -> XdsSnapshot {
    let service = |name: &str, port: u16, protocol: Protocol, ip: u8| {
        let mut s = Service::new(format!("{name}.default.svc.cluster.local"), "default")
            .with_port("p", port, protocol);
        s.addresses = vec![[10, 96, 0, ip].into()];
        Registration::new(s, vec![Endpoint::new(format!("10.1.0.{ip}"))])
    };
    let sidecar = ConfigObject {
        meta: ConfigMeta {
            name: "default".into(),
            namespace: "default".into(),
            ..Default::default()
        },
        spec: ConfigSpec::Sidecar(serde_saphyr::from_str(spec).unwrap()),
    };
    let registrations = vec![
        service("reviews", 9080, Protocol::Http, 1),
        service("ratings", 9080, Protocol::Http, 2),
        service("db", 5432, Protocol::Tcp, 3),
    ];
    let model = snapshot_with_config(
        vec![(RegistryId::new("Mock"), registrations)],
        vec![sidecar],
    )
    .unwrap();
    assert_eq!(model.config.objects.len(), 1, "the Sidecar is valid");
    XdsSnapshot::new(Arc::new(model), DOMAIN)
}

fn names(s: &XdsSnapshot, t: TypeUrl) -> Vec<String> {
    let r = s.resources(&sidecar(), t, &BTreeSet::new());
    let mut names: Vec<String> = r.iter().map(|r| r.name.to_string()).collect();
    names.sort();
    names
}

fn hosts_on_9080(s: &XdsSnapshot) -> Vec<String> {
    let r = s.resources(&sidecar(), TypeUrl::Route, &BTreeSet::new());
    let rc = RouteConfiguration::decode(r.get("9080").unwrap().any().value.as_slice()).unwrap();
    rc.virtual_hosts
        .iter()
        .map(|v| v.name.clone())
        .filter(|n| n.contains('.'))
        .collect()
}

#[test]
fn a_port_s_listener_imports_its_hosts_there_and_the_catch_all_the_other_ports() {
    let s = snapshot(
        "- port: {number: 9080, protocol: HTTP, name: http}\n  \
           hosts: [./reviews.default.svc.cluster.local]\n\
         - hosts: ['./*']\n",
    );
    assert_eq!(
        hosts_on_9080(&s),
        ["reviews.default.svc.cluster.local:9080"]
    );
    // The catch-all still imports every service: ratings' cluster, db's listener.
    let clusters = names(&s, TypeUrl::Cluster);
    assert!(clusters.contains(&"outbound|9080||ratings.default.svc.cluster.local".to_string()));
    let listeners = names(&s, TypeUrl::Listener);
    assert!(
        listeners.contains(&"10.96.0.3_5432".to_string()),
        "{listeners:?}"
    );

    // Without a catch-all, other ports import nothing.
    let s = snapshot("- port: {number: 9080, protocol: HTTP, name: http}\n  hosts: ['./*']\n");
    assert_eq!(hosts_on_9080(&s).len(), 2);
    let listeners = names(&s, TypeUrl::Listener);
    assert!(
        !listeners.iter().any(|l| l.ends_with("_5432")),
        "{listeners:?}"
    );
}

#[test]
fn bind_and_capture_mode_none_make_a_listener_that_binds_its_own_address() {
    let s = snapshot(
        "- port: {number: 9080, protocol: HTTP, name: http}\n  bind: 127.0.0.2\n  \
           captureMode: NONE\n  hosts: ['./*']\n\
         - hosts: ['./*']\n",
    );
    let r = s.resources(&sidecar(), TypeUrl::Listener, &BTreeSet::new());
    let l = Listener::decode(
        r.get("127.0.0.2_9080")
            .expect("the bound listener")
            .any()
            .value
            .as_slice(),
    )
    .unwrap();
    assert_eq!(l.bind_to_port.map(|b| b.value), Some(true));
    assert!(r.get("0.0.0.0_9080").is_none());
    // Another port keeps the capture address, taking captured connections.
    let db = Listener::decode(r.get("10.96.0.3_5432").unwrap().any().value.as_slice()).unwrap();
    assert_eq!(db.bind_to_port.map(|b| b.value), Some(false));
}

#[test]
fn ingress_listeners_are_the_inbound_side_each_to_its_default_endpoint() {
    // The proxy (10.0.0.1) has no instance at all, and gets the listeners' ports.
    let s = snapshot_with(
        "ingress:\n- port: {number: 9080, protocol: HTTP, name: http}\n  \
           defaultEndpoint: 127.0.0.1:8080\n- port: {number: 9091, protocol: TCP}\n  \
           defaultEndpoint: unix:///var/run/app.sock\negress:\n- hosts: ['./*']\n",
    );
    let r = s.resources(&sidecar(), TypeUrl::Cluster, &BTreeSet::new());
    let inbound: Vec<String> = r
        .iter()
        .map(|c| c.name.to_string())
        .filter(|n| n.starts_with("inbound|"))
        .collect();
    assert_eq!(inbound, ["inbound|9080||", "inbound|9091||"]);
    let http = crate::xds::pb::cluster::Cluster::decode(
        r.get("inbound|9080||").unwrap().any().value.as_slice(),
    )
    .unwrap();
    let json = format!("{http:?}");
    assert!(json.contains("8080"), "{json}");
    let unix = crate::xds::pb::cluster::Cluster::decode(
        r.get("inbound|9091||").unwrap().any().value.as_slice(),
    )
    .unwrap();
    assert!(format!("{unix:?}").contains("/var/run/app.sock"));
    let r = s.resources(&sidecar(), TypeUrl::Listener, &BTreeSet::new());
    let inbound =
        Listener::decode(r.get("virtualInbound").unwrap().any().value.as_slice()).unwrap();
    let ports: BTreeSet<u32> = inbound
        .filter_chains
        .iter()
        .filter_map(|c| {
            Some(
                c.filter_chain_match
                    .as_ref()?
                    .destination_port
                    .as_ref()?
                    .value,
            )
        })
        .collect();
    assert!(ports.contains(&9080) && ports.contains(&9091), "{ports:?}");
}

#[test]
fn an_ingress_listener_s_connection_pool_and_the_inbound_one_shape_the_inbound_clusters() {
    let s = snapshot_with(
        "ingress:\n- port: {number: 9080, protocol: HTTP, name: http}\n  \
           defaultEndpoint: 127.0.0.1:8080\n  \
           connectionPool: {http: {http1MaxPendingRequests: 5, maxRequestsPerConnection: 2}}\n\
         - port: {number: 9091, protocol: TCP}\n  defaultEndpoint: 127.0.0.1:9091\n\
         inboundConnectionPool: {tcp: {maxConnections: 10, connectTimeout: 2s}}\n\
         egress:\n- hosts: ['./*']\n",
    );
    let r = s.resources(&sidecar(), TypeUrl::Cluster, &BTreeSet::new());
    let cluster = |name: &str| {
        crate::xds::pb::cluster::Cluster::decode(r.get(name).unwrap().any().value.as_slice())
            .unwrap()
    };
    let limits = |c: &crate::xds::pb::cluster::Cluster| {
        let t = &c.circuit_breakers.as_ref().unwrap().thresholds[0];
        let v = |x: Option<crate::xds::pb::protobuf::UInt32Value>| x.map(|x| x.value);
        (v(t.max_connections), v(t.max_pending_requests))
    };
    // The listener's own pool for its port (the inbound one does not add to it).
    let http = cluster("inbound|9080||");
    assert_eq!(limits(&http), (Some(u32::MAX), Some(5)));
    let options = format!("{:?}", http.typed_extension_protocol_options);
    assert!(options.contains("HttpProtocolOptions"), "{options}");
    // The Sidecar's inbound pool for the other.
    let tcp = cluster("inbound|9091||");
    assert_eq!(limits(&tcp), (Some(10), Some(u32::MAX)));
    assert_eq!(tcp.connect_timeout.map(|d| d.seconds), Some(2));
    assert!(tcp.typed_extension_protocol_options.is_empty());
}

#[test]
fn an_ingress_listener_s_tls_is_terminated_on_its_port_where_mesh_mtls_is_off() {
    let s = snapshot_with(
        "ingress:\n- port: {number: 8443, protocol: HTTPS, name: https}\n  \
           defaultEndpoint: 127.0.0.1:8080\n  \
           tls: {mode: SIMPLE, serverCertificate: /etc/certs/tls.crt, \
           privateKey: /etc/certs/tls.key}\negress:\n- hosts: ['./*']\n",
    );
    let r = s.resources(&sidecar(), TypeUrl::Listener, &BTreeSet::new());
    let inbound =
        Listener::decode(r.get("virtualInbound").unwrap().any().value.as_slice()).unwrap();
    let filters: Vec<&str> = inbound
        .listener_filters
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(
        filters,
        [
            "envoy.filters.listener.original_dst",
            "envoy.filters.listener.tls_inspector"
        ]
    );
    let chain = inbound
        .filter_chains
        .iter()
        .find(|c| c.name == "inbound|8443||")
        .expect("the port's chain");
    let m = chain.filter_chain_match.as_ref().unwrap();
    assert_eq!(m.transport_protocol, "tls");
    let socket = format!("{:?}", chain.transport_socket);
    assert!(socket.contains("envoy.transport_sockets.tls"), "{socket}");
    let context = crate::xds::pb::tls::DownstreamTlsContext::decode(
        match chain
            .transport_socket
            .as_ref()
            .unwrap()
            .config_type
            .as_ref()
            .unwrap()
        {
            crate::xds::pb::core::transport_socket::ConfigType::TypedConfig(any) => {
                any.value.as_slice()
            }
        },
    )
    .unwrap();
    let certificate = format!("{:?}", context.common_tls_context.unwrap().tls_certificates);
    assert!(
        certificate.contains("/etc/certs/tls.crt") && certificate.contains("/etc/certs/tls.key"),
        "{certificate}"
    );
    // What TLS carried is HTTP: the chain's filter is a connection manager.
    assert_eq!(
        chain.filters[0].name,
        "envoy.filters.network.http_connection_manager"
    );
}

#[test]
fn an_ingress_listener_with_capture_mode_none_has_a_listener_of_its_own() {
    let s = snapshot_with(
        "ingress:\n- port: {number: 9090, protocol: HTTP, name: http}\n  \
           defaultEndpoint: 127.0.0.1:8080\n  bind: 127.0.0.2\n  captureMode: NONE\n\
         - port: {number: 9091, protocol: TCP}\n  defaultEndpoint: 127.0.0.1:9091\n\
         egress:\n- hosts: ['./*']\n",
    );
    let r = s.resources(&sidecar(), TypeUrl::Listener, &BTreeSet::new());
    let own = Listener::decode(r.get("127.0.0.2_9090").unwrap().any().value.as_slice()).unwrap();
    assert_eq!(format!("{:?}", own.address).matches("127.0.0.2").count(), 1);
    assert_eq!(own.bind_to_port, None, "Envoy's default: it binds");
    assert_eq!(own.filter_chains.len(), 1);
    assert_eq!(
        own.filter_chains[0].filters[0].name,
        "envoy.filters.network.http_connection_manager"
    );
    let inbound =
        Listener::decode(r.get("virtualInbound").unwrap().any().value.as_slice()).unwrap();
    let names: Vec<&str> = inbound
        .filter_chains
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert!(names.contains(&"inbound|9091||"), "{names:?}");
    assert!(!names.contains(&"inbound|9090||"), "{names:?}");
}
