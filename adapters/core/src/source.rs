//! The one trait every source implements: an identity and a stream.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::error::RegistryError;
use crate::event::{Event, Item, Registration};

/// The stream a source of `T` produces: events, with failures as items (see [`Event`]'s
/// contract). Without a parameter, a registry's stream.
pub type EventStream<T = Registration> =
    Pin<Box<dyn Stream<Item = Result<Event<T>, RegistryError>> + Send>>;

/// A source of `T`s: a registry (one Kubernetes cluster, one Consul datacenter set, a set of
/// files) is a source of [`Registration`]s; a configuration source (a directory of files, the
/// Kubernetes API) is a source of configuration objects (`wayfinder-config`).
///
/// The contract is deliberately small: an identity and a stream, the same for every kind of
/// item, as kube-rs' `watcher()` is one function for every kind of object. Capabilities a
/// later source needs go into the [`Event`] payload, not into new methods here. Retrying a
/// source that went away is the adapter's business inside its stream (reporting each failure
/// as an error item), never the consumer's.
pub trait Source<T: Item>: Send {
    /// Who this source is; stable for the life of the process.
    fn id(&self) -> &RegistryId;

    /// Starts watching. The stream follows the contract written on [`Event`] and ends soon
    /// after `shutdown` is cancelled (the conformance kit allows five seconds).
    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream<T>;
}

/// A source of services: the name the server, its flags and embedders use for a
/// [`Source`] of [`Registration`]s.
///
/// Implemented by every such source; adapters implement [`Source<Registration>`] and never
/// this trait, which adds nothing.
pub trait Registry: Source<Registration> {}

impl<S: Source<Registration> + ?Sized> Registry for S {}

/// The name of a source as users see it in flags, logs and debug pages: `Mock`, `File`,
/// `Kubernetes/cluster-a`, `config-dir`. Registries and configuration sources are named
/// alike.
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
