//! The model snapshot: everything every registry says, merged, validated and immutable.
//!
//! The aggregate is the only writer: it builds a [`Snapshot`], checking each service it merges
//! with [`Snapshot::validate_service`] (the others are the previous snapshot's, shared), so
//! that what it publishes with the one [`Publisher`] passes [`Snapshot::validate`]. Everyone
//! else (the xDS server, the debug pages) holds a [`SnapshotReader`] and reads the current
//! `Arc<Snapshot>` without locking (see [`published`]). The model knows nothing of xDS.

mod config;
mod delegates;
mod publish;
pub mod rules;
mod status;
mod visibility;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use wayfinder_registry::{Endpoint, Registration, RegistryId, Resolution, Service, ServiceKey};

pub use config::TrafficConfig;
pub use publish::{Publisher, SnapshotReader, SourceStatuses, published};
pub use status::{ErrorRecord, Health, Holds, SourceStatus};
pub use visibility::Visible;

/// An immutable view of every service, as of one moment.
#[derive(Debug, Serialize)]
pub struct Snapshot {
    /// Increases by one with every published snapshot; 0 is the empty snapshot before sync.
    pub version: u64,
    /// When the snapshot was built.
    #[serde(with = "unix_seconds")]
    pub built_at: SystemTime,
    /// Merged services by key.
    pub services: BTreeMap<ServiceKey, Arc<MergedService>>,
    /// Disagreements between registries, with the value that won (see the merge rule in
    /// `aggregate::merge`).
    pub conflicts: Vec<Conflict>,
    /// What each registry contributed, in `--registries` order.
    pub sources: Vec<Source>,
    /// Istio traffic configuration.
    pub config: Arc<TrafficConfig>,
    /// What changed in the sources since the previous snapshot, which the aggregate sets
    /// when it publishes (zero in a snapshot made otherwise).
    #[serde(skip)]
    pub triggers: Triggers,
    #[serde(skip)]
    visible: visibility::Index,
}

/// The changes that made a snapshot, counted by the reasons Istio gives a push
/// (`pilot_push_triggers{type}`): its registries' and configuration sources' changes since
/// the previous snapshot, each counted once, as Istio counts the events merged into one push
/// request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Triggers {
    /// Services whose endpoints alone changed (Istio's `endpoint`).
    pub endpoint: u64,
    /// Services added, redefined or removed (Istio's `service`).
    pub service: u64,
    /// Configuration objects added, changed or removed (Istio's `config`).
    pub config: u64,
}

impl Triggers {
    /// Each reason with its count, by Istio's name, zero counts included.
    pub fn by_reason(&self) -> [(&'static str, u64); 3] {
        [
            ("endpoint", self.endpoint),
            ("service", self.service),
            ("config", self.config),
        ]
    }
}

/// One service after merging what every registry reported for its key.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct MergedService {
    /// The merged definition.
    pub service: Service,
    /// The registries that report this service, highest precedence first. The first is the
    /// registry "it came from" for every attribute that is not a union.
    pub registries: Vec<RegistryId>,
    /// Every endpoint from every registry.
    pub endpoints: Vec<EndpointView>,
}

/// An endpoint as the snapshot holds it: tagged with its registry, with its ports resolved to
/// the merged service's port numbers.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct EndpointView {
    /// The registry that reported it.
    pub registry: RegistryId,
    /// The endpoint as reported, shared with the registry's registration.
    pub endpoint: SharedEndpoint,
    /// Service port number → the port this endpoint serves it on. A service port missing here
    /// is one this endpoint does not serve (it came from another registry).
    pub ports: BTreeMap<u16, u16>,
}

/// One endpoint of a registration, shared with it rather than copied: a merge costs a
/// reference count per endpoint, not a copy of its ports and labels. Reads as the
/// [`Endpoint`] it points to (`Deref`), and compares, prints and serializes as that endpoint.
#[derive(Clone)]
pub struct SharedEndpoint {
    list: Arc<[Endpoint]>,
    index: usize,
}

impl SharedEndpoint {
    /// Each endpoint of `list`, in order.
    pub fn all(list: &Arc<[Endpoint]>) -> impl Iterator<Item = Self> + '_ {
        (0..list.len()).map(|index| Self {
            list: list.clone(),
            index,
        })
    }
}

impl Deref for SharedEndpoint {
    type Target = Endpoint;

    fn deref(&self) -> &Endpoint {
        // `all` makes only indexes within the list, and the list is immutable.
        &self.list[self.index]
    }
}

impl PartialEq for SharedEndpoint {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for SharedEndpoint {}

impl fmt::Debug for SharedEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for SharedEndpoint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

/// A disagreement between two registries about one service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// The service.
    pub key: ServiceKey,
    /// What they disagree on, e.g. `ports[9080].protocol` or `resolution`.
    pub field: String,
    /// The registry whose value is used.
    pub winner: RegistryId,
    /// Its value.
    pub winner_value: String,
    /// The registry whose value is ignored.
    pub loser: RegistryId,
    /// Its value.
    pub loser_value: String,
}

/// What one registry contributes, for `/debug/registryz`.
#[derive(Debug, Serialize)]
pub struct Source {
    /// The registry.
    pub registry: RegistryId,
    /// Its services as it reported them.
    pub services: Arc<BTreeMap<ServiceKey, Registration>>,
}

/// A broken invariant: the snapshot is not published.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid snapshot: service {key}: {message}")]
pub struct InvariantError {
    /// The offending service.
    pub key: ServiceKey,
    /// What is wrong.
    pub message: String,
}

impl Snapshot {
    /// The empty snapshot served before any registry has synced.
    pub fn empty() -> Self {
        Self::new(0, BTreeMap::new(), Vec::new(), Vec::new(), Arc::default())
    }

    /// Assembles a snapshot. Call [`Snapshot::validate`] before publishing it.
    pub fn new(
        version: u64,
        services: BTreeMap<ServiceKey, Arc<MergedService>>,
        conflicts: Vec<Conflict>,
        sources: Vec<Source>,
        config: Arc<TrafficConfig>,
    ) -> Self {
        let visible = visibility::Index::build(&services);
        Self {
            version,
            built_at: SystemTime::now(),
            services,
            conflicts,
            sources,
            config,
            triggers: Triggers::default(),
            visible,
        }
    }

    /// Checks the invariants every published snapshot holds:
    /// - each service is stored under its own key;
    /// - port numbers and names are unique within a service;
    /// - every endpoint port refers to a port of its service and is not 0;
    /// - every endpoint has an address or else a network (one known only by its network is
    ///   reached through that network's gateways);
    /// - endpoints of client-side balanced services that have an address have an IP address;
    /// - weights are at least 1.
    pub fn validate(&self) -> Result<(), InvariantError> {
        self.services
            .iter()
            .try_for_each(|(key, merged)| Self::validate_service(key, merged))
    }

    /// The per-service part of [`Snapshot::validate`], for checking a service before it is
    /// put into a snapshot.
    pub fn validate_service(
        key: &ServiceKey,
        merged: &MergedService,
    ) -> Result<(), InvariantError> {
        let fail = |message: String| {
            Err(InvariantError {
                key: key.clone(),
                message,
            })
        };
        let svc = &merged.service;
        if &svc.key() != key {
            return fail(format!("stored under the wrong key (it is {})", svc.key()));
        }
        let numbers: HashSet<u16> = svc.ports.iter().map(|p| p.number).collect();
        let names: HashSet<&str> = svc.ports.iter().map(|p| &*p.name).collect();
        if numbers.len() != svc.ports.len() || names.len() != svc.ports.len() {
            return fail("duplicate port number or name".into());
        }
        for ep in &merged.endpoints {
            let address = &ep.endpoint.address;
            if let Some((port, _)) = ep
                .ports
                .iter()
                .find(|(n, p)| !numbers.contains(n) || **p == 0)
            {
                return fail(format!(
                    "endpoint {address} has port {port}, which is not a port of the service"
                ));
            }
            if ep.endpoint.network_only() && ep.endpoint.network.is_empty() {
                return fail("an endpoint has neither an address nor a network".into());
            }
            if svc.resolution == Resolution::ClientSideLb
                && !ep.endpoint.network_only()
                && ep.endpoint.ip().is_none()
            {
                return fail(format!("endpoint {address:?} is not an IP address"));
            }
            if ep.endpoint.weight == 0 {
                return fail(format!("endpoint {address} has weight 0"));
            }
        }
        Ok(())
    }

    /// The services a proxy in `namespace` sees: those exported to it, one per hostname.
    pub fn visible(&self, namespace: &str) -> Visible<'_> {
        self.visible.visible(&self.services, namespace, &[])
    }

    /// [`Snapshot::visible`], with `default` the `exportTo` of services that give none
    /// (MeshConfig's `defaultServiceExportTo`; empty: everywhere).
    pub fn visible_with(&self, namespace: &str, default: &[String]) -> Visible<'_> {
        self.visible.visible(&self.services, namespace, default)
    }

    /// Every endpoint count, for metrics and debug pages.
    pub fn endpoint_count(&self) -> usize {
        self.services.values().map(|s| s.endpoints.len()).sum()
    }
}

mod unix_seconds {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub(super) fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let secs = t
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        s.serialize_f64(secs)
    }
}
