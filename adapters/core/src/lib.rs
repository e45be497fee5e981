//! The adapter contract of wayfinder: what a service registry must provide.
//!
//! An adapter turns one registry (Kubernetes, Consul, a directory of files, memory) into a
//! [`Registry`]: an identity plus a stream of [`Event`]s. Start with [`Registry`] and
//! [`Event`] for the protocol, then [`Service`] and [`Endpoint`] for the model every
//! registry is mapped to. Adapters never see the aggregate, the snapshot or xDS: this crate
//! (and, for the sources of Istio's configuration, `wayfinder-config`, built on it) is the
//! whole of what they depend on. It depends on no other wayfinder crate.
//!
//! With the `testkit` feature, the `testkit` module holds the conformance suite every adapter's tests
//! run against their own registry.

pub mod answer;
pub mod backoff;
pub mod duration;
mod endpoint;
mod error;
mod event;
mod registry;
mod service;
mod validate;

#[cfg(feature = "fake-listener")]
pub mod fake_listener;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use endpoint::{Endpoint, Health, Locality};
pub use error::RegistryError;
pub use event::{Event, Registration};
pub use registry::{EventStream, Registry, RegistryId};
pub use service::{ExportTo, Labels, Port, Protocol, Resolution, Service, ServiceKey};
pub use tokio_util::sync::CancellationToken;
pub use validate::ValidationError;
