//! `Gateway`: the ports a gateway proxy listens on and the hosts it serves there.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::Opaque;

/// Listeners for gateway proxies whose labels match `selector` (Istio `networking.istio.io/v1`
/// `Gateway`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gateway {
    /// Ports and the hosts served on each.
    #[serde(default)]
    pub servers: Vec<Server>,
    /// Labels of the gateway proxies this applies to.
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
}

/// One listening port and what it serves.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Server {
    /// The port.
    pub port: GatewayPort,
    /// Address to bind (default: every address).
    #[serde(default)]
    pub bind: String,
    /// Hosts served, `[namespace/]host` with wildcards (`*`, `*.example.com`).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// TLS settings.
    #[serde(default)]
    pub tls: Option<ServerTlsSettings>,
    /// Default endpoint (not supported yet).
    #[serde(default)]
    pub default_endpoint: String,
    /// Name, for stats.
    #[serde(default)]
    pub name: String,
}

/// A gateway port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayPort {
    /// Number.
    pub number: u32,
    /// Protocol: HTTP, HTTPS, GRPC, HTTP2, MONGO, TCP or TLS.
    pub protocol: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Port the proxy actually binds (deprecated in Istio).
    #[serde(default)]
    pub target_port: Option<u32>,
}

/// TLS on a gateway port.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerTlsSettings {
    /// Redirect plain HTTP to HTTPS.
    #[serde(default)]
    pub https_redirect: bool,
    /// Mode.
    #[serde(default)]
    pub mode: Option<ServerTlsMode>,
    /// Server certificate file.
    #[serde(default)]
    pub server_certificate: String,
    /// Server key file.
    #[serde(default)]
    pub private_key: String,
    /// CA bundle to verify clients (MUTUAL).
    #[serde(default)]
    pub ca_certificates: String,
    /// CRL file.
    #[serde(default)]
    pub ca_crl: String,
    /// Secret holding the certificates (not supported yet).
    #[serde(default)]
    pub credential_name: String,
    /// Several secrets (not supported yet).
    #[serde(default)]
    pub credential_names: Vec<String>,
    /// Several certificates (not supported yet).
    #[serde(default)]
    pub tls_certificates: Vec<Opaque>,
    /// Names client certificates must carry.
    #[serde(default)]
    pub subject_alt_names: Vec<String>,
    /// Accepted client certificate hashes.
    #[serde(default)]
    pub verify_certificate_spki: Vec<String>,
    /// Accepted client certificate hashes.
    #[serde(default)]
    pub verify_certificate_hash: Vec<String>,
    /// Lowest TLS version.
    #[serde(default)]
    pub min_protocol_version: Option<String>,
    /// Highest TLS version.
    #[serde(default)]
    pub max_protocol_version: Option<String>,
    /// Cipher suites.
    #[serde(default)]
    pub cipher_suites: Vec<String>,
}

/// Gateway TLS modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ServerTlsMode {
    /// Forward TLS untouched, routed by SNI.
    Passthrough,
    /// Terminate TLS.
    Simple,
    /// Terminate TLS and require client certificates.
    Mutual,
    /// Passthrough to mesh services, routed by Istio's SNI `outbound_.PORT_.SUBSET_.HOST`
    /// (an east-west gateway).
    AutoPassthrough,
    /// Terminate Istio's mutual TLS with the gateway's mesh certificate.
    IstioMutual,
    /// Client certificates optional.
    OptionalMutual,
}
