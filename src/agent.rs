//! The agent: pilot-agent's counterpart, run beside every Envoy (`wayfinder agent`).
//!
//! - [`proxy`] (`wayfinder agent proxy sidecar|router`) works out the proxy's identity from
//!   its environment ([`identity`]), writes Envoy's bootstrap ([`bootstrap`]), starts Envoy,
//!   hot-restarts it when its certificates or configuration change, restarts it when it
//!   crashes and drains it on shutdown ([`supervisor`]), and answers the kubelet's probes on
//!   its status port ([`status`]).
//! - [`capture`] (`wayfinder agent capture`) redirects a network namespace's TCP traffic to
//!   the sidecar, as Istio's `istio-iptables` does.
//!
//! The agent shares no state with the server: it reaches the control plane only through the
//! Envoy it runs, over xDS, as any proxy does (`tests/it/architecture.rs` checks that it names
//! none of the server's modules).

pub mod args;
pub mod bootstrap;
pub mod capture;
pub mod identity;
mod status;
mod supervisor;
mod watch;

pub use args::{ProxyArgs, RegistryKind, Role};

/// Runs `wayfinder agent proxy` until `stop` resolves.
pub async fn proxy(
    _args: ProxyArgs,
    _stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    anyhow::bail!("wayfinder agent proxy is not built yet")
}
