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

use super::state::{Nack, Outcome, RequestError, TypeStatus, now, push_in_order};
use super::subscription::Subscription;
use crate::xds::TypeUrl;
use crate::xds::generate::XdsSnapshot;
use crate::xds::pb::core::ControlPlane;
use crate::xds::pb::discovery::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, Resource as DeltaResource,
};
use crate::xds::proxy::Proxy;
use crate::xds::resource::Version;

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
    /// What the client holds as far as the server knows: name → version (`None`: a version
    /// that is not one of ours, from `initial_resource_versions`; never equal to a current one).
    held: HashMap<Arc<str>, Option<Version>>,
    /// The version of everything offered at the last build (see the state-of-the-world twin).
    offered: Option<Version>,
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
    ) -> Result<Outcome<DeltaDiscoveryResponse>, RequestError> {
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
            state.held = req
                .initial_resource_versions
                .iter()
                .map(|(name, version)| (Arc::from(name.as_str()), Version::parse(version)))
                .collect();
        }
        let subscribe = &req.resource_names_subscribe;
        let unsubscribe = &req.resource_names_unsubscribe;
        let before = state.subscription.clone();
        state
            .subscription
            .update_delta(subscribe, unsubscribe, first, always_wildcard);
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
        if let Some(response) = self.build(type_url, snap, &forced, first || wildcard_added) {
            outcome.responses.push(response.0);
        }
        Ok(outcome)
    }

    /// Pushes what a new snapshot changed, in make-before-break order.
    pub fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<DeltaDiscoveryResponse> {
        let served: BTreeSet<TypeUrl> = self.types.keys().copied().collect();
        push_in_order(&served, |type_url, forced| {
            self.build(type_url, snap, forced, false)
        })
    }

    /// What changed for the client in one type; `forced` names are sent (or reported
    /// missing) even if the client holds them; `respond` answers even when nothing changed.
    /// Returns the response and the names whose content the client did not have.
    fn build(
        &mut self,
        type_url: TypeUrl,
        snap: &XdsSnapshot,
        forced: &BTreeSet<Arc<str>>,
        respond: bool,
    ) -> Option<(DeltaDiscoveryResponse, BTreeSet<Arc<str>>)> {
        let state = self.types.get_mut(&type_url)?;
        let sub = &state.subscription;
        let all = snap.resources(&self.proxy, type_url, &sub.names);
        let offered = Version::of_set(all.iter().map(|r| &**r));
        if !respond && forced.is_empty() && state.offered == Some(offered) {
            return None;
        }
        state.offered = Some(offered);
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
                resources.push(DeltaResource {
                    name: r.name.to_string(),
                    version: r.version.to_string(),
                    resource: Some(r.any.clone()),
                    ..Default::default()
                });
                state.held.insert(r.name.clone(), Some(r.version));
            }
        }
        // Held but gone (or never there, for a name just asked for); held but no longer wanted
        // is forgotten quietly (the client dropped it when it unsubscribed).
        let mut removed: BTreeSet<Arc<str>> = forced
            .iter()
            .filter(|n| sub.wants(n) && all.get(n).is_none())
            .cloned()
            .collect();
        state.held.retain(|name, _| {
            if !sub.wants(name) {
                return false;
            }
            if all.get(name).is_none() {
                removed.insert(name.clone());
                return false;
            }
            true
        });
        if resources.is_empty() && removed.is_empty() && !respond {
            return None;
        }
        self.nonces += 1;
        let nonce = self.nonces.to_string();
        let mut held: Vec<(&Arc<str>, &Option<Version>)> = state.held.iter().collect();
        held.sort();
        let version = held_version(&held);
        state.nonce = Some(nonce.clone());
        state.sent_version = Some(version.clone());
        state.responses += 1;
        let response = DeltaDiscoveryResponse {
            system_version_info: version,
            resources,
            type_url: type_url.as_str().to_string(),
            removed_resources: removed.iter().map(|n| n.to_string()).collect(),
            nonce,
            control_plane: Some(ControlPlane {
                identifier: self.identifier.to_string(),
            }),
            ..Default::default()
        };
        Some((response, changed))
    }
}

/// A version for what the client holds (names and versions, sorted).
fn held_version(held: &[(&Arc<str>, &Option<Version>)]) -> String {
    let mut bytes = Vec::new();
    for (name, version) in held {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&version.map_or(0, |v| v.0).to_le_bytes());
    }
    Version::of_bytes(&bytes).to_string()
}
