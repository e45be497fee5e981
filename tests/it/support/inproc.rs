//! The server in-process, fed by memory registries the test changes through handles.

use std::time::Duration;

use wayfinder::aggregate::{Debounce, Settings};
use wayfinder::server::{self, Running};
use wayfinder::xds::ads::Limits;
use wayfinder_memory::{MemoryHandle, MemoryRegistry};
use wayfinder_registry::{Registration, Registry};

/// A running server and the handle of its memory registry.
pub(crate) struct InProcess {
    pub(crate) server: Running,
    /// Where its plaintext ADS port listens.
    pub(crate) grpc: std::net::SocketAddr,
    pub(crate) registry: MemoryHandle,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}

/// Starts a server on loopback ports whose one registry holds `services`.
pub(crate) async fn start(services: Vec<Registration>) -> InProcess {
    start_limited(services, Limits::default()).await
}

/// Like [`start`], with the given limits.
pub(crate) async fn start_limited(services: Vec<Registration>, limits: Limits) -> InProcess {
    let (registry, handle) = MemoryRegistry::new("Memory");
    for s in services {
        handle.upsert(s).await;
    }
    let server = start_configured(vec![Box::new(registry)], limits).await;
    InProcess {
        grpc: server.grpc_addr.expect("a plaintext ADS port"),
        server,
        registry: handle,
    }
}

/// Starts a server over the given registries, with a short debounce so tests run quickly.
pub(crate) async fn start_with(registries: Vec<Box<dyn Registry>>) -> Running {
    start_configured(registries, Limits::default()).await
}

async fn start_configured(registries: Vec<Box<dyn Registry>>, limits: Limits) -> Running {
    let loopback = "127.0.0.1:0".parse().expect("an address");
    let settings = Settings {
        debounce: Debounce {
            after: Duration::from_millis(5),
            max: Duration::from_secs(1),
            leading: false,
        },
        sync_timeout: Duration::from_secs(10),
    };
    server::start(server::Config {
        registries,
        config_sources: Vec::new(),
        settings,
        domain: "cluster.local".into(),
        grpc_addr: Some(loopback),
        secure: None,
        http_addr: loopback,
        monitoring_addr: loopback,
        ready_requires_healthy: false,
        mesh: Default::default(),
        jwks: Default::default(),
        debug_token: None,
        auto_registration: None,
        secret_stores: Vec::new(),
        election: None,
        mesh_config: None,
        limits,
        http_header_read_timeout: Duration::from_secs(10),
    })
    .await
    .expect("the server starts")
}
