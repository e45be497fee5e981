//! Wiring: registries → aggregate → ADS server, plus the debug and monitoring HTTP servers.
//!
//! [`start`] binds every listener first (so port 0 resolves before anything runs), logs one
//! `listening` line per listener with the address it actually bound, and returns a
//! [`Running`] server. Embedding programs call it with their own registries (see
//! `examples/embed.rs`); `wayfinder discovery` calls it from the command line.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use wayfinder_config::ConfigSource;
use wayfinder_registry::Registry;

use crate::aggregate::{Aggregate, Settings};
use crate::metrics::{Exposition, ModelMetrics};
use crate::snapshot::SnapshotReader;
use crate::xds::ads::{AdsServer, Limits};
use crate::xds::metrics::XdsMetrics;

mod grpc;
mod tls;

pub use crate::net::accept::raise_descriptor_limit;
use crate::net::{accept, http};
use accept::{Slots, descriptor_limit};

/// Everything a server needs.
pub struct Config {
    /// The registries, in precedence order.
    pub registries: Vec<Box<dyn Registry>>,
    /// The configuration sources, in precedence order.
    pub config_sources: Vec<Box<dyn ConfigSource>>,
    /// Debounce and sync settings.
    pub settings: Settings,
    /// Mesh domain (`cluster.local`).
    pub domain: String,
    /// The plaintext ADS (gRPC) address; `None`: no plaintext port.
    pub grpc_addr: Option<SocketAddr>,
    /// The secure port: ADS over mutual TLS and the certificate API; `None`: none.
    pub secure: Option<SecureConfig>,
    /// Debug HTTP address (`/ready`, `/debug/*`).
    pub http_addr: SocketAddr,
    /// Monitoring address (`/metrics`, `/version`).
    pub monitoring_addr: SocketAddr,
    /// Whether `/ready` also requires every registry to be healthy (not degraded).
    pub ready_requires_healthy: bool,
    /// What generation reads besides the model: the system's CA bundle on the proxies'
    /// machines (`--system-ca-file`), the trust domain (`--trust-domain`), the root
    /// namespace (`--root-namespace`), and what MeshConfig sets (`--meshConfig`), as read at
    /// start.
    pub mesh: crate::xds::MeshSettings,
    /// `--meshConfig`: the file to follow, its state at start, and the flags' settings its
    /// changes are overlaid on; `None` without the flag.
    pub mesh_config: Option<MeshConfigFile>,
    /// How the keys of RequestAuthentication's issuers are fetched (`--jwks-refresh-interval`,
    /// `--max-jwks-bytes`).
    pub jwks: crate::jwks::Settings,
    /// The ADS port's limits: push throttle, new-stream rate, connection ages, request sizes
    /// and budget, streams and connections.
    pub limits: Limits,
    /// How long a client of the HTTP ports may take to send a request's headers.
    pub http_header_read_timeout: Duration,
    /// The bearer token that lets peers other than loopback read `/debug/*`; `None`: only
    /// loopback peers may.
    pub debug_token: Option<crate::debug::DebugToken>,
    /// Auto-registration of VMs: where their entries go, and the grace period after their
    /// last stream closes (see [`crate::autoregistration`]). `None`: proxies asking for it
    /// are not registered.
    pub auto_registration: Option<(crate::autoregistration::Handle, Duration)>,
    /// Where gateways' credentials are read from, by cluster id, the primary first (see
    /// [`crate::credentials`]); empty: no cluster, so no credentials.
    pub secret_stores: Vec<(String, Arc<dyn crate::credentials::SecretStore>)>,
    /// The replicas' leader election (see [`crate::leader`]); `None`: this server leads alone.
    pub election: Option<crate::leader::Election>,
}

/// The settings files the server follows (see [`crate::mesh_config`]).
pub struct MeshConfigFile {
    /// The files: MeshConfig and MeshNetworks.
    pub files: crate::mesh_config::Files,
    /// The flags' settings, which the file's are overlaid on.
    pub flags: crate::xds::MeshSettings,
    /// What they held at start ([`crate::mesh_config::load`]).
    pub status: crate::mesh_config::MeshStatus,
}

/// The secure port (`--secure-grpc-addr`): what it listens on and signs with.
pub struct SecureConfig {
    /// Its address.
    pub addr: SocketAddr,
    /// The mesh CA, which signs the port's own certificate and the workloads'.
    pub ca: Arc<crate::ca::MeshCa>,
    /// The names of the port's certificate (`--secure-grpc-san`).
    pub names: Vec<String>,
    /// The VMs' bootstrap tokens (`--bootstrap-tokens`).
    pub bootstrap_tokens: Option<Arc<crate::ca::BootstrapTokens>>,
    /// The reviewer of Kubernetes service-account tokens, when Kubernetes is configured.
    pub token_reviewer: Option<Arc<dyn crate::ca::TokenReviewer>>,
}

/// A running server.
pub struct Running {
    /// Where plaintext ADS listens, if it does.
    pub grpc_addr: Option<SocketAddr>,
    /// Where the secure port listens, if it does.
    pub secure_grpc_addr: Option<SocketAddr>,
    /// Where the debug pages listen.
    pub http_addr: SocketAddr,
    /// Where metrics listen.
    pub monitoring_addr: SocketAddr,
    /// The published model: snapshot, readiness, source statuses.
    pub model: SnapshotReader,
    /// The ADS server (connections, config dumps).
    pub ads: AdsServer,
    /// Every metric, as `/metrics` serves them.
    pub metrics: Arc<Exposition>,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
}

/// A listener that could not be bound or failed while serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The secure port's TLS cannot be set up.
    #[error("the secure port (--secure-grpc-addr): {0}")]
    Tls(String),
    /// Binding failed.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Binds the listeners and starts everything.
pub async fn start(config: Config) -> Result<Running, ServeError> {
    let grpc = config.grpc_addr.map(|a| bind("grpc", a)).transpose()?;
    let secure_grpc = config
        .secure
        .as_ref()
        .map(|s| bind("secure-grpc", s.addr))
        .transpose()?;
    let http = bind("http", config.http_addr)?;
    let monitoring = bind("monitoring", config.monitoring_addr)?;
    let grpc_addr = grpc.as_ref().map(|l| bound("grpc", l)).transpose()?;
    let secure_grpc_addr = secure_grpc
        .as_ref()
        .map(|l| bound("secure-grpc", l))
        .transpose()?;
    let http_addr = bound("http", &http)?;
    let monitoring_addr = bound("monitoring", &monitoring)?;
    // The secure port's TLS before anything starts, so that a failure leaves nothing running.
    let secure_tls = config
        .secure
        .map(|secure| {
            let certificates = crate::ca::CertificateService::new(
                secure.ca.clone(),
                secure.bootstrap_tokens,
                secure.token_reviewer,
            );
            tls::Secure::new(secure.ca, secure.names, certificates)
        })
        .transpose()
        .map_err(ServeError::Tls)?;
    let shutdown = CancellationToken::new();
    // One Prometheus registry for both sides; each registers its own metrics, so the model's
    // side never names an xDS type.
    let mut registry = prometheus_client::registry::Registry::default();
    let xds_metrics = Arc::new(XdsMetrics::new(&mut registry));
    let model_metrics = Arc::new(ModelMetrics::new(&mut registry));
    let mut aggregate = Aggregate::new(config.registries, config.settings, model_metrics);
    for source in config.config_sources {
        aggregate.add_config_source(source);
    }
    let model = aggregate.start(shutdown.clone());
    crate::metrics::register_snapshot_gauges(&mut registry, model.clone(), &config.domain);
    let (leader, election) = match config.election {
        Some(e) => (e.leader.clone(), Some(e.run(shutdown.clone()))),
        None => (crate::leader::Leader::sole(), None),
    };
    registry.register_collector(Box::new(leader.clone()));
    let metrics = Arc::new(Exposition::new(registry));
    let (mesh_file, mesh_flags, mesh_status) = match config.mesh_config {
        Some(file) => (file.files, file.flags, file.status),
        None => (Default::default(), config.mesh.clone(), Default::default()),
    };
    let (mesh, mesh_status) = crate::mesh_config::spawn(
        mesh_file,
        mesh_flags,
        (config.mesh, mesh_status),
        shutdown.clone(),
    );
    let inputs = crate::xds::ads::InputChannels {
        jwks: crate::jwks::spawn(model.clone(), config.jwks, shutdown.clone()),
        credentials: crate::credentials::spawn(
            model.clone(),
            config.secret_stores,
            shutdown.clone(),
        ),
        mesh,
    };
    let ads = AdsServer::new(
        model.clone(),
        xds_metrics,
        &config.domain,
        inputs,
        &config.limits,
        shutdown.clone(),
    );
    if let Some((handle, grace)) = config.auto_registration {
        let max_age = config.limits.max_connection_age;
        if let Some(clean_up) = handle.clean_up(leader.clone(), grace, max_age, shutdown.clone()) {
            tokio::spawn(clean_up);
        }
        let observer = crate::autoregistration::AutoRegistration::new(handle, grace);
        let _ = ads.observe(Arc::new(observer));
    }
    let mut slots = slots(&config.limits);
    if grpc.is_some() && secure_grpc.is_some() && config.limits.max_connections == 0 {
        // The two ADS ports share the descriptors the limit leaves them.
        slots.ads = (slots.ads / 2).max(1);
    }
    let mut tasks = JoinSet::new();
    // Runs until shutdown, then releases the Lease: `wait` waits for it.
    if let Some(election) = election {
        tasks.spawn(election);
    }
    for (listener, tls) in [(secure_grpc, secure_tls), (grpc, None)] {
        if let Some(listener) = listener {
            tasks.spawn(grpc::serve(
                listener,
                ads.service(),
                config.limits.clone(),
                slots.ads,
                shutdown.clone(),
                tls,
            ));
        }
    }
    let debug = crate::debug::router(
        model.clone(),
        ads.clone(),
        mesh_status,
        config.ready_requires_healthy,
        config.debug_token,
        leader,
    );
    let header_timeout = config.http_header_read_timeout;
    for (what, listener, router) in [
        ("http", http, debug),
        (
            "monitoring",
            monitoring,
            crate::debug::monitoring_router(metrics.clone()),
        ),
    ] {
        let serve = http::serve(
            what,
            listener,
            router,
            slots.http,
            header_timeout,
            shutdown.clone(),
        );
        tasks.spawn(serve);
    }
    Ok(Running {
        grpc_addr,
        secure_grpc_addr,
        http_addr,
        monitoring_addr,
        model,
        ads,
        metrics,
        shutdown,
        tasks,
    })
}

impl Running {
    /// Asks everything to stop.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// A token that stops the server when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Waits until the servers stop (after [`Running::shutdown`]; a server that ends for any
    /// other reason stops the others).
    pub async fn wait(mut self) {
        while self.tasks.join_next().await.is_some() {
            self.shutdown.cancel();
        }
    }
}

/// The connection slots of each port: `--max-connections` for ADS when set, else what the
/// descriptor limit leaves after a reserve (see `net/accept.rs`).
fn slots(limits: &Limits) -> Slots {
    let mut slots = descriptor_limit().map_or(
        Slots {
            ads: usize::MAX,
            http: 128,
        },
        Slots::for_limit,
    );
    if limits.max_connections > 0 {
        slots.ads = limits.max_connections;
    }
    tracing::info!(
        ads = slots.ads,
        http = slots.http,
        "connection slots per port (--max-connections)"
    );
    slots
}

/// How many connections may wait in the kernel to be accepted: while a port's slots are all
/// taken, new connections queue here (tokio's own `bind` asks for 128).
const BACKLOG: u32 = 1024;

/// The address `listener` bound, logged in one machine-readable line: tests and scripts find
/// port-0 addresses there.
fn bound(what: &'static str, listener: &TcpListener) -> Result<SocketAddr, ServeError> {
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        what,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })?;
    tracing::info!(listener = %what, address = %addr, "listening");
    Ok(addr)
}

fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    };
    socket
        .and_then(|s| {
            s.set_reuseaddr(true)?;
            s.bind(addr)?;
            s.listen(BACKLOG)
        })
        .map_err(|source| ServeError::Bind { what, addr, source })
}
