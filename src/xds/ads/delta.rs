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
//! - `initial_resource_versions` (a reconnect, perhaps to another replica) seeds what the
//!   client holds: unchanged resources are not sent again, though its first request also
//!   subscribes them by name, and vanished ones are removed;
//! - the first request of a type is answered even when empty, so a client's does-not-exist
//!   timer ends quickly; a new snapshot pushes clusters, endpoints, listeners, routes in that
//!   order and re-sends the endpoints of every cluster it changed.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::clip::{NACK_DETAIL, clip};
use super::held::{Held, Holding};
use super::state::{Outcome, RequestError, now, picked, push_in_order};
use super::status::{self, Nack, TypeStatus, refresh_all};
use super::wire::DeltaResponse;
use crate::xds::generate::{Picked, Resources, XdsSnapshot};
use crate::xds::pb::discovery::DeltaDiscoveryRequest;
use crate::xds::proxy::Proxy;
use crate::xds::resource::Version;
use crate::xds::{PerType, TypeUrl};

/// The delta protocol state of one type on one stream.
type TypeState = status::TypeState<Own>;

/// What only delta keeps per type.
#[derive(Debug, Default)]
struct Own {
    /// Whether the type's first request was seen.
    started: bool,
}

/// One delta stream's protocol state.
pub struct DeltaState {
    proxy: Arc<Proxy>,
    types: PerType<TypeState>,
    nonces: u64,
    identifier: Arc<str>,
    max_names: usize,
}

impl DeltaState {
    /// State for a stream opened by `proxy`; `identifier` is sent as `control_plane.identifier`.
    pub fn new(proxy: Arc<Proxy>, identifier: Arc<str>) -> Self {
        Self {
            proxy,
            types: PerType::default(),
            nonces: 0,
            identifier,
            max_names: usize::MAX,
        }
    }

    /// Limits the names the stream may be subscribed to per type (each request adds to the
    /// subscription, so a stream could otherwise grow it without end); a request that would
    /// go beyond is refused with [`RequestError::TooManySubscribed`].
    pub fn with_max_names(mut self, max_names: usize) -> Self {
        self.max_names = max_names;
        self
    }

    /// The proxy at the other end.
    pub fn proxy(&self) -> &Arc<Proxy> {
        &self.proxy
    }

    /// Per-type status, for debug pages.
    pub fn status_into(&self, out: &mut PerType<TypeStatus>) {
        refresh_all(&self.types, out);
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
        let state = self.types.get_or_default(type_url);
        let first = !state.own.started;
        state.own.started = true;
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
                message: clip(&status.message, NACK_DETAIL).into_owned(),
                at: now(),
            });
            outcome.nack = state.last_nack.as_ref().map(|n| n.message.clone());
        } else if latest {
            state.acked_version = state.sent_version.clone();
            state.acked_nonce.clone_from(&state.nonce);
        }
        if first {
            state.held = Held::default();
            for (name, version) in &req.initial_resource_versions {
                let holding = Version::parse(version).map_or(Holding::Foreign, Holding::At);
                state.held.set(Arc::from(name.as_str()), holding);
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
        let subscribed = state.subscription.names.len();
        if subscribed > self.max_names {
            return Err(RequestError::TooManySubscribed {
                names: subscribed,
                max: self.max_names,
            });
        }
        if !first && subscribe.is_empty() && unsubscribe.is_empty() {
            // An ACK or NACK: nothing to send.
            return Ok(outcome);
        }
        // Send again: names newly subscribed (the client may have dropped them), names the
        // wildcard still covers after an explicit unsubscribe, and everything when the
        // wildcard is new. Not the names a stream's first request says the client holds
        // (`initial_resource_versions`): it says which version, so only a change is sent, and
        // a client moved to another replica gets nothing again.
        let mut forced: BTreeSet<Arc<str>> = subscribe
            .iter()
            .filter(|n| *n != "*")
            .filter(|n| !(first && req.initial_resource_versions.contains_key(*n)))
            .map(|n| Arc::from(n.as_str()))
            .collect();
        for name in unsubscribe {
            if state.subscription.wants(name) {
                forced.insert(name.as_str().into());
            }
        }
        state.held.drop_unwanted(&state.subscription);
        state.subscription_version = state.subscription.version();
        let wildcard_added = state.subscription.wildcard && !before.wildcard;
        let respond = first || wildcard_added;
        if let Some(response) = self.build(type_url, snap, &forced, Build::Request { respond }) {
            outcome.responses.push(response.0);
        }
        Ok(outcome)
    }

    /// Pushes what a new snapshot changed, in make-before-break order.
    pub fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<DeltaResponse> {
        let served: BTreeSet<TypeUrl> = self.types.keys().collect();
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
    ) -> Option<(DeltaResponse, Vec<Arc<str>>)> {
        let state = self.types.get_mut(type_url)?;
        let all = snap.resources(&self.proxy, type_url, &state.subscription.names);
        let respond = matches!(build, Build::Request { respond: true });
        let held = &state.held;
        let candidates = match build {
            Build::Snapshot if forced.is_empty() && held.is_exact() && all.same_as(held.base()) => {
                return None;
            }
            Build::Snapshot => all.changed_since(held.base()).map(|mut names| {
                names.extend(held.exceptions().cloned());
                names.extend(forced.iter().cloned());
                names
            }),
            Build::Request { .. } => None,
        };
        let (resources, changed, removed) = match candidates {
            Some(names) => changes(state, &all, &names, forced),
            None => {
                let track = type_url == TypeUrl::Cluster && matches!(build, Build::Snapshot);
                everything(state, &all, forced, track)
            }
        };
        state.held.rebase(all.layers());
        if resources.is_empty() && removed.is_empty() && !respond {
            return None;
        }
        self.nonces += 1;
        let nonce = self.nonces.to_string();
        let version = state.held.version(state.subscription_version).to_string();
        state.nonce = Some(nonce.clone());
        state.sent_version = Some(version.clone());
        state.sent_at = Some(now());
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
type Changes = (Picked, Vec<Arc<str>>, BTreeSet<Arc<str>>);

/// Compares every resource the subscription covers with what the client holds. The names
/// whose content the client did not have are listed only when `track`: only a pushed cluster
/// response's are used (`push_in_order`), and a sidecar's first endpoints answer would list
/// ten thousand.
fn everything(
    state: &TypeState,
    all: &Resources,
    forced: &BTreeSet<Arc<str>>,
    track: bool,
) -> Changes {
    let (sub, held) = (&state.subscription, &state.held);
    // A list: only a pushed cluster response's changed names are looked up (as endpoints to
    // re-send), and a first request sends thousands, which a set cost a tenth of the server's
    // time to build for 2,000 connecting sidecars (perf).
    let mut changed = Vec::new();
    let resources = if held.holds_nothing() && !track {
        // Everything wanted is new: sent as it is written, not listed.
        picked(sub, all)
    } else {
        let wanted: Vec<_> = if sub.wildcard {
            all.iter().collect()
        } else {
            all.get_all(&sub.names)
        };
        let mut resources = Vec::new();
        for r in wanted {
            let is_new = !held.holds(r, sub);
            if is_new || forced.contains(&r.name) {
                if is_new && track {
                    changed.push(r.name.clone());
                }
                resources.push(r.clone());
            }
        }
        resources.into()
    };
    // Held but gone (or never there, for a name just asked for); held but no longer wanted is
    // forgotten quietly (the client dropped it when it unsubscribed).
    let mut removed: BTreeSet<Arc<str>> = forced
        .iter()
        .filter(|n| sub.wants(n) && all.get(n).is_none())
        .cloned()
        .collect();
    removed.extend(
        held.names(sub)
            .into_iter()
            .filter(|n| sub.wants(n) && all.get(n).is_none()),
    );
    (resources, changed, removed)
}

/// Compares only `names` (those the new layers changed, the exceptions and the forced ones).
fn changes(
    state: &TypeState,
    all: &Resources,
    names: &BTreeSet<Arc<str>>,
    forced: &BTreeSet<Arc<str>>,
) -> Changes {
    let (sub, held) = (&state.subscription, &state.held);
    let mut resources = Vec::new();
    let mut changed = Vec::new();
    let mut removed = BTreeSet::new();
    for name in names.iter().filter(|n| sub.wants(n)) {
        match all.get(name) {
            Some(r) => {
                let is_new = !held.holds(r, sub);
                if is_new || forced.contains(name) {
                    if is_new {
                        changed.push(r.name.clone());
                    }
                    resources.push(r.clone());
                }
            }
            None => {
                if held.get(name, sub) != Holding::Nothing || forced.contains(name) {
                    removed.insert(name.clone());
                }
            }
        }
    }
    (resources.into(), changed, removed)
}
