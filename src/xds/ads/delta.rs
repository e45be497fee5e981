//! The incremental (delta) protocol for one stream, without any I/O: the delta twin of
//! [`super::StreamState`]. The rules (see the xDS notes, sections 3 to 7):
//!
//! - subscriptions are diffs: `resource_names_subscribe` adds names, `..._unsubscribe` drops
//!   them; a type's first request subscribing nothing is a legacy wildcard; `*` subscribes and
//!   unsubscribes the wildcard. Envoy's listeners and clusters are always wildcard;
//! - nonces never reject a request: a subscription change is honoured even with a stale nonce
//!   (a request with the latest nonce and no `error_detail` is an ACK; with it, a NACK, recorded
//!   and never answered with the same content);
//! - each response carries only what changed for this client, each resource with its own
//!   version (its content hash), and `removed_resources` for what it holds that is gone;
//! - a newly subscribed name is sent even if the client should have it, and answered in
//!   `removed_resources` at once if it does not exist; a name unsubscribed but still covered by
//!   the wildcard is sent again;
//! - `initial_resource_versions` (a reconnect) seeds what the client holds: unchanged resources
//!   are not sent again, vanished ones are removed;
//! - the first request of a type is answered even when empty, so a client's does-not-exist
//!   timer ends quickly; a new snapshot pushes clusters, endpoints, listeners, routes in that
//!   order and re-sends the endpoints of every cluster it changed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use super::state::{Nack, Outcome, RequestError, TypeStatus, now, push_in_order};
use super::subscription::Subscription;
use super::wire::DeltaResponse;
use crate::xds::TypeUrl;
use crate::xds::generate::{Layer, Resources, XdsSnapshot};
use crate::xds::pb::discovery::DeltaDiscoveryRequest;
use crate::xds::proxy::Proxy;
use crate::xds::resource::{Resource, Version};

/// The delta protocol state of one type on one stream.
#[derive(Debug, Default)]
struct TypeState {
    subscription: Subscription,
    /// Whether the type's first request was seen.
    started: bool,
    nonce: Option<String>,
    /// `system_version_info` of the latest response: the hash of what the client then held.
    sent_version: Option<String>,
    acked_version: Option<String>,
    last_nack: Option<Nack>,
    responses: u64,
    /// What the client holds as far as the server knows.
    held: Held,
    /// The layers of the last build (see the state-of-the-world twin).
    offered: Vec<Arc<Layer>>,
}

/// What a client holds of one type: name → version (`None`: a version that is not one of
/// ours, from `initial_resource_versions`; never equal to a current one), with a hash of the
/// whole kept up to date as entries come and go, so a response's `system_version_info` costs
/// nothing to compute.
#[derive(Debug, Default)]
struct Held {
    map: HashMap<Arc<str>, Option<Version>>,
    hash: u64,
}

impl Held {
    fn entry_hash(name: &str, version: Option<Version>) -> u64 {
        let mut hasher = Xxh3::new();
        hasher.update(name.as_bytes());
        hasher.update(&[0]);
        hasher.update(&version.map_or(0, |v| v.0).to_le_bytes());
        hasher.digest()
    }

    fn get(&self, name: &str) -> Option<&Option<Version>> {
        self.map.get(name)
    }

    fn insert(&mut self, name: Arc<str>, version: Option<Version>) {
        self.hash ^= Self::entry_hash(&name, version);
        if let Some(old) = self.map.insert(name.clone(), version) {
            self.hash ^= Self::entry_hash(&name, old);
        }
    }

    /// True when the client held `name`.
    fn remove(&mut self, name: &str) -> bool {
        match self.map.remove(name) {
            Some(old) => {
                self.hash ^= Self::entry_hash(name, old);
                true
            }
            None => false,
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&Arc<str>) -> bool) {
        let mut hash = self.hash;
        self.map.retain(|name, version| {
            let kept = keep(name);
            if !kept {
                hash ^= Self::entry_hash(name, *version);
            }
            kept
        });
        self.hash = hash;
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    /// A version for everything held (the same set, the same version).
    fn version(&self) -> String {
        Version(self.hash).to_string()
    }
}

/// One delta stream's protocol state.
pub struct DeltaState {
    proxy: Arc<Proxy>,
    types: BTreeMap<TypeUrl, TypeState>,
    nonces: u64,
    identifier: Arc<str>,
}

impl DeltaState {
    /// State for a stream opened by `proxy`; `identifier` is sent as `control_plane.identifier`.
    pub fn new(proxy: Arc<Proxy>, identifier: Arc<str>) -> Self {
        Self {
            proxy,
            types: BTreeMap::new(),
            nonces: 0,
            identifier,
        }
    }

    /// The proxy at the other end.
    pub fn proxy(&self) -> &Arc<Proxy> {
        &self.proxy
    }

    /// Per-type status, for debug pages.
    pub fn status(&self) -> BTreeMap<TypeUrl, TypeStatus> {
        self.types
            .iter()
            .map(|(t, s)| {
                let status = TypeStatus {
                    subscription: s.subscription.clone(),
                    nonce: s.nonce.clone(),
                    sent_version: s.sent_version.clone(),
                    acked_version: s.acked_version.clone(),
                    last_nack: s.last_nack.clone(),
                    responses: s.responses,
                    resources: s.held.len(),
                };
                (*t, status)
            })
            .collect()
    }

    /// Handles one request.
    pub fn on_request(
        &mut self,
        req: &DeltaDiscoveryRequest,
        snap: &XdsSnapshot,
    ) -> Result<Outcome<DeltaResponse>, RequestError> {
        if req.type_url.is_empty() {
            return Err(RequestError::NoTypeUrl);
        }
        let Some(type_url) = TypeUrl::parse(&req.type_url) else {
            return Ok(Outcome {
                unsupported: true,
                ..Outcome::default()
            });
        };
        let always_wildcard = self.proxy.is_envoy() && type_url.is_full_state();
        let state = self.types.entry(type_url).or_default();
        let first = !state.started;
        state.started = true;
        let mut outcome = Outcome::default();
        let latest = state.nonce.as_deref() == Some(req.response_nonce.as_str());
        if !req.response_nonce.is_empty() && !latest {
            // Stale: the subscription change it carries still counts.
            outcome.stale = true;
        }
        if let Some(status) = &req.error_detail {
            state.last_nack = Some(Nack {
                version: state.acked_version.clone().unwrap_or_default(),
                nonce: req.response_nonce.clone(),
                message: status.message.clone(),
                at: now(),
            });
            outcome.nack = Some(status.message.clone());
        } else if latest {
            state.acked_version = state.sent_version.clone();
        }
        if first {
            state.held = Held::default();
            for (name, version) in &req.initial_resource_versions {
                state
                    .held
                    .insert(Arc::from(name.as_str()), Version::parse(version));
            }
        }
        let subscribe = &req.resource_names_subscribe;
        let unsubscribe = &req.resource_names_unsubscribe;
        let before = state.subscription.clone();
        let current = (!subscribe.is_empty())
            .then(|| snap.resources(&self.proxy, type_url, &state.subscription.names));
        state
            .subscription
            .update_delta(subscribe, unsubscribe, first, always_wildcard, |n| {
                current.as_ref()?.get(n).map(|r| r.name.clone())
            });
        if !first && subscribe.is_empty() && unsubscribe.is_empty() {
            // An ACK or NACK: nothing to send.
            return Ok(outcome);
        }
        // Send again: names newly subscribed (the client may have dropped them), names the
        // wildcard still covers after an explicit unsubscribe, and everything when the
        // wildcard is new.
        let mut forced: BTreeSet<Arc<str>> = subscribe
            .iter()
            .filter(|n| *n != "*")
            .map(|n| Arc::from(n.as_str()))
            .collect();
        for name in unsubscribe {
            if state.subscription.wants(name) {
                forced.insert(name.as_str().into());
            } else {
                state.held.remove(name.as_str());
            }
        }
        let wildcard_added = state.subscription.wildcard && !before.wildcard;
        let respond = first || wildcard_added;
        if let Some(response) = self.build(type_url, snap, &forced, Build::Request { respond }) {
            outcome.responses.push(response.0);
        }
        Ok(outcome)
    }

    /// Pushes what a new snapshot changed, in make-before-break order.
    pub fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<DeltaResponse> {
        let served: BTreeSet<TypeUrl> = self.types.keys().copied().collect();
        push_in_order(&served, |type_url, forced| {
            self.build(type_url, snap, forced, Build::Snapshot)
        })
    }

    /// What changed for the client in one type; `forced` names are sent (or reported
    /// missing) even if the client holds them. Returns the response and the names whose content
    /// the client did not have.
    fn build(
        &mut self,
        type_url: TypeUrl,
        snap: &XdsSnapshot,
        forced: &BTreeSet<Arc<str>>,
        build: Build,
    ) -> Option<(DeltaResponse, BTreeSet<Arc<str>>)> {
        let state = self.types.get_mut(&type_url)?;
        let all = snap.resources(&self.proxy, type_url, &state.subscription.names);
        let respond = matches!(build, Build::Request { respond: true });
        let since = match build {
            Build::Snapshot if forced.is_empty() && all.same_as(&state.offered) => return None,
            Build::Snapshot => all.changed_since(&state.offered),
            Build::Request { .. } => None,
        };
        state.offered = all.layers().to_vec();
        let (resources, changed, removed) = match since {
            Some(mut names) => {
                names.extend(forced.iter().cloned());
                changes(state, &all, &names, forced)
            }
            None => everything(state, &all, forced),
        };
        if resources.is_empty() && removed.is_empty() && !respond {
            return None;
        }
        self.nonces += 1;
        let nonce = self.nonces.to_string();
        let version = state.held.version();
        state.nonce = Some(nonce.clone());
        state.sent_version = Some(version.clone());
        state.responses += 1;
        let response = DeltaResponse {
            system_version_info: version,
            resources,
            removed: removed.into_iter().collect(),
            type_url,
            nonce,
            identifier: self.identifier.clone(),
        };
        Some((response, changed))
    }
}

/// Why a type is built.
#[derive(Clone, Copy)]
enum Build {
    /// A request; `respond` answers even when nothing changed.
    Request { respond: bool },
    /// A new snapshot.
    Snapshot,
}

/// What one build sends: resources, the names whose content the client did not have, and the
/// names removed.
type Changes = (Vec<Arc<Resource>>, BTreeSet<Arc<str>>, BTreeSet<Arc<str>>);

/// Compares every resource the subscription covers with what the client holds.
fn everything(state: &mut TypeState, all: &Resources, forced: &BTreeSet<Arc<str>>) -> Changes {
    let sub = &state.subscription;
    let mut resources = Vec::new();
    let mut changed = BTreeSet::new();
    let wanted: Vec<_> = if sub.wildcard {
        all.iter().collect()
    } else {
        sub.names.iter().filter_map(|n| all.get(n)).collect()
    };
    for r in &wanted {
        let is_new = state.held.get(&r.name) != Some(&Some(r.version));
        if is_new || forced.contains(&r.name) {
            if is_new {
                changed.insert(r.name.clone());
            }
            resources.push(Arc::clone(r));
            state.held.insert(r.name.clone(), Some(r.version));
        }
    }
    // Held but gone (or never there, for a name just asked for); held but no longer wanted is
    // forgotten quietly (the client dropped it when it unsubscribed).
    let mut removed: BTreeSet<Arc<str>> = forced
        .iter()
        .filter(|n| sub.wants(n) && all.get(n).is_none())
        .cloned()
        .collect();
    state.held.retain(|name| {
        if !sub.wants(name) {
            return false;
        }
        if all.get(name).is_none() {
            removed.insert(name.clone());
            return false;
        }
        true
    });
    (resources, changed, removed)
}

/// Compares only `names` (those the new layers changed, and the forced ones).
fn changes(
    state: &mut TypeState,
    all: &Resources,
    names: &BTreeSet<Arc<str>>,
    forced: &BTreeSet<Arc<str>>,
) -> Changes {
    let mut resources = Vec::new();
    let mut changed = BTreeSet::new();
    let mut removed = BTreeSet::new();
    for name in names {
        if !state.subscription.wants(name) {
            continue;
        }
        match all.get(name) {
            Some(r) => {
                let is_new = state.held.get(name) != Some(&Some(r.version));
                if is_new || forced.contains(name) {
                    if is_new {
                        changed.insert(r.name.clone());
                    }
                    resources.push(Arc::clone(r));
                    state.held.insert(r.name.clone(), Some(r.version));
                }
            }
            None => {
                if state.held.remove(name) || forced.contains(name) {
                    removed.insert(name.clone());
                }
            }
        }
    }
    (resources, changed, removed)
}
