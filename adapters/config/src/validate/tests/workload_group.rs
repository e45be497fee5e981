//! WorkloadGroup: Istio's sample, and each rule with its field.

use super::{object, validate};
use crate::ConfigSpec;

fn problems(yaml: &str) -> Vec<String> {
    let object = object(yaml, |wg| ConfigSpec::WorkloadGroup(Box::new(wg)));
    validate(&object).iter().map(ToString::to_string).collect()
}

#[test]
fn istio_s_sample_group_is_valid() {
    let sample = "metadata: {labels: {app.kubernetes.io/name: reviews}}\n\
                  template: {ports: {grpc: 3550, http: 8080}, serviceAccount: default}\n\
                  probe: {initialDelaySeconds: 5, periodSeconds: 4, httpGet: {path: /ready, port: 8080}}\n";
    assert_eq!(problems(sample), Vec::<String>::new());
}

#[test]
fn each_rule_names_its_field() {
    let cases = [
        ("metadata: {}\n", "error: spec.template: is required"),
        (
            "template: {address: 1.2.3.4}\n",
            "warning: spec.template.address: ignored: each entry's address is its proxy's",
        ),
        (
            "template: {ports: {http: 70000}}\n",
            "error: spec.template.ports.http: 70000 is not a port (1 to 65535)",
        ),
        (
            "template: {}\nprobe: {tcpSocket: {port: 1}, exec: {command: [x]}}\n",
            "error: spec.probe: needs exactly one of httpGet, tcpSocket and exec",
        ),
        (
            "template: {}\nprobe: {periodSeconds: -1, tcpSocket: {port: 1}}\n",
            "error: spec.probe.periodSeconds: must be non-negative",
        ),
        (
            "template: {}\nprobe: {httpGet: {port: 0}}\n",
            "error: spec.probe.httpGet.port: 0 is not a port (1 to 65535)",
        ),
        (
            "template: {}\nprobe: {httpGet: {port: 80, scheme: FTP}}\n",
            "error: spec.probe.httpGet.scheme: \"FTP\" must be one of \"HTTPS\", \"HTTP\"",
        ),
        (
            "template: {}\nprobe: {exec: {command: []}}\n",
            "error: spec.probe.exec.command: is required",
        ),
        (
            "template: {}\nprobe: {grpc: {port: 80}}\n",
            "error: spec.probe.grpc: gRPC health checks are not supported",
        ),
    ];
    for (yaml, expected) in cases {
        assert_eq!(problems(yaml), [expected], "{yaml}");
    }
}
