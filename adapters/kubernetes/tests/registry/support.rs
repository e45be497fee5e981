//! Starting a registry over a fake API server and reading its stream.

use std::time::Duration;

use futures::StreamExt;
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::{Config, KubernetesRegistry};
use wayfinder_registry::{
    CancellationToken, Event, EventStream, Registration, RegistryError, RegistryId, Source,
};

/// How long a test waits for an item before failing.
pub(crate) const DEADLINE: Duration = Duration::from_secs(20);

/// A registry's stream and its shutdown token.
pub(crate) struct Watch {
    pub(crate) stream: EventStream,
    pub(crate) shutdown: CancellationToken,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub(crate) fn registry(fake: &FakeApiServer, config: Config) -> KubernetesRegistry {
    KubernetesRegistry::new(
        RegistryId::new("Kubernetes"),
        fake.client(),
        "east",
        &config,
    )
}

pub(crate) fn watch(fake: &FakeApiServer, config: Config) -> Watch {
    let shutdown = CancellationToken::new();
    let stream = Box::new(registry(fake, config)).watch(shutdown.clone());
    Watch { stream, shutdown }
}

impl Watch {
    /// The next item, failing the test after [`DEADLINE`].
    pub(crate) async fn next(&mut self) -> Result<Event, RegistryError> {
        tokio::time::timeout(DEADLINE, self.stream.next())
            .await
            .expect("no item before the deadline")
            .expect("the stream ended")
    }

    /// The first item, which must be a Reset.
    pub(crate) async fn reset(&mut self) -> Vec<Registration> {
        match self.next().await {
            Ok(Event::Reset(regs)) => regs,
            other => panic!("expected a Reset first, got {other:?}"),
        }
    }

    /// The next Ok item, collecting the errors before it.
    pub(crate) async fn next_ok(&mut self) -> (Event, Vec<RegistryError>) {
        let mut errors = Vec::new();
        loop {
            match self.next().await {
                Ok(event) => return (event, errors),
                Err(err) => errors.push(err),
            }
        }
    }

    /// The next Upsert, failing on any other event.
    pub(crate) async fn upsert(&mut self) -> Registration {
        match self.next_ok().await {
            (Event::Upsert(reg), _) => reg,
            other => panic!("expected an Upsert, got {other:?}"),
        }
    }
}
