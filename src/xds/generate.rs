//! From a model snapshot and a proxy to encoded xDS resources.
//!
//! An [`XdsSnapshot`] wraps one model snapshot with caches of what has been generated from it.
//! Every resource is encoded at most once per snapshot and shared by every proxy that receives
//! it: clusters and endpoints per service, route configurations per (namespace, DNS domain),
//! listeners per (namespace, listener placement). Only what depends on one proxy's own
//! addresses (its inbound clusters and `virtualInbound`) is generated per proxy.
//!
//! [`XdsSnapshot::next`] starts a snapshot from the previous one, so a change costs what it
//! touches: an endpoint change encodes that service's assignments again and nothing else, and
//! the endpoints [`Layer`] of each scope names them for the streams.
//!
//! **Invariant:** every memo of an [`XdsSnapshot`] is declared by a `Scope` (in
//! `declared.rs`, with its key): what its generator reads besides its key, of the model (the
//! services' definitions, their endpoints, the traffic configuration, or the one service its
//! key names), or of the server's inputs (JWT keys, credentials). Everything a
//! generator reads of a [`Proxy`] is in its key; the server's settings ([`MeshSettings`]: the
//! flags' and MeshConfig's) are in no key, so new settings start the next snapshot afresh
//! ([`XdsSnapshot::next_with`]), and the mesh domain is fixed at start. What the next
//! snapshot keeps of each memo follows from its declaration and what changed (`scope.rs`),
//! never from a policy picked for it. `generate/tests/invalidation.rs` enforces this: it makes
//! each kind of change in turn, checks that exactly the scopes declaring it were rebuilt, and
//! that every proxy then receives what a fresh snapshot generates. EnvoyFilters' patches are
//! applied after generation, to the layers a proxy would get (`envoy_filter`): what is made of
//! them is kept for one snapshot only, keyed by the layers it was made from.

mod authn;
mod authz;
mod cache;
mod cluster;
mod conflicts;
mod ctx;
mod declared;
mod domains;
mod endpoint;
mod envoy_filter;
mod gateway;
mod grpc;
mod inbound;
mod inputs;
mod listener;
mod locality;
mod memo;
mod mesh_tls;
mod network;
mod picked;
mod policy;
mod proto;
mod proxy_config;
mod route;
mod scope;
mod sds;
mod security;
mod served;
mod upstream_tls;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crate::credentials::Credentials;
use crate::jwks::JwksTable;
use crate::snapshot::Snapshot;
use crate::xds::TypeUrl;
use crate::xds::proxy::{ListenSettings, Proxy, ProxyKind};
use crate::xds::resource::Resource;

pub use self::cache::{Layer, Resources};
use self::ctx::Ctx;
use self::declared::{
    GATEWAYS, GRPC_ROUTING, GRPC_SCOPES, GRPC_SERVICES, GatewayKey, INBOUND, InboundKey, LISTENERS,
    LOCALIZED, MeshTls, OUTBOUND, ROUTES, SECRETS, SIDECAR_SERVICES, ScopeKey, SecretKey,
    ServiceRule,
};
pub use self::envoy_filter::Failure as EnvoyFilterFailure;
pub use self::inputs::{Inputs, MeshSettings};
use self::memo::{Memo, Value};
pub use self::picked::{Picked, Place};
use self::scope::Changes;
pub use self::upstream_tls::DEFAULT_SYSTEM_CA_FILE;

/// A model snapshot and the resources generated from it so far.
pub struct XdsSnapshot {
    model: Arc<Snapshot>,
    domain: Arc<str>,
    /// The server's settings (`--system-ca-file`, `--trust-domain`, `--root-namespace`).
    mesh: Arc<MeshSettings>,
    /// The JWT keys the control plane fetched (`crate::jwks`), part of the configuration.
    jwks: Arc<JwksTable>,
    /// The gateways' credentials the control plane reads (`crate::credentials`).
    credentials: Arc<Credentials>,
    published: Instant,
    // Each memo is declared by the `Scope` of the same name in `declared.rs`: what its
    // generator reads, from which follows what the next snapshot keeps of it.
    sidecar_services: Memo<ServiceRule, ServiceResources>,
    grpc_services: Memo<ServiceRule, ServiceResources>,
    outbound: Memo<(ScopeKey, MeshTls), Outbound>,
    grpc_scopes: Memo<Arc<str>, [Arc<Layer>; 2]>,
    grpc_routing: Memo<Arc<str>, [Arc<Layer>; 2]>,
    listeners: Memo<(ScopeKey, ListenSettings), OutboundListeners>,
    gateways: Memo<GatewayKey, [Arc<Layer>; 3]>,
    routes: Memo<(ScopeKey, Arc<str>), Arc<Layer>>,
    /// A sidecar's inbound clusters and listener, by what they depend on: every sidecar of
    /// a deployment shares them, and a stream pushed an endpoint change no longer generates
    /// its own (perf: a tenth of the server's time at 2,000 sidecars).
    inbound: Memo<InboundKey, [Arc<Layer>; 2]>,
    secrets: Memo<SecretKey, Arc<Layer>>,
    /// The assignments of a scope's clusters with locality load balancing, for one place.
    localized: Memo<(ScopeKey, MeshTls, locality::Place), Arc<Layer>>,
    instances: OnceLock<inbound::Index>,
    /// [`XdsSnapshot::listener_conflicts`] as last counted; `None` once a scope's listeners
    /// were generated since.
    conflicts: Mutex<Option<crate::xds::metrics::ListenerConflicts>>,
    /// The configuration's EnvoyFilters, read on first use; the next snapshot keeps them
    /// when the configuration is the same object.
    envoy_filters: OnceLock<Arc<envoy_filter::EnvoyFilters>>,
    /// What this snapshot's resources became with EnvoyFilters' patches (made afresh for
    /// each snapshot, from its layers).
    patched: envoy_filter::Patched,
}

/// What one service contributes, per type, for one kind of proxy.
#[derive(Debug, Default)]
pub(crate) struct ServiceResources {
    pub(crate) clusters: Vec<Arc<Resource>>,
    pub(crate) endpoints: Vec<Arc<Resource>>,
    pub(crate) listeners: Vec<Arc<Resource>>,
    /// Assignments locality load balancing shapes per proxy place (not in `endpoints`).
    localized: Vec<Arc<locality::Localized>>,
}

/// A sidecar scope's (or gateway namespace's) clusters and endpoints, and the assignments of
/// its clusters that locality load balancing shapes per proxy place.
pub(crate) struct Outbound {
    layers: [Arc<Layer>; 2],
    localized: Arc<[Arc<locality::Localized>]>,
}

/// Generated again, the layers are compared with the previous ones.
impl Value for Outbound {
    const COMPARED: bool = true;
}

/// A sidecar scope's outbound listeners, and the listeners its services could not have.
pub(crate) struct OutboundListeners {
    layer: Arc<Layer>,
    conflicts: listener::Conflicts,
}

/// Generated again, the layer is compared with the previous one.
impl Value for OutboundListeners {
    const COMPARED: bool = true;
}

/// Generated again, a service's resources are not compared with the previous ones: the layers
/// they go into are.
impl Value for ServiceResources {
    const COMPARED: bool = false;
}

impl XdsSnapshot {
    /// Wraps a model snapshot; nothing is generated until a proxy asks. `domain` is the mesh
    /// domain (`--domain`), which short hostnames in configuration are relative to.
    pub fn new(model: Arc<Snapshot>, domain: &str) -> Self {
        Self {
            model,
            domain: domain.into(),
            mesh: Arc::default(),
            jwks: Arc::new(JwksTable::new()),
            credentials: Arc::default(),
            published: Instant::now(),
            sidecar_services: Memo::new(&SIDECAR_SERVICES),
            grpc_services: Memo::new(&GRPC_SERVICES),
            outbound: Memo::new(&OUTBOUND),
            grpc_scopes: Memo::new(&GRPC_SCOPES),
            grpc_routing: Memo::new(&GRPC_ROUTING),
            listeners: Memo::new(&LISTENERS),
            gateways: Memo::new(&GATEWAYS),
            routes: Memo::new(&ROUTES),
            inbound: Memo::new(&INBOUND),
            secrets: Memo::new(&SECRETS),
            localized: Memo::new(&LOCALIZED),
            instances: OnceLock::new(),
            conflicts: Mutex::new(None),
            envoy_filters: OnceLock::new(),
            patched: envoy_filter::Patched::default(),
        }
    }

    /// Wraps the model snapshot that follows `previous`'s, reusing what `previous` generated
    /// where its inputs did not change. What changed between the two models is found once
    /// (`scope::Changes`), and each memo keeps what its declared `Scope` says is still valid:
    /// - every value, when nothing its scope reads changed (listeners and routes over an
    ///   endpoint-only change: they read no endpoints);
    /// - a service's clusters and endpoints, when neither that service nor the configuration
    ///   changed;
    /// - a sidecar's inbound layers when asked for again: they read nothing but their key;
    /// - otherwise nothing: each layer is generated again and compared with the previous one
    ///   of its key, which it replaces (keeping it when equal), so streams look only at the
    ///   names that differ.
    pub fn next(model: Arc<Snapshot>, domain: &str, previous: &XdsSnapshot) -> Self {
        Self::next_with(model, domain, previous, previous.inputs())
    }

    /// [`XdsSnapshot::next`] with the JWT keys `jwks` (the resolver's table, `crate::jwks`)
    /// and the previous snapshot's credentials.
    pub fn next_with_keys(
        model: Arc<Snapshot>,
        domain: &str,
        previous: &XdsSnapshot,
        jwks: Arc<JwksTable>,
    ) -> Self {
        let inputs = Inputs {
            jwks,
            ..previous.inputs()
        };
        Self::next_with(model, domain, previous, inputs)
    }

    /// [`XdsSnapshot::next`] with the server's `inputs`: new JWT keys rebuild what reads them
    /// (`Reads::KEYS`: gateways' listeners; a sidecar's inbound side holds its keys in its
    /// key), new credentials the secrets (`Reads::CREDENTIALS`). New mesh settings (a
    /// MeshConfig change, rare) rebuild everything: the snapshot starts afresh, and streams
    /// compare what they hold by content versions, so they send only what differs.
    pub fn next_with(
        model: Arc<Snapshot>,
        domain: &str,
        previous: &XdsSnapshot,
        inputs: Inputs,
    ) -> Self {
        if !Arc::ptr_eq(&previous.mesh, &inputs.mesh) {
            return Self::new(model, domain).with_inputs(inputs);
        }
        let mut changes = Changes::between(&previous.model, &model);
        changes.keys = !Arc::ptr_eq(&previous.jwks, &inputs.jwks);
        changes.credentials = !Arc::ptr_eq(&previous.credentials, &inputs.credentials);
        Self {
            domain: domain.into(),
            mesh: previous.mesh.clone(),
            jwks: inputs.jwks,
            credentials: inputs.credentials,
            published: Instant::now(),
            sidecar_services: previous.sidecar_services.next(&changes),
            grpc_services: previous.grpc_services.next(&changes),
            outbound: previous.outbound.next(&changes),
            grpc_scopes: previous.grpc_scopes.next(&changes),
            grpc_routing: previous.grpc_routing.next(&changes),
            listeners: previous.listeners.next(&changes),
            gateways: previous.gateways.next(&changes),
            routes: previous.routes.next(&changes),
            inbound: previous.inbound.next(&changes),
            secrets: previous.secrets.next(&changes),
            localized: previous.localized.next(&changes),
            instances: OnceLock::new(),
            conflicts: Mutex::new(None),
            envoy_filters: match previous.envoy_filters.get() {
                Some(read) if !changes.config => OnceLock::from(read.clone()),
                _ => OnceLock::new(),
            },
            patched: previous.patched.next(changes.config),
            model,
        }
    }

    /// The same snapshot with upstream TLS verifying against `path` when a DestinationRule
    /// gives no `caCertificates` (`--system-ca-file`; [`DEFAULT_SYSTEM_CA_FILE`] otherwise).
    /// Snapshots made by [`XdsSnapshot::next`] keep it: it is a server's setting, fixed at
    /// start, and so in no cache key.
    pub fn with_system_ca(mut self, path: &str) -> Self {
        Arc::make_mut(&mut self.mesh).system_ca = path.into();
        self
    }

    /// The same snapshot with the JWT keys `jwks` (see [`XdsSnapshot::next_with_keys`]).
    pub fn with_keys(mut self, jwks: Arc<JwksTable>) -> Self {
        self.jwks = jwks;
        self
    }

    /// The same snapshot with the server's `inputs` (see [`XdsSnapshot::next_with`]).
    pub fn with_inputs(mut self, inputs: Inputs) -> Self {
        self.jwks = inputs.jwks;
        self.credentials = inputs.credentials;
        self.mesh = inputs.mesh;
        self
    }

    /// The JWT keys generation inlines.
    pub fn keys(&self) -> &Arc<JwksTable> {
        &self.jwks
    }

    /// The gateways' credentials secrets are served from.
    pub fn credentials(&self) -> &Arc<Credentials> {
        &self.credentials
    }

    /// The server's inputs this snapshot generates from.
    pub fn inputs(&self) -> Inputs {
        Inputs {
            jwks: self.jwks.clone(),
            credentials: self.credentials.clone(),
            mesh: self.mesh.clone(),
        }
    }

    /// The same snapshot with the server's settings `mesh`. Snapshots made by
    /// [`XdsSnapshot::next`] keep them.
    pub fn with_mesh(mut self, mesh: MeshSettings) -> Self {
        self.mesh = Arc::new(mesh);
        self
    }

    /// The mesh domain (`--domain`) short hostnames in configuration are relative to.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The model snapshot.
    pub fn model(&self) -> &Arc<Snapshot> {
        &self.model
    }

    /// When this snapshot reached the xDS server.
    pub fn published(&self) -> Instant {
        self.published
    }

    /// Every resource of `type_url` that `proxy` may receive. `requested` are the names it
    /// subscribed to: proxyless gRPC clients may ask for a service by a short name, which is
    /// generated on demand.
    pub fn resources(
        &self,
        proxy: &Proxy,
        type_url: TypeUrl,
        requested: &BTreeSet<Arc<str>>,
    ) -> Resources {
        match type_url {
            TypeUrl::Secret => return self.secrets(proxy, requested),
            TypeUrl::ProxyConfig => return self.proxy_config(proxy),
            _ => {}
        }
        match proxy.kind {
            ProxyKind::Grpc => self.grpc(proxy, type_url, requested),
            ProxyKind::Sidecar | ProxyKind::Router => {
                let generated = self.sidecar(proxy, type_url);
                let selected = self
                    .envoy_filters()
                    .for_proxy(proxy, &self.mesh.root_namespace);
                let gateway = proxy.kind == ProxyKind::Router;
                self.patched.apply(&selected, gateway, type_url, generated)
            }
        }
    }

    /// The configuration's EnvoyFilters, read once per configuration; what could not be read
    /// is logged then.
    pub(crate) fn envoy_filters(&self) -> &Arc<envoy_filter::EnvoyFilters> {
        self.envoy_filters.get_or_init(|| {
            let read = envoy_filter::EnvoyFilters::read(&self.model.config);
            for problem in &read.problems {
                tracing::warn!(envoy_filter = %problem.key, "{}", problem.message);
            }
            Arc::new(read)
        })
    }

    /// Every EnvoyFilter patch left out, or that failed on a resource, since the configuration
    /// last changed (for `/debug/configz`).
    pub fn envoy_filter_failures(&self) -> Vec<envoy_filter::Failure> {
        let mut all = self.envoy_filters().problems.clone();
        all.extend(self.patched.failures());
        all
    }
}

#[cfg(test)]
mod tests;
