//! Istio's networking objects read from a fake API server through the real kube client: the
//! config source's stream contract, validation with Events, ServiceEntry and WorkloadEntry as
//! a registry (the conformance kit, and the same registrations as a file gives), failures and
//! missing CRDs. Every wait has a deadline; nothing sleeps to synchronize.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub
)]

mod config;
mod conformance;
mod entries;
mod faults;
mod missing;
mod support;
