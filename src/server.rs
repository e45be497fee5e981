//! Wiring: registries → aggregate → ADS server, plus the debug and monitoring HTTP servers.
//!
//! [`start`] binds every listener first (so port 0 resolves before anything runs), logs one
//! `listening` line per listener with the address it actually bound, and returns a
//! [`Running`] server. Embedding programs call it with their own registries (see
//! `examples/embed.rs`); `wayfinder discovery` calls it from the command line.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use wayfinder_registry::Registry;
use wayfinder_registry::config::ConfigSource;

use crate::aggregate::{Aggregate, AggregateHandle, Settings};
use crate::metrics::Metrics;
use crate::xds::ads::{AdsServer, Limits};

mod grpc;

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
    /// ADS (gRPC) address.
    pub grpc_addr: SocketAddr,
    /// Debug HTTP address (`/ready`, `/debug/*`).
    pub http_addr: SocketAddr,
    /// Monitoring address (`/metrics`, `/version`).
    pub monitoring_addr: SocketAddr,
    /// Whether `/ready` also requires every registry to be healthy (not degraded).
    pub ready_requires_healthy: bool,
    /// Push throttle, new-stream rate and connection ages.
    pub limits: Limits,
    /// The bearer token that lets peers other than loopback read `/debug/*`; `None`: only
    /// loopback peers may.
    pub debug_token: Option<crate::debug::DebugToken>,
}

/// A running server.
pub struct Running {
    /// Where ADS listens.
    pub grpc_addr: SocketAddr,
    /// Where the debug pages listen.
    pub http_addr: SocketAddr,
    /// Where metrics listen.
    pub monitoring_addr: SocketAddr,
    /// The aggregate's published state.
    pub aggregate: AggregateHandle,
    /// The ADS server (connections, config dumps).
    pub ads: AdsServer,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    tasks: JoinSet<Result<(), ServeError>>,
}

/// A listener that could not be bound or failed while serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
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
    /// An HTTP server failed.
    #[error("{what} HTTP server: {source}")]
    Http {
        /// Which server.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

/// Binds the listeners and starts everything.
pub async fn start(config: Config) -> Result<Running, ServeError> {
    let grpc = bind("grpc", config.grpc_addr).await?;
    let http = bind("http", config.http_addr).await?;
    let monitoring = bind("monitoring", config.monitoring_addr).await?;
    let mut bound = Vec::new();
    for (what, listener, asked) in [
        ("grpc", &grpc, config.grpc_addr),
        ("http", &http, config.http_addr),
        ("monitoring", &monitoring, config.monitoring_addr),
    ] {
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            what,
            addr: asked,
            source,
        })?;
        // One machine-readable line per listener: tests and scripts find port-0 addresses here.
        tracing::info!(listener = %what, address = %addr, "listening");
        bound.push(addr);
    }
    let shutdown = CancellationToken::new();
    let metrics = Arc::new(Metrics::new());
    let mut aggregate = Aggregate::new(config.registries, config.settings, metrics.clone());
    for source in config.config_sources {
        aggregate.add_config_source(source);
    }
    let aggregate = aggregate.start(shutdown.clone());
    let ads = AdsServer::new(
        aggregate.clone(),
        metrics.clone(),
        &config.domain,
        &config.limits,
        shutdown.clone(),
    );
    let mut tasks = JoinSet::new();
    let grpc_serve = grpc::serve(grpc, ads.service(), config.limits, shutdown.clone());
    tasks.spawn(async move {
        grpc_serve.await;
        Ok(())
    });
    let debug = crate::debug::router(
        aggregate.clone(),
        ads.clone(),
        config.ready_requires_healthy,
        config.debug_token,
    );
    tasks.spawn(serve_http("http", http, debug, shutdown.clone()));
    let monitor = crate::debug::monitoring_router(metrics.clone());
    tasks.spawn(serve_http(
        "monitoring",
        monitoring,
        monitor,
        shutdown.clone(),
    ));
    Ok(Running {
        grpc_addr: bound[0],
        http_addr: bound[1],
        monitoring_addr: bound[2],
        aggregate,
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

    /// Waits until the servers stop (after [`Running::shutdown`], or when one fails, which
    /// stops the others).
    pub async fn wait(mut self) -> Result<(), ServeError> {
        let mut result = Ok(());
        while let Some(joined) = self.tasks.join_next().await {
            self.shutdown.cancel();
            if let Ok(Err(err)) = joined
                && result.is_ok()
            {
                result = Err(err);
            }
        }
        result
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { what, addr, source })
}

async fn serve_http(
    what: &'static str,
    listener: TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.cancelled_owned())
    .await
    .map_err(|source| ServeError::Http { what, source })
}
