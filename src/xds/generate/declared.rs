//! Every memo of an [`XdsSnapshot`](super::XdsSnapshot), declared: what its generator reads
//! besides its key (a [`Scope`]), and the key. What the next snapshot keeps of each follows
//! from these declarations (`scope.rs`); `tests/invalidation.rs` checks them against a table
//! written out by hand.

use std::collections::BTreeSet;
use std::sync::Arc;

use wayfinder_config::{ConfigKey, EffectiveMtls};
use wayfinder_registry::ServiceKey;

use super::scope::{Reads, Scope};
use super::{inbound, sds, security};
use crate::xds::proxy::ListenSettings;

/// A service's clusters and endpoints for sidecars and gateways (`service_resources`): that
/// service, all of it (ports, resolution, endpoints), and the DestinationRule its key names.
pub(super) static SIDECAR_SERVICES: Scope<ServiceRule> =
    Scope::per_service("sidecar_services", rule_service, Reads::CONFIG);

/// The same for proxyless gRPC clients, with the service's API listeners
/// (`grpc::service_resources`).
pub(super) static GRPC_SERVICES: Scope<ServiceRule> =
    Scope::per_service("grpc_services", rule_service, Reads::CONFIG);

/// The clusters and endpoints of a sidecar scope or a gateway's namespace: the services it
/// sees (visibility and the Sidecar's egress hosts read definitions), each service's
/// resources through `SIDECAR_SERVICES` (endpoints, DestinationRules), and the Sidecar.
pub(super) static OUTBOUND: Scope<(ScopeKey, MeshTls)> = Scope::reading("outbound", EVERYTHING);

/// The load assignments locality load balancing shapes for one proxy place, of the clusters
/// of a sidecar scope or a gateway's namespace: what `OUTBOUND` reads (it takes them from
/// `OUTBOUND`'s value), and the place in its key.
pub(super) static LOCALIZED: Scope<(ScopeKey, MeshTls, super::locality::Place)> =
    Scope::reading("localized", EVERYTHING);

/// A gRPC client namespace's clusters and endpoints: as `OUTBOUND`, through `GRPC_SERVICES`.
pub(super) static GRPC_SCOPES: Scope<Arc<str>> = Scope::reading("grpc_scopes", EVERYTHING);

/// A gRPC client namespace's API listeners and route configurations: the services it sees and
/// their ports, VirtualServices (`grpc::route`) and DestinationRules (subsets, hash
/// policies). Only the listeners of `GRPC_SERVICES`' values, which read no endpoints.
pub(super) static GRPC_ROUTING: Scope<Arc<str>> =
    Scope::reading("grpc_routing", Reads::DEFINITIONS.and(Reads::CONFIG));

/// A sidecar scope's outbound listeners (`listener::outbound`): the services it sees, their
/// ports and addresses, VirtualServices' TCP and TLS rules, and the Sidecar's egress and
/// outbound traffic policy.
pub(super) static LISTENERS: Scope<(ScopeKey, ListenSettings)> =
    Scope::reading("listeners", Reads::DEFINITIONS.and(Reads::CONFIG));

/// A gateway's listeners, routes and SNI-DNAT clusters (`gateway::resources`): the Gateways
/// that select it, the VirtualServices bound to them and the services and DestinationRules
/// those route to; with an `AUTO_PASSTHROUGH` server, every service it sees and their
/// DestinationRules (EDS clusters: no endpoints); the security policies that select it and
/// the JWT keys of their rules.
pub(super) static GATEWAYS: Scope<GatewayKey> = Scope::reading(
    "gateways",
    Reads::DEFINITIONS.and(Reads::CONFIG).and(Reads::KEYS),
);

/// A sidecar scope's route configurations (`route::outbound`): the services it sees (their
/// ports and addresses make the domains), VirtualServices, DestinationRules (hash policies)
/// and the Sidecar's outbound traffic policy.
pub(super) static ROUTES: Scope<(ScopeKey, Arc<str>)> =
    Scope::reading("routes", Reads::DEFINITIONS.and(Reads::CONFIG));

/// A sidecar's inbound clusters and listener (`inbound`): a function of its key alone, the
/// ports of the proxy's instances (found in this snapshot's endpoints when the proxy asks) or
/// its Sidecar's ingress listeners (found in this snapshot's configuration),
/// where it listens, for a proxy that holds a mesh certificate the PeerAuthentication in force
/// for it, and the AuthorizationPolicies that apply to it (both found in this snapshot's
/// configuration when the proxy asks).
pub(super) static INBOUND: Scope<InboundKey> = Scope::reading("inbound", Reads::NOTHING);

/// The SDS secrets of a proxy (`sds::secrets`): the credentials table, for the names its key
/// holds, as its key's identity may read them.
pub(super) static SECRETS: Scope<SecretKey> = Scope::reading("secrets", Reads::CREDENTIALS);

/// What a proxy's secrets depend on besides the credentials: who reads them, what it may
/// read, and the names it asked for.
pub(super) type SecretKey = (
    crate::credentials::Identity,
    sds::Access,
    BTreeSet<Arc<str>>,
);

/// What a sidecar's inbound side depends on (see `INBOUND`): its ports, where it listens, its
/// PeerAuthentication mode (with a mesh certificate) and its AuthorizationPolicies.
pub(super) type InboundKey = (
    inbound::Ports,
    ListenSettings,
    Option<EffectiveMtls>,
    security::Policies,
);

/// Every part of the model.
const EVERYTHING: Reads = Reads::DEFINITIONS.and(Reads::ENDPOINTS).and(Reads::CONFIG);

/// A service, the DestinationRule that applies to it, and whether the proxy holds a mesh
/// certificate (its clusters may use mesh mTLS: see `mesh_tls`).
pub(super) type ServiceRule = (ServiceKey, Option<ConfigKey>, MeshTls);

/// Whether a proxy holds a mesh certificate ([`Proxy::mesh_tls`]): part of the key of what
/// differs with it (clusters, inbound listeners).
pub(super) type MeshTls = bool;

/// The service a per-service key names.
fn rule_service(key: &ServiceRule) -> &ServiceKey {
    &key.0
}

/// What a sidecar's outbound view depends on: its namespace and the Sidecar object scoping it.
pub(super) type ScopeKey = (Arc<str>, Option<ConfigKey>);

/// What a gateway's listeners and routes depend on: its namespace, where it listens, its
/// labels (which Gateways select it) and whether it holds a mesh certificate (`ISTIO_MUTUAL`
/// servers).
pub(super) type GatewayKey = (Arc<str>, ListenSettings, Vec<(String, String)>, MeshTls);
