//! What the ADS server tells the rest of the server about its streams, without naming what
//! listens: a proxy's stream opening (once the server is ready to serve it) and closing, and
//! the health a proxy reports. The auto-registration of VMs (`crate::autoregistration`)
//! listens, as Istio's WorkloadEntry controller does.

use std::sync::Arc;

use crate::snapshot::Snapshot;
use crate::xds::proxy::Proxy;

/// Health requests' type (istio-agent's `istio.io/health`): a request without `error_detail`
/// says healthy, one with it unhealthy, with the detail's message.
pub const HEALTH_TYPE: &str = "istio.io/health";

/// Told about every stream, on the stream's task: an implementation must not block.
pub trait StreamObserver: Send + Sync {
    /// `proxy`'s stream `stream` opened; `model` is the snapshot it is first served from.
    fn opened(&self, stream: u64, proxy: &Arc<Proxy>, model: &Snapshot);
    /// The stream ended, however it ended.
    fn closed(&self, stream: u64);
    /// The proxy reported its workload's health: `None` healthy, `Some(why)` unhealthy.
    fn health(&self, stream: u64, unhealthy: Option<&str>);
}
