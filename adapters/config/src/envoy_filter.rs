//! `EnvoyFilter`: patches to the Envoy configuration generated for some proxies (Istio
//! `networking.istio.io/v1alpha3` `EnvoyFilter`, the only version Istio serves of it).
//!
//! The spec is read here with Istio's field names; its patch values are kept as the JSON they
//! are (`google.protobuf.Struct` in Istio's API), because only the server, which holds Envoy's
//! message descriptors, can read them as the Envoy messages their `applyTo` names. Applying
//! the patches is the server's (`src/xds/generate/envoy_filter`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::authorization_policy::PolicyTargetReference;
use super::common::WorkloadSelector;

/// The longest `proxyVersion` pattern compiled (Istio's `maxProxyVersionLen`): a longer one is
/// a warning, and matches no proxy.
pub const MAX_PROXY_VERSION_LEN: usize = 1024;

/// Patches to the generated Envoy configuration of the workloads it selects (Istio
/// `EnvoyFilter`). One in the root namespace applies in every namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvoyFilter {
    /// The workloads it applies to; none: every workload of its namespace (every workload of
    /// the mesh in the root namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<WorkloadSelector>,
    /// Gateways (Kubernetes Gateway API) it applies to, instead of a selector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_refs: Vec<PolicyTargetReference>,
    /// The patches, applied in order.
    #[serde(default)]
    pub config_patches: Vec<Option<ConfigPatch>>,
    /// Order among the filters that apply to one proxy: lower first (negative before the
    /// default 0).
    #[serde(default)]
    pub priority: i32,
}

/// One patch: where it applies and what it does.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigPatch {
    /// The kind of object patched.
    #[serde(default)]
    pub apply_to: ApplyTo,
    /// Which objects of that kind; none: every one.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<ObjectMatch>,
    /// The operation and its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<Patch>,
}

/// The kinds of object a patch applies to (Istio `EnvoyFilter.ApplyTo`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ApplyTo {
    /// Not given.
    #[default]
    Invalid,
    /// A listener.
    Listener,
    /// A listener's filter chain.
    FilterChain,
    /// A network filter of a filter chain.
    NetworkFilter,
    /// An HTTP filter of an HTTP connection manager.
    HttpFilter,
    /// A route configuration.
    RouteConfiguration,
    /// A virtual host of a route configuration.
    VirtualHost,
    /// A route of a virtual host.
    HttpRoute,
    /// A cluster.
    Cluster,
    /// An extension configuration served over ECDS (not served by wayfinder).
    ExtensionConfig,
    /// The bootstrap (read by the agent in Istio; not patched by wayfinder).
    Bootstrap,
    /// A listener filter.
    ListenerFilter,
}

/// Where a patch applies (Istio `EnvoyConfigObjectMatch`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMatch {
    /// Which proxies' and which side's configuration.
    #[serde(default)]
    pub context: PatchContext,
    /// Which proxies, by version and metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyMatch>,
    /// Which listener (for the listener kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<ListenerMatch>,
    /// Which route configuration (for the route kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_configuration: Option<RouteConfigurationMatch>,
    /// Which cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterMatch>,
}

/// The configuration a patch applies to (Istio `EnvoyFilter.PatchContext`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PatchContext {
    /// Every proxy's, both sides.
    #[default]
    Any,
    /// A sidecar's inbound side.
    SidecarInbound,
    /// A sidecar's outbound side.
    SidecarOutbound,
    /// A gateway's.
    Gateway,
    /// An ambient waypoint's (wayfinder serves none).
    Waypoint,
}

/// Proxies by version and node metadata (Istio `ProxyMatch`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyMatch {
    /// A regular expression the proxy's `ISTIO_VERSION` metadata must match.
    #[serde(default)]
    pub proxy_version: String,
    /// Node metadata values the proxy must have.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// A listener, and within it a filter chain and a filter (Istio `ListenerMatch`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerMatch {
    /// The listener's port (the port of a filter chain of `virtualInbound`/`virtualOutbound`).
    #[serde(default)]
    pub port_number: u32,
    /// Not used by Istio.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub port_name: String,
    /// The filter chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_chain: Option<FilterChainMatch>,
    /// The name of a listener filter.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub listener_filter: String,
    /// The listener's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A filter chain of a listener (Istio `FilterChainMatch`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilterChainMatch {
    /// The chain's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// A server name the chain matches.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sni: String,
    /// The chain's transport protocol (`tls`, `raw_buffer`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub transport_protocol: String,
    /// Comma-separated application protocols the chain must all match.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub application_protocols: String,
    /// A network filter of the chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<FilterMatch>,
    /// The destination port the chain matches.
    #[serde(default)]
    pub destination_port: u32,
}

/// A network filter, and within an HTTP connection manager an HTTP filter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilterMatch {
    /// The filter's name (`envoy.filters.network.http_connection_manager`).
    #[serde(default)]
    pub name: String,
    /// An HTTP filter of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_filter: Option<SubFilterMatch>,
}

/// An HTTP filter by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SubFilterMatch {
    /// The filter's name (`envoy.filters.http.router`).
    #[serde(default)]
    pub name: String,
}

/// A route configuration, and within it a virtual host and a route (Istio
/// `RouteConfigurationMatch`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteConfigurationMatch {
    /// The port of the listener it serves (a gateway: its server's port).
    #[serde(default)]
    pub port_number: u32,
    /// A gateway server's port name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub port_name: String,
    /// A gateway: the Gateway object, `namespace/name`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gateway: String,
    /// A virtual host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vhost: Option<VirtualHostMatch>,
    /// The route configuration's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A virtual host by name or domain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualHostMatch {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// A domain it serves.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain_name: String,
    /// A route of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteMatch>,
}

/// A route by name or action.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteMatch {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its action.
    #[serde(default)]
    pub action: RouteAction,
}

/// What a route does (Istio `RouteMatch.Action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RouteAction {
    /// Any action.
    #[default]
    Any,
    /// Forwards to a cluster.
    Route,
    /// Redirects.
    Redirect,
    /// Answers directly.
    DirectResponse,
}

/// A cluster by name, or by its service, subset and port (Istio `ClusterMatch`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMatch {
    /// The service's port.
    #[serde(default)]
    pub port_number: u32,
    /// The service's hostname.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service: String,
    /// The DestinationRule subset.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subset: String,
    /// The cluster's name (the other fields are then ignored).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// What a patch does (Istio `Patch`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Patch {
    /// The operation.
    #[serde(default)]
    pub operation: Operation,
    /// The value: an Envoy message of the `applyTo` kind, as JSON (proto field names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
    /// Where an HTTP filter added goes among Istio's own (not acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_class: Option<String>,
}

/// The operations (Istio `Patch.Operation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Operation {
    /// Not given.
    #[default]
    Invalid,
    /// Merge the value into the object (lists appended).
    Merge,
    /// Add the value as a new object.
    Add,
    /// Remove the object.
    Remove,
    /// Insert the value before the matched object (first without a match).
    InsertBefore,
    /// Insert the value after the matched object (last without a match).
    InsertAfter,
    /// Insert the value first.
    InsertFirst,
    /// Replace the matched object with the value.
    Replace,
    /// Merge, replacing lists instead of appending to them.
    MergeAndReplaceList,
}
