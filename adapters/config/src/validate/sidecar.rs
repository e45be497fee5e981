//! Sidecar: the egress hosts a workload sees and what happens to other traffic.

use super::Problems;
use super::names::{check_labels, check_scoped_host};
use crate::Sidecar;

/// Checks a Sidecar.
pub(super) fn check(sc: &Sidecar, p: &mut Problems) {
    if sc.egress.is_empty()
        && sc.ingress.is_empty()
        && sc.outbound_traffic_policy.is_none()
        && sc.inbound_connection_pool.is_none()
    {
        p.error(
            "spec",
            "an empty Sidecar changes nothing: give egress hosts or an outboundTrafficPolicy",
        );
    }
    if let Some(selector) = &sc.workload_selector {
        if selector.labels.is_empty() {
            p.warn(
                "spec.workloadSelector.labels",
                "no labels: the Sidecar applies to every workload of the namespace",
            );
        }
        check_labels(p, "spec.workloadSelector.labels", &selector.labels);
    }
    check_ingress(sc, p);
    if let Some(pool) = &sc.inbound_connection_pool {
        super::traffic_policy::check_connection_pool(p, "spec.inboundConnectionPool", pool);
    }
    check_egress(sc, p);
    if let Some(policy) = &sc.outbound_traffic_policy {
        if let Some(mode) = policy.mode.as_deref()
            && mode != "ALLOW_ANY"
            && mode != "REGISTRY_ONLY"
        {
            p.error(
                "spec.outboundTrafficPolicy.mode",
                format!("{mode:?} is not ALLOW_ANY or REGISTRY_ONLY"),
            );
        }
        if policy.egress_proxy.is_some() {
            p.ignored("spec.outboundTrafficPolicy.egressProxy");
        }
    }
}

/// Ingress listeners, as Istio's `validateSidecarIngress`: a port each (unique), a default
/// endpoint of the workload's loopback, its own address (`0.0.0.0`) or a Unix socket.
fn check_ingress(sc: &Sidecar, p: &mut Problems) {
    let mut ports = std::collections::BTreeMap::new();
    for (i, listener) in sc.ingress.iter().enumerate() {
        let path = format!("spec.ingress[{i}]");
        match &listener.port {
            None => p.error(format!("{path}.port"), "is required"),
            Some(port) => {
                check_sidecar_port(p, &format!("{path}.port"), port);
                if let Some(first) = ports.insert(port.number, i) {
                    p.error(
                        format!("{path}.port.number"),
                        format!("spec.ingress[{first}] has port {} already", port.number),
                    );
                }
            }
        }
        if let Err(e) = crate::sidecar::parse_default_endpoint(&listener.default_endpoint) {
            p.error(format!("{path}.defaultEndpoint"), e);
        }
        if let Some(tls) = &listener.tls {
            let protocol = listener.port.as_ref().map_or("", |p| p.protocol.as_str());
            check_ingress_tls(p, &format!("{path}.tls"), tls, protocol);
        }
        check_bind(p, &path, &listener.bind, listener.capture_mode.as_deref());
        if !listener.bind.is_empty() && listener.capture_mode.as_deref() != Some("NONE") {
            p.warn(
                format!("{path}.bind"),
                "has effect only with captureMode NONE: captured traffic arrives on the inbound \
                 capture port",
            );
        }
        if let Some(pool) = &listener.connection_pool {
            super::traffic_policy::check_connection_pool(
                p,
                &format!("{path}.connectionPool"),
                pool,
            );
        }
    }
}

/// An ingress listener's TLS, as Istio's `validateSidecarIngress` checks it: a terminating
/// mode with certificate files (no Secrets, no names to check, no redirect), on an HTTPS or
/// TLS port.
fn check_ingress_tls(p: &mut Problems, path: &str, t: &crate::ServerTlsSettings, protocol: &str) {
    use crate::ServerTlsMode;
    for (field, set) in [
        ("subjectAltNames", !t.subject_alt_names.is_empty()),
        ("httpsRedirect", t.https_redirect),
        ("credentialName", !t.credential_name.is_empty()),
        ("credentialNames", !t.credential_names.is_empty()),
        ("tlsCertificates", !t.tls_certificates.is_empty()),
    ] {
        if set {
            p.error(
                format!("{path}.{field}"),
                "is not supported in a sidecar's ingress TLS (as in Istio)",
            );
        }
    }
    if !matches!(protocol.to_ascii_uppercase().as_str(), "HTTPS" | "TLS") {
        p.error(path, "TLS settings need an HTTPS or TLS port");
    }
    match t.mode {
        Some(
            mode @ (ServerTlsMode::Simple | ServerTlsMode::Mutual | ServerTlsMode::OptionalMutual),
        ) => {
            super::gateway::check_terminating(p, path, t, mode);
        }
        other => p.error(
            format!("{path}.mode"),
            format!(
                "{} cannot be a sidecar's ingress TLS: SIMPLE, MUTUAL or OPTIONAL_MUTUAL",
                other.map_or_else(
                    || "PASSTHROUGH (the default)".to_string(),
                    |m| serde_json::to_value(m)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default()
                )
            ),
        ),
    }
    super::gateway::check_versions(p, path, t);
}

/// A Sidecar port: a number (1 to 65535) and a protocol Istio knows, if given.
fn check_sidecar_port(p: &mut Problems, path: &str, port: &crate::SidecarPort) {
    if !(1..=65535).contains(&port.number) {
        p.error(
            format!("{path}.number"),
            format!("{} is not a port (1 to 65535)", port.number),
        );
    }
    if !port.protocol.is_empty()
        && wayfinder_registry::Protocol::parse(&port.protocol)
            == wayfinder_registry::Protocol::Unsupported
    {
        p.error(
            format!("{path}.protocol"),
            format!("{:?} is not a protocol Istio knows", port.protocol),
        );
    }
}

/// A listener's `bind` (an IP address) and `captureMode` (`DEFAULT`, `IPTABLES`, `NONE`).
fn check_bind(p: &mut Problems, path: &str, bind: &str, capture_mode: Option<&str>) {
    if !bind.is_empty() && bind.parse::<std::net::IpAddr>().is_err() {
        p.error(
            format!("{path}.bind"),
            format!("{bind:?} is not an IP address"),
        );
    }
    if let Some(mode) = capture_mode
        && !matches!(mode, "DEFAULT" | "IPTABLES" | "NONE")
    {
        p.error(
            format!("{path}.captureMode"),
            format!("{mode:?} is not DEFAULT, IPTABLES or NONE"),
        );
    }
}

/// Egress listeners. As in Istio, only one may leave out the port (the catch-all), and it
/// comes last so that listeners with ports take precedence.
fn check_egress(sc: &Sidecar, p: &mut Problems) {
    let mut catch_all: Option<usize> = None;
    let mut ports = std::collections::BTreeMap::new();
    for (i, listener) in sc.egress.iter().enumerate() {
        let path = format!("spec.egress[{i}]");
        if let Some(port) = &listener.port {
            check_sidecar_port(p, &format!("{path}.port"), port);
            if let Some(first) = ports.insert(port.number, i) {
                p.error(
                    format!("{path}.port.number"),
                    format!("spec.egress[{first}] has port {} already", port.number),
                );
            }
        } else if let Some(first) = catch_all {
            p.error(
                &path,
                format!(
                    "spec.egress[{first}] is already the listener without a port: only one may \
                     leave it out"
                ),
            );
        } else {
            catch_all = Some(i);
            if i + 1 != sc.egress.len() {
                p.error(&path, "the listener without a port must be the last one");
            }
        }
        check_bind(p, &path, &listener.bind, listener.capture_mode.as_deref());
        if listener.port.is_none()
            && (!listener.bind.is_empty() || listener.capture_mode.as_deref() == Some("NONE"))
        {
            p.error(
                &path,
                "bind and captureMode NONE need a port: the listener without one takes what \
                 is captured",
            );
        }
        if listener.hosts.is_empty() {
            p.error(
                format!("{path}.hosts"),
                "an egress listener needs at least one host",
            );
        }
        for (j, host) in listener.hosts.iter().enumerate() {
            for e in check_scoped_host(host, false) {
                p.error(format!("{path}.hosts[{j}]"), e);
            }
        }
    }
}
