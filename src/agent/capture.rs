//! `wayfinder agent capture`: traffic capture for the sidecar, as `istio-iptables` does it.

use clap::Args;

/// `wayfinder agent capture` flags (istio-iptables' names).
#[derive(Debug, Args)]
pub struct CaptureArgs {}

/// Installs (or with `--cleanup` removes) the capture rules.
pub fn run(_args: &CaptureArgs) -> anyhow::Result<()> {
    anyhow::bail!("wayfinder agent capture is not built yet")
}
