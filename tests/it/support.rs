//! Shared test machinery: the binary as a child process, an in-process server, a raw ADS
//! client, files, and waiting for conditions with deadlines.

pub(crate) mod ads;
pub(crate) mod agent;
pub(crate) mod binary;
pub(crate) mod delta;
pub(crate) mod fixtures;
pub(crate) mod inproc;
pub(crate) mod logs;
pub(crate) mod netns;
pub(crate) mod pki;
pub(crate) mod pods;
pub(crate) mod raw;

use std::future::Future;
use std::time::Duration;

/// How long a test waits for something that should happen (generous: CI machines are small
/// and shared; a passing test never waits this long).
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// Installs the process's TLS provider, which every reqwest client needs (reqwest is built
/// without a default one; see `main.rs`).
pub(crate) fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Polls `check` until it returns `Some`, or fails with `what` after [`DEADLINE`]. For
/// conditions only observable by asking (an admin page, a debug page); the poll interval is
/// short and the deadline long, so the result does not depend on machine speed.
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {DEADLINE:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
