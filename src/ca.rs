//! The mesh CA: signs workload certificates with SPIFFE ids, and the secure port's own.
//!
//! The root is Istio's plug-in layout when `--cacerts-dir` (default `./etc/cacerts`, where
//! istiod mounts its `cacerts` secret) holds `ca-cert.pem`: `ca-cert.pem` and `ca-key.pem`
//! sign, `cert-chain.pem` follows every issued certificate, `root-cert.pem` is what peers
//! trust. Otherwise the CA is a self-signed root kept in `--ca-dir` (`root-cert.pem` and
//! `ca-key.pem`), made once with an ECDSA P-256 key and read back at every later start, as
//! istiod keeps its self-signed root in the `istio-ca-secret` secret.
//!
//! At load the CA signs a probe certificate and verifies it against the root with rustls'
//! own client-certificate verifier: a `ca-cert.pem` that does not chain to `root-cert.pem`
//! through `cert-chain.pem`, or a key that is not `ca-cert.pem`'s, stops the server at start
//! instead of breaking every handshake later.
//!
//! A workload certificate ([`MeshCa::sign_csr`]) carries one URI name,
//! `spiffe://TRUST_DOMAIN/ns/NS/sa/SA`, for the identity the caller authenticated as (the
//! CSR contributes only its public key, and its signature is checked), an empty subject (so
//! the name is critical), `digitalSignature` and `keyEncipherment`, server and client
//! authentication, a random 128-bit serial, and a validity from one minute ago (clock skew)
//! to the requested lifetime (`--workload-cert-ttl` by default, at most
//! `--max-workload-cert-ttl`). The answer is Istio's: the certificate, then `cert-chain.pem`
//! (plug-in only), then `root-cert.pem`.
//!
//! The CA key stays in this process: it is read or made here, never logged, never served,
//! and written only when made (to `ca-key.pem`, mode 0600, before `root-cert.pem`, each
//! through a temporary file renamed into place).

mod identity;
mod key;
mod service;
mod tokens;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use time::OffsetDateTime;

pub use identity::{PeerCertificate, SpiffeId};
pub(crate) use key::CaKey;
pub use service::{
    CertificateService, IstioCertificateRequest, IstioCertificateResponse, MAX_REQUEST_BYTES, PATH,
    Review, Reviewed, SecurePeer, TokenReviewer,
};
pub use tokens::BootstrapTokens;

/// How long a self-signed root made here is valid: ten years, as istiod's.
const ROOT_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// How far back an issued certificate's validity starts, for clocks a little behind ours.
const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// Where the CA's files are and what it issues.
#[derive(Clone, Debug)]
pub struct CaConfig {
    /// `cluster.local`: the trust domain of every SPIFFE id.
    pub trust_domain: String,
    /// Istio's plug-in layout (`--cacerts-dir`); used when it holds `ca-cert.pem`.
    pub cacerts_dir: PathBuf,
    /// Where the self-signed root is kept (`--ca-dir`).
    pub ca_dir: PathBuf,
    /// A workload certificate's lifetime when the request names none.
    pub ttl: Duration,
    /// The longest lifetime a request may ask for.
    pub max_ttl: Duration,
}

/// A CA that cannot start, with the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// A file cannot be read or written.
    #[error("CA file {}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (not a `source`: the message holds it already).
        error: std::io::Error,
    },
    /// A file holds something unusable.
    #[error("CA file {}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The files do not fit together, or signing failed.
    #[error("the CA in {}: {message}", dir.display())]
    Unusable {
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Why a certificate was not issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// The CSR does not parse, or its signature is wrong.
    #[error("the CSR is not usable: {0}")]
    Csr(String),
    /// The requested lifetime is longer than `--max-workload-cert-ttl`.
    #[error("the requested lifetime {asked:?} is longer than the most the CA gives, {max:?}")]
    Lifetime {
        /// What was asked.
        asked: Duration,
        /// `--max-workload-cert-ttl`.
        max: Duration,
    },
    /// Signing failed.
    #[error("cannot sign: {0}")]
    Sign(String),
}

/// The mesh CA. Cheap to share behind an `Arc`.
pub struct MeshCa {
    trust_domain: String,
    issuer: Issuer<'static, CaKey>,
    /// `cert-chain.pem` (plug-in), sent after every issued certificate; empty when the CA
    /// certificate is the root.
    chain: String,
    /// `root-cert.pem`.
    root: String,
    /// Its certificates, which peers are verified against.
    roots: Vec<CertificateDer<'static>>,
    /// `cert-chain.pem`'s certificates, which the server sends after its own.
    intermediates: Vec<CertificateDer<'static>>,
    ttl: Duration,
    max_ttl: Duration,
    /// Where it came from, for the start line.
    origin: String,
    /// Its directory, for errors.
    dir: PathBuf,
}

impl std::fmt::Debug for MeshCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshCa")
            .field("trust_domain", &self.trust_domain)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl MeshCa {
    /// Loads the plug-in CA, or the self-signed root (made now if `--ca-dir` has none), and
    /// checks that what it issues verifies against its root.
    pub fn load(config: &CaConfig) -> Result<Arc<Self>, CaError> {
        let ca = if config.cacerts_dir.join("ca-cert.pem").exists() {
            Self::plug_in(config)?
        } else {
            Self::self_signed(config)?
        };
        ca.check()?;
        tracing::info!(origin = %ca.origin, trust_domain = %ca.trust_domain, "mesh CA loaded");
        Ok(Arc::new(ca))
    }

    /// The trust domain of its SPIFFE ids.
    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// `root-cert.pem`: what workloads trust.
    pub fn root_pem(&self) -> &str {
        &self.root
    }

    /// The root as a rustls trust store.
    pub fn root_store(&self) -> RootCertStore {
        let mut store = RootCertStore::empty();
        store.add_parsable_certificates(self.roots.iter().cloned());
        store
    }

    /// The default lifetime of a workload certificate.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Signs `csr_pem` for `namespace`/`service_account`, valid for `ttl` (`None`: the
    /// default). The chain is Istio's: the certificate, `cert-chain.pem`, the root.
    pub fn sign_csr(
        &self,
        csr_pem: &str,
        namespace: &str,
        service_account: &str,
        ttl: Option<Duration>,
    ) -> Result<Vec<String>, IssueError> {
        let ttl = ttl.unwrap_or(self.ttl);
        if ttl > self.max_ttl {
            return Err(IssueError::Lifetime {
                asked: ttl,
                max: self.max_ttl,
            });
        }
        let mut csr = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| IssueError::Csr(e.to_string()))?;
        let id = SpiffeId::new(&self.trust_domain, namespace, service_account);
        csr.params = leaf(&[SanType::URI(
            id.to_string()
                .try_into()
                .map_err(|e: rcgen::Error| IssueError::Csr(e.to_string()))?,
        )])
        .and_then(|p| validity(p, ttl))
        .map_err(|e| IssueError::Sign(e.to_string()))?;
        let cert = csr
            .signed_by(&self.issuer)
            .map_err(|e| IssueError::Sign(e.to_string()))?;
        let mut chain = vec![cert.pem()];
        if !self.chain.is_empty() {
            chain.push(self.chain.clone());
        }
        chain.push(self.root.clone());
        Ok(chain)
    }

    /// A certificate for a server known by `names` (DNS names or IP addresses), with a key
    /// made here: the chain (certificate, then `cert-chain.pem`'s), the key, and when it
    /// expires.
    pub fn issue_server(
        &self,
        names: &[String],
    ) -> Result<
        (
            Vec<CertificateDer<'static>>,
            PrivateKeyDer<'static>,
            OffsetDateTime,
        ),
        IssueError,
    > {
        let sans = names
            .iter()
            .map(|n| match n.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n.as_str().try_into().map(SanType::DnsName),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| IssueError::Sign(format!("a server name: {e}")))?;
        let params = leaf(&sans)
            .and_then(|p| validity(p, self.ttl))
            .map_err(|e| IssueError::Sign(e.to_string()))?;
        let not_after = params.not_after;
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| IssueError::Sign(e.to_string()))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| IssueError::Sign(e.to_string()))?;
        let mut chain = vec![cert.der().clone()];
        chain.extend(self.intermediates.iter().cloned());
        let key = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        Ok((chain, key, not_after))
    }

    fn plug_in(config: &CaConfig) -> Result<Self, CaError> {
        let dir = &config.cacerts_dir;
        let cert = read(&dir.join("ca-cert.pem"))?;
        let key = read(&dir.join("ca-key.pem"))?;
        let chain = read(&dir.join("cert-chain.pem"))?;
        let root = read(&dir.join("root-cert.pem"))?;
        let key = CaKey::from_pem(&key).map_err(|message| CaError::Invalid {
            path: dir.join("ca-key.pem"),
            message,
        })?;
        let issuer = issuer(&dir.join("ca-cert.pem"), &cert, key)?;
        Ok(Self {
            trust_domain: config.trust_domain.clone(),
            issuer,
            intermediates: certificates(&dir.join("cert-chain.pem"), &chain)?,
            roots: certificates(&dir.join("root-cert.pem"), &root)?,
            chain: chain.trim_end().to_string() + "\n",
            root,
            ttl: config.ttl,
            max_ttl: config.max_ttl,
            origin: format!("plug-in CA in {}", dir.display()),
            dir: dir.clone(),
        })
    }

    fn self_signed(config: &CaConfig) -> Result<Self, CaError> {
        let dir = &config.ca_dir;
        let (cert_path, key_path) = (dir.join("root-cert.pem"), dir.join("ca-key.pem"));
        let made = !(cert_path.exists() && key_path.exists());
        if made {
            make_root(&config.trust_domain, dir)?;
        }
        let root = read(&cert_path)?;
        let key = CaKey::from_pem(&read(&key_path)?).map_err(|message| CaError::Invalid {
            path: key_path.clone(),
            message,
        })?;
        let issuer = issuer(&cert_path, &root, key)?;
        let verb = if made { "made" } else { "kept" };
        Ok(Self {
            trust_domain: config.trust_domain.clone(),
            issuer,
            chain: String::new(),
            intermediates: Vec::new(),
            roots: certificates(&cert_path, &root)?,
            root,
            ttl: config.ttl,
            max_ttl: config.max_ttl,
            origin: format!("self-signed root {verb} in {}", dir.display()),
            dir: dir.clone(),
        })
    }

    /// Issues a probe certificate and verifies it as the secure port verifies its clients.
    fn check(&self) -> Result<(), CaError> {
        let unusable = |message: String| CaError::Unusable {
            dir: self.dir.clone(),
            message,
        };
        let (chain, _, _) = self
            .issue_server(&["probe.wayfinder".to_string()])
            .map_err(|e| unusable(e.to_string()))?;
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(self.root_store()),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .map_err(|e| unusable(format!("root-cert.pem is not a usable trust anchor: {e}")))?;
        verifier
            .verify_client_cert(&chain[0], &chain[1..], UnixTime::now())
            .map_err(|e| {
                unusable(format!(
                    "a certificate it signs does not verify against root-cert.pem ({e}): is \
                     ca-key.pem the key of ca-cert.pem, and does ca-cert.pem chain to \
                     root-cert.pem through cert-chain.pem?"
                ))
            })?;
        Ok(())
    }
}

/// The parameters every certificate the CA issues shares.
fn leaf(sans: &[SanType]) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.subject_alt_names = sans.to_vec();
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(serial()?);
    Ok(params)
}

/// `params` valid from [`CLOCK_SKEW`] ago for `ttl`.
fn validity(
    mut params: CertificateParams,
    ttl: Duration,
) -> Result<CertificateParams, rcgen::Error> {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - CLOCK_SKEW;
    params.not_after = now + ttl;
    Ok(params)
}

/// A random positive 128-bit serial number.
fn serial() -> Result<SerialNumber, rcgen::Error> {
    let mut bytes = [0u8; 16];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| rcgen::Error::RingUnspecified)?;
    bytes[0] &= 0x7f;
    Ok(SerialNumber::from_slice(&bytes))
}

/// Makes a self-signed root in `dir`: the key first, then the certificate, each written
/// whole under a temporary name and renamed.
fn make_root(trust_domain: &str, dir: &Path) -> Result<(), CaError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| CaError::Io { path, error }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let key = CaKey::generate().map_err(|e| CaError::Unusable {
        dir: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, trust_domain);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let unusable = |e: rcgen::Error| CaError::Unusable {
        dir: dir.to_path_buf(),
        message: e.to_string(),
    };
    params.serial_number = Some(serial().map_err(unusable)?);
    let params = validity(params, ROOT_VALIDITY).map_err(unusable)?;
    let cert = params.self_signed(&key).map_err(unusable)?;
    let key_pem = key.pem().ok_or_else(|| CaError::Unusable {
        dir: dir.to_path_buf(),
        message: "a key made here has a PKCS#8 form".into(),
    })?;
    write_private(&dir.join("ca-key.pem"), &key_pem)?;
    write_private(&dir.join("root-cert.pem"), &cert.pem())?;
    Ok(())
}

/// Writes `contents` to `path` through a temporary file of mode 0600 in the same directory.
fn write_private(path: &Path, contents: &str) -> Result<(), CaError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |error| CaError::Io {
        path: path.to_path_buf(),
        error,
    };
    let tmp = path.with_extension("pem.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

fn read(path: &Path) -> Result<String, CaError> {
    std::fs::read_to_string(path).map_err(|error| CaError::Io {
        path: path.to_path_buf(),
        error,
    })
}

/// The PEM certificates of `pem`, at least one.
fn certificates(path: &Path, pem: &str) -> Result<Vec<CertificateDer<'static>>, CaError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CaError::Invalid {
            path: path.to_path_buf(),
            message: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(CaError::Invalid {
            path: path.to_path_buf(),
            message: "holds no certificate".into(),
        });
    }
    Ok(certs)
}

/// The signer of `cert_pem` (its first certificate) with `key`.
fn issuer(path: &Path, cert_pem: &str, key: CaKey) -> Result<Issuer<'static, CaKey>, CaError> {
    let first = certificates(path, cert_pem)?.remove(0);
    Issuer::from_ca_cert_der(&first, key).map_err(|e| CaError::Invalid {
        path: path.to_path_buf(),
        message: format!("not a usable CA certificate: {e}"),
    })
}

#[cfg(test)]
mod tests;
