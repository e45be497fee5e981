//! What Envoy should run, and following its inputs: the bootstrap (generated, rendered from
//! `--template-file`, or `--custom-config-file` as it is) and the certificate files.
//!
//! Every input's content goes into one hash; the supervisor hot-restarts Envoy when the hash
//! changes ([`super::supervisor`]). The files are watched through their directories
//! (`wayfinder_file::watch`, as the File registry watches), so a file replaced by a rename, or
//! a Kubernetes secret volume swapping its `..data` link, counts. A missing file counts as
//! absent, so its appearance changes the hash too. An input that cannot be read or rendered
//! any more is logged, and Envoy keeps running what it has.

use std::path::{Path, PathBuf};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use wayfinder_file::watch::{Target, Watch, WatchEvent};
use xxhash_rust::xxh3::Xxh3;

use super::bootstrap::{self, Settings};
use super::identity::Identity;

/// What Envoy is started with.
#[derive(Clone, Debug)]
pub enum Config {
    /// A bootstrap the agent made (generated or rendered), written to `envoy-rev<N>.json`.
    Generated(String),
    /// `--custom-config-file`, given to Envoy as it is.
    Custom(PathBuf),
}

/// A configuration and the hash of every input it depends on.
#[derive(Clone, Debug)]
pub struct Desired {
    /// What Envoy runs.
    pub config: Config,
    /// The inputs' hash: a change means a restart.
    pub hash: u64,
}

/// The inputs of Envoy's configuration.
#[derive(Clone, Debug)]
pub struct Source {
    /// The proxy's identity.
    pub identity: Identity,
    /// `--service-cluster`.
    pub cluster: String,
    /// `--discovery-address`.
    pub discovery_address: String,
    /// `--proxy-admin-port`.
    pub admin_port: u16,
    /// `--xds-delta`.
    pub delta: bool,
    /// `--custom-config-file`.
    pub custom: Option<PathBuf>,
    /// `--template-file`.
    pub template: Option<PathBuf>,
    /// Certificate files whose change restarts Envoy.
    pub certificates: Vec<PathBuf>,
    /// The agent's SDS socket under `--control-plane-auth-policy MUTUAL_TLS`.
    pub sds_socket: Option<PathBuf>,
}

impl Source {
    /// Every watched file.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files = self.certificates.clone();
        files.extend(self.custom.iter().cloned());
        files.extend(self.template.iter().cloned());
        files
    }

    /// Reads and renders every input.
    pub fn desired(&self) -> anyhow::Result<Desired> {
        let settings = Settings {
            cluster: &self.cluster,
            discovery_address: &self.discovery_address,
            admin_port: self.admin_port,
            delta: self.delta,
            sds_socket: self.sds_socket.as_deref(),
        };
        let mut hash = Xxh3::new();
        let config = if let Some(custom) = &self.custom {
            hash.update(&read(custom)?);
            Config::Custom(custom.clone())
        } else {
            let text = if let Some(template) = &self.template {
                let bytes = read(template)?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| anyhow::anyhow!("{}: not UTF-8", template.display()))?;
                bootstrap::render_template(
                    &text,
                    &template.display().to_string(),
                    &self.identity,
                    &settings,
                )?
            } else {
                bootstrap::generate(&self.identity, &settings)?
            };
            hash.update(text.as_bytes());
            Config::Generated(text)
        };
        for file in &self.certificates {
            hash.update(file.as_os_str().as_encoded_bytes());
            match std::fs::read(file) {
                Ok(bytes) => {
                    hash.update(&[1]);
                    hash.update(&bytes);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => hash.update(&[0]),
                Err(e) => anyhow::bail!("reading {}: {e}", file.display()),
            }
        }
        Ok(Desired {
            config,
            hash: hash.digest(),
        })
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
}

/// Follows the source's files until `shutdown`, publishing every configuration whose hash
/// differs from the last one.
pub async fn follow(source: Source, tx: watch::Sender<Desired>, shutdown: CancellationToken) {
    let targets: Vec<Target> = source.files().into_iter().map(Target::File).collect();
    let mut files = Watch::new(&targets, shutdown);
    while let Some(event) = files.next().await {
        match event {
            WatchEvent::Changed(_) | WatchEvent::Restored { .. } => match source.desired() {
                Ok(next) => {
                    tx.send_if_modified(|current| {
                        let changed = current.hash != next.hash;
                        if changed {
                            *current = next;
                        }
                        changed
                    });
                }
                Err(e) => tracing::error!(
                    error = %format!("{e:#}"),
                    "Envoy's configuration cannot be made from its files; Envoy keeps what it runs"
                ),
            },
            WatchEvent::Unavailable { path, reason } => {
                tracing::debug!(path = %path.display(), %reason, "watched directory unavailable");
            }
        }
    }
}

/// The certificate files a proxy of `role` watches in `certs_dir`: the workload's, and a
/// router's ingress certificates (pilot-agent's fixed paths).
pub fn certificate_files(certs_dir: &Path, router: bool) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["cert-chain.pem", "key.pem", "root-cert.pem"]
        .iter()
        .map(|f| certs_dir.join(f))
        .collect();
    if router {
        files.extend(
            [
                "/etc/istio/ingressgateway-certs/tls.crt",
                "/etc/istio/ingressgateway-certs/tls.key",
                "/etc/istio/ingressgateway-ca-certs/ca-chain.cert.pem",
            ]
            .iter()
            .map(PathBuf::from),
        );
    }
    files
}
