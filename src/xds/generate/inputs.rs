//! What generation reads besides the model and the proxy: the server's settings
//! ([`MeshSettings`]) and what its own tasks provide ([`Inputs`]).

use std::sync::Arc;

use super::upstream_tls::DEFAULT_SYSTEM_CA_FILE;
use crate::credentials::Credentials;
use crate::jwks::JwksTable;

/// The server's settings that generation reads besides the model: the flags' and MeshConfig's
/// (`crate::mesh_config`). Shared by every snapshot, and so in no cache key: a change starts
/// the next snapshot afresh ([`XdsSnapshot::next_with`](super::XdsSnapshot::next_with)).
#[derive(Clone, Debug, PartialEq)]
pub struct MeshSettings {
    /// The system's trust store on the proxies' machines (`--system-ca-file`): upstream TLS
    /// of a DestinationRule without `caCertificates` verifies against it.
    pub system_ca: Arc<str>,
    /// The trust domain of workload identities (`--trust-domain`): an endpoint's service
    /// account `SA` is `spiffe://TRUST_DOMAIN/ns/NS/sa/SA` in mTLS name checks.
    pub trust_domain: Arc<str>,
    /// The root namespace (`--root-namespace`): its PeerAuthentication without a selector is
    /// the mesh's.
    pub root_namespace: Arc<str>,
    /// Sidecars without a Sidecar's policy send unknown destinations nowhere (MeshConfig's
    /// `outboundTrafficPolicy: REGISTRY_ONLY`).
    pub registry_only: bool,
    /// Locality load balancing where a DestinationRule sets none (MeshConfig's
    /// `localityLbSetting`; `None`: Istio's default, enabled).
    pub locality_lb: Option<wayfinder_config::LocalityLbSetting>,
    /// Auto mTLS to workloads with a sidecar (MeshConfig's `enableAutoMtls`, default on).
    pub auto_mtls: bool,
    /// Clusters' connect timeout (MeshConfig's `connectTimeout`, Istio's default 10 s).
    pub connect_timeout: std::time::Duration,
    /// The mesh's networks and their gateways (`--networksConfig`): endpoints on a network
    /// with gateways are reached through them from other networks (`generate/network.rs`).
    pub networks: Arc<wayfinder_config::mesh_networks::MeshNetworks>,
    /// Where objects without `exportTo` are exported (MeshConfig's `default*ExportTo`).
    pub exports: crate::snapshot::rules::ExportDefaults,
    /// The proxies' default settings (MeshConfig's `defaultConfig`), under the ProxyConfig
    /// objects: what agents are served (`generate/proxy_config.rs`).
    pub proxy_defaults: Option<wayfinder_config::proxy_config::DefaultConfig>,
    /// How long the inbound listener's TLS inspector waits for a client's first bytes
    /// (MeshConfig's `protocolDetectionTimeout`; `None`: Envoy's 15 s).
    pub protocol_detection_timeout: Option<std::time::Duration>,
}

impl Default for MeshSettings {
    fn default() -> Self {
        Self {
            system_ca: DEFAULT_SYSTEM_CA_FILE.into(),
            trust_domain: "cluster.local".into(),
            root_namespace: "istio-system".into(),
            registry_only: false,
            locality_lb: None,
            auto_mtls: true,
            connect_timeout: std::time::Duration::from_secs(10),
            networks: Arc::default(),
            exports: Default::default(),
            proxy_defaults: None,
            protocol_detection_timeout: None,
        }
    }
}

/// What generation reads besides the model that the server's own tasks provide: the JWT keys
/// (`crate::jwks`) and the gateways' credentials (`crate::credentials`). Each is published
/// whole, so a new one is another `Arc`.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// The JWT keys of RequestAuthentications.
    pub jwks: Arc<JwksTable>,
    /// The Secrets gateways' `credentialName`s name, and who may read them.
    pub credentials: Arc<Credentials>,
    /// The server's settings, its flags overlaid with MeshConfig (`--meshConfig`).
    pub mesh: Arc<MeshSettings>,
}
