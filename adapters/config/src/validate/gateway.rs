//! Gateway: servers, their ports, hosts and TLS settings.

use std::collections::BTreeMap;

use super::names::{check_scoped_host, is_ip};
use super::{Problems, check_port, earlier};
use crate::{Gateway, Server, ServerTlsMode, ServerTlsSettings};

/// Protocols a gateway server may declare (compared case-insensitively).
const PROTOCOLS: [&str; 8] = [
    "HTTP", "HTTPS", "GRPC", "GRPC-WEB", "HTTP2", "MONGO", "TCP", "TLS",
];
/// TLS versions of `minProtocolVersion` and `maxProtocolVersion`, oldest first.
const TLS_VERSIONS: [&str; 5] = ["TLS_AUTO", "TLSV1_0", "TLSV1_1", "TLSV1_2", "TLSV1_3"];

/// What a port carries; servers sharing a port must carry the same, because one listener
/// serves them all (plain-text HTTP protocols share a route table, TLS ones an SNI filter chain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    PlainHttp,
    Tls,
    Tcp,
    Mongo,
}

fn family(protocol: &str) -> Option<Family> {
    match protocol.to_ascii_uppercase().as_str() {
        "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB" => Some(Family::PlainHttp),
        "HTTPS" | "TLS" => Some(Family::Tls),
        "TCP" => Some(Family::Tcp),
        "MONGO" => Some(Family::Mongo),
        _ => None,
    }
}

/// Checks a Gateway.
pub(super) fn check(gw: &Gateway, p: &mut Problems) {
    if gw.servers.is_empty() {
        p.error("spec.servers", "a Gateway needs at least one server");
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut ports: BTreeMap<u32, (usize, Family)> = BTreeMap::new();
    for (i, server) in gw.servers.iter().enumerate() {
        let path = format!("spec.servers[{i}]");
        let family = check_server(p, &path, server);
        let name = server.port.name.as_str();
        if !name.is_empty()
            && let Some(first) = earlier(&mut names, name, i)
        {
            p.error(
                format!("{path}.port.name"),
                format!("port name {name:?} is already used by spec.servers[{first}]"),
            );
        }
        let Some(family) = family else { continue };
        let (first, first_family) = *ports.entry(server.port.number).or_insert((i, family));
        if first_family != family {
            p.error(
                format!("{path}.port.protocol"),
                format!(
                    "{} cannot share port {} with spec.servers[{first}] ({}): servers on one \
                     port must all be plain HTTP (HTTP, HTTP2, GRPC, GRPC-WEB), all TLS (HTTPS, \
                     TLS), or all the same TCP protocol",
                    server.port.protocol, server.port.number, gw.servers[first].port.protocol
                ),
            );
        }
    }
}

/// Checks one server; returns its port's family when the protocol is known.
fn check_server(p: &mut Problems, path: &str, s: &Server) -> Option<Family> {
    check_port(p, format!("{path}.port.number"), s.port.number);
    let family = family(&s.port.protocol);
    if family.is_none() {
        p.error(
            format!("{path}.port.protocol"),
            format!(
                "{:?} is not one of {}",
                s.port.protocol,
                PROTOCOLS.join(", ")
            ),
        );
    }
    if s.port.target_port.is_some() {
        p.error(
            format!("{path}.port.targetPort"),
            "has no effect on gateways (as in Istio): remove it",
        );
    }
    if s.hosts.is_empty() {
        p.error(format!("{path}.hosts"), "a server needs at least one host");
    }
    for (j, host) in s.hosts.iter().enumerate() {
        for e in check_scoped_host(host, true) {
            p.error(format!("{path}.hosts[{j}]"), e);
        }
    }
    if !s.bind.is_empty() && !is_ip(&s.bind) {
        p.error(
            format!("{path}.bind"),
            format!("{:?} is not an IP address", s.bind),
        );
    }
    if !s.default_endpoint.is_empty() {
        p.ignored(format!("{path}.defaultEndpoint"));
    }
    match (&s.tls, family) {
        (None, Some(Family::Tls)) => {
            p.error(
                format!("{path}.tls"),
                "HTTPS and TLS servers need tls settings",
            );
        }
        (Some(tls), Some(family)) => check_tls(p, &format!("{path}.tls"), tls, family),
        _ => {}
    }
    family
}

fn check_tls(p: &mut Problems, path: &str, t: &ServerTlsSettings, family: Family) {
    // Istio's default mode is PASSTHROUGH (the enum's zero value).
    let mode = t.mode.unwrap_or(ServerTlsMode::Passthrough);
    let has_certs = !t.server_certificate.is_empty()
        || !t.private_key.is_empty()
        || !t.ca_certificates.is_empty()
        || !t.credential_name.is_empty()
        || !t.credential_names.is_empty();
    if t.https_redirect && family != Family::PlainHttp {
        // Istio warns only: old examples set it on HTTPS servers, where it never applied.
        p.warn(
            format!("{path}.httpsRedirect"),
            "has effect only on plain HTTP servers",
        );
    }
    if family != Family::Tls {
        let redirect_only = family == Family::PlainHttp && t.mode.is_none() && !has_certs;
        if !redirect_only {
            p.error(
                path,
                "TLS settings need protocol HTTPS or TLS; plain HTTP servers may only set \
                 httpsRedirect",
            );
        }
        return;
    }
    match mode {
        ServerTlsMode::AutoPassthrough if has_certs => p.warn(
            path,
            "AUTO_PASSTHROUGH does not terminate TLS: its certificates are ignored",
        ),
        ServerTlsMode::AutoPassthrough => {}
        // As Istio: the gateway's mesh certificate, never files or a secret.
        ServerTlsMode::IstioMutual if has_certs => p.error(
            path,
            "ISTIO_MUTUAL uses the gateway's mesh certificate: serverCertificate, privateKey, \
             caCertificates, credentialName and credentialNames cannot be given with it",
        ),
        ServerTlsMode::IstioMutual => {}
        ServerTlsMode::Passthrough if has_certs => p.warn(
            path,
            "PASSTHROUGH does not terminate TLS: its certificates are ignored",
        ),
        ServerTlsMode::Passthrough => {}
        ServerTlsMode::Simple | ServerTlsMode::Mutual | ServerTlsMode::OptionalMutual => {
            check_terminating(p, path, t, mode);
        }
    }
    check_versions(p, path, t);
}

/// SIMPLE, MUTUAL and OPTIONAL_MUTUAL terminate TLS with certificate files, or with the
/// Kubernetes Secrets `credentialName(s)` name, which the control plane serves (Istio's
/// `validateTLSOptions`).
pub(super) fn check_terminating(
    p: &mut Problems,
    path: &str,
    t: &ServerTlsSettings,
    mode: ServerTlsMode,
) {
    if !t.tls_certificates.is_empty() {
        p.ignored(format!("{path}.tlsCertificates"));
    }
    let files = !t.server_certificate.is_empty() && !t.private_key.is_empty();
    let sources = [
        files,
        !t.credential_name.is_empty(),
        !t.credential_names.is_empty(),
    ];
    if sources.iter().filter(|s| **s).count() > 1 {
        p.error(
            path,
            "only one of credentialName, credentialNames and serverCertificate/privateKey may be \
             given",
        );
    }
    let names = std::iter::once(("credentialName".to_owned(), &t.credential_name))
        .filter(|(_, n)| !n.is_empty())
        .chain(
            t.credential_names
                .iter()
                .enumerate()
                .map(|(i, n)| (format!("credentialNames[{i}]"), n)),
        );
    for (field, name) in names {
        if let Err(why) = check_credential(name) {
            p.error(format!("{path}.{field}"), why);
        }
    }
    if t.credential_names.len() > 2 {
        p.error(
            format!("{path}.credentialNames"),
            "at most 2 credentials (one RSA, one ECDSA), as Istio's CRD allows",
        );
    }
    if !t.credential_name.is_empty() || !t.credential_names.is_empty() {
        // As Istio: the credential holds all of it, and the files are not read.
        for (field, value) in [("caCertificates", &t.ca_certificates), ("caCrl", &t.ca_crl)] {
            if !value.is_empty() {
                p.warn(
                    format!("{path}.{field}"),
                    "is ignored with credentialName: the CA certificate and CRL come from the \
                     Secret (NAME-cacert, or the keys cacert/ca.crt and crl/ca.crl)",
                );
            }
        }
        return;
    }
    for (field, value) in [
        ("serverCertificate", &t.server_certificate),
        ("privateKey", &t.private_key),
    ] {
        if value.trim().is_empty() {
            p.error(
                format!("{path}.{field}"),
                "is required to terminate TLS (a file path), unless credentialName names a \
                 Secret",
            );
        }
    }
    if mode != ServerTlsMode::Simple && t.ca_certificates.trim().is_empty() {
        p.error(
            format!("{path}.caCertificates"),
            "MUTUAL and OPTIONAL_MUTUAL need the CA bundle that verifies client certificates",
        );
    }
    if mode == ServerTlsMode::Simple && !t.ca_crl.is_empty() {
        p.error(
            format!("{path}.caCrl"),
            "a CRL applies to client certificates: use MUTUAL",
        );
    }
}

/// A credential wayfinder can serve: a Secret's name, or `kubernetes://[NAMESPACE/]NAME`.
/// Istio's other kinds of names (`builtin://`, `sds://`, `configmap://`,
/// `kubernetes-gateway://`) are refused: wayfinder serves Kubernetes Secrets only.
fn check_credential(name: &str) -> Result<(), String> {
    use crate::credentials::KUBERNETES_PREFIX;
    let (bare, kind) = match name.split_once("://") {
        None => (name, None),
        Some((_, rest)) if name.starts_with(KUBERNETES_PREFIX) => (rest, None),
        Some((kind, _)) => (name, Some(kind)),
    };
    if let Some(kind) = kind {
        return Err(format!(
            "{kind}:// credentials are not supported: wayfinder serves Kubernetes Secrets \
             (NAME or {KUBERNETES_PREFIX}NAME)"
        ));
    }
    let parts: Vec<&str> = bare.split('/').collect();
    if parts.len() > 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "{name:?} is not a Secret: NAME, {KUBERNETES_PREFIX}NAME or \
             {KUBERNETES_PREFIX}NAMESPACE/NAME"
        ));
    }
    Ok(())
}

pub(super) fn check_versions(p: &mut Problems, path: &str, t: &ServerTlsSettings) {
    let mut index = |field: &str, value: &Option<String>| {
        let v = value.as_deref()?;
        let i = TLS_VERSIONS.iter().position(|known| *known == v);
        if i.is_none() {
            p.error(
                format!("{path}.{field}"),
                format!("{v:?} is not one of {}", TLS_VERSIONS.join(", ")),
            );
        }
        i
    };
    let min = index("minProtocolVersion", &t.min_protocol_version);
    let max = index("maxProtocolVersion", &t.max_protocol_version);
    // TLS_AUTO (index 0) means "Envoy's default" and orders with nothing.
    if let (Some(min @ 1..), Some(max @ 1..)) = (min, max)
        && min > max
    {
        p.error(
            format!("{path}.minProtocolVersion"),
            "is above maxProtocolVersion",
        );
    }
}
