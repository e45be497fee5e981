//! The secure ADS port's TLS: a server certificate from the mesh CA, renewed at half its life,
//! and client certificates requested and, when presented, verified against the mesh root.
//!
//! A client without a certificate still completes the handshake: the certificate API lets it
//! in with a bootstrap token, and ADS refuses its streams with `UNAUTHENTICATED`
//! (`xds::ads`). A certificate that does not verify fails the handshake. TLS 1.2 and 1.3,
//! ALPN `h2` only (gRPC), rustls with ring.

use std::sync::{Arc, Mutex};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;

use crate::ca::{CertificateService, MeshCa, PeerCertificate};

/// What the secure port needs: its TLS settings and the certificate API.
#[derive(Clone)]
pub(super) struct Secure {
    pub(super) acceptor: tokio_rustls::TlsAcceptor,
    pub(super) certificates: CertificateService,
}

impl Secure {
    /// TLS with a certificate for `names` from `ca`, verifying clients against its root.
    pub(super) fn new(
        ca: Arc<MeshCa>,
        names: Vec<String>,
        certificates: CertificateService,
    ) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(ca.root_store()),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| format!("the mesh root as a client trust anchor: {e}"))?;
        let resolver = ServerCert::new(ca, names)?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Self {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            certificates,
        })
    }
}

/// The client certificate of a finished handshake, read.
pub(super) fn peer_certificate(
    tls: &tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
) -> Option<Arc<PeerCertificate>> {
    let (_, session) = tls.get_ref();
    let leaf = session.peer_certificates()?.first()?;
    PeerCertificate::read(leaf).map(Arc::new)
}

/// The server's certificate, issued again once half its life has passed.
struct ServerCert {
    ca: Arc<MeshCa>,
    names: Vec<String>,
    current: Mutex<(Arc<CertifiedKey>, OffsetDateTime)>,
}

impl std::fmt::Debug for ServerCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerCert")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl ServerCert {
    fn new(ca: Arc<MeshCa>, names: Vec<String>) -> Result<Self, String> {
        let first = issue(&ca, &names)?;
        tracing::info!(names = ?names, "secure port certificate issued");
        Ok(Self {
            ca,
            names,
            current: Mutex::new(first),
        })
    }
}

/// A certificate for `names` and the time from which it is renewed (half its life).
fn issue(ca: &MeshCa, names: &[String]) -> Result<(Arc<CertifiedKey>, OffsetDateTime), String> {
    let (chain, key, not_after) = ca.issue_server(names).map_err(|e| e.to_string())?;
    let key = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| e.to_string())?;
    let now = OffsetDateTime::now_utc();
    Ok((
        Arc::new(CertifiedKey::new(chain, key)),
        now + (not_after - now) / 2,
    ))
}

impl ResolvesServerCert for ServerCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if OffsetDateTime::now_utc() >= current.1 {
            match issue(&self.ca, &self.names) {
                Ok(next) => {
                    tracing::info!(names = ?self.names, "secure port certificate renewed");
                    *current = next;
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot renew the secure port's certificate; serving the old one, trying again in a minute");
                    current.1 = OffsetDateTime::now_utc() + time::Duration::minutes(1);
                }
            }
        }
        Some(current.0.clone())
    }
}
