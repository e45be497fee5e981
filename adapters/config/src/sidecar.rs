//! `Sidecar`: what a sidecar proxy sees.

use serde::{Deserialize, Serialize};

use super::common::{Opaque, WorkloadSelector};
use super::destination_rule::ConnectionPoolSettings;
use super::gateway::ServerTlsSettings;

/// Limits a sidecar's view of the mesh (Istio `networking.istio.io/v1` `Sidecar`). Without a
/// `workloadSelector` it is the default of its namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    /// Workloads this applies to; none: every workload of the namespace without its own.
    #[serde(default)]
    pub workload_selector: Option<WorkloadSelector>,
    /// Inbound listeners: with any, the workload's inbound side is these ports only, each
    /// forwarded to its `defaultEndpoint`.
    #[serde(default)]
    pub ingress: Vec<IngressListener>,
    /// What the workload may reach.
    #[serde(default)]
    pub egress: Vec<EgressListener>,
    /// The connection pool of the workload's inbound clusters (an ingress listener's own
    /// wins for its port). Boxed: inline, it made every configuration object larger.
    #[serde(default)]
    pub inbound_connection_pool: Option<Box<ConnectionPoolSettings>>,
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

/// One inbound listener (Istio `IstioIngressListener`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressListener {
    /// The port traffic arrives on, and its protocol.
    #[serde(default)]
    pub port: Option<SidecarPort>,
    /// Where the workload listens: `127.0.0.1:PORT`, `0.0.0.0:PORT` (the workload's own
    /// address), `[::1]:PORT` or `unix:///PATH`.
    #[serde(default)]
    pub default_endpoint: String,
    /// With `captureMode: NONE`, the address the port's own listener binds (`0.0.0.0` when
    /// empty).
    #[serde(default)]
    pub bind: String,
    /// `DEFAULT`/`IPTABLES` (the port's traffic is captured to the inbound port) or `NONE`
    /// (the port has a listener of its own, which binds its address and port).
    #[serde(default)]
    pub capture_mode: Option<String>,
    /// TLS the sidecar terminates for clients outside the mesh (`SIMPLE` or `MUTUAL`, with
    /// certificate files on the proxy's machine).
    #[serde(default)]
    pub tls: Option<ServerTlsSettings>,
    /// The connection pool of the port's inbound cluster.
    #[serde(default)]
    pub connection_pool: Option<ConnectionPoolSettings>,
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

/// Where an ingress listener's traffic goes (its `defaultEndpoint`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DefaultEndpoint {
    /// An address of the workload's loopback, and a port.
    Loopback(std::net::IpAddr, u16),
    /// The workload's own address (`0.0.0.0:PORT`), and a port.
    Instance(u16),
    /// A Unix domain socket's path.
    Unix(String),
}

/// Reads a `defaultEndpoint` as Istio accepts it: `127.0.0.1:PORT`, `[::1]:PORT`,
/// `0.0.0.0:PORT` or `[::]:PORT` (the workload's own address), or `unix:///PATH`.
pub fn parse_default_endpoint(text: &str) -> Result<DefaultEndpoint, String> {
    if let Some(path) = text.strip_prefix("unix://") {
        if !path.starts_with('/') {
            return Err(format!("{text:?}: a Unix socket needs an absolute path"));
        }
        return Ok(DefaultEndpoint::Unix(path.to_string()));
    }
    let addr: std::net::SocketAddr = text.parse().map_err(|_| {
        format!("{text:?} is not 127.0.0.1:PORT, 0.0.0.0:PORT, [::1]:PORT or unix:///PATH")
    })?;
    if addr.port() == 0 {
        return Err(format!("{text:?}: port 0"));
    }
    match addr.ip() {
        ip if ip.is_loopback() => Ok(DefaultEndpoint::Loopback(ip, addr.port())),
        ip if ip.is_unspecified() => Ok(DefaultEndpoint::Instance(addr.port())),
        _ => Err(format!(
            "{text:?}: the address must be the workload's loopback or 0.0.0.0 (its own)"
        )),
    }
}
