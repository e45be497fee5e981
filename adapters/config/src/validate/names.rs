//! The grammar of the names configuration is made of: DNS labels, host names with wildcards,
//! `namespace/host` scopes, gateway references, label selectors and `exportTo` lists.
//!
//! Each check follows the Istio function of the same purpose (`agent.ValidateWildcardDomain`,
//! `ValidateNamespaceSlashWildcardHostname`, `labels.Instance.Validate`, …) so that a name
//! Istio accepts is accepted here too.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::{Problems, key_path};

/// A Kubernetes DNS-1123 label: 1 to 63 lowercase letters, digits and `-`, alphanumeric at both
/// ends. Object names and namespaces use it.
pub(super) fn is_dns1123_label(s: &str) -> bool {
    is_label(s, false)
}

/// Istio's DNS label, which also allows upper case (host-name labels, subset names).
pub(super) fn is_dns_label(s: &str) -> bool {
    is_label(s, true)
}

/// A host that may start with a wildcard label (`*`, `*.example.com`, `*-api.example.com`) or be
/// a short name (`reviews`), as VirtualService and DestinationRule hosts may.
pub(super) fn check_wildcard_domain(host: &str) -> Result<(), String> {
    check_length(host)?;
    let (first, rest) = match host.split_once('.') {
        Some((first, rest)) => (first, Some(rest)),
        None => (host, None),
    };
    if !is_wildcard_label(first) {
        return Err(format!(
            "{host:?} is not a valid host: label {first:?} is invalid"
        ));
    }
    rest.map_or(Ok(()), |rest| check_labels_of(host, rest))
}

/// A host name without wildcards; a single label is allowed.
pub(super) fn check_fqdn(host: &str) -> Result<(), String> {
    check_length(host)?;
    check_labels_of(host, host)
}

/// True for an IPv4 or IPv6 address.
pub(super) fn is_ip(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok()
}

/// An address or a CIDR block (`10.0.0.0/8`, `2001:db8::/32`).
pub(super) fn is_ip_or_cidr(s: &str) -> bool {
    match s.split_once('/') {
        None => is_ip(s),
        Some((ip, bits)) => match (ip.parse::<IpAddr>(), bits.parse::<u8>()) {
            (Ok(IpAddr::V4(_)), Ok(bits)) => bits <= 32,
            (Ok(IpAddr::V6(_)), Ok(bits)) => bits <= 128,
            _ => false,
        },
    }
}

/// A `namespace/host` entry of a Sidecar egress listener (`for_gateway` false) or a Gateway
/// server (`for_gateway` true, where the namespace may be left out and the host may be an IP
/// address). Returns every problem with the entry.
pub(super) fn check_scoped_host(entry: &str, for_gateway: bool) -> Vec<String> {
    let mut errors = Vec::new();
    let (namespace, host) = match entry.split_once('/') {
        Some(parts) => parts,
        None if for_gateway => ("*", entry),
        None => {
            errors.push(format!(
                "{entry:?} must be namespace/host, e.g. ./* (own namespace), \
                 istio-system/*, */api.example.com"
            ));
            return errors;
        }
    };
    // Sidecars may exclude a namespace with `~ns` (and `~/host` hides the host everywhere).
    let bare = if for_gateway {
        namespace
    } else {
        namespace.trim_start_matches('~')
    };
    let namespace_ok = match bare {
        "*" | "." => true,
        "" => !for_gateway && namespace == "~",
        ns => is_dns_label(ns),
    };
    if !namespace_ok {
        errors.push(format!(
            "namespace {namespace:?} is invalid: expected *, ., ~ or a namespace name"
        ));
    }
    if host.is_empty() {
        errors.push("the host after '/' is empty".into());
        return errors;
    }
    if host != "*" && !host.contains('.') {
        errors.push(format!(
            "short name {host:?} is not allowed here: write the full name, \
             e.g. {host}.<namespace>.svc.cluster.local"
        ));
    } else if let Err(e) = check_wildcard_domain(host)
        && !(for_gateway && is_ip(host))
    {
        errors.push(e);
    }
    if host.contains('*') && host != "*" && !host.starts_with("*.") {
        errors.push(format!(
            "partial wildcard {host:?} is not allowed: use * or *.domain"
        ));
    }
    errors
}

/// A reference to a gateway from a VirtualService: `mesh`, `namespace/name`, or a name in the
/// VirtualService's namespace; the legacy `name.namespace` form is accepted with a warning.
pub(super) fn check_gateway_ref(p: &mut Problems, field: &str, name: &str) {
    if name == "mesh" {
        return;
    }
    match name.split_once('/') {
        Some((ns, gw)) => {
            for (what, part) in [("namespace", ns), ("name", gw)] {
                if !is_dns_label(part) {
                    p.error(field, format!("gateway {what} {part:?} is not a DNS label"));
                }
            }
        }
        None => match check_fqdn(name) {
            Err(e) => p.error(field, format!("invalid gateway name: {e}")),
            Ok(()) if name.contains('.') => p.warn(
                field,
                format!("legacy gateway name {name:?}: prefer the namespace/name form"),
            ),
            Ok(()) => {}
        },
    }
}

/// Label selectors (subset labels, workload selectors): Kubernetes label keys (`[prefix/]name`)
/// and values.
pub(super) fn check_labels(p: &mut Problems, field: &str, labels: &BTreeMap<String, String>) {
    for (key, value) in labels {
        let path = key_path(field, key);
        if key.is_empty() {
            p.error(path, "label keys cannot be empty");
            continue;
        }
        let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
        let prefix_ok =
            prefix.is_empty() || (prefix.len() <= 253 && prefix.split('.').all(is_dns1123_label));
        if !prefix_ok || !is_label_value(name) || name.is_empty() {
            p.error(
                &path,
                format!(
                    "{key:?} is not a label key: [prefix/]name, the name at most 63 letters, \
                     digits, '-', '_' and '.', starting and ending alphanumeric"
                ),
            );
        }
        if !is_label_value(value) {
            p.error(
                path,
                format!(
                    "{value:?} is not a label value: at most 63 letters, digits, '-', '_' and \
                     '.', starting and ending alphanumeric"
                ),
            );
        }
    }
}

/// `exportTo`: `.`, `*` or namespace names, without duplicates, and `*` alone.
pub(super) fn check_export_to(p: &mut Problems, field: &str, namespace: &str, list: &[String]) {
    let mut seen = BTreeSet::new();
    for (i, entry) in list.iter().enumerate() {
        let path = format!("{field}[{i}]");
        let key = if entry == "." {
            namespace
        } else {
            entry.as_str()
        };
        if entry != "*" && entry != "." && !is_dns1123_label(entry) {
            p.error(path, format!("{entry:?} is not ., * or a namespace name"));
        } else if !seen.insert(key) {
            p.error(
                path,
                format!("{entry:?} is listed twice (. is namespace {namespace})"),
            );
        }
    }
    if list.len() > 1 && list.iter().any(|e| e == "*") {
        p.error(
            field,
            "* exports to every namespace and cannot be combined with others",
        );
    }
}

/// Whether two hosts overlap (Istio's `host.Name.Matches`): equal, or one wildcard covers the
/// other (`*.example.com` and `api.example.com`, `*.com` and `*.example.com`).
pub(crate) fn hosts_overlap(a: &str, b: &str) -> bool {
    match (a.strip_prefix('*'), b.strip_prefix('*')) {
        (Some(a), Some(b)) => a.ends_with(b) || b.ends_with(a),
        (Some(a), None) => b.ends_with(a),
        (None, Some(b)) => a.ends_with(b),
        (None, None) => a == b,
    }
}

/// Whether every name `a` stands for is also covered by `b` (Istio's `host.Name.SubsetOf`).
pub(crate) fn host_within(a: &str, b: &str) -> bool {
    match (a.strip_prefix('*'), b.strip_prefix('*')) {
        (Some(a), Some(b)) => a.len() >= b.len() && a.ends_with(b),
        (Some(_), None) => false,
        (None, Some(b)) => a.ends_with(b),
        (None, None) => a == b,
    }
}

fn check_length(host: &str) -> Result<(), String> {
    match host.len() {
        0 => Err("the host is empty".into()),
        256.. => Err(format!("host {host:?} is too long: at most 255 characters")),
        _ => Ok(()),
    }
}

/// The dot-separated labels `rest` of `host`; the last may be empty (`example.com.`), and the top
/// label may not be all digits (so that `1.2.3.4` is not taken for a name).
fn check_labels_of(host: &str, rest: &str) -> Result<(), String> {
    let labels: Vec<&str> = rest.split('.').collect();
    let last = labels.len() - 1;
    if let Some(top) = labels.last().filter(|t| !t.is_empty())
        && top.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!(
            "{host:?} is not a valid host: top-level label {top:?} is numeric"
        ));
    }
    for (i, label) in labels.iter().enumerate() {
        if !(is_dns_label(label) || (i == last && i > 0 && label.is_empty())) {
            return Err(format!(
                "{host:?} is not a valid host: label {label:?} is invalid"
            ));
        }
    }
    Ok(())
}

fn is_label(s: &str, upper: bool) -> bool {
    let alnum =
        |b: u8| b.is_ascii_digit() || b.is_ascii_lowercase() || (upper && b.is_ascii_uppercase());
    let bytes = s.as_bytes();
    bytes.len() <= 63
        && bytes.first().is_some_and(|&b| alnum(b))
        && bytes.last().is_some_and(|&b| alnum(b))
        && bytes.iter().all(|&b| alnum(b) || b == b'-')
}

/// `*`, `*label`, `*-label` or a label.
fn is_wildcard_label(s: &str) -> bool {
    match s.strip_prefix('*') {
        Some("") => true,
        Some(rest) => s.len() <= 63 && is_dns_label(rest.strip_prefix('-').unwrap_or(rest)),
        None => is_dns_label(s),
    }
}

/// A Kubernetes label value (also the name part of a key): empty, or at most 63 of
/// `[-_.A-Za-z0-9]`, alphanumeric at both ends.
fn is_label_value(s: &str) -> bool {
    let bytes = s.as_bytes();
    let ends = |b: &u8| b.is_ascii_alphanumeric();
    s.is_empty()
        || (bytes.len() <= 63
            && bytes.first().is_some_and(ends)
            && bytes.last().is_some_and(ends)
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b)))
}
