//! The TLS a gateway server terminates: certificate files, or the Kubernetes Secrets its
//! `credentialName(s)` name, served over SDS on the ADS stream (see `sds`), or the gateway's
//! mesh certificate (`ISTIO_MUTUAL`).

use wayfinder_config::credentials::{CA_SUFFIX, resource_name};
use wayfinder_config::{Server, ServerTlsMode, ServerTlsSettings};

use super::super::mesh_tls;
use super::super::proto::{ads, any};
use super::super::upstream_tls::san_matcher;
use crate::xds::pb::core::{DataSource, TransportSocket, data_source, transport_socket};
use crate::xds::pb::tls::common_tls_context::{
    CombinedCertificateValidationContext, ValidationContextType,
};
use crate::xds::pb::tls::{
    CertificateValidationContext, CommonTlsContext, DownstreamTlsContext, SdsSecretConfig,
    TlsCertificate,
};

/// The TLS a gateway server terminates: [`terminating`] for `SIMPLE`, `MUTUAL` and
/// `OPTIONAL_MUTUAL`, the gateway's mesh certificate for `ISTIO_MUTUAL`.
pub(super) fn tls_termination(server: &Server) -> Option<TransportSocket> {
    let tls = server.tls.as_ref()?;
    if tls.mode == Some(ServerTlsMode::IstioMutual) {
        return Some(mesh_tls::downstream(true));
    }
    Some(terminating(tls))
}

/// The TLS a `SIMPLE`, `MUTUAL` or `OPTIONAL_MUTUAL` server (a gateway's, or a Sidecar's
/// ingress listener's) terminates with: its credentials over SDS when it names some
/// (`credentialName(s)`), else its files; with client certificates verified against the
/// credential's CA (`NAME-cacert`) or `caCertificates`, and the server's `subjectAltNames`,
/// `verifyCertificateSpki` and `verifyCertificateHash` (Istio's `BuildListenerTLSContext`).
pub(in crate::xds::generate) fn terminating(tls: &ServerTlsSettings) -> TransportSocket {
    let credentials = credential_names(tls);
    let common = CommonTlsContext {
        validation_context_type: client_validation(tls, &credentials),
        ..certificates(tls, &credentials)
    };
    let context = DownstreamTlsContext {
        common_tls_context: Some(common),
        require_client_certificate: Some(crate::xds::pb::protobuf::BoolValue {
            value: tls.mode == Some(ServerTlsMode::Mutual),
        }),
        ..Default::default()
    };
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(any(&context))),
    }
}

/// The server's certificates: its `credentials` over SDS, else its files.
fn certificates(tls: &ServerTlsSettings, credentials: &[&str]) -> CommonTlsContext {
    if credentials.is_empty() {
        return CommonTlsContext {
            tls_certificates: vec![TlsCertificate {
                certificate_chain: file(&tls.server_certificate),
                private_key: file(&tls.private_key),
                ..Default::default()
            }],
            ..Default::default()
        };
    }
    CommonTlsContext {
        tls_certificate_sds_secret_configs: credentials
            .iter()
            .map(|name| credential_sds(&resource_name(name)))
            .collect(),
        ..Default::default()
    }
}

/// How client certificates are checked: for `MUTUAL` and `OPTIONAL_MUTUAL`, against the first
/// credential's CA (as Istio: one CA for all of them) or `caCertificates`; with the server's
/// names and hashes whenever it gives some.
fn client_validation(
    tls: &ServerTlsSettings,
    credentials: &[&str],
) -> Option<ValidationContextType> {
    let verify = CertificateValidationContext {
        match_typed_subject_alt_names: tls
            .subject_alt_names
            .iter()
            .map(|n| san_matcher(n))
            .collect(),
        verify_certificate_spki: tls.verify_certificate_spki.clone(),
        verify_certificate_hash: tls.verify_certificate_hash.clone(),
        ..Default::default()
    };
    let mutual = matches!(
        tls.mode,
        Some(ServerTlsMode::Mutual | ServerTlsMode::OptionalMutual)
    );
    match credentials.first() {
        Some(first) if mutual => Some(ValidationContextType::CombinedValidationContext(
            CombinedCertificateValidationContext {
                default_validation_context: Some(verify),
                validation_context_sds_secret_config: Some(credential_sds(&resource_name(
                    &format!("{first}{CA_SUFFIX}"),
                ))),
                ..Default::default()
            },
        )),
        None if mutual && !tls.ca_certificates.is_empty() => Some(
            ValidationContextType::ValidationContext(CertificateValidationContext {
                trusted_ca: file(&tls.ca_certificates),
                ..verify
            }),
        ),
        _ if verify != CertificateValidationContext::default() => {
            Some(ValidationContextType::ValidationContext(verify))
        }
        _ => None,
    }
}

fn file(path: &str) -> Option<DataSource> {
    Some(DataSource {
        specifier: Some(data_source::Specifier::Filename(path.to_string())),
        ..Default::default()
    })
}

/// A server's `credentialNames`, else its `credentialName`, else none.
fn credential_names(tls: &ServerTlsSettings) -> Vec<&str> {
    if !tls.credential_names.is_empty() {
        tls.credential_names.iter().map(String::as_str).collect()
    } else if !tls.credential_name.is_empty() {
        vec![tls.credential_name.as_str()]
    } else {
        Vec::new()
    }
}

/// A credential served by the control plane on the ADS stream (see `sds`). Unlike every other
/// ADS source here, with Envoy's default initial fetch timeout rather than none, as Istio's
/// `SDSAdsConfig`: a credential whose Secret is missing must not hold the listener warming
/// for ever, and with it the gateway's other servers.
fn credential_sds(name: &str) -> SdsSecretConfig {
    let mut source = ads().unwrap_or_default();
    source.initial_fetch_timeout = None;
    SdsSecretConfig {
        name: name.to_owned(),
        sds_config: Some(source),
    }
}
