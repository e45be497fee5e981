//! The analyzers on small files read by the offline check, with what a registry knows.

use std::path::Path;

use wayfinder_registry::{Endpoint, Protocol, Registration, Service};

use super::*;
use crate::check::Checker;

/// Analyses `files` (name, text) with `registrations` known; the messages as printed.
fn analyze(files: &[(&str, &str)], registrations: Vec<Registration>) -> Vec<String> {
    let mut checker = Checker::analysing();
    for (name, text) in files {
        checker.file(Path::new(name), text.as_bytes());
    }
    let known = Known {
        registrations,
        ..Known::default()
    };
    let analysis = checker.analyze(&known);
    assert!(analysis.unparsed.is_empty(), "{:?}", analysis.unparsed);
    analysis.messages.iter().map(ToString::to_string).collect()
}

/// `ratings` of `default` on port 9080, with one workload `app=ratings,version=v1`.
fn ratings() -> Registration {
    let service = Service::new("ratings.default.svc.cluster.local", "default").with_port(
        "http",
        9080,
        Protocol::Http,
    );
    let endpoint = Endpoint::new("10.0.0.1")
        .with_label("app", "ratings")
        .with_label("version", "v1");
    Registration::new(service, vec![endpoint])
}

const ROUTES: &str = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ratings
spec:
  hosts: [ratings]
  http:
  - route:
    - destination:
        host: ratings
        subset: v1
";

#[test]
fn a_host_known_to_a_registry_is_found_and_its_missing_subset_reported() {
    let messages = analyze(&[("vs.yaml", ROUTES)], vec![ratings()]);
    assert_eq!(
        messages,
        [
            "Error [IST0101] (VirtualService default/ratings vs.yaml:11) Referenced host+subset \
             in destinationrule not found: \"ratings+v1\""
        ]
    );
}

#[test]
fn without_the_registry_the_host_is_unknown() {
    let messages = analyze(&[("vs.yaml", ROUTES)], Vec::new());
    assert!(
        messages.contains(
            &"Error [IST0101] (VirtualService default/ratings vs.yaml:10) Referenced host not \
              found: \"ratings\""
                .to_string()
        ),
        "{messages:#?}"
    );
}

#[test]
fn a_service_entry_among_the_files_defines_a_host_and_a_destination_rule_its_subset() {
    let entry = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: ratings
spec:
  hosts: [ratings.default.svc.cluster.local]
  ports: [{number: 9080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: ratings
spec:
  host: ratings
  subsets: [{name: v1, labels: {version: v1}}]
";
    let messages = analyze(&[("vs.yaml", ROUTES), ("se.yaml", entry)], Vec::new());
    assert!(messages.is_empty(), "{messages:#?}");
}

#[test]
fn a_sidecar_selector_counts_only_workloads_of_its_namespace() {
    let sidecar = |namespace: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: s\n  \
             namespace: {namespace}\nspec:\n  workloadSelector:\n    labels:\n      app: ratings\n  egress: [{{hosts: [./*]}}]\n"
        )
    };
    let found = analyze(&[("s.yaml", &sidecar("default"))], vec![ratings()]);
    assert!(found.is_empty(), "{found:#?}");
    assert_eq!(
        analyze(&[("s.yaml", &sidecar("shop"))], vec![ratings()]),
        [
            "Error [IST0101] (Sidecar shop/s s.yaml:9) Referenced selector not found: \"app=ratings\""
        ]
    );
}

#[test]
fn a_gateway_credential_is_a_secret_of_its_workloads_namespace() {
    let gateway = "\
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: shop
spec:
  selector: {app: ratings}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ['*']
    tls: {mode: SIMPLE, credentialName: cert}
";
    let secret = |namespace: &str| {
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: cert\n  namespace: {namespace}\n")
    };
    // The gateway's workload runs in `default`, whatever the Gateway's namespace.
    let found = analyze(
        &[("gw.yaml", gateway), ("s.yaml", &secret("default"))],
        vec![ratings()],
    );
    assert!(found.is_empty(), "{found:#?}");
    assert_eq!(
        analyze(
            &[("gw.yaml", gateway), ("s.yaml", &secret("shop"))],
            vec![ratings()]
        ),
        [
            "Error [IST0101] (Gateway shop/gw gw.yaml:11) Referenced credentialName not found: \
             \"cert\""
        ]
    );
}

#[test]
fn mtls_conflicts_follow_the_workloads_mode_and_auto_mtls_never_conflicts() {
    let rule = |tls: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: r\n\
             spec:\n  host: ratings\n{tls}"
        )
    };
    let policy = |mode: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata:\n  name: p\n\
             spec:\n  mtls: {{mode: {mode}}}\n"
        )
    };
    let disable = rule("  trafficPolicy:\n    tls: {mode: DISABLE}\n");
    let mutual = rule("  trafficPolicy:\n    tls: {mode: ISTIO_MUTUAL}\n");
    let auto = rule("");
    let run = |dr: &str, pa: &str| analyze(&[("dr.yaml", dr), ("pa.yaml", pa)], vec![ratings()]);
    let strict = policy("STRICT");
    let conflict = run(&disable, &strict);
    assert_eq!(conflict.len(), 1, "{conflict:#?}");
    assert!(
        conflict[0].starts_with("Error [IST0113] (DestinationRule default/r dr.yaml:8)")
            && conflict[0].contains(
                "mTLS must be false but the PeerAuthentication \"default/p\" specifies STRICT"
            ),
        "{conflict:#?}"
    );
    assert_eq!(run(&mutual, &policy("DISABLE")).len(), 1);
    assert!(run(&mutual, &strict).is_empty());
    assert!(run(&disable, &policy("PERMISSIVE")).is_empty());
    assert!(run(&auto, &strict).is_empty());
}

#[test]
fn exit_status_follows_istioctl() {
    let message = |code: Code| Message {
        code,
        subject: Subject {
            kind: "VirtualService".into(),
            namespace: "default".into(),
            name: "x".into(),
            path: Path::new("x.yaml").into(),
            line: 1,
        },
        text: String::new(),
    };
    let mut analysis = Analysis::default();
    assert_eq!(analysis.exit_status(Level::Error), 0);
    analysis
        .messages
        .push(message(Code::UnknownDestinationRuleHost));
    assert_eq!(analysis.exit_status(Level::Error), 0);
    assert_eq!(analysis.exit_status(Level::Warning), EXIT_ISSUES);
    assert_eq!(analysis.exit_status(Level::Info), EXIT_ISSUES);
    analysis
        .messages
        .push(message(Code::ReferencedResourceNotFound));
    assert_eq!(analysis.exit_status(Level::Error), EXIT_ISSUES);
}

#[test]
fn wildcard_services_and_destination_rules_cover_the_hosts_under_them() {
    let files = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: example
spec:
  hosts: ['*.example.com']
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: NONE
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: example
spec:
  host: '*.example.com'
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: api
spec:
  hosts: [api.example.com]
  tls:
  - match: [{sniHosts: [api.example.com]}]
    route:
    - destination: {host: api.example.com, subset: v1}
      weight: 50
    - destination: {host: api.example.org, subset: v1}
      weight: 50
";
    assert_eq!(
        analyze(&[("w.yaml", files)], Vec::new()),
        [
            "Error [IST0101] (VirtualService default/api w.yaml:29) Referenced host not found: \
             \"api.example.org\"",
            "Error [IST0101] (VirtualService default/api w.yaml:29) Referenced host+subset in \
             destinationrule not found: \"api.example.org+v1\""
        ]
    );
}

#[test]
fn only_the_object_in_force_of_a_duplicated_key_is_analysed() {
    let to = |host: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: r\n\
             spec:\n  hosts: [ratings]\n  http:\n  - route:\n    - destination: {{host: {host}}}\n"
        )
    };
    let messages = analyze(
        &[("a.yaml", &to("ratings")), ("b.yaml", &to("nowhere"))],
        vec![ratings()],
    );
    assert_eq!(
        messages,
        [
            "Error [IST0106] (VirtualService default/r b.yaml:1) Schema validation error: \
             duplicate, first defined at a.yaml: document 1 (line 1)"
        ]
    );
}
