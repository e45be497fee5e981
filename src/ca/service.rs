//! `istio.v1.auth.IstioCertificateService/CreateCertificate`, the certificate API
//! istio-agent speaks, served on the secure port.
//!
//! The identity in the certificate comes from how the caller authenticated, never from the
//! CSR: first the caller's own client certificate (a renewal: its SPIFFE id in this trust
//! domain), else an `authorization: Bearer TOKEN` header holding a bootstrap token of
//! `--bootstrap-tokens` or, when Kubernetes is configured, a service-account token the API
//! server accepts ([`TokenReviewer`]). Anything else is `UNAUTHENTICATED`, logged with the
//! peer's address; an API server that cannot answer is `UNAVAILABLE`.
//! A CSR that does not parse or whose signature is wrong, or a lifetime over
//! `--max-workload-cert-ttl`, is `INVALID_ARGUMENT`. Requests are at most
//! [`MAX_REQUEST_BYTES`].

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tonic::body::Body;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

use super::{BootstrapTokens, IssueError, MeshCa, PeerCertificate};

/// The method's HTTP/2 path.
pub const PATH: &str = "/istio.v1.auth.IstioCertificateService/CreateCertificate";

/// The largest request read: a CSR is about a kilobyte.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// Istio's `IstioCertificateRequest` (`security/v1alpha1/ca.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct IstioCertificateRequest {
    /// The PEM-encoded certificate signing request.
    #[prost(string, tag = "1")]
    pub csr: String,
    /// The requested lifetime in seconds; 0 or less: the CA's default.
    #[prost(int64, tag = "3")]
    pub validity_duration: i64,
}

/// Istio's `IstioCertificateResponse`: the PEM certificate, its chain, the root last.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IstioCertificateResponse {
    /// PEM blocks, the new certificate first and the root last.
    #[prost(string, repeated, tag = "1")]
    pub cert_chain: Vec<String>,
}

/// Who is at the other end of a secure connection, put in each request's extensions by the
/// secure port.
#[derive(Clone, Debug)]
pub struct SecurePeer {
    /// The TCP peer.
    pub addr: SocketAddr,
    /// Its verified client certificate, if it presented one.
    pub certificate: Option<Arc<PeerCertificate>>,
}

/// What a token reviewer says of a bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reviewed {
    /// A service account's token: its namespace and name.
    ServiceAccount(String, String),
    /// Not accepted, and why.
    Refused(String),
}

/// The future of a review.
pub type Review<'a> = Pin<Box<dyn Future<Output = Result<Reviewed, String>> + Send + 'a>>;

/// Checks bearer tokens that are not bootstrap tokens: Kubernetes service-account tokens,
/// through the API server's TokenReview. `Err` when the reviewer could not answer.
pub trait TokenReviewer: Send + Sync + std::fmt::Debug {
    /// Reviews `token`.
    fn review<'a>(&'a self, token: &'a str) -> Review<'a>;
}

/// The certificate service. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CertificateService {
    ca: Arc<MeshCa>,
    tokens: Option<Arc<BootstrapTokens>>,
    reviewer: Option<Arc<dyn TokenReviewer>>,
}

impl CertificateService {
    /// Signs with `ca`; `tokens` are `--bootstrap-tokens`, if given; `reviewer` checks the
    /// other tokens, if Kubernetes is configured.
    pub fn new(
        ca: Arc<MeshCa>,
        tokens: Option<Arc<BootstrapTokens>>,
        reviewer: Option<Arc<dyn TokenReviewer>>,
    ) -> Self {
        Self {
            ca,
            tokens,
            reviewer,
        }
    }

    /// Answers one gRPC call (the caller routes [`PATH`] here).
    pub async fn call(&self, request: http::Request<Body>) -> http::Response<Body> {
        let mut grpc = tonic::server::Grpc::new(ProstCodec::<
            IstioCertificateResponse,
            IstioCertificateRequest,
        >::default())
        .max_decoding_message_size(MAX_REQUEST_BYTES);
        grpc.unary(Create(self.clone()), request).await
    }

    /// The namespace and service account the caller proved, and how.
    async fn authenticate(
        &self,
        peer: Option<&SecurePeer>,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<(String, String, &'static str), Status> {
        let certified = peer.and_then(|p| p.certificate.as_deref()).and_then(|c| {
            c.identities
                .iter()
                .find(|id| id.trust_domain == self.ca.trust_domain())
        });
        if let Some(id) = certified {
            return Ok((
                id.namespace.clone(),
                id.service_account.clone(),
                "client certificate",
            ));
        }
        let Some(header) = metadata.get("authorization") else {
            return Err(Status::unauthenticated(
                "no client certificate of this mesh and no authorization: Bearer token",
            ));
        };
        let token = header
            .to_str()
            .ok()
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                Status::unauthenticated("the authorization header is not Bearer TOKEN")
            })?;
        if let Some((namespace, account)) = self.tokens.as_ref().and_then(|t| t.lookup(token)) {
            return Ok((namespace, account, "bootstrap token"));
        }
        let Some(reviewer) = &self.reviewer else {
            return Err(Status::unauthenticated(if self.tokens.is_some() {
                "the token is not a known bootstrap token"
            } else {
                "the server checks no tokens (no --bootstrap-tokens, no Kubernetes)"
            }));
        };
        match reviewer.review(token).await {
            Ok(Reviewed::ServiceAccount(namespace, account)) => {
                Ok((namespace, account, "Kubernetes token"))
            }
            Ok(Reviewed::Refused(why)) => Err(Status::unauthenticated(format!(
                "the token is not a known bootstrap token, and the API server refused it: {why}"
            ))),
            Err(err) => Err(Status::unavailable(format!(
                "cannot review the token with the API server: {err}"
            ))),
        }
    }

    async fn create(
        self,
        request: Request<IstioCertificateRequest>,
    ) -> Result<IstioCertificateResponse, Status> {
        let peer = request.extensions().get::<SecurePeer>();
        let addr = peer.map_or_else(|| "-".to_string(), |p| p.addr.to_string());
        let (namespace, account, how) = self
            .authenticate(peer, request.metadata())
            .await
            .inspect_err(|status| {
                tracing::warn!(peer = %addr, reason = status.message(), "refusing a certificate request");
            })?;
        let body = request.get_ref();
        let ttl = u64::try_from(body.validity_duration)
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs);
        let chain = self
            .ca
            .sign_csr(&body.csr, &namespace, &account, ttl)
            .map_err(|err| {
                tracing::warn!(peer = %addr, %namespace, service_account = %account, error = %err, "refusing a certificate request");
                match err {
                    IssueError::Csr(_) | IssueError::Lifetime { .. } => {
                        Status::invalid_argument(err.to_string())
                    }
                    IssueError::Sign(_) => Status::internal(err.to_string()),
                }
            })?;
        tracing::info!(peer = %addr, %namespace, service_account = %account, authenticated_by = how, ttl = ?ttl.unwrap_or(self.ca.ttl()), "issued a workload certificate");
        Ok(IstioCertificateResponse { cert_chain: chain })
    }
}

/// One call of the method, for tonic's unary handling.
struct Create(CertificateService);

impl tonic::server::UnaryService<IstioCertificateRequest> for Create {
    type Response = IstioCertificateResponse;
    type Future =
        Pin<Box<dyn Future<Output = Result<Response<IstioCertificateResponse>, Status>> + Send>>;

    fn call(&mut self, request: Request<IstioCertificateRequest>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.create(request).await.map(Response::new) })
    }
}
