//! The source contract of wayfinder: what a service registry, or any other source the
//! aggregate runs, must provide.
//!
//! An adapter turns one registry (Kubernetes, Consul, a directory of files, memory) into a
//! [`Source`] of [`Registration`]s (a [`Registry`]): an identity plus a stream of
//! [`Event`]s. Sources of Istio's configuration are sources of configuration objects
//! (`wayfinder-config`), with the same trait, the same events and the same written contract:
//! one vocabulary, generic over the [`Item`] a source carries, as kube-rs' `watcher::Event<K>`
//! is generic over the object kind. Start with [`Source`] and [`Event`] for the protocol, then
//! [`Service`] and [`Endpoint`] for the model every registry is mapped to. Adapters never see
//! the aggregate, the snapshot or xDS: this crate (and, for the sources of Istio's
//! configuration, `wayfinder-config`, built on it) is the whole of what they depend on. It
//! depends on no other wayfinder crate and names no configuration type.
//!
//! With the `testkit` feature, the `testkit` module holds the conformance suite every adapter's
//! tests run against their own source, whatever it carries.

pub mod answer;
pub mod backoff;
pub mod duration;
mod endpoint;
mod error;
mod event;
mod refusal;
mod service;
mod source;
mod validate;

#[cfg(feature = "fake-listener")]
pub mod fake_listener;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use endpoint::{Endpoint, Health, Locality};
pub use error::RegistryError;
pub use event::{Event, Item, Registration};
pub use refusal::Refusal;
pub use service::{ExportTo, Labels, Port, Protocol, Resolution, Service, ServiceKey};
pub use source::{EventStream, Registry, RegistryId, Source};
pub use tokio_util::sync::CancellationToken;
pub use validate::ValidationError;
