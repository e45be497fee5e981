//! `Sidecar`: what a sidecar proxy sees.

use serde::{Deserialize, Serialize};

use super::common::{Opaque, WorkloadSelector};

/// Limits a sidecar's view of the mesh (Istio `networking.istio.io/v1` `Sidecar`). Without a
/// `workloadSelector` it is the default of its namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    /// Workloads this applies to; none: every workload of the namespace without its own.
    #[serde(default)]
    pub workload_selector: Option<WorkloadSelector>,
    /// Inbound listeners (not supported yet).
    #[serde(default)]
    pub ingress: Vec<Opaque>,
    /// What the workload may reach.
    #[serde(default)]
    pub egress: Vec<EgressListener>,
    /// Inbound connection pool (not supported yet).
    #[serde(default)]
    pub inbound_connection_pool: Option<Opaque>,
    /// Traffic to unknown destinations: `ALLOW_ANY` (default) or `REGISTRY_ONLY`.
    #[serde(default)]
    pub outbound_traffic_policy: Option<OutboundTrafficPolicy>,
}

/// One egress listener: the hosts reachable (on a port, if given).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressListener {
    /// The port its hosts are imported on; none: every port no other listener names.
    #[serde(default)]
    pub port: Option<SidecarPort>,
    /// The address the port's listener is at (the capture address when empty).
    #[serde(default)]
    pub bind: String,
    /// `IPTABLES`/`DEFAULT` (the listener takes captured connections) or `NONE` (it binds
    /// its address and port itself, for applications that connect to it).
    #[serde(default)]
    pub capture_mode: Option<String>,
    /// `namespace/host` entries: `./*` (own namespace), `istio-system/*`, `*/api.example.com`, …
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// An egress listener's port (Istio `SidecarPort`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SidecarPort {
    /// The port number.
    #[serde(default)]
    pub number: u32,
    /// Its protocol (`HTTP`, `TCP`, …): the services' own protocols are used.
    #[serde(default)]
    pub protocol: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Not used for egress.
    #[serde(default)]
    pub target_port: Option<u32>,
}

/// What happens to traffic for unknown destinations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundTrafficPolicy {
    /// `ALLOW_ANY` or `REGISTRY_ONLY`.
    #[serde(default)]
    pub mode: Option<String>,
    /// Where `ALLOW_ANY` traffic goes (not supported yet).
    #[serde(default)]
    pub egress_proxy: Option<Opaque>,
}
