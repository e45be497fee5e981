//! The Istio objects the File registry's model reads, as they are written in files (or sent
//! by the Kubernetes API): `ServiceEntry` and `WorkloadEntry` of `networking.istio.io` (`v1`,
//! `v1beta1`, `v1alpha3`).
//!
//! Field names and defaults follow Istio's API. `metadata` is lenient (fields such as `uid`,
//! `resourceVersion` or `managedFields` in a `kubectl` export are ignored). The spec types
//! skip what they do not model, and [`crate::fields`] judges what they skipped: a field
//! Istio's CRDs define (`spec.exportTo` of a newer Istio) is accepted with a warning, a
//! misspelt one is an error that names it rather than a setting silently lost.

use std::collections::BTreeMap;

use serde::de::{Error as _, IgnoredAny};
use serde::{Deserialize, Deserializer};

use crate::documents::{Decode, TypeMeta};

/// The API group of Istio's networking objects.
pub(crate) const GROUP: &str = "networking.istio.io";
/// The versions of [`GROUP`] wayfinder reads; they share one schema.
pub(crate) const VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha3"];
/// The one version Istio serves `EnvoyFilter` in.
pub(crate) const ENVOY_FILTER_API_VERSION: &str = "networking.istio.io/v1alpha3";
/// The one version Istio serves `ProxyConfig` in.
pub(crate) const PROXY_CONFIG_API_VERSION: &str = "networking.istio.io/v1beta1";

/// True for any kind of Istio networking object (VirtualService, Gateway, …) in a known version.
pub(crate) fn is_networking(meta: &TypeMeta) -> bool {
    meta.group() == GROUP && VERSIONS.contains(&meta.version())
}

/// An object the File registry's model reads. Boxed: a file's parsed documents are all held until they
/// are mapped, and inline each (even one of a kind the model skips) was 384 bytes, a 50
/// MB list for a file of 75,000 VirtualServices.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum IstioObject {
    /// A `ServiceEntry`.
    ServiceEntry(Box<Object<ServiceEntrySpec>>),
    /// A `WorkloadEntry`.
    WorkloadEntry(Box<Object<WorkloadEntrySpec>>),
}

impl Decode for IstioObject {
    fn accepts(meta: &TypeMeta) -> bool {
        is_networking(meta) && matches!(meta.kind.as_str(), "ServiceEntry" | "WorkloadEntry")
    }

    fn decode<'de, D: Deserializer<'de>>(meta: &TypeMeta, de: D) -> Result<Self, D::Error> {
        match meta.kind.as_str() {
            "ServiceEntry" => Object::deserialize(de).map(|o| Self::ServiceEntry(Box::new(o))),
            "WorkloadEntry" => Object::deserialize(de).map(|o| Self::WorkloadEntry(Box::new(o))),
            other => Err(D::Error::custom(format!("unexpected kind {other}"))),
        }
    }
}

/// A whole object: type, metadata and spec. Of a `status`, only its conditions are read (a
/// WorkloadEntry's `Healthy` condition says whether its workload gets traffic); the rest is
/// accepted and ignored.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Object<S> {
    #[serde(rename = "apiVersion")]
    _api_version: IgnoredAny,
    #[serde(rename = "kind")]
    _kind: IgnoredAny,
    pub(crate) metadata: Metadata,
    pub(crate) spec: S,
    #[serde(default)]
    pub(crate) status: Option<ObjectStatus>,
}

/// An object's `status`, as far as it is read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ObjectStatus {
    #[serde(default)]
    pub(crate) conditions: Vec<Condition>,
}

/// One of a `status`'s `conditions` (Kubernetes' shape; other fields are ignored).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct Condition {
    #[serde(rename = "type", default)]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) message: String,
}

impl<S> Object<S> {
    /// Whether a condition of `kind` says `"False"`.
    pub(crate) fn condition_false(&self, kind: &str) -> bool {
        self.status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.kind == kind && c.status == "False")
    }
}

/// Kubernetes object metadata; fields other than these are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct Metadata {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) namespace: Option<String>,
    #[serde(default)]
    pub(crate) labels: Option<BTreeMap<String, String>>,
    /// Read so that a malformed value is reported; nothing maps annotations yet.
    #[serde(default)]
    pub(crate) annotations: Option<BTreeMap<String, String>>,
}

impl Metadata {
    /// The namespace, `default` when absent or empty (as `kubectl apply` does).
    pub(crate) fn namespace(&self) -> &str {
        match self.namespace.as_deref() {
            None | Some("") => "default",
            Some(namespace) => namespace,
        }
    }
}

/// `ServiceEntry.spec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceEntrySpec {
    #[serde(default)]
    pub(crate) hosts: Vec<String>,
    #[serde(default, deserialize_with = "crate::go_yaml::strings")]
    pub(crate) addresses: Vec<String>,
    #[serde(default)]
    pub(crate) ports: Vec<PortSpec>,
    #[serde(default)]
    pub(crate) location: LocationSpec,
    #[serde(default)]
    pub(crate) resolution: ResolutionSpec,
    #[serde(default)]
    pub(crate) endpoints: Vec<WorkloadEntrySpec>,
    #[serde(default)]
    pub(crate) workload_selector: Option<WorkloadSelectorSpec>,
    #[serde(default)]
    pub(crate) export_to: Vec<String>,
    #[serde(default)]
    pub(crate) subject_alt_names: Vec<String>,
}

/// `ServiceEntry.spec.ports[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PortSpec {
    /// Read wide, so that an out-of-range number is refused with Istio's message.
    pub(crate) number: u32,
    #[serde(default)]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) protocol: Option<String>,
    #[serde(default)]
    pub(crate) target_port: Option<u32>,
}

/// `ServiceEntry.spec.location`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum LocationSpec {
    /// Outside the mesh (Istio's default).
    #[default]
    MeshExternal,
    /// Part of the mesh.
    MeshInternal,
}

/// `ServiceEntry.spec.resolution`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum ResolutionSpec {
    /// Forward to the address the client dialed (Istio's default).
    #[default]
    None,
    /// The endpoints' IP addresses.
    Static,
    /// Resolve the endpoints (or the hosts) by DNS, using every address.
    Dns,
    /// Resolve by DNS, one address at a time.
    DnsRoundRobin,
}

/// `ServiceEntry.spec.workloadSelector`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct WorkloadSelectorSpec {
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
}

/// `WorkloadEntry.spec`, also the form of `ServiceEntry.spec.endpoints[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkloadEntrySpec {
    #[serde(default)]
    pub(crate) address: String,
    /// Read wide, so that an out-of-range number is refused with Istio's message.
    #[serde(default)]
    pub(crate) ports: BTreeMap<String, u32>,
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) network: String,
    #[serde(default)]
    pub(crate) locality: String,
    #[serde(default)]
    pub(crate) weight: Option<u32>,
    #[serde(default)]
    pub(crate) service_account: Option<String>,
}
