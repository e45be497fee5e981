//! Embedding wayfinder: a program that knows its services itself runs the control plane in
//! process, feeding it through the memory registry.
//!
//! `cargo run --example embed` starts ADS on 127.0.0.1:15010 and debug pages on
//! 127.0.0.1:8080, registers one service, then moves its endpoint every few seconds; watch it
//! with `curl 127.0.0.1:8080/debug/endpointz`.

use std::time::Duration;

use wayfinder::aggregate::Settings;
use wayfinder::server;
use wayfinder_memory::MemoryRegistry;
use wayfinder_registry::{Endpoint, Protocol, Registration, Service};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let (registry, handle) = MemoryRegistry::new("Embedded");
    let service = Service::new("inventory.shop.svc.cluster.local", "shop").with_port(
        "http",
        8080,
        Protocol::Http,
    );
    let key = service.key();
    handle
        .upsert(Registration::new(service, vec![Endpoint::new("10.0.0.1")]))
        .await;

    let running = server::start(server::Config {
        registries: vec![Box::new(registry)],
        config_sources: Vec::new(),
        settings: Settings::default(),
        domain: "cluster.local".into(),
        grpc_addr: Some("127.0.0.1:15010".parse()?),
        secure: None,
        http_addr: "127.0.0.1:8080".parse()?,
        monitoring_addr: "127.0.0.1:9093".parse()?,
        ready_requires_healthy: false,
        mesh: Default::default(),
        jwks: Default::default(),
        debug_token: None,
        auto_registration: None,
        secret_stores: Vec::new(),
        election: None,
        mesh_config: None,
        limits: Default::default(),
        http_header_read_timeout: Duration::from_secs(10),
    })
    .await?;

    let mover = tokio::spawn(async move {
        for i in 2u8.. {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let moved = vec![Endpoint::new(format!("10.0.0.{i}"))];
            if handle.set_endpoints(&key, moved).await.is_err() {
                return;
            }
        }
    });
    let token = running.shutdown_token();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        token.cancel();
    });
    running.wait().await;
    mover.abort();
    Ok(())
}
