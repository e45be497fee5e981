//! A DestinationRule's client TLS settings as Envoy's upstream TLS context, verified by
//! default as Istio does since it began verifying at the client (`VERIFY_CERTIFICATE_AT_CLIENT`):
//!
//! - `SIMPLE` and `MUTUAL` check the server's chain against `caCertificates`, or else against
//!   the system's trust store. Istio's agent serves the operating system's bundle to Envoy as
//!   the SDS secret `file-root:system`; wayfinder has no agent, so Envoy reads the bundle
//!   itself from the path `--system-ca-file` names (default [`DEFAULT_SYSTEM_CA_FILE`]), which
//!   must exist on the proxy's machine.
//! - SNI is `sni`, or else the destination's hostname.
//! - The server's certificate must name one of `subjectAltNames`, or else the SNI name: what
//!   Istio's `auto_san_validation` checks when neither `sni` nor `subjectAltNames` is given,
//!   and, stricter than Istio, also when only `sni` is.
//! - Only `insecureSkipVerify: true` turns verification off (chain and name); SNI is still
//!   sent.
//! - A wildcard destination (`*.example.com`) has no one name to send: Envoy takes SNI and the
//!   name to check from each request's `Host` (`auto_sni`, `auto_san_validation`), as Istio
//!   configures them. A TCP port has no `Host`, so there only the chain is checked unless the
//!   rule gives `sni` or `subjectAltNames`.
//!
//! As in Istio, clients offer TLS 1.2 to 1.3, and `h2` by ALPN on HTTP/2 and gRPC ports.

use std::net::IpAddr;

use wayfinder_config::{ClientTlsMode, ClientTlsSettings};

use super::proto::any;
use crate::xds::pb::core::{DataSource, TransportSocket, data_source, transport_socket};
use crate::xds::pb::matcher::{StringMatcher, string_matcher};
use crate::xds::pb::tls::{
    CertificateValidationContext, CommonTlsContext, SubjectAltNameMatcher, TlsCertificate,
    TlsParameters, UpstreamTlsContext, common_tls_context, subject_alt_name_matcher::SanType,
    tls_parameters::TlsProtocol,
};

/// Where Envoy finds the system's trust store unless `--system-ca-file` says otherwise: the
/// bundle of Debian and Ubuntu (Istio's and Envoy's proxy images), Alpine and distroless.
pub const DEFAULT_SYSTEM_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The cluster a TLS context is for.
#[derive(Clone, Copy, Debug)]
pub(super) struct Upstream<'a> {
    /// The destination's hostname (`api.example.com`, `*.example.com`).
    pub(super) host: &'a str,
    /// True when the port talks HTTP/2 upstream (ALPN `h2`).
    pub(super) http2: bool,
    /// The system's trust store on the proxy's machine (`--system-ca-file`).
    pub(super) system_ca: &'a str,
}

/// What a cluster gets from its client TLS settings.
#[derive(Debug, Default)]
pub(super) struct Origination {
    /// The transport socket, or none for `DISABLE`.
    pub(super) socket: Option<TransportSocket>,
    /// Envoy's `auto_sni`: SNI from each request's `Host`.
    pub(super) auto_sni: bool,
    /// Envoy's `auto_san_validation`: the certificate must name each request's `Host`.
    pub(super) auto_san_validation: bool,
}

/// The upstream TLS of `tls` towards `to` (see the module's rules).
pub(super) fn originate(tls: &ClientTlsSettings, to: Upstream<'_>) -> Origination {
    let mode = tls.mode.unwrap_or(ClientTlsMode::Disable);
    if !matches!(mode, ClientTlsMode::Simple | ClientTlsMode::Mutual) {
        // DISABLE, and ISTIO_MUTUAL, which validation refuses before it gets here.
        return Origination::default();
    }
    let verify = tls.insecure_skip_verify != Some(true);
    let sni = if tls.sni.is_empty() && !to.host.starts_with('*') {
        to.host
    } else {
        tls.sni.as_str()
    };
    let mut common = CommonTlsContext {
        tls_params: Some(TlsParameters {
            tls_minimum_protocol_version: TlsProtocol::TlSv12 as i32,
            tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
            ..Default::default()
        }),
        alpn_protocols: if to.http2 {
            vec!["h2".into()]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    if mode == ClientTlsMode::Mutual {
        common.tls_certificates = vec![TlsCertificate {
            certificate_chain: file(&tls.client_certificate),
            private_key: file(&tls.private_key),
            ..Default::default()
        }];
    }
    if verify {
        let names: Vec<&str> = if !tls.subject_alt_names.is_empty() {
            tls.subject_alt_names.iter().map(String::as_str).collect()
        } else if !sni.is_empty() {
            vec![sni]
        } else {
            Vec::new()
        };
        let ca = if tls.ca_certificates.is_empty() {
            to.system_ca
        } else {
            &tls.ca_certificates
        };
        let validation = CertificateValidationContext {
            trusted_ca: file(ca),
            match_typed_subject_alt_names: names.into_iter().map(san_matcher).collect(),
            crl: (!tls.ca_crl.is_empty())
                .then(|| file(&tls.ca_crl))
                .flatten(),
            ..Default::default()
        };
        common.validation_context_type =
            Some(common_tls_context::ValidationContextType::ValidationContext(validation));
    }
    let context = UpstreamTlsContext {
        common_tls_context: Some(common),
        sni: sni.to_string(),
        ..Default::default()
    };
    let auto_sni = sni.is_empty();
    Origination {
        socket: Some(TransportSocket {
            name: "envoy.transport_sockets.tls".into(),
            config_type: Some(transport_socket::ConfigType::TypedConfig(any(&context))),
        }),
        auto_sni,
        auto_san_validation: auto_sni && verify && tls.subject_alt_names.is_empty(),
    }
}

/// A matcher for one name the server's certificate must carry, of the SAN type the name is
/// written as: an IP address, a URI (`spiffe://…`), an email address, or else a DNS name
/// (which a wildcard certificate matches). Istio's untyped matcher tries every type; a name
/// can only ever equal a SAN of its own type, so this is the same check.
pub(super) fn san_matcher(name: &str) -> SubjectAltNameMatcher {
    SubjectAltNameMatcher {
        san_type: san_type(name) as i32,
        matcher: Some(StringMatcher {
            match_pattern: Some(string_matcher::MatchPattern::Exact(name.to_string())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The SAN type a name is written as (see [`san_matcher`]).
pub(super) fn san_type(name: &str) -> SanType {
    if name.parse::<IpAddr>().is_ok() {
        SanType::IpAddress
    } else if name.contains("://") {
        SanType::Uri
    } else if name.contains('@') {
        SanType::Email
    } else {
        SanType::Dns
    }
}

fn file(path: &str) -> Option<DataSource> {
    Some(DataSource {
        specifier: Some(data_source::Specifier::Filename(path.to_string())),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::pb::tls::UpstreamTlsContext;
    use prost::Message;

    const SYSTEM: &str = "/etc/ssl/certs/ca-certificates.crt";

    fn settings(yaml: &str) -> ClientTlsSettings {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn context(o: &Origination) -> UpstreamTlsContext {
        let Some(transport_socket::ConfigType::TypedConfig(any)) =
            o.socket.as_ref().and_then(|s| s.config_type.clone())
        else {
            panic!("no TLS socket");
        };
        UpstreamTlsContext::decode(any.value.as_slice()).unwrap()
    }

    fn validation(c: &UpstreamTlsContext) -> Option<&CertificateValidationContext> {
        match &c.common_tls_context.as_ref()?.validation_context_type {
            Some(common_tls_context::ValidationContextType::ValidationContext(v)) => Some(v),
            _ => None,
        }
    }

    fn to(host: &str) -> Upstream<'_> {
        Upstream {
            host,
            http2: false,
            system_ca: SYSTEM,
        }
    }

    fn trusted(v: &CertificateValidationContext) -> Option<&str> {
        match v.trusted_ca.as_ref()?.specifier.as_ref()? {
            data_source::Specifier::Filename(f) => Some(f),
            _ => None,
        }
    }

    fn names(v: &CertificateValidationContext) -> Vec<(i32, String)> {
        v.match_typed_subject_alt_names
            .iter()
            .map(|m| {
                let Some(string_matcher::MatchPattern::Exact(name)) =
                    m.matcher.as_ref().and_then(|m| m.match_pattern.clone())
                else {
                    panic!("not an exact matcher");
                };
                (m.san_type, name)
            })
            .collect()
    }

    #[test]
    fn simple_without_ca_verifies_the_host_against_the_system_store() {
        let o = originate(&settings("{mode: SIMPLE}"), to("api.example.com"));
        let c = context(&o);
        assert_eq!(c.sni, "api.example.com");
        let v = validation(&c).expect("a validation context");
        assert_eq!(trusted(v), Some(SYSTEM));
        assert_eq!(
            names(v),
            [(SanType::Dns as i32, "api.example.com".to_string())]
        );
        assert!(!o.auto_sni && !o.auto_san_validation);
    }

    #[test]
    fn given_names_and_sni_win_and_are_typed() {
        let yaml = "{mode: MUTUAL, clientCertificate: /c.pem, privateKey: /k.pem, \
                    sni: api.internal, subjectAltNames: [spiffe://td/ns/a/sa/b, 10.0.0.1, ops@example.com, api.internal]}";
        let c = context(&originate(&settings(yaml), to("api.example.com")));
        assert_eq!(c.sni, "api.internal");
        let v = validation(&c).unwrap();
        assert_eq!(
            trusted(v),
            Some(SYSTEM),
            "MUTUAL without a CA: the system store"
        );
        let types: Vec<i32> = names(v).into_iter().map(|(t, _)| t).collect();
        assert_eq!(
            types,
            [
                SanType::Uri,
                SanType::IpAddress,
                SanType::Email,
                SanType::Dns
            ]
            .map(|t| t as i32)
        );
        let common = c.common_tls_context.unwrap();
        assert_eq!(common.tls_certificates.len(), 1);
    }

    #[test]
    fn sni_alone_is_also_the_name_checked() {
        let c = context(&originate(
            &settings("{mode: SIMPLE, sni: api.internal, caCertificates: /ca.pem}"),
            to("api.example.com"),
        ));
        let v = validation(&c).unwrap();
        assert_eq!(trusted(v), Some("/ca.pem"));
        assert_eq!(
            names(v),
            [(SanType::Dns as i32, "api.internal".to_string())]
        );
    }

    #[test]
    fn only_insecure_skip_verify_turns_verification_off() {
        let o = originate(
            &settings("{mode: SIMPLE, insecureSkipVerify: true}"),
            to("api.example.com"),
        );
        let c = context(&o);
        assert_eq!(c.sni, "api.example.com", "SNI is still sent");
        assert!(validation(&c).is_none());
        assert!(!o.auto_san_validation);
        let o = originate(
            &settings("{mode: SIMPLE, insecureSkipVerify: false}"),
            to("api.example.com"),
        );
        assert!(validation(&context(&o)).is_some());
    }

    #[test]
    fn a_wildcard_host_takes_its_name_from_each_request() {
        let o = originate(&settings("{mode: SIMPLE}"), to("*.example.com"));
        let c = context(&o);
        assert_eq!(c.sni, "");
        assert!(names(validation(&c).unwrap()).is_empty());
        assert!(o.auto_sni && o.auto_san_validation);
        let o = originate(
            &settings("{mode: SIMPLE, subjectAltNames: [a.example.com]}"),
            to("*.example.com"),
        );
        assert!(
            o.auto_sni && !o.auto_san_validation,
            "the given names are checked"
        );
    }

    #[test]
    fn http2_ports_offer_h2() {
        let up = Upstream {
            http2: true,
            ..to("api.example.com")
        };
        let c = context(&originate(&settings("{mode: SIMPLE}"), up));
        assert_eq!(c.common_tls_context.unwrap().alpn_protocols, ["h2"]);
    }

    #[test]
    fn disable_and_istio_mutual_originate_nothing() {
        for yaml in ["{mode: DISABLE}", "{mode: ISTIO_MUTUAL}", "{}"] {
            let o = originate(&settings(yaml), to("api.example.com"));
            assert!(o.socket.is_none() && !o.auto_sni, "{yaml}");
        }
    }
}
