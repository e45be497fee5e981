//! Mapping tests: files in, registrations (or errors) out, through the same `load` the
//! registry uses.

use std::collections::BTreeMap;
use std::path::Path;

use wayfinder_registry::{Health, ServiceKey};

use super::*;
use crate::services::load_whole as load;
use crate::view::{FileContents, compose};

fn contents(name: &str, text: &str) -> Result<FileContents, RegistryError> {
    load(Path::new(name), text.as_bytes())
}

/// The registrations of one file, by key.
fn registrations(text: &str) -> BTreeMap<ServiceKey, Registration> {
    let file = contents("se.yaml", text).unwrap();
    let (view, errors) = compose(&BTreeMap::from([((0, "se.yaml".into()), file)]));
    assert_eq!(errors, vec![]);
    view
}

fn only(text: &str) -> Registration {
    let view = registrations(text);
    assert_eq!(view.len(), 1, "{view:#?}");
    view.into_values().next().unwrap()
}

fn error(text: &str) -> RegistryError {
    contents("bad.yaml", text).unwrap_err()
}

const FULL: &str = r#"
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: payments
  namespace: shop
  labels: {team: money}
  annotations: {note: "read and ignored"}
  uid: 0b7c6a6e-0000-0000-0000-000000000000
  resourceVersion: "12345"
  creationTimestamp: "2024-01-01T00:00:00Z"
  managedFields: [{manager: kubectl, operation: Update}]
spec:
  hosts: [payments.example.com]
  addresses: [240.0.0.10, "2001:db8::10"]
  ports:
  - {number: 443, name: https, protocol: TLS}
  - {number: 8080, name: http-web, targetPort: 9090}
  - {number: 9000, name: grpc}
  - {number: 9001, name: grpc-web}
  - {number: 9002, name: metrics}
  - {number: 9003, name: admin, protocol: http2}
  - {number: 9004, name: thrift, protocol: THRIFT}
  location: MESH_INTERNAL
  resolution: STATIC
  exportTo: [".", shop-frontend]
  subjectAltNames: ["spiffe://cluster.local/ns/shop/sa/payments"]
  endpoints:
  - address: 10.0.0.1
    ports: {http-web: 7070}
    labels: {version: v1}
    locality: us-east1/b/rack1
    weight: 3
    network: net-a
    serviceAccount: payments
  - address: 10.0.0.2
    weight: 0
status:
  conditions: []
"#;

#[test]
fn every_service_entry_field_is_mapped() {
    let reg = only(FULL);
    let svc = &reg.service;
    assert_eq!(&*svc.hostname, "payments.example.com");
    assert_eq!(&*svc.namespace, "shop");
    assert_eq!(
        svc.addresses,
        vec![
            "240.0.0.10".parse::<IpAddr>().unwrap(),
            "2001:db8::10".parse().unwrap()
        ]
    );
    let ports: Vec<(&str, u16, Protocol, Option<u16>)> = svc
        .ports
        .iter()
        .map(|p| (&*p.name, p.number, p.protocol, p.target_port))
        .collect();
    assert_eq!(
        ports,
        vec![
            ("https", 443, Protocol::Tls, None),
            ("http-web", 8080, Protocol::Http, Some(9090)),
            ("grpc", 9000, Protocol::Grpc, None),
            ("grpc-web", 9001, Protocol::GrpcWeb, None),
            ("metrics", 9002, Protocol::Tcp, None),
            ("admin", 9003, Protocol::Http2, None),
            ("thrift", 9004, Protocol::Unsupported, None),
        ]
    );
    assert_eq!(svc.resolution, Resolution::ClientSideLb);
    assert!(!svc.mesh_external);
    assert_eq!(svc.labels.len(), 1);
    assert_eq!(svc.labels.get("team").map(|v| &**v), Some("money"));
    assert_eq!(
        svc.export_to,
        ExportTo(vec![".".into(), "shop-frontend".into()])
    );
    assert_eq!(
        svc.service_accounts,
        vec![Arc::<str>::from(
            "spiffe://cluster.local/ns/shop/sa/payments"
        )]
    );

    let first = &reg.endpoints[0];
    assert_eq!(&*first.address, "10.0.0.1");
    assert_eq!(first.ports.get("http-web"), Some(&7070));
    assert_eq!(first.labels.get("version").map(|v| &**v), Some("v1"));
    assert_eq!(first.locality, Locality::parse("us-east1/b/rack1"));
    assert_eq!(&*first.locality.subzone, "rack1");
    assert_eq!(first.weight, 3);
    assert_eq!(&*first.network, "net-a");
    assert_eq!(first.service_account.as_deref(), Some("payments"));
    assert_eq!(&*first.cluster_id, "");
    assert_eq!(first.health, Health::Healthy);

    let second = &reg.endpoints[1];
    assert_eq!(&*second.address, "10.0.0.2");
    assert_eq!(second.weight, 1, "a weight of 0 means the default, 1");
    assert!(second.locality.is_empty());
    assert_eq!(second.service_account, None);
}

fn entry(api_version: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: {api_version}\nkind: ServiceEntry\nmetadata:\n  name: e\nspec:\n  hosts: [e.example.com]\n  ports: [{{number: 80, name: http}}]\n{extra_spec}"
    )
}

#[test]
fn all_three_api_versions_are_read_and_defaults_follow_istio() {
    for version in ["v1", "v1beta1", "v1alpha3"] {
        let reg = only(&entry(&format!("networking.istio.io/{version}"), ""));
        assert_eq!(&*reg.service.namespace, "default");
        assert_eq!(reg.service.resolution, Resolution::Passthrough);
        assert!(reg.service.mesh_external, "MESH_EXTERNAL is the default");
        assert_eq!(reg.service.export_to, ExportTo::default());
        assert!(reg.endpoints.is_empty());
    }
}

#[test]
fn other_kinds_and_groups_are_skipped_without_error() {
    let text = format!(
        "{}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs}}\nspec: {{hosts: [x], http: []}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm}}\ndata: {{a: b}}\n---\napiVersion: networking.istio.io/v2\nkind: ServiceEntry\nmetadata: {{name: future}}\nspec: {{whatever: 1}}\n",
        entry("networking.istio.io/v1", "")
    );
    assert_eq!(registrations(&text).len(), 1);
}

#[test]
fn resolutions_and_locations_map_to_the_model() {
    for (written, want) in [
        ("STATIC", Resolution::ClientSideLb),
        ("DNS", Resolution::Dns),
        ("DNS_ROUND_ROBIN", Resolution::DnsRoundRobin),
        ("NONE", Resolution::Passthrough),
    ] {
        let text = entry(
            "networking.istio.io/v1",
            &format!("  resolution: {written}\n  location: MESH_EXTERNAL\n"),
        );
        let reg = only(&text);
        assert_eq!(reg.service.resolution, want, "{written}");
        assert!(reg.service.mesh_external);
    }
    let err = error(&entry("networking.istio.io/v1", "  resolution: MAGIC\n"));
    assert!(matches!(err, RegistryError::Malformed { .. }), "{err}");
    assert!(err.to_string().contains("MAGIC"), "{err}");
}

#[test]
fn dns_entries_without_endpoints_resolve_each_host() {
    for resolution in ["DNS", "DNS_ROUND_ROBIN"] {
        let text = format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: ext, namespace: web}}\nspec:\n  hosts: [a.example.com, b.example.com]\n  ports: [{{number: 443, name: tls, protocol: TLS}}]\n  resolution: {resolution}\n"
        );
        let view = registrations(&text);
        assert_eq!(view.len(), 2);
        for (key, reg) in &view {
            assert_eq!(&*key.namespace, "web");
            let addresses: Vec<&str> = reg.endpoints.iter().map(|e| &*e.address).collect();
            assert_eq!(addresses, vec![&*key.hostname]);
        }
    }
    // STATIC without endpoints has none; a wildcard host cannot be resolved.
    assert!(
        only(&entry("networking.istio.io/v1", "  resolution: STATIC\n"))
            .endpoints
            .is_empty()
    );
    let text = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: w}\nspec:\n  hosts: ['*.example.com']\n  resolution: DNS\n";
    let err = error(text);
    assert!(err.to_string().contains("spec.hosts[0]"), "{err}");
}

#[test]
fn addresses_are_ips_or_cidr_ranges_for_none_and_static_resolution() {
    let reg = only(&entry(
        "networking.istio.io/v1",
        "  addresses: [10.0.0.1, 10.1.2.3/16, 13.229.188.59/32, '2001:db8::/32', 001:db8::]\n",
    ));
    let addresses: Vec<String> = reg
        .service
        .addresses
        .iter()
        .map(ToString::to_string)
        .collect();
    // A range of one address is that address; host bits are dropped, as Go's ParseCIDR does.
    assert_eq!(addresses, ["10.0.0.1", "13.229.188.59", "1:db8::"]);
    let ranges: Vec<String> = reg
        .service
        .address_ranges
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(ranges, ["10.1.0.0/16", "2001:db8::/32"]);

    for (extra, why) in [
        ("  addresses: [db.internal]\n", "not an IP address"),
        ("  addresses: [1.2.3.4/99]\n", "not a CIDR range"),
        (
            "  addresses: [10.1.0.0/16]\n  resolution: DNS\n",
            "CIDR addresses are allowed only for NONE/STATIC resolution types",
        ),
    ] {
        let err = error(&entry("networking.istio.io/v1", extra));
        assert!(matches!(err, RegistryError::Invalid { .. }), "{err}");
        let shown = err.to_string();
        assert!(shown.contains(why), "{extra}: {shown}");
        assert!(shown.contains("spec.addresses[0]"), "{shown}");
        assert!(shown.contains("ServiceEntry default/e"), "{shown}");
    }
}

#[test]
fn the_rules_of_istio_s_crds_are_checked_with_their_messages() {
    for (extra, field, why) in [
        (
            "  workloadSelector: {labels: {app: '*'}}\n",
            "spec.workloadSelector.labels",
            "wildcard is not supported in selector",
        ),
        (
            "  endpoints: [{address: 10.0.0.1}]\n",
            "spec.endpoints",
            "NONE mode cannot set endpoints",
        ),
        (
            "  resolution: DNS_ROUND_ROBIN\n  endpoints: [{address: a.example.com}, {address: b.example.com}]\n",
            "spec.endpoints",
            "DNS_ROUND_ROBIN mode cannot have multiple endpoints",
        ),
        (
            "  resolution: STATIC\n  endpoints: [{address: 'unix://relative'}]\n",
            "spec.endpoints[0].address",
            "UDS must be an absolute path or abstract socket",
        ),
        (
            "  resolution: STATIC\n  endpoints: [{address: 10.0.0.1, ports: {'@': 80}}]\n",
            "spec.endpoints[0].ports.@",
            "port name must be valid",
        ),
    ] {
        let shown = error(&entry("networking.istio.io/v1", extra)).to_string();
        assert!(
            shown.contains(&format!("{field}: {why}")),
            "{extra}: {shown}"
        );
    }
    let ports = |ports: &str| {
        let text = format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: p}}\nspec:\n  hosts: [p.example.com]\n  ports: {ports}\n"
        );
        error(&text).to_string()
    };
    assert!(
        ports("[{number: 99999, name: a}]")
            .contains("spec.ports[0].number: port must be between 1-65535")
    );
    assert!(
        ports("[{number: 1, name: a, targetPort: 0}]")
            .contains("spec.ports[0].targetPort: port must be between 1-65535")
    );
    assert!(
        ports("[{number: 1, name: a}, {number: 1, name: b}]")
            .contains("spec.ports[1].number: port number cannot be duplicated")
    );
    let hosts = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: h}\nspec:\n  hosts: ['*']\n";
    assert!(
        error(hosts)
            .to_string()
            .contains("spec.hosts[0]: hostname cannot be wildcard")
    );
    // A partial wildcard is a host, as in Istio.
    let partial = only(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: h}\nspec:\n  hosts: ['*x']\n",
    );
    assert_eq!(&*partial.service.hostname, "*x");
}

#[test]
fn endpoints_and_a_workload_selector_together_are_refused() {
    let err = error(&entry(
        "networking.istio.io/v1",
        "  endpoints: [{address: 10.0.0.1}]\n  workloadSelector: {labels: {app: e}}\n",
    ));
    assert!(matches!(err, RegistryError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("spec.workloadSelector"), "{err}");
}

#[test]
fn unknown_spec_fields_are_errors_that_name_the_field() {
    let err = error(&entry("networking.istio.io/v1", "  resolutoin: DNS\n"));
    assert!(matches!(err, RegistryError::Invalid { .. }), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("spec.resolutoin: unknown field: Istio's ServiceEntry defines no such"),
        "{shown}"
    );
    assert!(
        shown.starts_with("bad.yaml: document 1 (line 1): invalid: ServiceEntry default/e:"),
        "{shown}"
    );

    let err = error(&entry(
        "networking.istio.io/v1",
        "  endpoints: [{address: 10.0.0.1, zone: a}]\n",
    ));
    assert!(err.to_string().contains("zone"), "{err}");
}

#[test]
fn validation_failures_name_the_origin_object_and_field() {
    let text = format!(
        "{}---\n{}",
        entry("networking.istio.io/v1", ""),
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: static\n  namespace: shop\nspec:\n  hosts: [s.example.com]\n  resolution: STATIC\n  endpoints:\n  - address: db.internal\n"
    );
    let err = error(&text);
    let RegistryError::Invalid { origin, detail } = &err else {
        panic!("expected Invalid, got {err:?}");
    };
    assert_eq!(origin, "bad.yaml: document 2 (line 9)");
    assert!(
        detail.starts_with("ServiceEntry shop/static: spec.endpoints[0].address:"),
        "{detail}"
    );
    assert!(detail.contains("not an IP address"), "{detail}");

    let err = error(&entry(
        "networking.istio.io/v1",
        "  resolution: STATIC\n  endpoints: [{address: 10.0.0.1, ports: {http: 0}}]\n",
    ));
    assert!(
        err.to_string().contains("spec.endpoints[0].ports.http"),
        "{err}"
    );

    let text = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: p}\nspec:\n  hosts: [p.example.com]\n  ports: [{number: 80, name: http}, {number: 81, name: http}]\n";
    assert!(error(text).to_string().contains("spec.ports[1].name"));

    let text = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: h}\nspec:\n  hosts: [ok.example.com, 'bad host']\n";
    assert!(error(text).to_string().contains("spec.hosts[1]"));

    let text =
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: h}\nspec: {}\n";
    assert!(error(text).to_string().contains("spec.hosts"));
}

#[test]
fn workload_entries_map_to_endpoints() {
    let text = "apiVersion: networking.istio.io/v1beta1\nkind: WorkloadEntry\nmetadata: {name: vm-1, namespace: shop}\nspec:\n  address: 10.0.1.1\n  ports: {http: 8081}\n  labels: {app: payments, version: v2}\n  locality: eu-west1/a\n  weight: 5\n  network: vm-net\n  serviceAccount: payments-vm\n";
    let file = contents("we.yaml", text).unwrap();
    assert!(file.entries.is_empty());
    let [workload] = &file.workloads[..] else {
        panic!("expected one workload: {file:?}");
    };
    assert_eq!(&*workload.namespace, "shop");
    assert_eq!(workload.name, "WorkloadEntry shop/vm-1");
    let ep = &workload.endpoint;
    assert_eq!(&*ep.address, "10.0.1.1");
    assert_eq!(ep.ports.get("http"), Some(&8081));
    // Its own two, and Istio's mark of a workload with a service account: it speaks mesh
    // mTLS (auto mTLS sends it TLS).
    assert_eq!(ep.labels.len(), 3, "{:?}", ep.labels);
    assert_eq!(
        ep.labels.get(crate::TLS_MODE_LABEL).map(|v| &**v),
        Some("istio")
    );
    assert_eq!(&*ep.locality.region, "eu-west1");
    assert_eq!(ep.weight, 5);
    assert_eq!(&*ep.network, "vm-net");
    assert_eq!(ep.service_account.as_deref(), Some("payments-vm"));

    // A label of its own wins; without a service account, no mark.
    for (spec, want) in [
        (
            "{address: 10.0.1.2, serviceAccount: sa, labels: {security.istio.io/tlsMode: disabled}}",
            Some("disabled"),
        ),
        ("{address: 10.0.1.3}", None),
    ] {
        let text = format!(
            "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {{name: w}}\nspec: {spec}\n"
        );
        let file = contents("we.yaml", &text).unwrap();
        let labels = &file.workloads[0].endpoint.labels;
        assert_eq!(
            labels.get(crate::TLS_MODE_LABEL).map(|v| &**v),
            want,
            "{spec}"
        );
    }

    let err = error(
        "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: x}\nspec: {labels: {a: b}}\n",
    );
    assert!(
        err.to_string()
            .contains("WorkloadEntry default/x: spec.address: Address is required"),
        "{err}"
    );
}

#[test]
fn a_workload_entry_with_only_a_network_is_an_endpoint_without_an_address() {
    let text = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: vm}\nspec:\n  hosts: [vm.example.com]\n  resolution: STATIC\n  workloadSelector: {labels: {app: vm}}\n---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: remote}\nspec: {network: east, labels: {app: vm}, serviceAccount: vm, weight: 3}\n---\napiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: local}\nspec: {address: 10.0.0.9, labels: {app: vm}}\n";
    let reg = only(text);
    let endpoints: Vec<(&str, &str, u32)> = reg
        .endpoints
        .iter()
        .map(|e| (&*e.address, &*e.network, e.weight))
        .collect();
    assert_eq!(endpoints, [("", "east", 3), ("10.0.0.9", "", 1)]);
    assert!(reg.endpoints[0].network_only());
    // Its service account makes it a mesh workload, as with an address.
    assert_eq!(
        reg.endpoints[0]
            .labels
            .get(crate::TLS_MODE_LABEL)
            .map(|v| &**v),
        Some("istio")
    );
    // So is an inline endpoint with only a network.
    let inline = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: vm}\nspec:\n  hosts: [vm.example.com]\n  resolution: STATIC\n  endpoints: [{network: east}, {address: 10.0.0.9}]\n";
    let reg = only(inline);
    let networks: Vec<(&str, &str)> = reg
        .endpoints
        .iter()
        .map(|e| (&*e.address, &*e.network))
        .collect();
    assert_eq!(networks, [("", "east"), ("10.0.0.9", "")]);
    for (spec, why) in [
        (
            "{address: 'unix:///dir/'}",
            "spec.address: UDS may not be a dir",
        ),
        (
            "{address: 'unix://@sock', ports: {http: 80}}",
            "spec.ports: UDS may not include ports",
        ),
        (
            "{address: 1.1.1.1, ports: {http: 99999}}",
            "spec.ports.http: port must be between 1-65535",
        ),
    ] {
        let text = format!(
            "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {{name: w}}\nspec: {spec}\n"
        );
        assert!(
            error(&text).to_string().contains(why),
            "{spec}: {}",
            error(&text)
        );
    }
}
