//! The one trait an adapter implements.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::error::RegistryError;
use crate::event::Event;

/// The stream a registry produces: events, with failures as items (see [`Event`]'s contract).
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Event, RegistryError>> + Send>>;

/// A source of services: one Kubernetes cluster, one Consul datacenter set, a set of files.
///
/// The contract is deliberately small: an identity and a stream. Capabilities a later registry
/// needs go into the [`Event`] payload, not into new methods here. Retrying a registry that
/// went away is the adapter's business inside its stream (reporting each failure as an error
/// item), never the consumer's.
pub trait Registry: Send {
    /// Who this registry is; stable for the life of the process.
    fn id(&self) -> &RegistryId;

    /// Starts watching. The stream follows the contract written on [`Event`] and ends soon
    /// after `shutdown` is cancelled (the conformance kit allows five seconds).
    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream;
}

/// The name of a registry as users see it in flags, logs and debug pages: `Mock`, `File`,
/// later `Kubernetes/cluster-a`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct RegistryId(pub Arc<str>);

impl RegistryId {
    /// Builds an id from a name.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self(name.into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RegistryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
