//! The workload's certificate: made, obtained and renewed by the agent, as istio-agent does.
//!
//! - The key is an ECDSA P-256 key made here ([`rcgen::KeyPair::generate`]), held in memory
//!   only, and given to nobody but the Envoy the agent runs, over SDS ([`super::sds`]).
//! - A CSR for it goes to the CA's `CreateCertificate` ([`crate::ca::PATH`]) on `--ca-address`
//!   (by default `--discovery-address`), over TLS that trusts only `--ca-root-cert`. The agent
//!   proves who it is with its current certificate (renewal) and, when it has one, a token as
//!   `authorization: Bearer …`: `--bootstrap-token-file` if given, else `--token-file`
//!   (Kubernetes' projected token), both re-read for every request. The identity in the
//!   certificate is the CA's decision, from that proof; the CSR names none.
//! - A certificate is renewed at a random point between 50% and 80% of its lifetime (spread,
//!   so that the workloads that started together do not renew together). A failed request is
//!   retried after 1 s, doubling to 30 s, for as long as it takes; the current certificate is
//!   served meanwhile.
//! - The root Envoy trusts (SDS `ROOTCA`) is the last certificate of the CA's answer, which
//!   came over a connection verified against `--ca-root-cert`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::sync::watch;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::ca::{IstioCertificateRequest, IstioCertificateResponse, PATH, PeerCertificate};

/// The first retry's delay after a failed request; each failure in a row doubles it.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest delay between retries.
pub const MAX_RETRY: Duration = Duration::from_secs(30);

/// A workload certificate and its key.
pub struct Workload {
    /// The certificate and its intermediates, PEM, leaf first (SDS `default`).
    pub chain_pem: String,
    /// The key, PKCS#8 PEM. Never logged: [`Workload`]'s `Debug` leaves it out.
    pub key_pem: String,
    /// The mesh's root, PEM (SDS `ROOTCA`).
    pub root_pem: String,
    /// The leaf's SPIFFE ids and validity.
    pub leaf: PeerCertificate,
    /// Counts certificates obtained since the agent started: SDS's version.
    pub serial: u64,
    /// When the agent received it.
    pub received: SystemTime,
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workload")
            .field("identities", &self.leaf.identities)
            .field("expiry", &self.leaf.expiry())
            .field("serial", &self.serial)
            .finish_non_exhaustive()
    }
}

impl Workload {
    /// When to renew: at `fraction` (0.5–0.8) of the lifetime left when it was received
    /// (istio-agent's reckoning: the validity's start is back-dated for clock skew).
    fn renew_at(&self, fraction: f64) -> SystemTime {
        let expiry = SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(self.leaf.not_after).unwrap_or_default());
        let left = expiry.duration_since(self.received).unwrap_or_default();
        self.received + left.mul_f64(fraction)
    }
}

/// How the agent reaches the CA and proves who it is.
#[derive(Clone, Debug)]
pub struct CaClient {
    /// `HOST:PORT`.
    pub address: String,
    /// `--ca-root-cert`.
    pub root_cert: PathBuf,
    /// `--bootstrap-token-file`, else `--token-file`.
    pub token_file: PathBuf,
    /// `--secret-ttl`.
    pub ttl: Duration,
}

/// A TLS channel to `address` that trusts only the root in `root_cert` and checks the
/// server's name (or address) against the host of `address`, presenting `identity` when
/// given: how the agent reaches the CA and the secure port.
pub async fn channel(
    address: &str,
    root_cert: &Path,
    identity: Option<&Workload>,
) -> anyhow::Result<Channel> {
    let root = std::fs::read_to_string(root_cert)
        .map_err(|e| anyhow::anyhow!("--ca-root-cert {}: {e}", root_cert.display()))?;
    let (host, _) = address
        .rsplit_once(':')
        .ok_or_else(|| anyhow::anyhow!("{address:?} is not HOST:PORT"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(root))
        .domain_name(host);
    if let Some(workload) = identity {
        tls = tls.identity(Identity::from_pem(&workload.chain_pem, &workload.key_pem));
    }
    Ok(Endpoint::from_shared(format!("https://{address}"))?
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .tls_config(tls)?
        .connect()
        .await?)
}

/// How the agent's own streams reach the control plane (a VM's health reports: see
/// [`super::health`]), as Envoy does.
#[derive(Clone, Debug)]
pub enum ControlPlane {
    /// Plaintext (`--control-plane-auth-policy NONE`).
    Plain,
    /// Mutual TLS with the workload's current certificate.
    Mutual {
        /// `--ca-root-cert`.
        root_cert: PathBuf,
        /// The current certificate.
        workload: watch::Receiver<Arc<Workload>>,
    },
}

impl ControlPlane {
    /// A channel to `address` (`HOST:PORT`).
    pub async fn connect(&self, address: &str) -> anyhow::Result<Channel> {
        match self {
            Self::Plain => Ok(Endpoint::from_shared(format!("http://{address}"))?
                .connect()
                .await?),
            Self::Mutual {
                root_cert,
                workload,
            } => {
                let current = workload.borrow().clone();
                channel(address, root_cert, Some(&current)).await
            }
        }
    }
}

impl CaClient {
    /// The token to send, if the file exists; an error if it exists and cannot be read.
    fn token(&self) -> anyhow::Result<Option<String>> {
        match std::fs::read_to_string(&self.token_file) {
            Ok(text) => Ok(Some(text.trim().to_string()).filter(|t| !t.is_empty())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow::anyhow!("{}: {e}", self.token_file.display())),
        }
    }

    /// Makes a key and a CSR and asks the CA for its certificate, authenticated by `current`
    /// and the token.
    pub async fn fetch(&self, current: Option<&Workload>) -> anyhow::Result<Workload> {
        let token = self.token()?;
        if token.is_none() && current.is_none() {
            anyhow::bail!(
                "no token at {} and no certificate yet: the CA has no way to know who this is",
                self.token_file.display()
            );
        }
        let key = KeyPair::generate()?;
        let csr = CertificateParams::default()
            .serialize_request(&key)?
            .pem()?;
        let mut request = tonic::Request::new(IstioCertificateRequest {
            csr,
            validity_duration: i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX),
        });
        if let Some(token) = token {
            let value = format!("Bearer {token}").parse().map_err(|_| {
                anyhow::anyhow!("{}: not a header value", self.token_file.display())
            })?;
            request.metadata_mut().insert("authorization", value);
        }
        let channel = channel(&self.address, &self.root_cert, current).await?;
        let mut client = tonic::client::Grpc::new(channel);
        client.ready().await?;
        let codec =
            tonic_prost::ProstCodec::<IstioCertificateRequest, IstioCertificateResponse>::default();
        let chain = client
            .unary(request, http::uri::PathAndQuery::from_static(PATH), codec)
            .await
            .map_err(|status| {
                anyhow::anyhow!("the CA refused: {:?}: {}", status.code(), status.message())
            })?
            .into_inner()
            .cert_chain;
        workload(
            &chain,
            key.serialize_pem(),
            current.map_or(1, |w| w.serial + 1),
        )
    }
}

/// A workload from the CA's chain (leaf first, root last) and its key.
fn workload(chain: &[String], key_pem: String, serial: u64) -> anyhow::Result<Workload> {
    let [leaf_and_chain @ .., root] = chain else {
        anyhow::bail!("the CA answered with no certificate");
    };
    if leaf_and_chain.is_empty() {
        anyhow::bail!("the CA answered with a root and no certificate");
    }
    let chain_pem: String = leaf_and_chain
        .iter()
        .map(|pem| ensure_newline(pem))
        .collect();
    let leaf = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .ok_or_else(|| anyhow::anyhow!("the CA's certificate is not PEM"))??;
    let leaf = PeerCertificate::read(&leaf)
        .ok_or_else(|| anyhow::anyhow!("the CA's certificate does not parse"))?;
    Ok(Workload {
        chain_pem,
        key_pem,
        root_pem: ensure_newline(root),
        leaf,
        serial,
        received: SystemTime::now(),
    })
}

fn ensure_newline(pem: &str) -> String {
    let mut pem = pem.trim_end().to_string();
    pem.push('\n');
    pem
}

/// A fraction of a lifetime between 0.5 and 0.8, from the system's random source.
fn renewal_fraction() -> f64 {
    let mut byte = [0u8; 2];
    // A failing system random source leaves the midpoint, which is as good a renewal time.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut byte);
    0.5 + 0.3 * f64::from(u16::from_le_bytes(byte)) / f64::from(u16::MAX)
}

/// Obtains the first certificate, retrying until it succeeds, and returns it.
pub async fn first(client: &CaClient) -> Workload {
    obtain(client, None).await
}

/// Renews the certificate in `current` for as long as the agent runs.
pub async fn renew(client: CaClient, current: watch::Sender<Arc<Workload>>) {
    loop {
        let at = current.borrow().renew_at(renewal_fraction());
        tokio::time::sleep(at.duration_since(SystemTime::now()).unwrap_or_default()).await;
        let held = current.borrow().clone();
        current.send_replace(Arc::new(obtain(&client, Some(&held)).await));
    }
}

/// A certificate after `current` (the first if none), asked for until the CA gives one: a
/// failure is logged and retried after [`FIRST_RETRY`], doubling to [`MAX_RETRY`].
async fn obtain(client: &CaClient, current: Option<&Workload>) -> Workload {
    let mut pause = FIRST_RETRY;
    loop {
        match client.fetch(current).await {
            Ok(workload) => {
                let identity = workload.leaf.identities.iter().map(ToString::to_string);
                let identity = identity.collect::<Vec<_>>().join(",");
                tracing::info!(identity = %identity, expiry = %workload.leaf.expiry(), serial = workload.serial, "obtained the workload certificate");
                return workload;
            }
            Err(e) => {
                let error = format!("{e:#}");
                match current {
                    None => {
                        tracing::warn!(ca = %client.address, error = %error, retry = ?pause, "could not obtain the workload certificate");
                    }
                    Some(held) => {
                        tracing::warn!(ca = %client.address, error = %error, retry = ?pause, expiry = %held.leaf.expiry(), "could not renew the workload certificate");
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_RETRY);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_falls_between_half_and_four_fifths_of_the_lifetime() {
        for _ in 0..100 {
            let f = renewal_fraction();
            assert!((0.5..=0.8).contains(&f), "{f}");
        }
    }

    #[tokio::test]
    async fn without_a_token_or_a_certificate_the_agent_does_not_ask() {
        let dir = tempfile::tempdir().unwrap();
        let client = CaClient {
            // Nothing listens there: the request must end before connecting.
            address: "127.0.0.1:1".into(),
            root_cert: dir.path().join("root-cert.pem"),
            token_file: dir.path().join("istio-token"),
            ttl: Duration::from_secs(60),
        };
        let err = client.fetch(None).await.unwrap_err().to_string();
        assert!(
            err.starts_with("no token at ") && err.contains("istio-token"),
            "{err}"
        );
        std::fs::write(&client.token_file, "a-token\n").unwrap();
        let err = client.fetch(None).await.unwrap_err().to_string();
        assert!(err.contains("--ca-root-cert"), "{err}");
    }

    #[test]
    fn an_answer_without_a_certificate_is_refused() {
        let err = workload(&[], String::new(), 1).unwrap_err().to_string();
        assert_eq!(err, "the CA answered with no certificate");
        let err = workload(&["x".into()], String::new(), 1)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "the CA answered with a root and no certificate");
    }
}
