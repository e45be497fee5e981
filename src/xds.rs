//! xDS: generating Envoy and gRPC configuration from the model and serving it over ADS.
//!
//! [`generate`] turns a model snapshot into encoded resources per proxy; [`ads`] is the
//! ADS server (state of the world and delta); [`proxy`] reads who is asking. Envoy's types come through
//! [`pb`] only.

pub mod ads;
mod canonical;
pub mod consistency;
#[cfg(test)]
mod fixtures;
pub mod generate;
pub mod json;
pub mod metrics;
pub mod names;
pub mod observe;
pub mod pb;
pub mod proxy;
pub mod resource;
mod types;

pub use generate::{DEFAULT_SYSTEM_CA_FILE, Inputs, MeshSettings, Resources, XdsSnapshot};
pub use proxy::{Proxy, ProxyKind};
pub use resource::{Resource, ResourceSet, Version};
pub use types::{PerType, TypeUrl};
