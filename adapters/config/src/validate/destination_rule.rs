//! DestinationRule: the host, subsets and where traffic policies appear. The policies
//! themselves are checked in `traffic_policy`.

use std::collections::BTreeMap;

use super::names::{check_export_to, check_labels, check_wildcard_domain, is_dns_label};
use super::{Problems, check_port, earlier, traffic_policy};
use crate::{DestinationRule, PortTrafficPolicy, TrafficPolicy};

/// Checks a DestinationRule in `namespace`.
pub(super) fn check(dr: &DestinationRule, namespace: &str, p: &mut Problems) {
    if dr.host.is_empty() {
        p.error("spec.host", "is required");
    } else if let Err(e) = check_wildcard_domain(&dr.host) {
        p.error("spec.host", e);
    }
    if let Some(policy) = &dr.traffic_policy {
        check_policy(p, "spec.trafficPolicy", policy);
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, subset) in dr.subsets.iter().enumerate() {
        let path = format!("spec.subsets[{i}]");
        let name = &subset.name;
        if name.is_empty() {
            p.error(format!("{path}.name"), "is required");
        } else if !is_dns_label(name) {
            p.error(
                format!("{path}.name"),
                format!(
                    "subset name {name:?} is not a DNS label: it becomes part of cluster names"
                ),
            );
        } else if let Some(first) = earlier(&mut names, name.as_str(), i) {
            p.error(
                format!("{path}.name"),
                format!("subset {name:?} is already defined by spec.subsets[{first}]"),
            );
        }
        check_labels(p, &format!("{path}.labels"), &subset.labels);
        if let Some(policy) = &subset.traffic_policy {
            check_policy(p, &format!("{path}.trafficPolicy"), policy);
        }
    }
    check_export_to(p, "spec.exportTo", namespace, &dr.export_to);
    if dr.workload_selector.is_some() {
        p.ignored("spec.workloadSelector");
    }
}

/// A whole traffic policy, at the top of the rule or in a subset.
fn check_policy(p: &mut Problems, path: &str, t: &TrafficPolicy) {
    let empty = t.load_balancer.is_none()
        && t.connection_pool.is_none()
        && t.outlier_detection.is_none()
        && t.tls.is_none()
        && t.port_level_settings.is_empty()
        && t.tunnel.is_none()
        && t.proxy_protocol.is_none();
    if empty {
        p.error(path, "a traffic policy needs at least one setting");
    }
    let parts = traffic_policy::Parts {
        load_balancer: t.load_balancer.as_ref(),
        connection_pool: t.connection_pool.as_ref(),
        outlier_detection: t.outlier_detection.as_ref(),
        tls: t.tls.as_ref(),
    };
    parts.check(p, path);
    check_port_level(
        p,
        &format!("{path}.portLevelSettings"),
        &t.port_level_settings,
    );
    if t.tunnel.is_some() {
        p.ignored(format!("{path}.tunnel"));
    }
    if t.proxy_protocol.is_some() {
        p.ignored(format!("{path}.proxyProtocol"));
    }
}

/// Per-port overrides: each names a distinct port and sets something.
fn check_port_level(p: &mut Problems, path: &str, settings: &[PortTrafficPolicy]) {
    let mut ports: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, s) in settings.iter().enumerate() {
        let path = format!("{path}[{i}]");
        match s.port {
            None => p.error(format!("{path}.port"), "is required"),
            Some(port) => {
                let field = format!("{path}.port.number");
                check_port(p, &field, port.number);
                if let Some(first) = earlier(&mut ports, port.number, i) {
                    p.error(
                        field,
                        format!("port {} already has settings at index {first}", port.number),
                    );
                }
            }
        }
        let parts = traffic_policy::Parts {
            load_balancer: s.load_balancer.as_ref(),
            connection_pool: s.connection_pool.as_ref(),
            outlier_detection: s.outlier_detection.as_ref(),
            tls: s.tls.as_ref(),
        };
        if parts.is_empty() {
            p.error(
                &path,
                "port settings need at least one of loadBalancer, connectionPool, \
                 outlierDetection and tls",
            );
        }
        parts.check(p, &path);
    }
}
