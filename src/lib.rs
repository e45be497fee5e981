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

pub mod aggregate;
pub mod cli;
pub mod debug;
pub mod logging;
pub mod metrics;
pub mod registries;
pub mod server;
pub mod snapshot;
pub mod xds;
