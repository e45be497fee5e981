//! `WorkloadGroup` (`networking.istio.io`): the template of the WorkloadEntries that VMs'
//! proxies register when they connect (Istio's auto-registration), and the probe their agents
//! run. The server reads it when a proxy names it in `AUTO_REGISTER_GROUP`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::common::Opaque;

/// A `WorkloadGroup` spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadGroup {
    /// Labels and annotations of the entries made from it.
    #[serde(default)]
    pub metadata: GroupMetadata,
    /// The entries' spec (required); its address is ignored, each proxy gives its own.
    #[serde(default)]
    pub template: Option<WorkloadTemplate>,
    /// The readiness probe the workloads' agents run and report.
    #[serde(default)]
    pub probe: Option<ReadinessProbe>,
}

/// `WorkloadGroup.spec.metadata`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupMetadata {
    /// Labels of each entry.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations of each entry.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// `WorkloadGroup.spec.template`: a WorkloadEntry spec, whose `address` each entry replaces
/// with its proxy's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadTemplate {
    /// Ignored: each entry's address is its proxy's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// The workload's port for each service port name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ports: BTreeMap<String, u32>,
    /// Labels of the workload (the proxy's own go over them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Network of the workload.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network: String,
    /// `region/zone/subzone`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub locality: String,
    /// Load-balancing weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Service account the workload runs as.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account: String,
}

/// Istio's `ReadinessProbe`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessProbe {
    /// Seconds before the first probe.
    #[serde(default)]
    pub initial_delay_seconds: i64,
    /// Seconds a probe may take.
    #[serde(default)]
    pub timeout_seconds: i64,
    /// Seconds between probes.
    #[serde(default)]
    pub period_seconds: i64,
    /// Passes in a row that make the workload healthy.
    #[serde(default)]
    pub success_threshold: i64,
    /// Failures in a row that make it unhealthy.
    #[serde(default)]
    pub failure_threshold: i64,
    /// An HTTP GET.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpProbe>,
    /// A TCP connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpProbe>,
    /// A command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecProbe>,
    /// A gRPC health check: refused, as Istio refuses it.
    #[serde(default, skip_serializing)]
    pub grpc: Option<Opaque>,
}

/// `ReadinessProbe.httpGet`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpProbe {
    /// Path to GET.
    #[serde(default)]
    pub path: String,
    /// Port.
    #[serde(default)]
    pub port: u32,
    /// Host to connect to (default: the workload's own loopback).
    #[serde(default)]
    pub host: String,
    /// `HTTP` or `HTTPS`.
    #[serde(default)]
    pub scheme: String,
    /// Headers to send.
    #[serde(default)]
    pub http_headers: Vec<ProbeHeader>,
}

/// A header of an HTTP probe.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeHeader {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// `ReadinessProbe.tcpSocket`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpProbe {
    /// Host to connect to.
    #[serde(default)]
    pub host: String,
    /// Port.
    #[serde(default)]
    pub port: u32,
}

/// `ReadinessProbe.exec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecProbe {
    /// The command and its arguments.
    #[serde(default)]
    pub command: Vec<String>,
}
