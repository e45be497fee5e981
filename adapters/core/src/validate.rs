//! The rules every registration must meet before the aggregate accepts it.

use std::collections::HashSet;

use crate::event::Registration;
use crate::service::{Resolution, ServiceKey};

/// Why a registration was refused: the service, the field (as a path such as
/// `endpoints[2].address`) and the rule it breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("service {key}: {field}: {message}")]
pub struct ValidationError {
    /// The service the registration describes.
    pub key: ServiceKey,
    /// Path of the offending field.
    pub field: String,
    /// The rule it breaks.
    pub message: String,
}

impl Registration {
    /// Checks the rules every registration must meet: a valid hostname and namespace, ports
    /// unique by name and number and never 0, endpoints with an address (an IP address when the
    /// service is resolved client-side) or else a network (see [`crate::Endpoint::network_only`]),
    /// non-zero ports and a weight of at least 1.
    ///
    /// The aggregate runs this on every registration a registry sends and refuses the ones
    /// that fail, keeping that service's last good state; adapters may run it earlier to report
    /// the error against their own source (a file and line).
    pub fn validate(&self) -> Result<(), ValidationError> {
        let service = &self.service;
        let fail = |field: String, message: String| {
            Err(ValidationError {
                key: service.key(),
                field,
                message,
            })
        };
        if let Err(message) = check_hostname(&service.hostname) {
            return fail("hostname".into(), message);
        }
        if service.namespace.is_empty() {
            return fail("namespace".into(), "must not be empty".into());
        }
        let mut names = HashSet::new();
        let mut numbers = HashSet::new();
        for (i, port) in service.ports.iter().enumerate() {
            if port.name.is_empty() {
                return fail(format!("ports[{i}].name"), "must not be empty".into());
            }
            if port.number == 0 || port.target_port == Some(0) {
                return fail(
                    format!("ports[{i}].number"),
                    "port 0 is not a valid port".into(),
                );
            }
            if !names.insert(&port.name) {
                return fail(
                    format!("ports[{i}].name"),
                    format!("duplicate port name {:?}", port.name),
                );
            }
            if !numbers.insert(port.number) {
                return fail(
                    format!("ports[{i}].number"),
                    format!("duplicate port {}", port.number),
                );
            }
        }
        for (i, ep) in self.endpoints.iter().enumerate() {
            if ep.network_only() && ep.network.is_empty() {
                return fail(
                    format!("endpoints[{i}].address"),
                    "must not be empty unless the endpoint names a network".into(),
                );
            }
            if service.resolution == Resolution::ClientSideLb
                && !ep.network_only()
                && ep.ip().is_none()
            {
                return fail(
                    format!("endpoints[{i}].address"),
                    format!(
                        "{:?} is not an IP address, and the service is resolved client-side (STATIC)",
                        ep.address
                    ),
                );
            }
            if let Some((name, _)) = ep.ports.iter().find(|(_, p)| **p == 0) {
                return fail(
                    format!("endpoints[{i}].ports.{name}"),
                    "port 0 is not a valid port".into(),
                );
            }
            if ep.weight == 0 {
                return fail(
                    format!("endpoints[{i}].weight"),
                    "must be at least 1".into(),
                );
            }
        }
        Ok(())
    }
}

/// A hostname is DNS labels of letters, digits, `-` and `_`, at most 253 characters, with an
/// optional leading `*` for wildcard hosts: a whole first label (`*.example.com`) or its start
/// (`*x`, `*-api.example.com`, which Istio's ServiceEntries allow: hosts ending as it does).
fn check_hostname(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("must not be empty".into());
    }
    if host.len() > 253 {
        return Err(format!("{host:?} is longer than 253 characters"));
    }
    for (i, label) in host.split('.').enumerate() {
        let label = match label.strip_prefix('*') {
            Some("") if i == 0 => continue,
            // Istio's wildcard label: `*`, `*x…` or `*-x…`.
            Some(rest) if i == 0 => rest.strip_prefix('-').unwrap_or(rest),
            _ => label,
        };
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!(
                "{host:?} is not a valid hostname (label {label:?})"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Endpoint, Protocol, Service};

    fn reg(service: Service, endpoints: Vec<Endpoint>) -> Registration {
        Registration::new(service, endpoints)
    }

    #[test]
    fn accepts_a_plain_service() {
        let svc = Service::new("reviews.default.svc.cluster.local", "default").with_port(
            "http",
            9080,
            Protocol::Http,
        );
        assert_eq!(reg(svc, vec![Endpoint::new("10.0.0.1")]).validate(), Ok(()));
        for wildcard in ["*.example.com", "*x", "*-api.example.com", "*"] {
            let svc = Service::new(wildcard, "default");
            assert_eq!(reg(svc, vec![]).validate(), Ok(()), "{wildcard}");
        }
        for bad in ["a.*.example.com", "**.example.com", "*.", "x*"] {
            let svc = Service::new(bad, "default");
            assert!(reg(svc, vec![]).validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn names_the_offending_field() {
        let svc = Service::new("a.example.com", "default")
            .with_port("http", 80, Protocol::Http)
            .with_port("http", 81, Protocol::Http);
        let err = reg(svc, vec![]).validate().unwrap_err();
        assert_eq!(err.field, "ports[1].name");

        let svc = Service::new("a.example.com", "default");
        let err = reg(svc, vec![Endpoint::new("not-an-ip")])
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "endpoints[0].address");
        assert!(err.to_string().contains("not an IP address"), "{err}");

        let err = reg(Service::new("bad host", "default"), vec![])
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "hostname");
    }

    #[test]
    fn an_endpoint_without_an_address_must_name_a_network() {
        let svc = Service::new("a.example.com", "default");
        let err = reg(svc.clone(), vec![Endpoint::new("")])
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "endpoints[0].address");
        assert!(
            err.message.contains("unless the endpoint names a network"),
            "{err}"
        );
        let mut remote = Endpoint::new("");
        remote.network = "net2".into();
        assert!(remote.network_only());
        // Client-side resolution needs IP addresses, but such an endpoint has none to give.
        assert_eq!(reg(svc, vec![remote]).validate(), Ok(()));
    }

    #[test]
    fn dns_services_may_have_hostname_endpoints() {
        let mut svc = Service::new("db.example.com", "default");
        svc.resolution = Resolution::Dns;
        assert_eq!(
            reg(svc, vec![Endpoint::new("db.example.com")]).validate(),
            Ok(())
        );
    }
}
