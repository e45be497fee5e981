//! Sidecar: egress hosts, the catch-all listener and the outbound traffic policy.

use super::{assert_errors, assert_warnings, sc, validate};

#[test]
fn namespace_default_is_valid() {
    let o = sc(r#"
egress:
- hosts: ["./*", "istio-system/*"]
outboundTrafficPolicy: {mode: REGISTRY_ONLY}
"#);
    let problems = validate(&o);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn egress_hosts_and_listeners() {
    assert_errors(
        sc,
        &[
            ("{}", &["spec"]),
            (
                "{egress: [{hosts: ['*/*', '~/api.example.com', '~other/*', '*/*.example.com']}]}",
                &[],
            ),
            (
                "{egress: [{hosts: [default]}]}",
                &["spec.egress[0].hosts[0]"],
            ),
            (
                "{egress: [{hosts: ['Bad_ns/*', ./reviews, './*foo.example.com', '/x.com']}]}",
                &[
                    "spec.egress[0].hosts[0]",
                    "spec.egress[0].hosts[1]",
                    "spec.egress[0].hosts[2]",
                    "spec.egress[0].hosts[3]",
                ],
            ),
            ("{egress: [{hosts: []}]}", &["spec.egress[0].hosts"]),
            (
                "{egress: [{hosts: ['./*']}, {hosts: ['*/*']}]}",
                &["spec.egress[0]", "spec.egress[1]"],
            ),
            (
                "{egress: [{hosts: ['./*']}, {port: {number: 80}, hosts: ['./*']}]}",
                &["spec.egress[0]"],
            ),
            (
                "{outboundTrafficPolicy: {mode: ALLOW_ANY_DYNAMIC_DNS}}",
                &["spec.outboundTrafficPolicy.mode"],
            ),
            (
                "{workloadSelector: {labels: {'': x}}, egress: [{hosts: ['./*']}]}",
                &["spec.workloadSelector.labels[\"\"]"],
            ),
        ],
    );
}

#[test]
fn unsupported_fields_warn() {
    let o = sc(r#"
workloadSelector: {labels: {}}
ingress:
- port: {number: 9080, protocol: HTTP, name: http}
  defaultEndpoint: 127.0.0.1:8080
  bind: 0.0.0.0
inboundConnectionPool: {tcp: {maxConnections: 10}}
egress:
- port: {number: 3306, protocol: MYSQL, name: mysql}
  bind: 127.0.0.1
  captureMode: NONE
  hosts: ["*/mysql.example.com"]
- hosts: ["./*"]
outboundTrafficPolicy:
  mode: ALLOW_ANY
  egressProxy: {host: egress.example.com}
"#);
    assert_warnings(
        &o,
        &[
            "spec.workloadSelector.labels",
            "spec.ingress[0].bind",
            "spec.outboundTrafficPolicy.egressProxy",
        ],
    );
}

#[test]
fn inbound_connection_pools_are_checked_as_a_destination_rule_s() {
    let o = sc(r#"
ingress:
- port: {number: 9080, protocol: HTTP, name: http}
  defaultEndpoint: 127.0.0.1:8080
  connectionPool: {http: {http2MaxRequests: 0}}
inboundConnectionPool: {}
"#);
    let errors: Vec<String> = validate(&o)
        .into_iter()
        .filter(|p| p.fatal)
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        errors,
        [
            "error: spec.ingress[0].connectionPool.http.http2MaxRequests: must be at least 1",
            "error: spec.inboundConnectionPool: a connection pool needs tcp or http settings",
        ]
    );
}

#[test]
fn ingress_tls_terminates_with_files_on_a_tls_port_only() {
    let errors = |tls: &str, protocol: &str| -> Vec<String> {
        let o = sc(&format!(
            "ingress:\n- port: {{number: 8443, protocol: {protocol}, name: p}}\n  \
             defaultEndpoint: 127.0.0.1:8080\n  tls: {tls}\n"
        ));
        validate(&o)
            .into_iter()
            .filter(|p| p.fatal)
            .map(|p| p.to_string())
            .collect()
    };
    let files = "serverCertificate: /etc/certs/tls.crt, privateKey: /etc/certs/tls.key";
    assert_eq!(
        errors(&format!("{{mode: SIMPLE, {files}}}"), "HTTPS"),
        Vec::<String>::new()
    );
    assert_eq!(
        errors(&format!("{{mode: SIMPLE, {files}}}"), "HTTP"),
        ["error: spec.ingress[0].tls: TLS settings need an HTTPS or TLS port"]
    );
    assert_eq!(
        errors("{mode: SIMPLE, credentialName: web}", "TLS"),
        [
            "error: spec.ingress[0].tls.credentialName: is not supported in a sidecar's ingress \
             TLS (as in Istio)"
        ]
    );
    assert_eq!(
        errors("{mode: ISTIO_MUTUAL}", "TLS"),
        [
            "error: spec.ingress[0].tls.mode: ISTIO_MUTUAL cannot be a sidecar's ingress TLS: \
             SIMPLE, MUTUAL or OPTIONAL_MUTUAL"
        ]
    );
    assert_eq!(
        errors(&format!("{{mode: MUTUAL, {files}}}"), "TLS"),
        [
            "error: spec.ingress[0].tls.caCertificates: MUTUAL and OPTIONAL_MUTUAL need the CA \
             bundle that verifies client certificates"
        ]
    );
}

#[test]
fn egress_ports_bind_and_capture_mode_are_checked() {
    let o = sc(r#"
egress:
- port: {number: 70000, protocol: SOAP}
  bind: localhost
  captureMode: SOMETIMES
  hosts: ["./*"]
- port: {number: 9080}
  hosts: ["./*"]
- port: {number: 9080}
  hosts: ["./*"]
- bind: 127.0.0.1
  hosts: ["./*"]
"#);
    let errors: Vec<String> = validate(&o)
        .into_iter()
        .filter(|p| p.fatal)
        .map(|p| p.field)
        .collect();
    assert_eq!(
        errors,
        [
            "spec.egress[0].port.number",
            "spec.egress[0].port.protocol",
            "spec.egress[0].bind",
            "spec.egress[0].captureMode",
            "spec.egress[2].port.number",
            "spec.egress[3]",
        ]
    );
}

#[test]
fn ingress_listeners_need_a_port_and_a_workload_endpoint() {
    let o = sc(r#"
ingress:
- defaultEndpoint: 127.0.0.1:8080
- port: {number: 9080, protocol: HTTP}
  defaultEndpoint: 10.0.0.1:8080
- port: {number: 9080, protocol: HTTP}
  defaultEndpoint: unix://relative
- port: {number: 9090, protocol: TCP}
  defaultEndpoint: 0.0.0.0:9090
- port: {number: 9091}
  defaultEndpoint: unix:///var/run/app.sock
"#);
    let errors: Vec<String> = validate(&o)
        .into_iter()
        .filter(|p| p.fatal)
        .map(|p| p.field)
        .collect();
    assert_eq!(
        errors,
        [
            "spec.ingress[0].port",
            "spec.ingress[1].defaultEndpoint",
            "spec.ingress[2].port.number",
            "spec.ingress[2].defaultEndpoint",
        ]
    );
}
