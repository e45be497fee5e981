//! The state-of-the-world protocol for one stream, without any I/O.
//!
//! [`StreamState::on_request`] and [`StreamState::on_snapshot`] take a request or a new
//! snapshot and return the responses to send, so the rules of the protocol are unit-tested
//! with plain values. The rules (see the xDS notes, sections 2 to 6):
//!
//! - a request with an empty type URL is refused; one for a type wayfinder does not serve is
//!   ignored;
//! - a request whose nonce is not the latest one sent for its type is **stale** and ignored;
//! - a request with `error_detail` is a **NACK**: it is recorded and nothing is re-sent until
//!   the content changes or the subscription grows; otherwise a request with a nonce is an ACK;
//! - the first request of a type gets an answer at once (an empty one for listeners and
//!   clusters, so a client's does-not-exist timer ends quickly); a later one gets an answer only
//!   for names it adds, even ones it was sent before unasked;
//! - names asked for that do not exist yet are remembered and sent when they appear;
//! - listeners and clusters are always sent as the full set (a missing one is deleted); routes
//!   and endpoints only when they changed, or were newly asked for;
//! - a new snapshot pushes clusters, endpoints, listeners, routes in that order, and re-sends
//!   the endpoints of every cluster it changed (Envoy keeps a changed cluster warming until its
//!   endpoints arrive again);
//! - versions are content hashes: a response's version hashes what was offered (the layers'
//!   versions) and the subscription, which together decide what the client holds.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::SystemTime;

use super::clip::{NACK_DETAIL, clip};
use super::held::Holding;
use super::status::{self, Nack, TypeStatus, refresh_all};
use super::subscription::Subscription;
use super::wire::{SotwRequest, SotwResponse};
use crate::xds::generate::{Picked, Resources, XdsSnapshot};
use crate::xds::proxy::Proxy;
use crate::xds::resource::{Resource, Version};
use crate::xds::{PerType, TypeUrl};

/// A request that ends the stream.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    /// ADS requests must name their type.
    #[error("request without type_url")]
    NoTypeUrl,
    /// A resource name that is not UTF-8.
    #[error("{0}")]
    BadName(String),
    /// A delta stream subscribed to more names of one type than it may.
    #[error(
        "subscribed to {names} resource names of one type, more than the {max} accepted \
         (--max-names-per-request)"
    )]
    TooManySubscribed {
        /// Names the subscription would hold.
        names: usize,
        /// The limit.
        max: usize,
    },
}

/// What a request amounted to, for logs and metrics.
#[derive(Debug, PartialEq)]
pub struct Outcome<R = SotwResponse> {
    /// Responses to send, in order.
    pub responses: Vec<R>,
    /// The request carried a nonce other than the latest sent and was ignored.
    pub stale: bool,
    /// The request was a NACK with this message.
    pub nack: Option<String>,
    /// The request was for a type wayfinder does not serve.
    pub unsupported: bool,
}

impl<R> Default for Outcome<R> {
    fn default() -> Self {
        Self {
            responses: Vec::new(),
            stale: false,
            nack: None,
            unsupported: false,
        }
    }
}

/// The state-of-the-world protocol state of one type on one stream.
type TypeState = status::TypeState<Own>;

/// What only state of the world keeps per type.
#[derive(Debug, Default)]
struct Own {
    /// The hash of the latest request's names.
    names_hash: Option<u64>,
}

/// One stream's protocol state.
pub struct StreamState {
    proxy: Arc<Proxy>,
    types: PerType<TypeState>,
    nonces: u64,
    identifier: Arc<str>,
}

enum Mode<'a> {
    /// First request of the type on this stream.
    Initial,
    /// A request that may have added names.
    Added(BTreeSet<Arc<str>>),
    /// A new snapshot; `forced` names are sent even if unchanged.
    Snapshot(&'a BTreeSet<Arc<str>>),
}

impl StreamState {
    /// State for a stream opened by `proxy`; `identifier` is sent as `control_plane.identifier`.
    pub fn new(proxy: Arc<Proxy>, identifier: Arc<str>) -> Self {
        Self {
            proxy,
            types: PerType::default(),
            nonces: 0,
            identifier,
        }
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
        sotw: &SotwRequest,
        snap: &XdsSnapshot,
    ) -> Result<Outcome, RequestError> {
        let req = &sotw.request;
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
        let first = state.nonce.is_none();
        if !first
            && state.nonce.as_deref() != Some(req.response_nonce.as_str())
            && !req.response_nonce.is_empty()
        {
            return Ok(Outcome {
                stale: true,
                ..Outcome::default()
            });
        }
        let mut outcome = Outcome::default();
        if let Some(status) = &req.error_detail {
            state.last_nack = Some(Nack {
                version: req.version_info.clone(),
                nonce: req.response_nonce.clone(),
                message: clip(&status.message, NACK_DETAIL).into_owned(),
                at: now(),
            });
            outcome.nack = state.last_nack.as_ref().map(|n| n.message.clone());
        } else if !req.response_nonce.is_empty() {
            state.acked_version = Some(req.version_info.clone());
            // Past the stale check the nonce is the latest this stream sent (a first
            // request's is another stream's, and this one has sent none: `None` stays).
            state.acked_nonce.clone_from(&state.nonce);
        }
        if !first && state.own.names_hash == Some(sotw.names_hash()) {
            // An ACK or NACK repeating the names of the previous request (a sidecar's
            // endpoints ACK lists every cluster): nothing changed, nothing to decode.
            return Ok(outcome);
        }
        let names = sotw.names().map_err(RequestError::BadName)?;
        state.own.names_hash = Some(sotw.names_hash());
        let before = state.subscription.clone();
        if always_wildcard || names.is_empty() {
            state.subscription.update(&names, always_wildcard);
        } else {
            let current = snap.resources(&self.proxy, type_url, &state.subscription.names);
            state
                .subscription
                .update_interned(&names, false, |n| current.get(n).map(|r| r.name.clone()));
        }
        if !first && state.subscription == before {
            // An ACK or NACK with the same names: nothing to send.
            return Ok(outcome);
        }
        state.subscription_version = state.subscription.version();
        // A client drops what it no longer subscribes to, and holds nothing yet under a name
        // it just asked for (whatever older layers had under it).
        state.held.drop_unwanted(&state.subscription);
        state.held.asked_for(&before, &state.subscription);
        let wildcard_added = state.subscription.wildcard && !before.wildcard;
        let mode = if first || (wildcard_added && !type_url.is_full_state()) {
            Mode::Initial
        } else {
            Mode::Added(added(
                &before,
                &state.subscription,
                snap,
                &self.proxy,
                type_url,
            ))
        };
        if let Some((response, _)) = self.build(type_url, snap, mode) {
            outcome.responses.push(response);
        }
        Ok(outcome)
    }

    /// Pushes what a new snapshot changed, in make-before-break order.
    pub fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<SotwResponse> {
        let served: BTreeSet<TypeUrl> = self.types.keys().collect();
        push_in_order(&served, |type_url, forced| {
            self.build(type_url, snap, Mode::Snapshot(forced))
        })
    }

    /// Decides what to send for one type; returns the response and the names whose content the
    /// client did not have before.
    fn build(
        &mut self,
        type_url: TypeUrl,
        snap: &XdsSnapshot,
        mode: Mode<'_>,
    ) -> Option<(SotwResponse, Vec<Arc<str>>)> {
        let state = self.types.get_mut(type_url)?;
        let all = snap.resources(&self.proxy, type_url, &state.subscription.names);
        let version = response_version(&all, state.subscription_version);
        let none = BTreeSet::new();
        let forced = match &mode {
            Mode::Snapshot(forced) => *forced,
            _ => &none,
        };
        // The names to look at (`None`: all). Comparing layers is far cheaper than comparing
        // resources with what the client holds: an endpoint-only change leaves clusters,
        // listeners and routes alone, and the endpoints layer names the assignments it changed.
        let candidates = match &mode {
            Mode::Initial => None,
            Mode::Added(names) => Some(names.clone()),
            Mode::Snapshot(_) => {
                let held = &state.held;
                if forced.is_empty() && held.is_exact() && all.same_as(held.base()) {
                    return None;
                }
                all.changed_since(held.base()).map(|mut names| {
                    names.extend(held.exceptions().cloned());
                    names.extend(forced.iter().cloned());
                    names
                })
            }
        };
        let (sub, held) = (&state.subscription, &mut state.held);
        let send: Picked = if type_url.is_full_state() {
            let differs = |names: &BTreeSet<Arc<str>>| {
                names.iter().filter(|n| sub.wants(n)).any(|n| {
                    let current = all
                        .get(n)
                        .map_or(Holding::Nothing, |r| Holding::At(r.version));
                    held.get(n, sub) != current
                })
            };
            let respond = match (&mode, &candidates) {
                (Mode::Initial, _) => true,
                (Mode::Added(names), _) => !names.is_empty(),
                (Mode::Snapshot(_), Some(names)) => differs(names),
                (Mode::Snapshot(_), None) => {
                    let desired = desired(sub, &all);
                    desired.len() != held.names(sub).len()
                        || desired.iter().any(|r| !held.holds(r, sub))
                }
            };
            if !respond {
                held.rebase(all.layers());
                return None;
            }
            picked(sub, &all)
        } else {
            let added = matches!(mode, Mode::Added(_));
            match &candidates {
                // A client that holds nothing is sent all it wants, walked as it is written.
                None if held.holds_nothing() => picked(sub, &all),
                _ => {
                    let looked_at: Vec<&Arc<Resource>> = match &candidates {
                        Some(names) => names
                            .iter()
                            .filter(|n| sub.wants(n))
                            .filter_map(|n| all.get(n))
                            .collect(),
                        None => desired(sub, &all),
                    };
                    let send: Vec<Arc<Resource>> = looked_at
                        .into_iter()
                        .filter(|r| added || !held.holds(r, sub) || forced.contains(&r.name))
                        .cloned()
                        .collect();
                    send.into()
                }
            }
        };
        // Only a pushed cluster response's changed names are used (`push_in_order` forces
        // their endpoints); looking each resource up costs a tenth of a full-mesh sidecar's
        // push, and a request's answer has nothing to force.
        let changed: Vec<Arc<str>> = match (type_url, &mode) {
            (TypeUrl::Cluster, Mode::Snapshot(_)) => send
                .iter()
                .filter(|r| !held.holds(r, sub))
                .map(|r| r.name.clone())
                .collect(),
            _ => Vec::new(),
        };
        if matches!(mode, Mode::Added(_)) && !type_url.is_full_state() {
            // Only the added names were sent, from this snapshot; the others keep what they
            // had, so the next snapshot still compares with the layers they came from.
            for r in send.iter() {
                held.set(r.name.clone(), Holding::At(r.version));
            }
        } else {
            held.rebase(all.layers());
        }
        // An empty full-state response deletes everything, and answers a first request for
        // names that do not exist; an empty incremental one says nothing.
        if send.is_empty() && !type_url.is_full_state() {
            return None;
        }
        Some((self.respond(type_url, send, version), changed))
    }

    /// A response carrying `send`, recorded as the type's latest.
    fn respond(&mut self, type_url: TypeUrl, send: Picked, version: Version) -> SotwResponse {
        self.nonces += 1;
        let nonce = self.nonces.to_string();
        let version = version.to_string();
        if let Some(state) = self.types.get_mut(type_url) {
            state.nonce = Some(nonce.clone());
            state.sent_version = Some(version.clone());
            state.sent_at = Some(now());
            state.responses += 1;
        }
        SotwResponse {
            version_info: version,
            resources: send,
            type_url,
            nonce,
            identifier: self.identifier.clone(),
        }
    }
}

/// A response's version: the hash of what was offered and of the subscription, which together
/// decide what the client holds.
fn response_version(all: &Resources, subscription: Version) -> Version {
    let mut bytes = all.version().0.to_le_bytes().to_vec();
    bytes.extend_from_slice(&subscription.0.to_le_bytes());
    Version::of_bytes(&bytes)
}

/// Builds each of the `served` types in make-before-break order (clusters, endpoints,
/// listeners, routes), forcing the endpoints of every cluster the clusters' build changed:
/// Envoy keeps a changed cluster warming until its endpoints come again. `build` returns a
/// response and the names whose content the client did not have. Shared by both protocols.
pub(super) fn push_in_order<R>(
    served: &BTreeSet<TypeUrl>,
    mut build: impl FnMut(TypeUrl, &BTreeSet<Arc<str>>) -> Option<(R, Vec<Arc<str>>)>,
) -> Vec<R> {
    let mut responses = Vec::new();
    let mut changed_clusters = BTreeSet::new();
    let none = BTreeSet::new();
    for type_url in TypeUrl::PUSH_ORDER {
        if !served.contains(&type_url) {
            continue;
        }
        let forced = if type_url == TypeUrl::Endpoint {
            &changed_clusters
        } else {
            &none
        };
        if let Some((response, changed)) = build(type_url, forced) {
            responses.push(response);
            if type_url == TypeUrl::Cluster {
                changed_clusters = changed.into_iter().collect();
            }
        }
    }
    responses
}

/// The resources a subscription covers, as a response carries them: a wildcard's or many
/// names' as the layers to walk (a walk beside the names is linear in the layers), a few
/// names' listed (each found by a search).
pub(super) fn picked(subscription: &Subscription, all: &Resources) -> Picked {
    if subscription.wildcard {
        Picked::Every(all.clone())
    } else if all.few(subscription.names.len()) {
        Picked::List(
            all.get_all(&subscription.names)
                .into_iter()
                .cloned()
                .collect(),
        )
    } else {
        Picked::Named(all.clone(), subscription.names.clone())
    }
}

/// The resources a subscription covers, in a stable order.
fn desired<'a>(subscription: &Subscription, all: &'a Resources) -> Vec<&'a Arc<Resource>> {
    if subscription.wildcard {
        all.iter().collect()
    } else {
        all.get_all(&subscription.names)
    }
}

/// Names the new subscription covers that the old did not, among those that exist.
fn added(
    before: &Subscription,
    after: &Subscription,
    snap: &XdsSnapshot,
    proxy: &Proxy,
    type_url: TypeUrl,
) -> BTreeSet<Arc<str>> {
    if after.wildcard && !before.wildcard {
        let all = snap.resources(proxy, type_url, &after.names);
        return all
            .iter()
            .filter(|r| !before.wants(&r.name))
            .map(|r| r.name.clone())
            .collect();
    }
    if after.wildcard {
        return BTreeSet::new();
    }
    let all = snap.resources(proxy, type_url, &after.names);
    after
        .names
        .iter()
        .filter(|n| !before.wants(n) && all.get(n).is_some())
        .cloned()
        .collect()
}

pub(super) fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}
