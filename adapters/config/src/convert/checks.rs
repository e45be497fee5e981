//! The rules of Istio's CRDs for `ServiceEntry` and `WorkloadEntry` (their OpenAPI schema and
//! `x-kubernetes-validations`, which the API server enforces before istiod sees an object),
//! with their messages, checked before an object is mapped: each is the first problem's field
//! and message.

use std::collections::BTreeSet;

use crate::istio::{ResolutionSpec, ServiceEntrySpec, WorkloadEntrySpec};

/// A problem: the field and the rule's message.
pub(super) type Problem = (String, String);

/// What Istio's CRD says of the address of a Unix domain socket endpoint.
pub(super) const UNIX_PREFIX: &str = "unix://";

const PORT_RANGE: &str = "port must be between 1-65535";

/// A ServiceEntry's hosts, selector, addresses, ports and resolution.
pub(super) fn service_entry(spec: &ServiceEntrySpec) -> Result<(), Problem> {
    let fail = |field: String, message: &str| Err((field, message.to_string()));
    for (i, host) in spec.hosts.iter().enumerate() {
        if host == "*" {
            return fail(format!("spec.hosts[{i}]"), "hostname cannot be wildcard");
        }
    }
    if let Some(selector) = &spec.workload_selector {
        if selector
            .labels
            .iter()
            .any(|(k, v)| k.contains('*') || v.contains('*'))
        {
            return fail(
                "spec.workloadSelector.labels".into(),
                "wildcard is not supported in selector",
            );
        }
        if !spec.endpoints.is_empty() {
            return fail(
                "spec.workloadSelector".into(),
                "only one of WorkloadSelector or Endpoints can be set",
            );
        }
    }
    let cidr = spec.addresses.iter().position(|a| a.contains('/'));
    if let Some(i) = cidr
        && !matches!(
            spec.resolution,
            ResolutionSpec::None | ResolutionSpec::Static
        )
    {
        return fail(
            format!("spec.addresses[{i}]"),
            "CIDR addresses are allowed only for NONE/STATIC resolution types",
        );
    }
    let mut numbers = BTreeSet::new();
    for (i, port) in spec.ports.iter().enumerate() {
        if !in_range(port.number) {
            return fail(format!("spec.ports[{i}].number"), PORT_RANGE);
        }
        if port.target_port.is_some_and(|t| !in_range(t)) {
            return fail(format!("spec.ports[{i}].targetPort"), PORT_RANGE);
        }
        if !numbers.insert(port.number) {
            return fail(
                format!("spec.ports[{i}].number"),
                "port number cannot be duplicated",
            );
        }
    }
    match spec.resolution {
        ResolutionSpec::None if !spec.endpoints.is_empty() => {
            fail("spec.endpoints".into(), "NONE mode cannot set endpoints")
        }
        ResolutionSpec::DnsRoundRobin if spec.endpoints.len() > 1 => fail(
            "spec.endpoints".into(),
            "DNS_ROUND_ROBIN mode cannot have multiple endpoints",
        ),
        _ => Ok(()),
    }?;
    for (i, endpoint) in spec.endpoints.iter().enumerate() {
        workload_entry(endpoint).map_err(|(field, message)| {
            let field = field.replacen("spec.", &format!("spec.endpoints[{i}]."), 1);
            (field, message)
        })?;
    }
    Ok(())
}

/// A WorkloadEntry (or an inline endpoint): an address unless it names a network, a Unix
/// socket's address and ports, its ports' names and numbers.
pub(super) fn workload_entry(spec: &WorkloadEntrySpec) -> Result<(), Problem> {
    let fail = |field: String, message: &str| Err((field, message.to_string()));
    if spec.address.is_empty() && spec.network.is_empty() {
        return fail("spec.address".into(), "Address is required");
    }
    if let Some(path) = spec.address.strip_prefix(UNIX_PREFIX) {
        if !path.starts_with('/') && !path.starts_with('@') {
            return fail(
                "spec.address".into(),
                "UDS must be an absolute path or abstract socket",
            );
        }
        if path.ends_with('/') {
            return fail("spec.address".into(), "UDS may not be a dir");
        }
        if !spec.ports.is_empty() {
            return fail("spec.ports".into(), "UDS may not include ports");
        }
    }
    for (name, port) in &spec.ports {
        if !port_name(name) {
            return fail(format!("spec.ports.{name}"), "port name must be valid");
        }
        if !in_range(*port) {
            return fail(format!("spec.ports.{name}"), PORT_RANGE);
        }
    }
    Ok(())
}

fn in_range(port: u32) -> bool {
    (1..=65535).contains(&port)
}

/// A port name as the CRD takes it: shorter than 63 characters, letters, digits and `-`,
/// starting and ending with a letter or digit.
fn port_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    name.len() < 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
}
