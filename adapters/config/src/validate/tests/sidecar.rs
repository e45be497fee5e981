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
  tls: {mode: SIMPLE}
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
            "spec.ingress[0].tls",
            "spec.inboundConnectionPool",
            "spec.outboundTrafficPolicy.egressProxy",
        ],
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
