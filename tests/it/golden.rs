//! Generated configuration, per generator, against readable JSON under `tests/it/golden/`.
//!
//! The mesh (`support::fixtures::mesh`) exercises every path of the generators. When a change
//! to the generators is intended, re-bless with `WAYFINDER_BLESS=1 cargo test --test it golden`
//! and review the diff of the JSON files like code.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use wayfinder::aggregate::{snapshot_from, snapshot_with_config};
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::pb::protobuf::Struct;
use wayfinder::xds::proxy::string_value;
use wayfinder::xds::{Proxy, TypeUrl, XdsSnapshot, json};
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec};
use wayfinder_registry::RegistryId;

use crate::support::fixtures::mesh;

fn snapshot() -> XdsSnapshot {
    let model = snapshot_from(vec![(RegistryId::new("Mock"), mesh())]).expect("a valid mesh");
    XdsSnapshot::new(Arc::new(model), "cluster.local")
}

/// The mesh with the traffic configuration of `golden/config.yaml`.
fn configured() -> XdsSnapshot {
    let config = load_config(&golden_dir().join("config.yaml"));
    let model = snapshot_with_config(vec![(RegistryId::new("Mock"), mesh())], config)
        .expect("a valid mesh");
    assert_eq!(
        model.config.objects.len(),
        15,
        "every object of config.yaml passed validation"
    );
    XdsSnapshot::new(Arc::new(model), "cluster.local")
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/golden")
}

/// Reads Istio objects from a multi-document YAML file.
fn load_config(path: &std::path::Path) -> Vec<ConfigObject> {
    #[derive(serde::Deserialize)]
    struct Doc {
        kind: String,
        metadata: Meta,
        spec: Value,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        name: String,
        namespace: String,
    }
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<Doc> = serde_saphyr::from_multiple(&text).unwrap();
    docs.into_iter()
        .map(|d| {
            let spec = match d.kind.as_str() {
                "VirtualService" => {
                    ConfigSpec::VirtualService(serde_json::from_value(d.spec).unwrap())
                }
                "DestinationRule" => {
                    ConfigSpec::DestinationRule(Box::new(serde_json::from_value(d.spec).unwrap()))
                }
                "Gateway" => ConfigSpec::Gateway(serde_json::from_value(d.spec).unwrap()),
                "Sidecar" => ConfigSpec::Sidecar(serde_json::from_value(d.spec).unwrap()),
                "PeerAuthentication" => {
                    ConfigSpec::PeerAuthentication(serde_json::from_value(d.spec).unwrap())
                }
                other => panic!("unexpected kind {other}"),
            };
            let meta = ConfigMeta {
                name: d.metadata.name.into(),
                namespace: d.metadata.namespace.into(),
                origin: path.display().to_string().into(),
                ..Default::default()
            };
            ConfigObject { meta, spec }
        })
        .collect()
}

fn proxy(id: &str, meta: &[(&str, &str)]) -> Proxy {
    let fields = meta
        .iter()
        .map(|(k, v)| (k.to_string(), string_value(v)))
        .collect();
    let node = Node {
        id: id.into(),
        metadata: Some(Struct { fields }),
        ..Default::default()
    };
    Proxy::from_node(&node, "cluster.local").expect("a valid node")
}

fn render(snap: &XdsSnapshot, proxy: &Proxy, t: TypeUrl, names: &[&str]) -> Value {
    let requested: BTreeSet<Arc<str>> = names.iter().map(|n| Arc::from(*n)).collect();
    let all = snap.resources(proxy, t, &requested);
    let list: Vec<Value> = if names.is_empty() {
        all.iter().map(|r| json::any_to_json(&r.any())).collect()
    } else {
        names
            .iter()
            .filter_map(|n| all.get(n))
            .map(|r| json::any_to_json(&r.any()))
            .collect()
    };
    Value::Array(list)
}

/// Compares with `golden/NAME.json`, or writes it under `WAYFINDER_BLESS=1`.
fn check(name: &str, value: &Value) {
    let path = golden_dir().join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(value).expect("serializable") + "\n";
    if std::env::var("WAYFINDER_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &text).expect("write the golden file");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with WAYFINDER_BLESS=1 to create it",
            path.display()
        )
    });
    if want != text {
        let line = want
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "{} differs from the generated config at line {}:\n  golden:    {}\n  generated: {}\n\
             If the change is intended, run with WAYFINDER_BLESS=1 and review the diff.",
            path.display(),
            line + 1,
            want.lines().nth(line).unwrap_or("<end>"),
            text.lines().nth(line).unwrap_or("<end>"),
        );
    }
}

/// A proxy with one workload label (metadata `LABELS`) and capture listeners on loopback.
fn labelled(id: &str, label: (&str, &str)) -> Proxy {
    use wayfinder::xds::pb::protobuf::{Value as PbValue, value::Kind};
    let labels = Struct {
        fields: [(label.0.to_string(), string_value(label.1))].into(),
    };
    let fields = [
        (
            "LABELS".to_string(),
            PbValue {
                kind: Some(Kind::StructValue(labels)),
            },
        ),
        (
            "WAYFINDER_LISTEN_ADDRESS".to_string(),
            string_value("127.0.0.1"),
        ),
    ];
    let node = Node {
        id: id.into(),
        metadata: Some(Struct {
            fields: fields.into(),
        }),
        ..Default::default()
    };
    Proxy::from_node(&node, "cluster.local").unwrap()
}

/// A sidecar of reviews v1 (10.1.0.1) in `default`, with capture listeners on loopback.
fn reviews_sidecar() -> Proxy {
    proxy(
        "sidecar~10.1.0.1~reviews-v1-7f9.default~default.svc.cluster.local",
        &[("WAYFINDER_LISTEN_ADDRESS", "127.0.0.1")],
    )
}

#[test]
fn sidecar_clusters() {
    check(
        "sidecar_cds",
        &render(&snapshot(), &reviews_sidecar(), TypeUrl::Cluster, &[]),
    );
}

#[test]
fn sidecar_endpoints() {
    check(
        "sidecar_eds",
        &render(&snapshot(), &reviews_sidecar(), TypeUrl::Endpoint, &[]),
    );
}

#[test]
fn sidecar_listeners() {
    check(
        "sidecar_lds",
        &render(&snapshot(), &reviews_sidecar(), TypeUrl::Listener, &[]),
    );
}

#[test]
fn sidecar_routes() {
    check(
        "sidecar_rds",
        &render(&snapshot(), &reviews_sidecar(), TypeUrl::Route, &[]),
    );
}

#[test]
fn sidecar_routes_from_another_namespace() {
    // From `prod`: short names relative to prod, and prod's private service is visible.
    let p = proxy("sidecar~10.2.0.9~web.prod~prod.svc.cluster.local", &[]);
    check(
        "sidecar_rds_prod",
        &render(&snapshot(), &p, TypeUrl::Route, &[]),
    );
}

#[test]
fn proxyless_grpc() {
    let p = proxy(
        "grpc-client-1",
        &[("GENERATOR", "grpc"), ("NAMESPACE", "default")],
    );
    let snap = snapshot();
    let listener = "echo.default.svc.cluster.local:7070";
    let short = "echo:7070";
    let cluster = "outbound|7070||echo.default.svc.cluster.local";
    let out = serde_json::json!({
        "listeners": render(&snap, &p, TypeUrl::Listener, &[listener, short]),
        "routes": render(&snap, &p, TypeUrl::Route, &[listener, short]),
        "clusters": render(&snap, &p, TypeUrl::Cluster, &[cluster]),
        "endpoints": render(&snap, &p, TypeUrl::Endpoint, &[cluster, "outbound|9080||reviews.default.svc.cluster.local"]),
    });
    check("grpc", &out);
}

#[test]
fn destination_rules_as_clusters() {
    check(
        "config_cds",
        &render(&configured(), &reviews_sidecar(), TypeUrl::Cluster, &[]),
    );
}

#[test]
fn destination_rule_subsets_as_endpoints() {
    check(
        "config_eds",
        &render(&configured(), &reviews_sidecar(), TypeUrl::Endpoint, &[]),
    );
}

#[test]
fn virtual_services_as_routes() {
    check(
        "config_rds",
        &render(&configured(), &reviews_sidecar(), TypeUrl::Route, &[]),
    );
}

#[test]
fn gateway_listeners_and_routes() {
    let gateway = labelled(
        "router~10.0.0.1~ingress-7d9.default~default.svc.cluster.local",
        ("istio", "ingressgateway"),
    );
    let snap = configured();
    let out = serde_json::json!({
        "listeners": render(&snap, &gateway, TypeUrl::Listener, &[]),
        "routes": render(&snap, &gateway, TypeUrl::Route, &[]),
    });
    check("gateway", &out);
}

#[test]
fn sidecar_scope_limits_what_a_workload_sees() {
    let scoped = labelled(
        "sidecar~10.9.9.9~scoped-1.default~default.svc.cluster.local",
        ("app", "scoped"),
    );
    let snap = configured();
    let names = |t: TypeUrl| -> Vec<String> {
        snap.resources(&scoped, t, &BTreeSet::new())
            .iter()
            .map(|r| r.name.to_string())
            .collect()
    };
    let out = serde_json::json!({
        "clusters": names(TypeUrl::Cluster),
        "listeners": render(&snap, &scoped, TypeUrl::Listener, &["virtualOutbound"]),
        "routes": render(&snap, &scoped, TypeUrl::Route, &[]),
    });
    check("sidecar_scope", &out);
}

#[test]
fn proxyless_grpc_with_routing() {
    let p = proxy(
        "grpc-client-1",
        &[("GENERATOR", "grpc"), ("NAMESPACE", "default")],
    );
    let snap = configured();
    let names = [
        "echo.default.svc.cluster.local:7070",
        "reviews.default.svc.cluster.local:9080",
    ];
    let out = serde_json::json!({
        "routes": render(&snap, &p, TypeUrl::Route, &names),
        "clusters": render(&snap, &p, TypeUrl::Cluster, &["outbound|9080|v2|reviews.default.svc.cluster.local"]),
        "endpoints": render(&snap, &p, TypeUrl::Endpoint, &["outbound|9080|v2|reviews.default.svc.cluster.local"]),
    });
    check("grpc_routing", &out);
}

#[test]
fn virtual_service_tcp_and_tls_rules_as_listeners() {
    check(
        "config_lds",
        &render(
            &configured(),
            &reviews_sidecar(),
            TypeUrl::Listener,
            &["127.0.0.1_6379", "127.0.0.1_443"],
        ),
    );
}

/// Services outside the mesh for the upstream TLS rules: `(host, port protocol)`, HTTP on 443
/// resolved by DNS, but the wildcard, which passes through.
fn external_services() -> Vec<wayfinder_registry::Registration> {
    use wayfinder_registry::{Endpoint, Protocol, Registration, Resolution, Service};
    let hosts = [
        ("plain.example.com", Protocol::Http),
        ("named.example.com", Protocol::Grpc),
        ("mutual.example.com", Protocol::Http),
        ("mutual-system.example.com", Protocol::Http),
        ("skip.example.com", Protocol::Http),
        ("*.wild.example.com", Protocol::Http),
    ];
    hosts
        .into_iter()
        .map(|(host, protocol)| {
            let mut svc = Service::new(host, "default").with_port("tls", 443, protocol);
            svc.mesh_external = true;
            if host.starts_with('*') {
                svc.resolution = Resolution::Passthrough;
                return Registration::new(svc, vec![]);
            }
            svc.resolution = Resolution::Dns;
            Registration::new(svc, vec![Endpoint::new(host)])
        })
        .collect()
}

/// DestinationRule client TLS verifies by default (`golden/upstream_tls.yaml`): against the
/// system's trust store without `caCertificates`, SNI from the host without `sni`, the names
/// always checked, only `insecureSkipVerify` turning it off; and `--system-ca-file` moves the
/// trust store.
#[test]
fn upstream_tls_verifies_by_default() {
    let config = load_config(&golden_dir().join("upstream_tls.yaml"));
    let model = snapshot_with_config(vec![(RegistryId::new("Mock"), external_services())], config)
        .expect("a valid mesh");
    assert_eq!(
        model.config.objects.len(),
        6,
        "every rule passed validation"
    );
    let model = Arc::new(model);
    let cluster = |host: &str| format!("outbound|443||{host}");
    let names: Vec<String> = external_services()
        .iter()
        .map(|r| cluster(&r.service.hostname))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let snap = XdsSnapshot::new(model.clone(), "cluster.local");
    let moved = XdsSnapshot::new(model, "cluster.local").with_system_ca("/etc/pki/tls/cert.pem");
    let plain = cluster("plain.example.com");
    let out = serde_json::json!({
        "clusters": render(&snap, &reviews_sidecar(), TypeUrl::Cluster, &names),
        "with --system-ca-file": render(&moved, &reviews_sidecar(), TypeUrl::Cluster, &[&plain]),
    });
    check("upstream_tls", &out);
}

/// The mesh with sidecars beside reviews v1 and v2 (labelled `security.istio.io/tlsMode:
/// istio`, service account `bookinfo-reviews`; v3 has none) and the policies of
/// `golden/mesh_tls.yaml`.
fn mesh_tls() -> XdsSnapshot {
    let mut registrations = mesh();
    let reviews = &mut registrations[0];
    let mut endpoints = reviews.endpoints.to_vec();
    for ep in &mut endpoints {
        if ep.labels.get("version").is_some_and(|v| &**v != "v3") {
            ep.labels
                .insert("security.istio.io/tlsMode".into(), "istio".into());
            ep.service_account = Some("bookinfo-reviews".into());
        }
    }
    reviews.endpoints = endpoints.into();
    let config = load_config(&golden_dir().join("mesh_tls.yaml"));
    let model = snapshot_with_config(vec![(RegistryId::new("Mock"), registrations)], config)
        .expect("a valid mesh");
    assert_eq!(
        model.config.objects.len(),
        5,
        "every object passed validation"
    );
    XdsSnapshot::new(Arc::new(model), "cluster.local")
}

/// The reviews v1 sidecar holding a mesh certificate (connected to the secure port).
fn reviews_v1_with_a_certificate() -> Proxy {
    Proxy {
        labels: [("app", "reviews"), ("version", "v1")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
        certificate: Some((
            "spiffe://cluster.local/ns/default/sa/bookinfo-reviews".into(),
            "2030-01-01T00:00:00Z".into(),
        )),
        ..reviews_sidecar()
    }
}

/// Mesh mTLS (`golden/mesh_tls.yaml`): auto mTLS to reviews (TLS to the endpoints with a
/// sidecar whose policy allows it, their service account checked), `ISTIO_MUTUAL` to db, none
/// to a service outside the mesh or a passthrough one, and
/// the inbound chains of the STRICT namespace with the workload's PERMISSIVE port.
#[test]
fn mesh_tls_for_a_sidecar_with_a_certificate() {
    let snap = mesh_tls();
    let proxy = reviews_v1_with_a_certificate();
    let reviews = "outbound|9080||reviews.default.svc.cluster.local";
    let db = "outbound|5432||db.default.svc.cluster.local";
    // Outside the mesh, and passthrough: no auto mTLS, as in Istio.
    let external = "outbound|443||api.example.com";
    let passthrough = "outbound|9000||wildcard.example.com";
    let clusters = [reviews, db, external, passthrough];
    let out = serde_json::json!({
        "clusters": render(&snap, &proxy, TypeUrl::Cluster, &clusters),
        "endpoints": render(&snap, &proxy, TypeUrl::Endpoint, &[reviews]),
        "inbound": render(&snap, &proxy, TypeUrl::Listener, &["virtualInbound"]),
    });
    check("mesh_tls", &out);
}

/// Istio's east-west gateway (`golden/mesh_tls.yaml`): its `AUTO_PASSTHROUGH` listener routes
/// by SNI to the SNI-DNAT cluster of that name, which shares the service's endpoints.
#[test]
fn an_east_west_gateway_passes_mesh_tls_through_by_sni() {
    let snap = mesh_tls();
    let gateway = labelled(
        "router~10.0.0.2~eastwest-1.default~default.svc.cluster.local",
        ("istio", "eastwestgateway"),
    );
    let sni = "outbound_.9080_._.reviews.default.svc.cluster.local";
    let out = serde_json::json!({
        "listeners": render(&snap, &gateway, TypeUrl::Listener, &[]),
        "clusters": render(&snap, &gateway, TypeUrl::Cluster, &[sni]),
    });
    check("east_west_gateway", &out);
}

/// Every proxy of the golden meshes, Envoy or proxyless gRPC, receives only references it can
/// follow: each cluster a route or TCP proxy names, each EDS cluster's assignment, each route
/// configuration a listener (or a gRPC client's API listener) names (`xds::consistency`).
#[test]
fn every_proxys_configuration_is_consistent() {
    let proxies = [
        reviews_sidecar(),
        proxy("sidecar~10.2.0.9~web.prod~prod.svc.cluster.local", &[]),
        labelled(
            "router~10.0.0.1~ingress-7d9.default~default.svc.cluster.local",
            ("istio", "ingressgateway"),
        ),
        labelled(
            "sidecar~10.9.9.9~scoped-1.default~default.svc.cluster.local",
            ("app", "scoped"),
        ),
        reviews_v1_with_a_certificate(),
        proxy(
            "grpc-client-1",
            &[("GENERATOR", "grpc"), ("NAMESPACE", "default")],
        ),
    ];
    let upstream_tls = snapshot_with_config(
        vec![(RegistryId::new("Mock"), external_services())],
        load_config(&golden_dir().join("upstream_tls.yaml")),
    )
    .expect("a valid mesh");
    let meshes = [
        ("mesh", snapshot()),
        ("config.yaml", configured()),
        (
            "upstream_tls.yaml",
            XdsSnapshot::new(Arc::new(upstream_tls), "cluster.local"),
        ),
        ("mesh_tls.yaml", mesh_tls()),
    ];
    for (mesh, snap) in &meshes {
        for p in &proxies {
            let clusters = snap.resources(p, TypeUrl::Cluster, &BTreeSet::new());
            assert!(!clusters.is_empty(), "{mesh}: {} receives clusters", p.id);
            let problems = wayfinder::xds::consistency::check(snap, p);
            assert!(problems.is_empty(), "{mesh}, {}: {problems:#?}", p.id);
        }
    }
}
