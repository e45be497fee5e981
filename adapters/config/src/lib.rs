//! Istio's configuration in wayfinder: its kinds and their validation, reading them from YAML
//! and JSON with positions, the `ServiceEntry`/`WorkloadEntry` mapping, and the per-object
//! last good store every source of them shares.
//!
//! - **The kinds.** The types mirror Istio's `networking.istio.io` API (`v1`, `v1beta1` and
//!   `v1alpha3` share one schema) for the kinds that shape what proxies are served:
//!   [`VirtualService`], [`DestinationRule`], [`Gateway`] and [`Sidecar`], and
//!   [`WorkloadGroup`] (the template of auto-registered VMs' entries), and [`EnvoyFilter`]
//!   (`v1alpha3` only, as Istio serves it: patches to the generated Envoy configuration,
//!   their values kept as JSON for the server to read as Envoy messages), and [`ProxyConfig`]
//!   (`v1beta1` only: per-workload settings of the proxy itself, layered by
//!   [`proxy_config::effective`]); and of
//!   `security.istio.io` (`v1`, `v1beta1`), [`PeerAuthentication`] (whether connections to a
//!   workload must be mutual TLS; [`peer_authentication::effective`] is Istio's precedence of
//!   mesh, namespace, workload and port), [`AuthorizationPolicy`] (which requests a
//!   workload accepts; the server turns it into Envoy's RBAC filters) and
//!   [`RequestAuthentication`] (the JSON Web Tokens it accepts). Each is a
//!   [`ConfigObject`] with its [`ConfigMeta`] and [`ConfigSpec`]. Field names and enum values
//!   are Istio's, so the YAML users already have deserializes as is. [`validate`] checks an
//!   object as Istio does, with field paths. The types skip fields they do not model; a reader
//!   reports each skipped field ([`istio_defines`] tells which): one that Istio's CRDs define
//!   is accepted with a warning that wayfinder does not act on it (as are fields the types
//!   read but [`validate`] says are not supported yet), one nobody defines (a typo) rejects
//!   its object.
//! - **The contract of their sources.** A [`ConfigObject`] is an [`Item`] of the one source
//!   contract (its key a [`ConfigKey`]), so a [`ConfigSource`] (a watched directory, the
//!   Kubernetes API) is a [`Source`] of them and its [`ConfigEvent`]s are the contract's
//!   [`Event`]s, with the rules written there: the first item is a `Reset`, errors are items,
//!   what a source refuses now travels as `Refused`, a rejected object keeps its last good
//!   version.
//! - **Reading.** [`documents`] splits a file (or an API object's JSON) into documents and
//!   deserializes each into a typed object, with errors that carry the path, document number
//!   and line; one bad document never costs another.
//! - **The models** ([`model`]): what a source keeps over the files or objects it reads, per
//!   object and with its last good version. [`model::Services`] maps `ServiceEntry` and
//!   `WorkloadEntry` objects to registrations (the File registry's, and the Kubernetes
//!   adapter's entries); [`model::ConfigState`] keeps the configuration kinds (the config
//!   sources'). The File adapter drives them with watched files; [`Feed`] drives them with
//!   named blobs, for the Kubernetes API. So an object means the same wherever it is read.
//! - **The offline check** ([`check`], for `wayfinder validate`): files' bytes read as both
//!   models read them, every problem in a report; [`analyze`] (for `wayfinder analyze`)
//!   checks what it accepted across objects, with Istio's message codes.
//!
//! Start with [`ConfigObject`] and [`ConfigEvent`] for what sources send, then [`model`].
//!
//! This crate depends on `wayfinder-registry` alone among wayfinder's crates (for the model
//! the entries map to, [`RegistryError`], the cancellation token and Go-style durations), and
//! never on an adapter or the server. The config sources (the File adapter's `--config-dir`
//! and File registry, the Kubernetes adapter's API sources) and the server depend on it; it
//! reads no file and talks to no server.

pub mod analyze;
pub mod authorization_policy;
pub mod check;
pub mod credentials;
pub mod delegate;
pub mod documents;
pub mod envoy_filter;
pub mod envoy_types;
pub mod feed;
pub mod mesh_config;
pub mod mesh_networks;
pub mod model;
pub mod peer_authentication;
pub mod proxy_config;
pub mod request_authentication;
pub mod validate;

mod common;
mod convert;
mod destination_rule;
mod fields;
mod fit;
mod gateway;
mod go_yaml;
mod health;
mod istio;
mod istio_fields;
mod keep;
mod objects;
mod security;
mod services;
mod sidecar;
mod view;
mod virtual_service;
mod workload_group;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use wayfinder_registry::{Event, EventStream, Item, Source};

#[cfg(doc)]
use wayfinder_registry::RegistryError;

pub use authorization_policy::AuthorizationPolicy;
pub use common::{
    Destination, Duration, GRPC_STATUS_CODES, HeaderOperations, Headers, LabelLookup,
    LabelSelector, Opaque, Percent, PortSelector, StringMatch, WorkloadSelector,
};
pub use convert::TLS_MODE_LABEL;
pub use destination_rule::*;
pub use envoy_filter::EnvoyFilter;
pub use feed::Feed;
pub use gateway::*;
pub use istio_fields::{FieldPath, Step, istio_defines};
pub use peer_authentication::{EffectiveMtls, MtlsMode, PeerAuthentication, PeerMtls};
pub use proxy_config::ProxyConfig;
pub use request_authentication::RequestAuthentication;
pub use sidecar::*;
pub use virtual_service::*;
/// Re-exported from the contract, where every source's refusals are one type.
pub use wayfinder_registry::Refusal;
pub use workload_group::*;

/// The kinds of configuration wayfinder reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// `VirtualService`: routing.
    VirtualService,
    /// `DestinationRule`: subsets and traffic policy.
    DestinationRule,
    /// `Gateway`: listeners of gateway proxies.
    Gateway,
    /// `Sidecar`: what a sidecar sees.
    Sidecar,
    /// `WorkloadGroup`: the template of auto-registered VMs' entries.
    WorkloadGroup,
    /// `PeerAuthentication` (`security.istio.io`): whether connections to workloads must be
    /// mutual TLS.
    PeerAuthentication,
    /// `AuthorizationPolicy` (`security.istio.io`): which requests and connections workloads
    /// accept.
    AuthorizationPolicy,
    /// `RequestAuthentication` (`security.istio.io`): the JSON Web Tokens workloads accept.
    RequestAuthentication,
    /// `EnvoyFilter` (`networking.istio.io/v1alpha3` only): patches to the generated Envoy
    /// configuration.
    EnvoyFilter,
    /// `ProxyConfig` (`networking.istio.io/v1beta1` only): settings of the proxy itself, per
    /// workload.
    ProxyConfig,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 10] = [
        Kind::VirtualService,
        Kind::DestinationRule,
        Kind::Gateway,
        Kind::Sidecar,
        Kind::WorkloadGroup,
        Kind::PeerAuthentication,
        Kind::AuthorizationPolicy,
        Kind::RequestAuthentication,
        Kind::EnvoyFilter,
        Kind::ProxyConfig,
    ];

    /// The kind's name in YAML.
    pub fn name(self) -> &'static str {
        match self {
            Kind::VirtualService => "VirtualService",
            Kind::DestinationRule => "DestinationRule",
            Kind::Gateway => "Gateway",
            Kind::Sidecar => "Sidecar",
            Kind::WorkloadGroup => "WorkloadGroup",
            Kind::PeerAuthentication => "PeerAuthentication",
            Kind::AuthorizationPolicy => "AuthorizationPolicy",
            Kind::RequestAuthentication => "RequestAuthentication",
            Kind::EnvoyFilter => "EnvoyFilter",
            Kind::ProxyConfig => "ProxyConfig",
        }
    }

    /// The kind for a YAML `kind`, if wayfinder reads it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What identifies a configuration object: kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ConfigKey {
    /// Its kind.
    pub kind: Kind,
    /// Its namespace.
    pub namespace: Arc<str>,
    /// Its name.
    pub name: Arc<str>,
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Object metadata wayfinder uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConfigMeta {
    /// Name.
    pub name: Arc<str>,
    /// Namespace (`default` when the source had none).
    pub namespace: Arc<str>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Where the object came from, for messages: `path: document N (line L)`, or an API path.
    pub origin: Arc<str>,
    /// What its source warned about it, as `field: message`: fields Istio defines that
    /// wayfinder does not act on, deprecated forms. Shown with the object on debug pages.
    /// Shared, and two words rather than three: every object carries it, nearly always empty.
    pub warnings: Arc<[String]>,
}

/// A configuration object's spec, by kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ConfigSpec {
    /// A `VirtualService`.
    VirtualService(VirtualService),
    /// A `DestinationRule`, boxed: inline, its traffic policies (800 bytes, nearly all
    /// `None`) made every object of every kind that size, 75,000 VirtualServices 48 MB more.
    DestinationRule(Box<DestinationRule>),
    /// A `Gateway`.
    Gateway(Gateway),
    /// A `Sidecar`.
    Sidecar(Sidecar),
    /// A `WorkloadGroup`, boxed as DestinationRule is: its template and probe would make every
    /// object larger.
    WorkloadGroup(Box<WorkloadGroup>),
    /// A `PeerAuthentication`.
    PeerAuthentication(PeerAuthentication),
    /// An `AuthorizationPolicy`, boxed: its target references would make every object larger.
    AuthorizationPolicy(Box<AuthorizationPolicy>),
    /// A `RequestAuthentication`, boxed for the same reason.
    RequestAuthentication(Box<RequestAuthentication>),
    /// An `EnvoyFilter`, boxed for the same reason.
    EnvoyFilter(Box<EnvoyFilter>),
    /// A `ProxyConfig`.
    ProxyConfig(ProxyConfig),
}

/// One configuration object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfigObject {
    /// Metadata.
    pub meta: ConfigMeta,
    /// The spec.
    pub spec: ConfigSpec,
}

impl ConfigObject {
    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self.spec {
            ConfigSpec::VirtualService(_) => Kind::VirtualService,
            ConfigSpec::DestinationRule(_) => Kind::DestinationRule,
            ConfigSpec::Gateway(_) => Kind::Gateway,
            ConfigSpec::Sidecar(_) => Kind::Sidecar,
            ConfigSpec::WorkloadGroup(_) => Kind::WorkloadGroup,
            ConfigSpec::PeerAuthentication(_) => Kind::PeerAuthentication,
            ConfigSpec::AuthorizationPolicy(_) => Kind::AuthorizationPolicy,
            ConfigSpec::RequestAuthentication(_) => Kind::RequestAuthentication,
            ConfigSpec::EnvoyFilter(_) => Kind::EnvoyFilter,
            ConfigSpec::ProxyConfig(_) => Kind::ProxyConfig,
        }
    }

    /// The object's key.
    pub fn key(&self) -> ConfigKey {
        ConfigKey {
            kind: self.kind(),
            namespace: self.meta.namespace.clone(),
            name: self.meta.name.clone(),
        }
    }
}

impl Item for ConfigObject {
    type Key = ConfigKey;

    fn key(&self) -> ConfigKey {
        ConfigObject::key(self)
    }
}

/// What a configuration source reports: the [`Event`] every source speaks, carrying shared
/// configuration objects, so its contract is the one written there. The first item is a
/// `Reset` (which replaces everything the source said before), `Upsert` carries a whole
/// object, errors are items, what the source refuses now travels as [`Event::Refused`], and a
/// source that works again without a change sends `Recovered`. Sources send only objects that
/// passed [`validate::validate`]; an object that fails keeps its last good version.
pub type ConfigEvent = Event<Arc<ConfigObject>>;

/// The stream a configuration source produces.
pub type ConfigStream = EventStream<Arc<ConfigObject>>;

/// A source of configuration: a directory of files, the Kubernetes API. The name for a
/// [`Source`] of configuration objects, as `Registry` is for one of registrations: implemented
/// by every such source; adapters implement [`Source`] and never this trait.
pub trait ConfigSource: Source<Arc<ConfigObject>> {}

impl<S: Source<Arc<ConfigObject>> + ?Sized> ConfigSource for S {}
