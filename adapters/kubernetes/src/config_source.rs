//! Istio's networking objects, and its `PeerAuthentication`s, read from a cluster's API
//! server: what `--config-dir` files give, from `kubectl apply` instead, with the same
//! validation and the same last good versions.
//!
//! Start with [`IstioConfig::new`] (a client, a namespace or all, the cluster's name for
//! messages). It gives two sources, each watching its own kinds with its own stream:
//!
//! - [`IstioConfig::config_source`]: `VirtualService`, `DestinationRule`, `Gateway`,
//!   `Sidecar`, `WorkloadGroup`, `EnvoyFilter` (`v1alpha3`, the one version Istio serves it
//!   in), `ProxyConfig` (`v1beta1`, likewise) and `security.istio.io`'s `PeerAuthentication`, `AuthorizationPolicy` and
//!   `RequestAuthentication` as a [`ConfigSource`] named `Kubernetes`, whose stream follows
//!   the contract on [`ConfigEvent`].
//! - [`IstioConfig::entries`]: `ServiceEntry` and `WorkloadEntry` as a [`Registry`], mapped as
//!   the File registry maps them ([`wayfinder_config::model::Services`]: hosts, resolution,
//!   `workloadSelector` across objects, repeated hosts merged), whose stream follows the
//!   contract on [`Event`].
//!
//! # Mapping
//!
//! Each kind is watched (kube's `watcher`, list then watch, backoff 0.5 s to 10 s) in its
//! group's `v1`, or `v1beta1` when the API server does not serve `v1` (Istio before 1.22). Objects are reduced to their type, name, namespace, labels, annotations, uid,
//! resource version and spec (no `managedFields`, no `status`, no
//! `kubectl.kubernetes.io/last-applied-configuration`) and handed to `wayfinder_config`'s
//! [`Feed`]: the very models behind `--config-dir` and the File registry, so an object means
//! here exactly what it means in a file. An object's origin in messages and on debug pages is
//! `<cluster>: <API path>`, e.g.
//! `Kubernetes: /apis/networking.istio.io/v1/namespaces/default/virtualservices/reviews`.
//! Where entries of several objects merge a host, objects are ranked by that path.
//!
//! # Validation and the last good version
//!
//! Each object is validated on its own as Istio validates it
//! ([`wayfinder_config::validate`]; for entries, the registry model's checks). A
//! rejected object is an error item ([`RegistryError::Invalid`], or
//! [`RegistryError::Malformed`] when its spec does not even parse) whose origin names the
//! object; it keeps the last good version it had (a `VirtualService`; a `ServiceEntry` keeps
//! its last good contents as a file does), and every other object is unaffected. Fixing it
//! sends the change. Health follows the last item: `Recovered` when everything works again
//! and nothing changed.
//!
//! # Events
//!
//! A rejection is also posted on the object as a Kubernetes Event: type `Warning`, reason
//! `InvalidConfig`, source and reporting component `wayfinder`, message the problems as
//! `field: message; …`, so that `kubectl describe virtualservice reviews` says why it is not
//! in force. One Event per version of an object (uid and resource version): a relist does not
//! post it again. A failure to post is logged as a warning and otherwise ignored. With
//! replicas ([`IstioConfig::with_leadership`]), only the leader posts, once for the deployment
//! (see [`crate::leader`]).
//!
//! Permissions: `list` and `watch` on the seven kinds of `networking.istio.io` and the three
//! of `security.istio.io` (and what [`crate::workload_entries`] writes, when
//! auto-registration is on), and `create` and `list` (a new leader's check for an Event posted
//! already) on core `events` in the namespaces of the objects.
//!
//! # Lists, failures and missing CRDs
//!
//! The first item is a `Reset`, sent once every kind has been listed. After that, and after
//! every relist (a failure, an expired watch), only what changed is sent. A failed list or
//! watch is a [`RegistryError::Unavailable`] item with the origin
//! `cluster <id>: list/watch networking.istio.io/v1 virtualservices`; the kind is listed again after a
//! backoff, and the last good state stays meanwhile. A kind served in no version (its CRD is
//! not installed) is logged once as a warning and counts as an empty list, so that a cluster
//! without Istio is ready at once; it is looked for again every 30 seconds, so installing
//! Istio later works. The streams end promptly when the shutdown token is cancelled.

mod driver;
mod events;
mod kinds;
mod object;
mod watch;

use std::fmt;
use std::sync::Arc;

use wayfinder_config::{ConfigObject, ConfigStream, Feed};
use wayfinder_registry::{CancellationToken, EventStream, Registration, RegistryId, Source};

use crate::leader::Leadership;

#[cfg(doc)]
use wayfinder_config::{ConfigEvent, ConfigSource};
#[cfg(doc)]
use wayfinder_registry::{Event, Registry, RegistryError};

/// Istio's networking objects from one cluster's API server; see the module docs.
#[derive(Clone)]
pub struct IstioConfig {
    cluster: Target,
}

impl IstioConfig {
    /// Reads through `client`. `namespace`: watch only this namespace (`None`: all).
    /// `cluster`: the cluster's name in messages and origins. Nothing is read until a source's
    /// stream is polled.
    pub fn new(client: kube::Client, namespace: Option<String>, cluster: &str) -> Self {
        Self {
            cluster: Target {
                client,
                namespace,
                name: cluster.into(),
                leadership: Leadership::sole(),
            },
        }
    }

    /// Posts Events only while `leadership` says this replica leads (see
    /// [`crate::leader`]); without it, always.
    pub fn with_leadership(mut self, leadership: Leadership) -> Self {
        self.cluster.leadership = leadership;
        self
    }

    /// The config source of `VirtualService`, `DestinationRule`, `Gateway` and `Sidecar`
    /// objects; its [`Source::id`] is `Kubernetes`.
    pub fn config_source(&self) -> ApiConfigSource {
        ApiConfigSource {
            id: RegistryId::new("Kubernetes"),
            cluster: self.cluster.clone(),
        }
    }

    /// The registry of `ServiceEntry` and `WorkloadEntry` objects, with the given id.
    pub fn entries(&self, id: RegistryId) -> ApiEntries {
        ApiEntries {
            id,
            cluster: self.cluster.clone(),
        }
    }
}

/// `VirtualService`, `DestinationRule`, `Gateway` and `Sidecar` objects of a cluster, as a
/// [`ConfigSource`]; made by [`IstioConfig::config_source`].
pub struct ApiConfigSource {
    id: RegistryId,
    cluster: Target,
}

impl Source<Arc<ConfigObject>> for ApiConfigSource {
    fn id(&self) -> &RegistryId {
        &self.id
    }

    fn watch(self: Box<Self>, shutdown: CancellationToken) -> ConfigStream {
        driver::stream(self.cluster, &kinds::CONFIG, Feed::config(), shutdown)
    }
}

/// `ServiceEntry` and `WorkloadEntry` objects of a cluster, as a [`Registry`]; made by
/// [`IstioConfig::entries`].
pub struct ApiEntries {
    id: RegistryId,
    cluster: Target,
}

impl Source<Registration> for ApiEntries {
    fn id(&self) -> &RegistryId {
        &self.id
    }

    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream {
        driver::stream(self.cluster, &kinds::ENTRIES, Feed::entries(), shutdown)
    }
}

/// Where the objects are read.
#[derive(Clone)]
struct Target {
    client: kube::Client,
    /// The one namespace watched, or all.
    namespace: Option<String>,
    /// The cluster's name in messages.
    name: Arc<str>,
    /// Whether this replica writes the deployment's Events.
    leadership: Leadership,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for IstioConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.cluster.fmt(f)
    }
}

impl fmt::Debug for ApiConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.cluster.fmt(f)
    }
}

impl fmt::Debug for ApiEntries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiEntries")
            .field("id", &self.id)
            .field("cluster", &self.cluster)
            .finish()
    }
}
