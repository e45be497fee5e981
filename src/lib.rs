//! Wayfinder: a service-discovery aggregator and Envoy control plane.
//!
//! Registries (`wayfinder-registry` adapters) feed the [`aggregate`], which merges what they
//! say into an immutable [`snapshot`] published through an `ArcSwap`; the [`xds`] generator
//! turns the snapshot into Envoy and gRPC configuration, served over ADS. Start reading at
//! [`server`], which wires these together, and at `ARCHITECTURE.md` for the map.
//!
//! The Kubernetes, Consul and Eureka adapters are cargo features of this crate (`kubernetes`,
//! `consul`, `eureka`, on by default); the memory and file registries are always built in.
//! [`registries`] says what a build without them refuses.
//!
//! Among wayfinder's crates it depends on `wayfinder-registry` (the contract every source
//! follows), `wayfinder-config` (Istio's configuration kinds), the memory and File adapters,
//! and the Kubernetes, Consul and Eureka adapters under their features. Outside: tokio and
//! hyper/h2 (with tonic's codec types) for serving, `envoy-types` and prost for the xDS
//! messages (named only in `xds::pb`), arc-swap for the published snapshot,
//! prometheus-client for metrics, axum for the HTTP pages, tracing for logs.
//! `tests/it/architecture.rs` checks which module may name which.

pub mod agent;
pub mod aggregate;
pub mod analyze;
pub mod autoregistration;
pub mod ca;
pub mod cli;
pub mod credentials;
pub mod debug;
pub mod jwks;
pub mod leader;
pub mod logging;
pub mod mesh_config;
pub mod metrics;
mod net;
pub mod registries;
pub mod server;
pub mod snapshot;
#[cfg(test)]
mod testing;
pub mod xds;
