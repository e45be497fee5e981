//! The agent's SDS server: the workload's certificate and the mesh's root, served to Envoy on
//! a Unix socket as istio-agent serves them.
//!
//! - The socket is Istio's path, [`SOCKET`], relative to the agent's working directory. Its
//!   directory is made `0700` and the socket `0600`, and a connection whose peer (by
//!   `SO_PEERCRED`) runs as another user than the agent, and is not root, is closed unread:
//!   the key goes only to the Envoy the agent runs. The socket is removed when the agent
//!   stops.
//! - Two secrets, by Istio's names: [`DEFAULT`], the certificate chain and its key, and
//!   [`ROOTCA`], the root that validates peers. Other names are logged and left unanswered,
//!   as a missing secret is for Envoy (its resource stays warming).
//! - State of the world (`StreamSecrets`) and `FetchSecrets`; delta SDS is refused with
//!   `UNIMPLEMENTED` (the bootstrap asks for `GRPC`). Each stream answers the names it asked
//!   for when it asks and again whenever the certificate changes; an ACK of what was sent
//!   sends nothing. A rotation is therefore a push on the open streams: Envoy swaps the
//!   certificate in place, without a restart.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prost::Message;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use super::certificates::Workload;
use crate::xds::pb::core::{DataSource, data_source};
use crate::xds::pb::discovery::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use crate::xds::pb::protobuf::Any;
use crate::xds::pb::secret::secret_discovery_service_server::{
    SecretDiscoveryService, SecretDiscoveryServiceServer,
};
use crate::xds::pb::tls::{CertificateValidationContext, Secret, TlsCertificate, secret};

/// Istio's SDS socket, relative to the working directory.
pub const SOCKET: &str = "var/run/secrets/workload-spiffe-uds/socket";
/// The workload's certificate and key.
pub const DEFAULT: &str = "default";
/// The mesh's root.
pub const ROOTCA: &str = "ROOTCA";
const SECRET_TYPE: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

/// The SDS socket's absolute path, for the agent's working directory.
pub fn socket_path() -> anyhow::Result<PathBuf> {
    Ok(std::env::current_dir()?.join(SOCKET))
}

/// The socket file: removed when dropped.
#[derive(Debug)]
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Binds the socket at `path` (replacing a stale one) and serves `certificates` on it until
/// `shutdown`. The socket file goes when the returned value is dropped.
pub fn serve(
    path: &Path,
    certificates: watch::Receiver<Arc<Workload>>,
    shutdown: CancellationToken,
) -> anyhow::Result<SocketFile> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{}: no directory", path.display()))?;
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            anyhow::bail!("{}: {e}", path.display())
        }
        _ => {}
    }
    let listener =
        UnixListener::bind(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let own = rustix::process::getuid().as_raw();
    let incoming = futures::stream::unfold(listener, move |listener| async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => match stream.peer_cred() {
                    Ok(cred) if cred.uid() == own || cred.uid() == 0 => {
                        return Some((Ok::<_, std::io::Error>(stream), listener));
                    }
                    Ok(cred) => {
                        tracing::warn!(uid = cred.uid(), pid = ?cred.pid(), "SDS: refused a connection from another user");
                    }
                    Err(e) => tracing::warn!(error = %e, "SDS: a connection without credentials"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "SDS: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    });
    let service = SecretDiscoveryServiceServer::new(Sds { certificates });
    let file = SocketFile(path.to_path_buf());
    let path = path.to_path_buf();
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, shutdown.cancelled())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, socket = %path.display(), "SDS server failed");
        }
    });
    Ok(file)
}

struct Sds {
    certificates: watch::Receiver<Arc<Workload>>,
}

/// The secrets `names` asks for, of those the agent has.
fn response(workload: &Workload, names: &[String], nonce: u64) -> DiscoveryResponse {
    let inline = |text: &str| {
        Some(DataSource {
            specifier: Some(data_source::Specifier::InlineBytes(
                text.as_bytes().to_vec(),
            )),
            ..DataSource::default()
        })
    };
    let resources = names
        .iter()
        .filter_map(|name| {
            let kind = match name.as_str() {
                DEFAULT => secret::Type::TlsCertificate(TlsCertificate {
                    certificate_chain: inline(&workload.chain_pem),
                    private_key: inline(&workload.key_pem),
                    ..TlsCertificate::default()
                }),
                ROOTCA => secret::Type::ValidationContext(CertificateValidationContext {
                    trusted_ca: inline(&workload.root_pem),
                    ..CertificateValidationContext::default()
                }),
                _ => return None,
            };
            let secret = Secret {
                name: name.clone(),
                r#type: Some(kind),
            };
            Some(Any {
                type_url: SECRET_TYPE.to_string(),
                value: secret.encode_to_vec(),
            })
        })
        .collect();
    DiscoveryResponse {
        version_info: workload.serial.to_string(),
        resources,
        type_url: SECRET_TYPE.to_string(),
        nonce: nonce.to_string(),
        ..DiscoveryResponse::default()
    }
}

fn warn_unknown(names: &[String]) {
    for name in names.iter().filter(|n| *n != DEFAULT && *n != ROOTCA) {
        tracing::warn!(secret = %name, "SDS: Envoy asked for a secret the agent does not serve (only `default` and `ROOTCA`)");
    }
}

#[tonic::async_trait]
impl SecretDiscoveryService for Sds {
    type DeltaSecretsStream = futures::stream::Empty<Result<DeltaDiscoveryResponse, Status>>;
    type StreamSecretsStream = ReceiverStream<Result<DiscoveryResponse, Status>>;

    async fn delta_secrets(
        &self,
        _: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaSecretsStream>, Status> {
        Err(Status::unimplemented(
            "the agent serves SDS as state of the world (StreamSecrets)",
        ))
    }

    async fn stream_secrets(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamSecretsStream>, Status> {
        let mut requests = request.into_inner();
        let mut certificates = self.certificates.clone();
        let (tx, rx) = mpsc::channel(2);
        tokio::spawn(async move {
            let mut names: Vec<String> = Vec::new();
            let mut sent: Option<(Vec<String>, u64)> = None;
            let mut nonce = 0u64;
            loop {
                tokio::select! {
                    message = requests.message() => match message {
                        Ok(Some(request)) => {
                            if let Some(error) = &request.error_detail {
                                tracing::warn!(secrets = ?request.resource_names, error = %error.message, "SDS: Envoy rejected a secret");
                            }
                            if request.resource_names != names {
                                warn_unknown(&request.resource_names);
                                names = request.resource_names;
                            }
                        }
                        Ok(None) | Err(_) => return,
                    },
                    changed = certificates.changed() => if changed.is_err() { return },
                }
                let workload = certificates.borrow_and_update().clone();
                let now = (names.clone(), workload.serial);
                if names.is_empty() || sent.as_ref() == Some(&now) {
                    continue;
                }
                nonce += 1;
                if tx
                    .send(Ok(response(&workload, &names, nonce)))
                    .await
                    .is_err()
                {
                    return;
                }
                sent = Some(now);
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn fetch_secrets(
        &self,
        request: Request<DiscoveryRequest>,
    ) -> Result<Response<DiscoveryResponse>, Status> {
        let names = request.into_inner().resource_names;
        warn_unknown(&names);
        let workload = self.certificates.borrow().clone();
        Ok(Response::new(response(&workload, &names, 0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_carries_the_asked_secrets_and_no_others() {
        let workload = Workload {
            chain_pem: "CHAIN\n".into(),
            key_pem: "KEY\n".into(),
            root_pem: "ROOT\n".into(),
            leaf: crate::ca::PeerCertificate {
                identities: Vec::new(),
                not_after: 0,
            },
            serial: 3,
            received: std::time::SystemTime::now(),
        };
        let names = vec!["ROOTCA".to_string(), "file-cert:x".to_string()];
        let r = response(&workload, &names, 7);
        assert_eq!((r.version_info.as_str(), r.nonce.as_str()), ("3", "7"));
        assert_eq!(r.resources.len(), 1);
        let secret = Secret::decode(r.resources[0].value.as_slice()).unwrap();
        assert_eq!(secret.name, "ROOTCA");
        let Some(secret::Type::ValidationContext(v)) = secret.r#type else {
            panic!("a validation context");
        };
        assert_eq!(
            v.trusted_ca.unwrap().specifier,
            Some(data_source::Specifier::InlineBytes(b"ROOT\n".to_vec()))
        );
    }
}
