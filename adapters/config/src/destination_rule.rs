//! `DestinationRule`: subsets of a service and how clients talk to it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::{Duration, Opaque, PortSelector, WorkloadSelector};

/// Policy for traffic to one host (Istio `networking.istio.io/v1` `DestinationRule`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRule {
    /// The host; a short name is relative to the object's namespace; `*.example.com` wildcards
    /// apply to every matching host not covered by a more specific rule.
    pub host: String,
    /// Policy for every port and subset unless overridden.
    #[serde(default)]
    pub traffic_policy: Option<TrafficPolicy>,
    /// Named groups of endpoints, selected by labels.
    #[serde(default)]
    pub subsets: Vec<Subset>,
    /// Namespaces that see this rule.
    #[serde(default)]
    pub export_to: Vec<String>,
    /// Workloads this rule applies to (not supported yet).
    #[serde(default)]
    pub workload_selector: Option<WorkloadSelector>,
}

/// A named group of endpoints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subset {
    /// Name, used in cluster names `outbound|port|NAME|host`.
    pub name: String,
    /// Labels an endpoint must have.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Policy for this subset, merged over the rule's.
    #[serde(default)]
    pub traffic_policy: Option<TrafficPolicy>,
}

/// How clients talk to a service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    /// Load balancing.
    #[serde(default)]
    pub load_balancer: Option<LoadBalancerSettings>,
    /// Connection limits.
    #[serde(default)]
    pub connection_pool: Option<ConnectionPoolSettings>,
    /// Ejection of failing endpoints.
    #[serde(default)]
    pub outlier_detection: Option<OutlierDetection>,
    /// TLS to the service.
    #[serde(default)]
    pub tls: Option<ClientTlsSettings>,
    /// Per-port overrides.
    #[serde(default)]
    pub port_level_settings: Vec<PortTrafficPolicy>,
    /// Tunnelling (not supported yet).
    #[serde(default)]
    pub tunnel: Option<Opaque>,
    /// PROXY protocol (not supported yet).
    #[serde(default)]
    pub proxy_protocol: Option<Opaque>,
}

/// Per-port policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortTrafficPolicy {
    /// The port.
    #[serde(default)]
    pub port: Option<PortSelector>,
    /// Load balancing.
    #[serde(default)]
    pub load_balancer: Option<LoadBalancerSettings>,
    /// Connection limits.
    #[serde(default)]
    pub connection_pool: Option<ConnectionPoolSettings>,
    /// Ejection of failing endpoints.
    #[serde(default)]
    pub outlier_detection: Option<OutlierDetection>,
    /// TLS to the service.
    #[serde(default)]
    pub tls: Option<ClientTlsSettings>,
}

/// Load balancing: a simple algorithm or consistent hashing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerSettings {
    /// A simple algorithm.
    #[serde(default)]
    pub simple: Option<SimpleLb>,
    /// Consistent hashing.
    #[serde(default)]
    pub consistent_hash: Option<ConsistentHash>,
    /// Locality-aware balancing: weights by locality, or failover between localities.
    #[serde(default)]
    pub locality_lb_setting: Option<LocalityLbSetting>,
    /// Slow start, in seconds form (deprecated by `warmup`).
    #[serde(default)]
    pub warmup_duration_secs: Option<Duration>,
    /// Slow start: new endpoints get a growing share of traffic over `duration`.
    #[serde(default)]
    pub warmup: Option<Warmup>,
}

/// Locality-aware load balancing (Istio's `LocalityLoadBalancerSetting`), in a
/// DestinationRule's load balancer or, mesh-wide, in MeshConfig. With no `distribute`, and
/// outlier detection to notice failures, endpoints are prioritised by their proximity to the
/// proxy (same region, zone and subzone first), or by `failoverPriority` labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalityLbSetting {
    /// Shares of traffic from a proxy's locality to endpoints' localities.
    #[serde(default)]
    pub distribute: Vec<LocalityDistribute>,
    /// Regions to fail over to, from a region.
    #[serde(default)]
    pub failover: Vec<LocalityFailover>,
    /// Labels, in order, that endpoints should share with the proxy to be preferred
    /// (`LABEL`, or `LABEL=VALUE` to compare with a value rather than the proxy's).
    #[serde(default)]
    pub failover_priority: Vec<String>,
    /// Whether locality load balancing is on (default: on).
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// Traffic from the proxies of `from` split among localities `to` (weights summing to 100).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalityDistribute {
    /// A locality (`region/zone/subzone`, `*` allowed last).
    #[serde(default)]
    pub from: String,
    /// Localities and their shares of the traffic.
    #[serde(default)]
    pub to: BTreeMap<String, u32>,
}

/// Proxies of region `from` fail over to region `to`, before other regions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalityFailover {
    /// A region.
    #[serde(default)]
    pub from: String,
    /// The region to fail over to.
    #[serde(default)]
    pub to: String,
}

/// Slow start of new endpoints (Istio's `WarmupConfiguration`, Envoy's slow start).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Warmup {
    /// How long an endpoint warms up (required).
    #[serde(default)]
    pub duration: Option<Duration>,
    /// The share of its weight an endpoint starts with, in percent (default 10).
    #[serde(default)]
    pub minimum_percent: Option<f64>,
    /// How traffic grows over the duration: 1 is linear (the default), more is faster late.
    #[serde(default)]
    pub aggression: Option<f64>,
}

/// Simple load-balancing algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SimpleLb {
    /// Istio's default (LEAST_REQUEST).
    Unspecified,
    /// Random.
    Random,
    /// Forward to the address the client dialed.
    Passthrough,
    /// Round robin.
    RoundRobin,
    /// Fewest requests in flight.
    LeastRequest,
    /// Deprecated name of `LEAST_REQUEST`.
    LeastConn,
}

/// Consistent hashing on a request property.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsistentHash {
    /// Hash on this header.
    #[serde(default)]
    pub http_header_name: Option<String>,
    /// Hash on this cookie (created with `ttl` if missing).
    #[serde(default)]
    pub http_cookie: Option<HttpCookie>,
    /// Hash on the client's IP.
    #[serde(default)]
    pub use_source_ip: Option<bool>,
    /// Hash on this query parameter.
    #[serde(default)]
    pub http_query_parameter_name: Option<String>,
    /// Ring hash settings.
    #[serde(default)]
    pub ring_hash: Option<RingHash>,
    /// Maglev settings.
    #[serde(default)]
    pub maglev: Option<Maglev>,
    /// Deprecated ring size.
    #[serde(default)]
    pub minimum_ring_size: Option<u64>,
}

/// A hashing cookie.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpCookie {
    /// Name.
    pub name: String,
    /// Path.
    #[serde(default)]
    pub path: String,
    /// Lifetime of a generated cookie.
    #[serde(default)]
    pub ttl: Option<Duration>,
    /// Cookie attributes (not supported yet).
    #[serde(default)]
    pub attributes: Vec<Opaque>,
}

/// Ring hash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RingHash {
    /// Minimum ring size.
    #[serde(default)]
    pub minimum_ring_size: Option<u64>,
}

/// Maglev.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Maglev {
    /// Table size (a prime).
    #[serde(default)]
    pub table_size: Option<u64>,
}

/// Connection limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionPoolSettings {
    /// TCP limits.
    #[serde(default)]
    pub tcp: Option<TcpSettings>,
    /// HTTP limits.
    #[serde(default)]
    pub http: Option<HttpSettings>,
}

/// TCP limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpSettings {
    /// Most connections to the service.
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// Connection timeout.
    #[serde(default)]
    pub connect_timeout: Option<Duration>,
    /// Keepalive.
    #[serde(default)]
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// Longest a connection lives.
    #[serde(default)]
    pub max_connection_duration: Option<Duration>,
    /// Idle timeout.
    #[serde(default)]
    pub idle_timeout: Option<Duration>,
}

/// TCP keepalive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpKeepalive {
    /// Probes before the connection is dead.
    #[serde(default)]
    pub probes: Option<u32>,
    /// Idle time before probing.
    #[serde(default)]
    pub time: Option<Duration>,
    /// Between probes.
    #[serde(default)]
    pub interval: Option<Duration>,
}

/// HTTP limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpSettings {
    /// Most requests waiting for a connection.
    #[serde(default)]
    pub http1_max_pending_requests: Option<u32>,
    /// Most requests in flight.
    #[serde(default)]
    pub http2_max_requests: Option<u32>,
    /// Requests per connection.
    #[serde(default)]
    pub max_requests_per_connection: Option<u32>,
    /// Most retries in flight.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// Idle timeout.
    #[serde(default)]
    pub idle_timeout: Option<Duration>,
    /// Upgrade HTTP/1.1 to HTTP/2 (`DEFAULT`, `DO_NOT_UPGRADE`, `UPGRADE`; not supported yet).
    #[serde(default)]
    pub h2_upgrade_policy: Option<String>,
    /// Use the client's protocol upstream (not supported yet).
    #[serde(default)]
    pub use_client_protocol: Option<bool>,
    /// Most concurrent streams per HTTP/2 connection.
    #[serde(default)]
    pub max_concurrent_streams: Option<u32>,
}

/// Ejection of failing endpoints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutlierDetection {
    /// Count local-origin failures separately.
    #[serde(default)]
    pub split_external_local_origin_errors: Option<bool>,
    /// Local-origin failures before ejection.
    #[serde(default)]
    pub consecutive_local_origin_failures: Option<u32>,
    /// Gateway errors (502, 503, 504) before ejection.
    #[serde(default)]
    pub consecutive_gateway_errors: Option<u32>,
    /// 5xx errors before ejection.
    #[serde(default)]
    pub consecutive_5xx_errors: Option<u32>,
    /// Deprecated form of `consecutive5xxErrors`.
    #[serde(default)]
    pub consecutive_errors: Option<u32>,
    /// Between analysis sweeps.
    #[serde(default)]
    pub interval: Option<Duration>,
    /// Minimum ejection time.
    #[serde(default)]
    pub base_ejection_time: Option<Duration>,
    /// Most endpoints ejected, percent.
    #[serde(default)]
    pub max_ejection_percent: Option<u32>,
    /// Below this healthy share, eject nothing (panic threshold), percent.
    #[serde(default)]
    pub min_health_percent: Option<u32>,
}

/// TLS from the client to the service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientTlsSettings {
    /// Mode.
    #[serde(default)]
    pub mode: Option<ClientTlsMode>,
    /// Client certificate file (MUTUAL).
    #[serde(default)]
    pub client_certificate: String,
    /// Client key file (MUTUAL).
    #[serde(default)]
    pub private_key: String,
    /// CA bundle file to verify the server; without it, the system's trust store
    /// (`--system-ca-file`).
    #[serde(default)]
    pub ca_certificates: String,
    /// Secret name holding the certificates (not supported yet).
    #[serde(default)]
    pub credential_name: String,
    /// Names the server certificate must carry (one of them); without them, the SNI name.
    #[serde(default)]
    pub subject_alt_names: Vec<String>,
    /// SNI to send; without it, the destination host.
    #[serde(default)]
    pub sni: String,
    /// `true` skips verifying the server's chain and name: the only way to turn
    /// verification off.
    #[serde(default)]
    pub insecure_skip_verify: Option<bool>,
    /// Certificate revocation list file.
    #[serde(default)]
    pub ca_crl: String,
}

/// Client TLS modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ClientTlsMode {
    /// Plain text.
    Disable,
    /// TLS, verifying the server.
    Simple,
    /// TLS with a client certificate.
    Mutual,
    /// Istio's mutual TLS with the proxy's mesh certificate.
    IstioMutual,
}
