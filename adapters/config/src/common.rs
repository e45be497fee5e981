//! Types several Istio kinds share.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written the Go way (`10s`, `1.5s`, `100ms`, `1m`), as Istio's YAML writes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub std::time::Duration);

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let text = String::deserialize(de)?;
        wayfinder_registry::duration::parse(&text)
            .map(Duration)
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 {
            write!(f, "{}s", d.as_secs())
        } else {
            write!(f, "{}ms", d.as_secs_f64() * 1000.0)
        }
    }
}

/// How a string is matched: exactly, by prefix, or by an RE2 regular expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StringMatch {
    /// Equal to.
    Exact(String),
    /// Starts with.
    Prefix(String),
    /// Matches the whole value (RE2 syntax).
    Regex(String),
}

/// A percentage, 0.0 to 100.0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percent {
    /// The percentage.
    #[serde(default)]
    pub value: f64,
}

/// A port of the destination service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PortSelector {
    /// The port number.
    #[serde(default)]
    pub number: u32,
}

/// Where traffic goes: a service (by hostname, short names allowed), a subset of it, a port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// Service hostname; short names are relative to the namespace of the object.
    pub host: String,
    /// Name of a subset defined by a DestinationRule for that host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subset: String,
    /// Port, required when the service has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortSelector>,
}

/// Selects workloads by labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    /// Labels a workload must have.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// Selects workloads by labels as Istio's security policies write it (`selector.matchLabels`,
/// Istio's `istio.type.v1beta1.WorkloadSelector`); the networking kinds write
/// [`WorkloadSelector`] (`workloadSelector.labels`) instead.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels a workload must have.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

impl LabelSelector {
    /// True when `labels` has every label of the selector, with its value (so an empty
    /// selector matches every workload).
    pub fn matches(&self, labels: &impl LabelLookup) -> bool {
        self.match_labels
            .iter()
            .all(|(key, value)| labels.label(key) == Some(value.as_str()))
    }
}

/// A workload's labels, however they are stored: a proxy's (`String`s, from its node) or an
/// endpoint's (`Arc<str>`s, from its registry). Selectors read them without copying, since
/// they are matched per endpoint when clusters are generated.
pub trait LabelLookup {
    /// The value of the label `key`, if the workload has it.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl LabelLookup for wayfinder_registry::Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(|v| &**v)
    }
}

/// Header changes for requests and responses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Headers {
    /// Changes to the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<HeaderOperations>,
    /// Changes to the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<HeaderOperations>,
}

/// Set, append and remove headers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderOperations {
    /// Overwrite these headers.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Append these headers.
    #[serde(default)]
    pub add: BTreeMap<String, String>,
    /// Remove these headers.
    #[serde(default)]
    pub remove: Vec<String>,
}

/// A field wayfinder accepts but does not interpret yet: its value is read and ignored (and
/// `validate` warns that it has no effect).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opaque;

impl<'de> Deserialize<'de> for Opaque {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(de).map(|_| Opaque)
    }
}

impl Serialize for Opaque {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("(not interpreted)")
    }
}

/// gRPC status code names, by code (`OK` is 0, `UNAVAILABLE` 14), as VirtualService abort
/// faults name them.
pub const GRPC_STATUS_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];
