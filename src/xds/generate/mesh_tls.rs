//! Istio's mutual TLS between workloads, as Envoy configuration: the transport sockets of
//! `ISTIO_MUTUAL` and auto mTLS clusters (client side) and of inbound filter chains that
//! terminate mesh mTLS (server side).
//!
//! Both sides take their certificate and trust from the agent beside the proxy, over SDS on
//! the bootstrap's `sds-grpc` cluster: the secret `default` (the workload's chain and key) and
//! `ROOTCA` (the mesh root). Only a proxy connected over the secure port has them (its agent
//! runs with `--control-plane-auth-policy MUTUAL_TLS`), so only such a proxy is given these
//! sockets ([`crate::xds::proxy::Proxy::mesh_tls`]); Envoy would refuse a cluster naming an
//! `sds-grpc` its bootstrap does not have.
//!
//! As Istio:
//! - clients send ALPN `istio` (and `h2` on HTTP/2 ports), which a server's PERMISSIVE chains
//!   match to tell mesh mTLS from other TLS (Istio's clients put `istio-peer-exchange` first,
//!   for the peer-metadata exchange of its telemetry filters, which wayfinder does not run;
//!   the chains accept it too);
//! - SNI is `outbound_.PORT_.SUBSET_.HOST`;
//! - clients check the server's certificate against the destination's service accounts,
//!   servers accept any client certificate of the mesh root with a SPIFFE URI.

use std::sync::Arc;

use super::proto::{any, seconds};
use crate::xds::pb::core::{
    ApiVersion, ConfigSource, GrpcService, TransportSocket, api_config_source::ApiType,
    config_source, grpc_service, transport_socket,
};
use crate::xds::pb::matcher::{StringMatcher, string_matcher};
use crate::xds::pb::protobuf::BoolValue;
use crate::xds::pb::tls::{
    CertificateValidationContext, CommonTlsContext, DownstreamTlsContext, SdsSecretConfig,
    SubjectAltNameMatcher, TlsParameters, UpstreamTlsContext, common_tls_context,
    subject_alt_name_matcher::SanType, tls_parameters::TlsProtocol,
};

/// The bootstrap cluster of the agent's SDS socket.
pub(crate) const SDS_CLUSTER: &str = "sds-grpc";
/// The SDS secret with the workload's certificate chain and key.
pub(crate) const WORKLOAD_SECRET: &str = "default";
/// The SDS secret with the mesh's root certificate.
pub(crate) const ROOT_SECRET: &str = "ROOTCA";
/// The ALPN value of mesh mTLS.
pub(super) const ALPN_ISTIO: &str = "istio";
/// What a server's PERMISSIVE chain recognises as mesh mTLS: Istio's in-mesh ALPN values,
/// with and without its peer-metadata exchange and HTTP variants.
pub(super) const ALPN_MESH: [&str; 5] = [
    "istio-peer-exchange",
    "istio",
    "istio-http/1.0",
    "istio-http/1.1",
    "istio-h2",
];
/// The endpoint metadata namespace Envoy's `transport_socket_matches` read.
pub(super) const SOCKET_MATCH: &str = "envoy.transport_socket_match";
/// The label that marks a workload whose sidecar speaks mesh mTLS.
pub(crate) use wayfinder_config::TLS_MODE_LABEL;
/// The key of [`SOCKET_MATCH`] metadata Istio writes the label's value under.
pub(super) const TLS_MODE_KEY: &str = "tlsMode";
/// Its value for workloads that speak mesh mTLS.
pub(crate) const TLS_MODE_ISTIO: &str = "istio";

/// Istio's SNI for a cluster: `outbound_.9080_.v1_.reviews.default.svc.cluster.local`.
pub(super) fn sni(port: u16, subset: &str, host: &str) -> String {
    format!("outbound_.{port}_.{subset}_.{host}")
}

/// The client side: mesh mTLS towards `sni`, accepting a server certificate that names one
/// of `identities` (any of the mesh's when empty), offering `h2` too when `http2`.
pub(super) fn upstream(sni: &str, identities: &[Arc<str>], http2: bool) -> TransportSocket {
    let mut alpn = vec![ALPN_ISTIO.to_string()];
    if http2 {
        alpn.push("h2".into());
    }
    let matchers = identities
        .iter()
        .map(|id| super::upstream_tls::san_matcher(id))
        .collect();
    let context = UpstreamTlsContext {
        common_tls_context: Some(common(alpn, matchers)),
        sni: sni.to_string(),
        ..Default::default()
    };
    tls_socket(any(&context))
}

/// The client side for a proxy without a workload certificate that is told to use
/// `ISTIO_MUTUAL`: TLS without a client certificate, which every mesh server refuses. The
/// request fails rather than leaving in plaintext.
pub(super) fn upstream_without_identity(sni: &str) -> TransportSocket {
    let context = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_params: tls_params(),
            alpn_protocols: vec![ALPN_ISTIO.into()],
            ..Default::default()
        }),
        sni: sni.to_string(),
        ..Default::default()
    };
    tls_socket(any(&context))
}

/// The server side: mesh mTLS with a client certificate required, from the mesh's root and
/// with a SPIFFE URI. HTTP chains offer `h2` and `http/1.1`.
pub(super) fn downstream(http: bool) -> TransportSocket {
    let alpn = if http {
        vec!["h2".into(), "http/1.1".into()]
    } else {
        Vec::new()
    };
    let spiffe = SubjectAltNameMatcher {
        san_type: SanType::Uri as i32,
        matcher: Some(StringMatcher {
            match_pattern: Some(string_matcher::MatchPattern::Prefix("spiffe://".into())),
            ..Default::default()
        }),
        ..Default::default()
    };
    let context = DownstreamTlsContext {
        common_tls_context: Some(common(alpn, vec![spiffe])),
        require_client_certificate: Some(BoolValue { value: true }),
        ..Default::default()
    };
    tls_socket(any(&context))
}

/// Envoy's plaintext socket, for the `tlsMode-disabled` match of auto mTLS.
pub(super) fn raw_buffer() -> TransportSocket {
    TransportSocket {
        name: "envoy.transport_sockets.raw_buffer".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(any(
            &crate::xds::pb::raw_buffer::RawBuffer::default(),
        ))),
    }
}

fn common(alpn: Vec<String>, matchers: Vec<SubjectAltNameMatcher>) -> CommonTlsContext {
    CommonTlsContext {
        tls_params: tls_params(),
        alpn_protocols: alpn,
        tls_certificate_sds_secret_configs: vec![sds(WORKLOAD_SECRET)],
        validation_context_type: Some(
            common_tls_context::ValidationContextType::CombinedValidationContext(
                common_tls_context::CombinedCertificateValidationContext {
                    default_validation_context: Some(CertificateValidationContext {
                        match_typed_subject_alt_names: matchers,
                        ..Default::default()
                    }),
                    validation_context_sds_secret_config: Some(sds(ROOT_SECRET)),
                    ..Default::default()
                },
            ),
        ),
        ..Default::default()
    }
}

fn tls_params() -> Option<TlsParameters> {
    Some(TlsParameters {
        tls_minimum_protocol_version: TlsProtocol::TlSv12 as i32,
        tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
        ..Default::default()
    })
}

/// A secret from the agent's SDS server, as Istio names it.
fn sds(name: &str) -> SdsSecretConfig {
    SdsSecretConfig {
        name: name.into(),
        sds_config: Some(ConfigSource {
            config_source_specifier: Some(config_source::ConfigSourceSpecifier::ApiConfigSource(
                crate::xds::pb::core::ApiConfigSource {
                    api_type: ApiType::Grpc as i32,
                    transport_api_version: ApiVersion::V3 as i32,
                    grpc_services: vec![GrpcService {
                        target_specifier: Some(grpc_service::TargetSpecifier::EnvoyGrpc(
                            grpc_service::EnvoyGrpc {
                                cluster_name: SDS_CLUSTER.into(),
                                ..Default::default()
                            },
                        )),
                        ..Default::default()
                    }],
                    set_node_on_first_message_only: true,
                    ..Default::default()
                },
            )),
            initial_fetch_timeout: seconds(0),
            resource_api_version: ApiVersion::V3 as i32,
            ..Default::default()
        }),
    }
}

fn tls_socket(context: crate::xds::pb::protobuf::Any) -> TransportSocket {
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(context)),
    }
}
