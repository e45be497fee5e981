//! `WorkloadGroup`, as Istio's `ValidateWorkloadGroup` checks it: a template is required (not
//! checked as a WorkloadEntry, since entries fill in what it lacks), and a probe has exactly
//! one handler of those Istio runs (`httpGet`, `tcpSocket`, `exec`) with sane numbers. Beyond
//! Istio: a template port that no port can be is refused (an entry with it could not be
//! served), and a template address is ignored with a warning.

use super::Problems;
use crate::workload_group::{ReadinessProbe, WorkloadGroup};

pub(super) fn check(wg: &WorkloadGroup, p: &mut Problems) {
    let Some(t) = &wg.template else {
        p.error("spec.template", "is required");
        return;
    };
    if !t.address.is_empty() {
        p.warn(
            "spec.template.address",
            "ignored: each entry's address is its proxy's",
        );
    }
    for (name, port) in &t.ports {
        port_in_range(&format!("spec.template.ports.{name}"), *port, p);
    }
    if let Some(probe) = &wg.probe {
        check_probe(probe, p);
    }
}

fn port_in_range(field: &str, port: u32, p: &mut Problems) {
    if !(1..=65535).contains(&port) {
        p.error(
            field.to_string(),
            format!("{port} is not a port (1 to 65535)"),
        );
    }
}

fn check_probe(probe: &ReadinessProbe, p: &mut Problems) {
    for (field, value) in [
        ("periodSeconds", probe.period_seconds),
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ] {
        if value < 0 {
            p.error(format!("spec.probe.{field}"), "must be non-negative");
        }
    }
    if probe.grpc.is_some() {
        p.error("spec.probe.grpc", "gRPC health checks are not supported");
    }
    let handlers = [
        probe.http_get.is_some(),
        probe.tcp_socket.is_some(),
        probe.exec.is_some(),
    ];
    match handlers.iter().filter(|h| **h).count() {
        1 => {}
        0 if probe.grpc.is_some() => {}
        _ => p.error(
            "spec.probe",
            "needs exactly one of httpGet, tcpSocket and exec",
        ),
    }
    if let Some(h) = &probe.http_get {
        port_in_range("spec.probe.httpGet.port", h.port, p);
        if !h.scheme.is_empty() && h.scheme != "HTTP" && h.scheme != "HTTPS" {
            p.error(
                "spec.probe.httpGet.scheme",
                format!("{:?} must be one of \"HTTPS\", \"HTTP\"", h.scheme),
            );
        }
        for (i, header) in h.http_headers.iter().enumerate() {
            let valid = !header.name.is_empty()
                && header
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if !valid {
                p.error(
                    format!("spec.probe.httpGet.httpHeaders[{i}].name"),
                    format!("{:?} is not a header name", header.name),
                );
            }
        }
    }
    if let Some(t) = &probe.tcp_socket {
        port_in_range("spec.probe.tcpSocket.port", t.port, p);
    }
    if let Some(e) = &probe.exec
        && e.command.is_empty()
    {
        p.error("spec.probe.exec.command", "is required");
    }
}
