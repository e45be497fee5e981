//! The Kubernetes registry against the in-process API server: the conformance kit, the model
//! it produces (golden), which changes it sends, and how it rides out API server trouble.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod conformance;
mod golden;
mod resilience;
mod support;
mod updates;
