//! Mesh mTLS as generated: what a proxy with a mesh certificate gets and one without does
//! not, auto mTLS by endpoint label, `ISTIO_MUTUAL`, and the inbound chains of each
//! PeerAuthentication mode.

use std::collections::BTreeSet;
use std::sync::Arc;

use prost::Message;
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec};
use wayfinder_registry::{Endpoint, Protocol, Registration, RegistryId, Service};

use crate::aggregate::snapshot_with_config;
use crate::xds::fixtures::{DOMAIN, sidecar};
use crate::xds::pb::cluster::Cluster;
use crate::xds::pb::core::transport_socket;
use crate::xds::pb::endpoint::ClusterLoadAssignment;
use crate::xds::pb::listener::Listener;
use crate::xds::pb::tls::{DownstreamTlsContext, UpstreamTlsContext, common_tls_context};
use crate::xds::proxy::Proxy;
use crate::xds::{TypeUrl, XdsSnapshot};

const REVIEWS: &str = "outbound|9080||reviews.default.svc.cluster.local";
const REVIEWS_ID: &str = "spiffe://cluster.local/ns/default/sa/reviews";

/// `reviews` (HTTP 9080): the proxy's own workload at 10.0.0.1 with a sidecar (labelled
/// `security.istio.io/tlsMode: istio`, service account `reviews`), and 10.0.0.2 without one.
/// `db` (TCP 5432) at 10.0.0.1 too. The objects of `config` are named `NAME` (in `default`) or
/// `NAMESPACE/NAME`.
pub(super) fn snapshot(config: &[(&str, ConfigSpec)]) -> XdsSnapshot {
    let mut reviews = Service::new("reviews.default.svc.cluster.local", "default").with_port(
        "http",
        9080,
        Protocol::Http,
    );
    reviews.addresses = vec![[10, 96, 0, 1].into()];
    let mut meshed = Endpoint::new("10.0.0.1")
        .with_label("app", "reviews")
        .with_label("security.istio.io/tlsMode", "istio");
    meshed.service_account = Some("reviews".into());
    let plain = Endpoint::new("10.0.0.2").with_label("app", "reviews");
    let mut db = Service::new("db.default.svc.cluster.local", "default").with_port(
        "tcp",
        5432,
        Protocol::Tcp,
    );
    db.addresses = vec![[10, 96, 0, 2].into()];
    let registrations = vec![
        Registration::new(reviews, vec![meshed.clone(), plain]),
        Registration::new(db, vec![meshed]),
    ];
    let objects = config
        .iter()
        .map(|(name, spec)| {
            let (namespace, name) = name.split_once('/').unwrap_or(("default", name));
            ConfigObject {
                meta: ConfigMeta {
                    name: name.into(),
                    namespace: namespace.into(),
                    ..Default::default()
                },
                spec: spec.clone(),
            }
        })
        .collect();
    let model =
        snapshot_with_config(vec![(RegistryId::new("Mock"), registrations)], objects).unwrap();
    assert_eq!(
        model.config.objects.len(),
        config.len(),
        "every object is valid"
    );
    XdsSnapshot::new(Arc::new(model), DOMAIN)
}

fn peers(yaml: &str) -> ConfigSpec {
    ConfigSpec::PeerAuthentication(serde_saphyr::from_str(yaml).unwrap())
}

fn rule(yaml: &str) -> ConfigSpec {
    ConfigSpec::DestinationRule(Box::new(serde_saphyr::from_str(yaml).unwrap()))
}

/// The sidecar of the workload at 10.0.0.1 (`app: reviews`), with a mesh certificate or not.
pub(super) fn proxy(mesh: bool) -> Proxy {
    Proxy {
        labels: [("app".to_string(), "reviews".to_string())].into(),
        ips: vec![[10, 0, 0, 1].into()],
        certificate: mesh.then(|| (REVIEWS_ID.into(), "2030-01-01T00:00:00Z".into())),
        ..sidecar()
    }
}

pub(super) fn get<M: Message + Default>(
    snap: &XdsSnapshot,
    proxy: &Proxy,
    t: TypeUrl,
    name: &str,
) -> M {
    let resources = snap.resources(proxy, t, &BTreeSet::new());
    let r = resources
        .get(name)
        .unwrap_or_else(|| panic!("no {t} {name}"));
    M::decode(r.any().value.as_slice()).unwrap()
}

fn upstream(socket: &crate::xds::pb::core::TransportSocket) -> UpstreamTlsContext {
    let Some(transport_socket::ConfigType::TypedConfig(any)) = &socket.config_type else {
        panic!("no typed config");
    };
    UpstreamTlsContext::decode(any.value.as_slice()).unwrap()
}

/// The names the client checks the server's certificate against, and its SDS secrets.
fn client_checks(c: &UpstreamTlsContext) -> (Vec<String>, Vec<String>) {
    let common = c.common_tls_context.as_ref().unwrap();
    let secrets = common
        .tls_certificate_sds_secret_configs
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let Some(common_tls_context::ValidationContextType::CombinedValidationContext(combined)) =
        &common.validation_context_type
    else {
        return (Vec::new(), secrets);
    };
    let names = combined
        .default_validation_context
        .iter()
        .flat_map(|v| &v.match_typed_subject_alt_names)
        .map(|m| format!("{:?}", m.matcher.as_ref().unwrap().match_pattern))
        .collect();
    (names, secrets)
}

#[test]
fn a_proxy_without_a_mesh_certificate_gets_no_mesh_tls() {
    let snap = snapshot(&[]);
    let plain = proxy(false);
    let cluster: Cluster = get(&snap, &plain, TypeUrl::Cluster, REVIEWS);
    assert!(cluster.transport_socket.is_none() && cluster.transport_socket_matches.is_empty());
    let inbound: Listener = get(&snap, &plain, TypeUrl::Listener, "virtualInbound");
    assert_eq!(inbound.listener_filters.len(), 1, "original_dst only");
    assert!(
        inbound
            .filter_chains
            .iter()
            .all(|c| c.transport_socket.is_none())
    );
}

#[test]
fn auto_mtls_sends_mesh_tls_to_endpoints_with_a_sidecar_and_checks_their_identity() {
    let snap = snapshot(&[]);
    let mesh = proxy(true);
    let cluster: Cluster = get(&snap, &mesh, TypeUrl::Cluster, REVIEWS);
    let matches: Vec<&str> = cluster
        .transport_socket_matches
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(matches, ["tlsMode-istio", "tlsMode-disabled"]);
    let istio = &cluster.transport_socket_matches[0];
    assert_eq!(
        format!(
            "{:?}",
            istio.r#match.as_ref().unwrap().fields["tlsMode"].kind
        ),
        "Some(StringValue(\"istio\"))"
    );
    let tls = upstream(istio.transport_socket.as_ref().unwrap());
    assert_eq!(
        tls.sni,
        "outbound_.9080_._.reviews.default.svc.cluster.local"
    );
    let (names, secrets) = client_checks(&tls);
    assert_eq!(names, [format!("Some(Exact({REVIEWS_ID:?}))")]);
    assert_eq!(secrets, ["default"]);
    assert_eq!(tls.common_tls_context.unwrap().alpn_protocols, ["istio"]);
    // Only the endpoint with a sidecar says so.
    let cla: ClusterLoadAssignment = get(&snap, &mesh, TypeUrl::Endpoint, REVIEWS);
    let marked: Vec<bool> = cla.endpoints[0]
        .lb_endpoints
        .iter()
        .map(|e| e.metadata.is_some())
        .collect();
    assert_eq!(marked, [true, false]);
}

#[test]
fn istio_mutual_uses_the_mesh_certificate_and_fails_closed_without_one() {
    let snap = snapshot(&[(
        "reviews",
        rule(
            "{host: reviews, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}, subsets: [{name: v1, labels: {app: reviews}}]}",
        ),
    )]);
    let subset = "outbound|9080|v1|reviews.default.svc.cluster.local";
    let cluster: Cluster = get(&snap, &proxy(true), TypeUrl::Cluster, subset);
    let tls = upstream(cluster.transport_socket.as_ref().unwrap());
    assert_eq!(
        tls.sni,
        "outbound_.9080_.v1_.reviews.default.svc.cluster.local"
    );
    assert_eq!(client_checks(&tls).1, ["default"]);
    // Without a certificate: TLS that no mesh server accepts, never plaintext.
    let cluster: Cluster = get(&snap, &proxy(false), TypeUrl::Cluster, subset);
    let tls = upstream(cluster.transport_socket.as_ref().unwrap());
    assert_eq!(client_checks(&tls), (Vec::new(), Vec::new()));
}

/// The inbound chains of the proxy's ports: (name, transport protocol, ALPN, mTLS).
fn chains(snap: &XdsSnapshot) -> Vec<(String, String, usize, bool)> {
    let inbound: Listener = get(snap, &proxy(true), TypeUrl::Listener, "virtualInbound");
    assert_eq!(
        inbound.listener_filters.len(),
        2,
        "original_dst and tls_inspector"
    );
    inbound
        .filter_chains
        .iter()
        .filter(|c| c.name != "virtualInbound-blackhole")
        .map(|c| {
            let m = c.filter_chain_match.clone().unwrap_or_default();
            let mtls = c.transport_socket.as_ref().is_some_and(|s| {
                let Some(transport_socket::ConfigType::TypedConfig(any)) = &s.config_type else {
                    return false;
                };
                let d = DownstreamTlsContext::decode(any.value.as_slice()).unwrap();
                d.require_client_certificate.is_some_and(|r| r.value)
            });
            (
                c.name.clone(),
                m.transport_protocol,
                m.application_protocols.len(),
                mtls,
            )
        })
        .collect()
}

fn chain(name: &str, transport: &str, alpn: usize, mtls: bool) -> (String, String, usize, bool) {
    (name.into(), transport.into(), alpn, mtls)
}

#[test]
fn peer_authentication_modes_shape_the_inbound_chains() {
    // No policy: PERMISSIVE, Istio's default.
    let permissive = [
        chain("inbound|5432||-mtls", "tls", 5, true),
        chain("inbound|5432||", "raw_buffer", 0, false),
        chain("inbound|5432||-tls", "tls", 0, false),
        chain("inbound|9080||-mtls", "tls", 5, true),
        chain("inbound|9080||", "raw_buffer", 0, false),
        chain("inbound|9080||-tls", "tls", 0, false),
        chain("virtualInbound-catchall-tcp", "", 0, false),
    ];
    assert_eq!(chains(&snapshot(&[])), permissive);
    // STRICT in the namespace, DISABLE on the workload's port 5432; the catch-all is STRICT.
    let snap = snapshot(&[
        ("default", peers("{mtls: {mode: STRICT}}")),
        (
            "reviews",
            peers(
                "{selector: {matchLabels: {app: reviews}}, portLevelMtls: {5432: {mode: DISABLE}}}",
            ),
        ),
    ]);
    assert_eq!(
        chains(&snap),
        [
            chain("inbound|5432||", "", 0, false),
            chain("inbound|9080||-mtls", "tls", 0, true),
            chain("virtualInbound-catchall-tcp-mtls", "tls", 0, true),
        ]
    );
    // DISABLE: plaintext only, and auto mTLS no longer marks the workload's endpoint.
    let snap = snapshot(&[("default", peers("{mtls: {mode: DISABLE}}"))]);
    assert!(chains(&snap).iter().all(|(_, _, _, mtls)| !mtls));
    let cla: ClusterLoadAssignment = get(&snap, &proxy(true), TypeUrl::Endpoint, REVIEWS);
    assert!(
        cla.endpoints[0]
            .lb_endpoints
            .iter()
            .all(|e| e.metadata.is_none())
    );
}

#[test]
fn an_ingress_listener_s_tls_yields_to_mesh_mtls_where_it_is_on() {
    let files = "serverCertificate: /c.pem, privateKey: /k.pem";
    let sidecar = ConfigSpec::Sidecar(
        serde_saphyr::from_str(&format!(
            "ingress:\n\
             - port: {{number: 9080, protocol: HTTPS, name: https}}\n  \
               defaultEndpoint: 127.0.0.1:8080\n  tls: {{mode: SIMPLE, {files}}}\n\
             - port: {{number: 5432, protocol: TLS, name: tls}}\n  \
               defaultEndpoint: 127.0.0.1:5433\n  tls: {{mode: SIMPLE, {files}}}\n"
        ))
        .unwrap(),
    );
    let snap = snapshot(&[
        ("default", sidecar),
        ("default", peers("{mtls: {mode: STRICT}}")),
        (
            "reviews",
            peers(
                "{selector: {matchLabels: {app: reviews}}, portLevelMtls: {5432: {mode: DISABLE}}}",
            ),
        ),
    ]);
    // 5432 (DISABLE): the listener's own TLS; 9080 (STRICT): mesh mTLS, as in Istio.
    assert_eq!(
        chains(&snap),
        [
            chain("inbound|5432||", "tls", 0, false),
            chain("inbound|9080||-mtls", "tls", 0, true),
            chain("virtualInbound-catchall-tcp-mtls", "tls", 0, true),
        ]
    );
}

#[test]
fn inbound_http_behind_mtls_forwards_the_client_identity() {
    use crate::xds::pb::hcm::HttpConnectionManager;
    use crate::xds::pb::hcm::http_connection_manager::ForwardClientCertDetails;
    use crate::xds::pb::listener::filter;
    let snap = snapshot(&[("default", peers("{mtls: {mode: PERMISSIVE}}"))]);
    let inbound: Listener = get(&snap, &proxy(true), TypeUrl::Listener, "virtualInbound");
    let hcm = |name: &str| {
        let c = inbound
            .filter_chains
            .iter()
            .find(|c| c.name == name)
            .unwrap();
        let Some(filter::ConfigType::TypedConfig(any)) = &c.filters[0].config_type else {
            panic!("{name}: no typed config");
        };
        HttpConnectionManager::decode(any.value.as_slice()).unwrap()
    };
    let mtls = hcm("inbound|9080||-mtls");
    assert_eq!(
        mtls.forward_client_cert_details,
        ForwardClientCertDetails::AppendForward as i32
    );
    assert!(mtls.set_current_client_cert_details.unwrap().uri);
    let plain = hcm("inbound|9080||");
    assert_eq!(
        plain.forward_client_cert_details,
        ForwardClientCertDetails::Sanitize as i32,
        "a plaintext client's header is removed"
    );
}

#[test]
fn an_auto_passthrough_gateway_routes_by_istio_s_sni_to_sni_dnat_clusters() {
    use crate::xds::proxy::ProxyKind;
    let gateway = ConfigSpec::Gateway(
        serde_saphyr::from_str(
            "{selector: {istio: eastwestgateway}, servers: [{port: {number: 15443, name: tls, \
             protocol: TLS}, hosts: ['*.local'], tls: {mode: AUTO_PASSTHROUGH}}]}",
        )
        .unwrap(),
    );
    let snap = snapshot(&[("cross-network", gateway)]);
    let eastwest = Proxy {
        id: "router~10.0.0.9~eastwest.default~default.svc.cluster.local".into(),
        kind: ProxyKind::Router,
        ips: vec![[10, 0, 0, 9].into()],
        labels: [("istio".to_string(), "eastwestgateway".to_string())].into(),
        ..proxy(true)
    };
    let listener: Listener = get(&snap, &eastwest, TypeUrl::Listener, "0.0.0.0_15443");
    let chain = &listener.filter_chains[0];
    assert_eq!(
        chain.filter_chain_match.as_ref().unwrap().server_names,
        ["*.local"]
    );
    let filters: Vec<&str> = chain.filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        filters,
        [
            "envoy.filters.network.sni_cluster",
            "envoy.filters.network.tcp_proxy"
        ]
    );
    assert!(chain.transport_socket.is_none(), "not terminated");
    let sni = "outbound_.9080_._.reviews.default.svc.cluster.local";
    let cluster: Cluster = get(&snap, &eastwest, TypeUrl::Cluster, sni);
    assert_eq!(cluster.eds_cluster_config.unwrap().service_name, REVIEWS);
    assert!(cluster.transport_socket.is_none() && cluster.transport_socket_matches.is_empty());
    // A gateway without such a server has no SNI-DNAT clusters.
    let ingress = Proxy {
        labels: [("istio".to_string(), "ingressgateway".to_string())].into(),
        ..eastwest
    };
    let clusters = snap.resources(&ingress, TypeUrl::Cluster, &BTreeSet::new());
    assert!(clusters.get(sni).is_none());
    assert!(clusters.get(REVIEWS).is_some());
}
