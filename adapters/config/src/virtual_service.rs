//! `VirtualService`: how requests to a host are routed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::{Destination, Duration, Headers, Percent, StringMatch};

/// Routing for one or more hosts (Istio `networking.istio.io/v1` `VirtualService`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualService {
    /// Hosts the rules apply to; short names are relative to the object's namespace.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Gateways the rules apply to (`namespace/name`, or `mesh` for sidecars); empty: `mesh`.
    #[serde(default)]
    pub gateways: Vec<String>,
    /// HTTP rules, first match wins.
    #[serde(default)]
    pub http: Vec<HttpRoute>,
    /// TLS rules (by SNI), for TLS and HTTPS ports.
    #[serde(default)]
    pub tls: Vec<TlsRoute>,
    /// TCP rules, for opaque ports.
    #[serde(default)]
    pub tcp: Vec<TcpRoute>,
    /// Namespaces that see these rules (`.`, `*`, or names); empty: every namespace.
    #[serde(default)]
    pub export_to: Vec<String>,
}

/// One HTTP rule: conditions and what happens to matching requests.
///
/// Its policies are boxed: most rules set one or two of them, and inline they made every rule
/// 1,008 bytes whatever it set (208 boxed; heaptrack, BENCHMARKS.md "Hardening (issue 12)").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    /// Name, used in route names and stats.
    #[serde(default)]
    pub name: String,
    /// Conditions; the rule applies when any one matches (all when empty).
    #[serde(default, rename = "match")]
    pub matches: Vec<HttpMatchRequest>,
    /// Destinations with weights.
    #[serde(default)]
    pub route: Vec<HttpRouteDestination>,
    /// Redirect instead of forwarding.
    #[serde(default)]
    pub redirect: Option<Box<HttpRedirect>>,
    /// Answer directly instead of forwarding.
    #[serde(default)]
    pub direct_response: Option<Box<HttpDirectResponse>>,
    /// Delegate to another VirtualService (one without hosts), whose rules replace this one
    /// (see [`crate::delegate`]).
    #[serde(default)]
    pub delegate: Option<Box<Delegate>>,
    /// For a rule merged from a delegate: the delegate's namespace, which short destination
    /// hosts are relative to. Never read from YAML.
    #[serde(skip)]
    pub delegate_namespace: Option<std::sync::Arc<str>>,
    /// Rewrite path or authority before forwarding.
    #[serde(default)]
    pub rewrite: Option<Box<HttpRewrite>>,
    /// Request timeout; none by default.
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// Retry policy; Istio's default policy when absent.
    #[serde(default)]
    pub retries: Option<Box<HttpRetry>>,
    /// Fault injection.
    #[serde(default)]
    pub fault: Option<Box<HttpFaultInjection>>,
    /// Mirror requests to another destination.
    #[serde(default)]
    pub mirror: Option<Box<Destination>>,
    /// Several mirrors (not supported yet).
    #[serde(default)]
    pub mirrors: Vec<HttpMirrorPolicy>,
    /// Share of requests mirrored (default 100).
    #[serde(default)]
    pub mirror_percentage: Option<Percent>,
    /// Deprecated integer form of `mirrorPercentage`.
    #[serde(default)]
    pub mirror_percent: Option<u32>,
    /// CORS policy.
    #[serde(default)]
    pub cors_policy: Option<Box<CorsPolicy>>,
    /// Header changes.
    #[serde(default)]
    pub headers: Option<Box<Headers>>,
}

/// Conditions on a request; all given ones must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpMatchRequest {
    /// Name, appended to the route name.
    #[serde(default)]
    pub name: String,
    /// Path.
    #[serde(default)]
    pub uri: Option<StringMatch>,
    /// Scheme.
    #[serde(default)]
    pub scheme: Option<StringMatch>,
    /// Method.
    #[serde(default)]
    pub method: Option<StringMatch>,
    /// Authority (Host header).
    #[serde(default)]
    pub authority: Option<StringMatch>,
    /// Header values; an empty match object means "present".
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderMatch>,
    /// Port of the service the request was sent to.
    #[serde(default)]
    pub port: Option<u32>,
    /// Labels of the client workload.
    #[serde(default)]
    pub source_labels: BTreeMap<String, String>,
    /// Gateways this condition applies to.
    #[serde(default)]
    pub gateways: Vec<String>,
    /// Query parameters.
    #[serde(default)]
    pub query_params: BTreeMap<String, HeaderMatch>,
    /// Match the path case-insensitively.
    #[serde(default)]
    pub ignore_uri_case: bool,
    /// Headers that must not match.
    #[serde(default)]
    pub without_headers: BTreeMap<String, HeaderMatch>,
    /// Namespace of the client workload.
    #[serde(default)]
    pub source_namespace: String,
    /// Stats prefix (not supported yet).
    #[serde(default)]
    pub stat_prefix: String,
}

/// A header or query parameter match: a [`StringMatch`], or `{}` for "present".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatch {
    /// Equal to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// Starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Matches (RE2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

/// A weighted destination.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteDestination {
    /// Where.
    pub destination: Destination,
    /// Share, 0 to 100; weights of a rule add up to 100 (a single destination may omit it).
    #[serde(default)]
    pub weight: Option<i32>,
    /// Header changes for this destination.
    #[serde(default)]
    pub headers: Option<Box<Headers>>,
}

/// A redirect answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRedirect {
    /// New path.
    #[serde(default)]
    pub uri: String,
    /// New authority.
    #[serde(default)]
    pub authority: String,
    /// New port.
    #[serde(default)]
    pub port: Option<u32>,
    /// Derive the port from the scheme (`FROM_PROTOCOL_DEFAULT`, `FROM_REQUEST_PORT`).
    #[serde(default)]
    pub derive_port: Option<String>,
    /// New scheme.
    #[serde(default)]
    pub scheme: String,
    /// Status code, 301 by default.
    #[serde(default)]
    pub redirect_code: Option<u32>,
}

/// A direct answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpDirectResponse {
    /// Status code.
    pub status: u32,
    /// Body.
    #[serde(default)]
    pub body: Option<HttpBody>,
}

/// A direct response body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpBody {
    /// Text.
    #[serde(default)]
    pub string: Option<String>,
    /// Base64 bytes.
    #[serde(default)]
    pub bytes: Option<String>,
}

/// Delegation to another VirtualService.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delegate {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its namespace.
    #[serde(default)]
    pub namespace: String,
}

/// Rewrites before forwarding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRewrite {
    /// Replaces the matched path prefix (or the whole path for an exact match).
    #[serde(default)]
    pub uri: String,
    /// Replaces the authority.
    #[serde(default)]
    pub authority: String,
    /// Rewrites the path with a regular expression.
    #[serde(default)]
    pub uri_regex_rewrite: Option<RegexRewrite>,
}

/// A regular-expression path rewrite.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegexRewrite {
    /// The pattern (RE2).
    #[serde(rename = "match")]
    pub pattern: String,
    /// The replacement, with `\1`-style groups.
    pub rewrite: String,
}

/// Retries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRetry {
    /// Attempts after the first; 0 disables retries.
    #[serde(default)]
    pub attempts: i32,
    /// Timeout per attempt.
    #[serde(default)]
    pub per_try_timeout: Option<Duration>,
    /// Conditions (Envoy's `retry_on` names, and status codes).
    #[serde(default)]
    pub retry_on: String,
    /// Retry in other localities.
    #[serde(default)]
    pub retry_remote_localities: Option<bool>,
    /// Back-off between attempts (not supported yet).
    #[serde(default)]
    pub backoff: Option<Duration>,
    /// Retry errors the proxy itself causes (not supported yet).
    #[serde(default)]
    pub retry_ignore_previous_hosts: Option<bool>,
}

/// Faults to inject.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpFaultInjection {
    /// Delay requests.
    #[serde(default)]
    pub delay: Option<FaultDelay>,
    /// Fail requests.
    #[serde(default)]
    pub abort: Option<FaultAbort>,
}

/// A delay fault.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultDelay {
    /// How long.
    #[serde(default)]
    pub fixed_delay: Option<Duration>,
    /// Exponential delay (not supported, as in Istio).
    #[serde(default)]
    pub exponential_delay: Option<Duration>,
    /// Share of requests (default 100).
    #[serde(default)]
    pub percentage: Option<Percent>,
    /// Deprecated integer form of `percentage`.
    #[serde(default)]
    pub percent: Option<i32>,
}

/// An abort fault.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultAbort {
    /// HTTP status to answer with.
    #[serde(default)]
    pub http_status: Option<u32>,
    /// gRPC status to answer with (a name such as `UNAVAILABLE`).
    #[serde(default)]
    pub grpc_status: Option<String>,
    /// HTTP/2 error (not supported, as in Istio).
    #[serde(default)]
    pub http2_error: Option<String>,
    /// Share of requests (default 100).
    #[serde(default)]
    pub percentage: Option<Percent>,
}

/// One of several mirrors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpMirrorPolicy {
    /// Where.
    pub destination: Destination,
    /// Share of requests.
    #[serde(default)]
    pub percentage: Option<Percent>,
}

/// CORS.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CorsPolicy {
    /// Allowed origins.
    #[serde(default)]
    pub allow_origins: Vec<StringMatch>,
    /// Deprecated exact origins.
    #[serde(default)]
    pub allow_origin: Vec<String>,
    /// Allowed methods.
    #[serde(default)]
    pub allow_methods: Vec<String>,
    /// Allowed request headers.
    #[serde(default)]
    pub allow_headers: Vec<String>,
    /// Headers the browser may read.
    #[serde(default)]
    pub expose_headers: Vec<String>,
    /// How long preflight answers may be cached.
    #[serde(default)]
    pub max_age: Option<Duration>,
    /// Allow credentials.
    #[serde(default)]
    pub allow_credentials: Option<bool>,
    /// What to do with preflights from origins that do not match (`FORWARD`, `IGNORE`).
    #[serde(default)]
    pub unmatched_preflights: Option<String>,
}

/// A TLS rule, by SNI.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsRoute {
    /// Conditions (at least one).
    #[serde(default, rename = "match")]
    pub matches: Vec<TlsMatchAttributes>,
    /// Destinations.
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

/// Conditions on a TLS connection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsMatchAttributes {
    /// SNI names (wildcards allowed).
    #[serde(default)]
    pub sni_hosts: Vec<String>,
    /// Destination IPs or CIDRs.
    #[serde(default)]
    pub destination_subnets: Vec<String>,
    /// Port of the service.
    #[serde(default)]
    pub port: Option<u32>,
    /// Labels of the client workload.
    #[serde(default)]
    pub source_labels: BTreeMap<String, String>,
    /// Gateways.
    #[serde(default)]
    pub gateways: Vec<String>,
    /// Namespace of the client workload.
    #[serde(default)]
    pub source_namespace: String,
}

/// A TCP rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpRoute {
    /// Conditions (all connections when empty).
    #[serde(default, rename = "match")]
    pub matches: Vec<L4MatchAttributes>,
    /// Destinations.
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

/// Conditions on a TCP connection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct L4MatchAttributes {
    /// Destination IPs or CIDRs.
    #[serde(default)]
    pub destination_subnets: Vec<String>,
    /// Port of the service.
    #[serde(default)]
    pub port: Option<u32>,
    /// Labels of the client workload.
    #[serde(default)]
    pub source_labels: BTreeMap<String, String>,
    /// Gateways.
    #[serde(default)]
    pub gateways: Vec<String>,
    /// Namespace of the client workload.
    #[serde(default)]
    pub source_namespace: String,
}

/// A weighted destination of a TCP or TLS rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteDestination {
    /// Where.
    pub destination: Destination,
    /// Share, 0 to 100.
    #[serde(default)]
    pub weight: Option<i32>,
}
