//! The mesh CA's and the secure port's flags (see [`crate::ca`] and SECURITY.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::{parse_duration, parse_listen_addr};
use crate::ca::{BootstrapTokens, CaConfig, MeshCa};
use crate::server::SecureConfig;

/// Istio's name for the control plane, which istio-agent checks the secure port's
/// certificate against by default.
const ISTIOD_SAN: &str = "istiod.istio-system.svc";

/// The CA and the secure port.
#[derive(Debug, Args)]
pub struct SecureArgs {
    /// The secure port: ADS over mutual TLS and the certificate API
    /// (`istio.v1.auth.IstioCertificateService`); `''` turns it (and the CA) off.
    #[arg(long = "secure-grpc-addr", visible_aliases = ["secureGrpcAddr", "secureGRPCAddr"], default_value = ":15012", value_parser = parse_listen_addr, value_name = "ADDR")]
    pub secure_grpc_addr: ::std::option::Option<SocketAddr>,
    /// The names in the secure port's certificate (repeatable, comma-separated); default:
    /// this host's name, `localhost`, `127.0.0.1`, `::1` and `istiod.istio-system.svc`.
    #[arg(long = "secure-grpc-san", value_delimiter = ',', value_name = "NAME")]
    pub secure_grpc_san: Vec<String>,
    /// The trust domain of every workload identity (`spiffe://TRUST_DOMAIN/ns/NS/sa/SA`).
    #[arg(long = "trust-domain", default_value = "cluster.local")]
    pub trust_domain: String,
    /// Istio's plug-in CA: `ca-cert.pem`, `ca-key.pem`, `cert-chain.pem`, `root-cert.pem`
    /// (the `cacerts` secret's files). Used when it holds `ca-cert.pem`.
    #[arg(
        long = "cacerts-dir",
        default_value = "./etc/cacerts",
        value_name = "DIR"
    )]
    pub cacerts_dir: PathBuf,
    /// Where the self-signed root is kept (`root-cert.pem`, `ca-key.pem`) when there is no
    /// plug-in CA; made on the first start.
    #[arg(
        long = "ca-dir",
        default_value = "./var/lib/wayfinder/ca",
        value_name = "DIR"
    )]
    pub ca_dir: PathBuf,
    /// A workload certificate's lifetime when its request names none.
    #[arg(long = "workload-cert-ttl", env = "DEFAULT_WORKLOAD_CERT_TTL", default_value = "24h", value_parser = parse_duration)]
    pub workload_cert_ttl: Duration,
    /// The longest lifetime a certificate request may ask for.
    #[arg(long = "max-workload-cert-ttl", env = "MAX_WORKLOAD_CERT_TTL", default_value = "2160h", value_parser = parse_duration)]
    pub max_workload_cert_ttl: Duration,
    /// The audiences a Kubernetes service-account token must have for the certificate API
    /// (comma-separated), checked by the API server's TokenReview.
    #[arg(
        long = "token-audiences",
        env = "TOKEN_AUDIENCES",
        value_delimiter = ',',
        default_value = "istio-ca"
    )]
    pub token_audiences: Vec<String>,
    /// VMs' bootstrap tokens: one `TOKEN NAMESPACE SERVICEACCOUNT` per line, re-read when
    /// the file changes. A VM presents its token (`authorization: Bearer TOKEN`) to get its
    /// first certificate for that identity.
    #[arg(long = "bootstrap-tokens", value_name = "FILE")]
    pub bootstrap_tokens: Option<PathBuf>,
}

impl SecureArgs {
    /// The secure port's configuration, with the CA loaded (made, for a first self-signed
    /// start); `None` when the port is off. `token_reviewer` checks Kubernetes tokens.
    pub fn load(
        &self,
        token_reviewer: Option<Arc<dyn crate::ca::TokenReviewer>>,
    ) -> anyhow::Result<Option<SecureConfig>> {
        let Some(addr) = self.secure_grpc_addr else {
            return Ok(None);
        };
        let ca = MeshCa::load(&CaConfig {
            trust_domain: self.trust_domain.clone(),
            cacerts_dir: self.cacerts_dir.clone(),
            ca_dir: self.ca_dir.clone(),
            ttl: self.workload_cert_ttl,
            max_ttl: self.max_workload_cert_ttl,
        })?;
        let bootstrap_tokens = self
            .bootstrap_tokens
            .as_deref()
            .map(BootstrapTokens::open)
            .transpose()
            .map_err(anyhow::Error::msg)?
            .map(Arc::new);
        Ok(Some(SecureConfig {
            addr,
            ca,
            names: self.names(),
            bootstrap_tokens,
            token_reviewer,
        }))
    }

    fn names(&self) -> Vec<String> {
        if !self.secure_grpc_san.is_empty() {
            return self.secure_grpc_san.clone();
        }
        crate::net::host_name()
            .into_iter()
            .chain(["localhost", "127.0.0.1", "::1", ISTIOD_SAN].map(str::to_string))
            .collect()
    }
}
