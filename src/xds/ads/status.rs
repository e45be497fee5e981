//! A stream's per-type protocol state, one type for both protocols ([`TypeState`]), and what
//! debug pages show of it (`/debug/syncz`, config dumps), refreshed after every message.

use serde::Serialize;

use super::held::Held;
use super::subscription::Subscription;
use crate::xds::PerType;
use crate::xds::resource::Version;

/// A NACK as recorded for `/debug/syncz`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Nack {
    /// The version the client still runs.
    pub version: String,
    /// The nonce of the rejected response.
    pub nonce: String,
    /// The client's error message.
    pub message: String,
    /// Seconds since the Unix epoch.
    pub at: f64,
}

/// A copy of a type's protocol state for debug pages, without the per-resource bookkeeping.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TypeStatus {
    /// What the client subscribed to.
    pub subscription: Subscription,
    /// Nonce of the latest response.
    pub nonce: Option<String>,
    /// Version of the latest response.
    pub sent_version: Option<String>,
    /// Latest version the client acknowledged.
    pub acked_version: Option<String>,
    /// Nonce of the latest response the client acknowledged: the type is in sync when it is
    /// `nonce` (Istio's `NonceAcked` against `NonceSent`).
    pub acked_nonce: Option<String>,
    /// When the latest response was sent, in seconds since the Unix epoch.
    pub sent_at: Option<f64>,
    /// Latest NACK.
    pub last_nack: Option<Nack>,
    /// Responses sent.
    pub responses: u64,
    /// What the client holds as far as the server knows, for the sync section of
    /// `/debug/config_dump`: the stream's own layers (no copy of a resource).
    #[serde(skip)]
    pub(super) held: Held,
    /// Resources the client holds: those of the layers it was last brought up to date with
    /// (wildcard) or the names it subscribed to, whichever applies (an estimate for debug pages).
    pub resources: usize,
}

/// The protocol state of one type on one stream, as both protocols keep it; `own` is what
/// only one of them needs (state of the world: the hash of the latest request's names; delta:
/// whether the first request was seen). Debug pages show a copy, [`TypeStatus`].
#[derive(Debug, Default)]
pub(super) struct TypeState<X> {
    /// What the client subscribed to.
    pub(super) subscription: Subscription,
    /// Nonce of the latest response.
    pub(super) nonce: Option<String>,
    /// Version of the latest response (delta: `system_version_info`, the hash of what the
    /// client then held).
    pub(super) sent_version: Option<String>,
    /// Latest version the client acknowledged.
    pub(super) acked_version: Option<String>,
    /// Nonce of the latest response the client acknowledged.
    pub(super) acked_nonce: Option<String>,
    /// When the latest response was sent (seconds since the Unix epoch).
    pub(super) sent_at: Option<f64>,
    /// Latest NACK.
    pub(super) last_nack: Option<Nack>,
    /// Responses sent.
    pub(super) responses: u64,
    /// What the client holds as far as the server knows: a snapshot whose layers are the
    /// held ones needs no look at each resource, and one whose layers replaced them needs a
    /// look only at the names they changed.
    pub(super) held: Held,
    /// A hash of the subscription, part of every response version.
    pub(super) subscription_version: Version,
    /// What one protocol alone keeps.
    pub(super) own: X,
}

/// Where a type stands between the server and the client, in istioctl's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SyncState {
    /// Nothing was sent yet (`NOT SENT`).
    #[serde(rename = "NOT SENT")]
    NotSent,
    /// The latest response is acknowledged (`SYNCED`).
    #[serde(rename = "SYNCED")]
    Synced,
    /// The latest response is neither acknowledged nor rejected yet (`STALE`).
    #[serde(rename = "STALE")]
    Stale,
    /// The client rejected the latest response (`NACKED`; istioctl's `ERROR`).
    #[serde(rename = "NACKED")]
    Nacked,
}

impl TypeStatus {
    /// Where the type stands: Istio's rule (`debugSyncStatus`) on nonces, the latest sent
    /// against the latest acknowledged; a rejected latest response is `Nacked`.
    pub fn sync(&self) -> SyncState {
        match &self.nonce {
            None => SyncState::NotSent,
            Some(n) if self.acked_nonce.as_ref() == Some(n) => SyncState::Synced,
            Some(n) if self.last_nack.as_ref().is_some_and(|k| &k.nonce == n) => SyncState::Nacked,
            Some(_) => SyncState::Stale,
        }
    }

    /// Seconds since the latest response was sent, `now` being seconds since the Unix epoch,
    /// while it is not acknowledged (stale or rejected); `None` once it is.
    pub fn unacked_for(&self, now: f64) -> Option<f64> {
        match self.sync() {
            SyncState::Stale | SyncState::Nacked => self.sent_at.map(|at| (now - at).max(0.0)),
            SyncState::NotSent | SyncState::Synced => None,
        }
    }

    /// Brings the debug copy up to date. It is refreshed after every message of every stream,
    /// so its strings keep their buffers (`clone_from`): building it anew each time was a
    /// tenth of the server's time under churn (perf).
    fn refresh<X>(&mut self, from: &TypeState<X>) {
        self.subscription.clone_from(&from.subscription);
        self.nonce.clone_from(&from.nonce);
        self.sent_version.clone_from(&from.sent_version);
        self.acked_version.clone_from(&from.acked_version);
        self.acked_nonce.clone_from(&from.acked_nonce);
        self.sent_at = from.sent_at;
        self.last_nack.clone_from(&from.last_nack);
        self.responses = from.responses;
        self.held.clone_from(&from.held);
        self.resources = from.held.count(&from.subscription);
    }
}

/// Refreshes one debug copy per type.
pub(super) fn refresh_all<X>(types: &PerType<TypeState<X>>, out: &mut PerType<TypeStatus>) {
    for (t, s) in types {
        out.get_or_default(*t).refresh(s);
    }
}
