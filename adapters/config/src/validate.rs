//! Validation of configuration objects: the rules of Istio's own validation
//! (`pkg/config/validation` in istio/istio), plus refusals for what wayfinder cannot serve yet.
//!
//! [`validate`] returns every [`Problem`] it finds rather than stopping at the first, so one edit
//! can fix them all. An error rejects the object (its source keeps the last good version); a
//! warning is reported and the object is used. Fields wayfinder reads but does not act on yet,
//! and deprecated fields, are warnings, so configuration written for Istio still loads.
//!
//! Field paths are written as the user wrote them in YAML: `metadata.name`,
//! `spec.http[1].route[0].weight`, `spec.http[0].match[0].headers.x-user`.
//!
//! The rules live beside the kind they check: `virtual_service` (hosts, TLS and TCP rules),
//! `http` and its helpers (HTTP rules), `destination_rule` and `traffic_policy`, `gateway`,
//! `sidecar`, `workload_group`, `peer_authentication`; `names` holds the host-name and label
//! grammar they share and `regex` the RE2 check.

mod attachment;
mod authorization_policy;
mod destination_rule;
mod envoy_filter;
mod gateway;
mod http;
mod http_match;
mod http_policy;
pub(crate) mod names;
mod peer_authentication;
mod proxy_config;
mod regex;
mod request_authentication;
mod sidecar;
mod traffic_policy;
mod virtual_service;
mod workload_group;

use std::collections::BTreeMap;
use std::fmt;

use super::{ConfigObject, ConfigSpec, Duration, Percent};

/// A problem with an object: the field path and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Path of the field, e.g. `spec.http[0].route[1].weight`.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// True for problems that make the object unusable; false for warnings.
    pub fatal: bool,
}

impl Problem {
    /// A problem that rejects the object.
    pub fn error(field: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            field: field.into(),
            message: message.into(),
            fatal: true,
        }
    }

    /// A problem worth telling the user about that does not reject the object.
    pub fn warning(field: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            fatal: false,
            ..Problem::error(field, message)
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = if self.fatal { "error" } else { "warning" };
        write!(f, "{level}: {}: {}", self.field, self.message)
    }
}

/// Checks a mesh-wide `localityLbSetting` (MeshConfig's) at `path`, as a DestinationRule's
/// is checked, but for the warning about outlier detection (a rule gives it, not the mesh).
pub fn locality_lb_setting(path: &str, setting: &crate::LocalityLbSetting) -> Vec<Problem> {
    let mut p = Problems::default();
    traffic_policy::locality::check(&mut p, path, setting, true);
    p.0
}

/// Checks a mesh-wide `exportTo` default (MeshConfig's `default*ExportTo`) at `path`, as an
/// object's `exportTo` is checked (`.`, `*` or namespace names, no repeats, `*` alone).
pub fn export_to(path: &str, list: &[String]) -> Vec<Problem> {
    let mut p = Problems::default();
    names::check_export_to(&mut p, path, "(the object's)", list);
    p.0
}

/// True if any of `problems` rejects the object.
pub fn has_errors(problems: &[Problem]) -> bool {
    problems.iter().any(|p| p.fatal)
}

/// Checks an object; returns every problem found, errors and warnings, in the order of the
/// fields.
pub fn validate(object: &ConfigObject) -> Vec<Problem> {
    let mut p = Problems::default();
    check_meta(object, &mut p);
    let namespace = &*object.meta.namespace;
    match &object.spec {
        ConfigSpec::VirtualService(vs) => virtual_service::check(vs, namespace, &mut p),
        ConfigSpec::DestinationRule(dr) => destination_rule::check(dr, namespace, &mut p),
        ConfigSpec::Gateway(gw) => gateway::check(gw, &mut p),
        ConfigSpec::Sidecar(sc) => sidecar::check(sc, &mut p),
        ConfigSpec::WorkloadGroup(wg) => workload_group::check(wg, &mut p),
        ConfigSpec::PeerAuthentication(pa) => peer_authentication::check(pa, &mut p),
        ConfigSpec::AuthorizationPolicy(ap) => authorization_policy::check(ap, &mut p),
        ConfigSpec::RequestAuthentication(ra) => request_authentication::check(ra, &mut p),
        ConfigSpec::EnvoyFilter(ef) => envoy_filter::check(ef, &mut p),
        ConfigSpec::ProxyConfig(pc) => proxy_config::check(pc, &mut p),
    }
    p.0
}

/// Name and namespace become parts of Kubernetes-style keys and of generated names, so both
/// must be DNS-1123 labels, as the Kubernetes API server requires.
fn check_meta(object: &ConfigObject, p: &mut Problems) {
    for (field, value) in [
        ("metadata.name", &object.meta.name),
        ("metadata.namespace", &object.meta.namespace),
    ] {
        if value.is_empty() {
            p.error(field, "is required");
        } else if !names::is_dns1123_label(value) {
            p.error(
                field,
                format!(
                    "{value:?} is not a DNS-1123 label: at most 63 lowercase letters, digits \
                     and '-', starting and ending with a letter or digit"
                ),
            );
        }
    }
}

/// The problems found so far, with shorthands for the messages several kinds share.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn error(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem::error(field, message));
    }

    fn warn(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem::warning(field, message));
    }

    /// A field wayfinder reads but does not act on yet.
    fn ignored(&mut self, field: impl Into<String>) {
        self.warn(field, "not supported yet: wayfinder ignores this field");
    }

    /// A field Istio deprecated in favour of `instead`; wayfinder still honours it.
    fn deprecated(&mut self, field: impl Into<String>, instead: &str) {
        self.warn(field, format!("deprecated: use {instead} instead"));
    }
}

/// The path of entry `key` of the map at `path`: `headers.x-user`, or `headers["a.b"]` when the
/// key would make the path ambiguous.
fn key_path(path: &str, key: &str) -> String {
    if key.is_empty() || key.contains(['.', '[', ']', '"', ' ']) {
        format!("{path}[{key:?}]")
    } else {
        format!("{path}.{key}")
    }
}

/// The index where `key` was first seen, if before `index`; otherwise records it. Duplicate
/// checks name the entry a repeat collides with.
fn earlier<K: Ord>(seen: &mut BTreeMap<K, usize>, key: K, index: usize) -> Option<usize> {
    let first = *seen.entry(key).or_insert(index);
    (first != index).then_some(first)
}

/// Durations below a millisecond are refused as in Istio: Envoy rounds most of them to
/// milliseconds, and zero means "disabled" in some fields and "never" in others.
fn check_duration(p: &mut Problems, field: impl Into<String>, d: &Duration) {
    if d.0 < std::time::Duration::from_millis(1) {
        p.error(field, format!("{d} is too short: at least 1ms"));
    }
}

/// A port number, 1 to 65535.
fn check_port(p: &mut Problems, field: impl Into<String>, number: u32) {
    if !(1..=65535).contains(&number) {
        p.error(field, format!("port {number} is out of range 1..=65535"));
    }
}

/// A `Percent` is 0, or 0.0001 to 100: Envoy's finest fraction is one in a million.
fn check_percent(p: &mut Problems, field: &str, percent: &Percent) {
    let v = percent.value;
    if !(0.0..=100.0).contains(&v) || (v > 0.0 && v < 0.0001) {
        p.error(
            format!("{field}.value"),
            format!("{v} is not a percentage: expected 0, or 0.0001 to 100"),
        );
    }
}

#[cfg(test)]
mod tests;
