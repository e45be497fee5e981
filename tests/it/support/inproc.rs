//! The server in-process, fed by memory registries the test changes through handles.

use std::time::Duration;

use wayfinder::aggregate::{Debounce, Settings};
use wayfinder::server::{self, Running};
use wayfinder_memory::{MemoryHandle, MemoryRegistry};
use wayfinder_registry::{Registration, Registry};

/// A running server and the handle of its memory registry.
pub(crate) struct InProcess {
    pub(crate) server: Running,
    pub(crate) registry: MemoryHandle,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}

/// Starts a server on loopback ports whose one registry holds `services`.
pub(crate) async fn start(services: Vec<Registration>) -> InProcess {
    let (registry, handle) = MemoryRegistry::new("Memory");
    for s in services {
        handle.upsert(s).await;
    }
    let server = start_with(vec![Box::new(registry)]).await;
    InProcess {
        server,
        registry: handle,
    }
}

/// Starts a server over the given registries, with a short debounce so tests run quickly.
pub(crate) async fn start_with(registries: Vec<Box<dyn Registry>>) -> Running {
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
        grpc_addr: loopback,
        http_addr: loopback,
        monitoring_addr: loopback,
        ready_requires_healthy: false,
    })
    .await
    .expect("the server starts")
}
