//! What the fake-backed tests share: a registry over a fake and deadline-bound stream reads.

#![allow(dead_code)]

use std::time::Duration;

use futures::StreamExt;
use wayfinder_eureka::Config;
use wayfinder_registry::{
    CancellationToken, Event, EventStream, Health, Registration, RegistryError, RegistryId,
    ServiceKey, Source,
};

/// How long a test waits for an item.
pub(crate) const DEADLINE: Duration = Duration::from_secs(10);

pub(crate) type Item = Result<Event, RegistryError>;

/// A short interval and timeout so that the tests are fast.
pub(crate) fn config(url: String) -> Config {
    Config {
        url,
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(500),
        ..Config::default()
    }
}

/// A watched registry.
pub(crate) struct Watch {
    pub(crate) stream: EventStream,
    pub(crate) shutdown: CancellationToken,
}

impl Watch {
    pub(crate) fn start(config: Config) -> Self {
        let registry = Box::new(config.build(RegistryId::new("Eureka")).unwrap());
        let shutdown = CancellationToken::new();
        let stream = registry.watch(shutdown.clone());
        Self { stream, shutdown }
    }

    /// The next item; fails after [`DEADLINE`] or when the stream ends.
    pub(crate) async fn next(&mut self) -> Item {
        match tokio::time::timeout(DEADLINE, self.stream.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => panic!("the stream ended"),
            Err(_) => panic!("no item within {DEADLINE:?}"),
        }
    }

    /// The first item, which must be a `Reset`.
    pub(crate) async fn reset(&mut self) -> Vec<Registration> {
        match self.next().await {
            Ok(Event::Reset(regs)) => regs,
            other => panic!("expected a Reset, got {other:?}"),
        }
    }

    /// The next item, which must be an `Upsert`.
    pub(crate) async fn upsert(&mut self) -> Registration {
        match self.next().await {
            Ok(Event::Upsert(reg)) => reg,
            other => panic!("expected an Upsert, got {other:?}"),
        }
    }

    /// Stops the registry; its stream must end within a second.
    pub(crate) async fn stop(mut self) {
        self.shutdown.cancel();
        let ended = tokio::time::timeout(Duration::from_secs(1), async {
            while self.stream.next().await.is_some() {}
        })
        .await;
        assert!(
            ended.is_ok(),
            "the stream did not end within 1s of shutdown"
        );
    }
}

pub(crate) fn key(host: &str) -> ServiceKey {
    ServiceKey::new("default", host)
}

/// `(address, health)` of a registration's endpoints.
pub(crate) fn health(reg: &Registration) -> Vec<(String, Health)> {
    reg.endpoints
        .iter()
        .map(|e| (e.address.to_string(), e.health))
        .collect()
}
