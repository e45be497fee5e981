//! What debug pages show of a stream's per-type protocol state (`/debug/syncz`, config
//! dumps), refreshed after every message.

use serde::Serialize;

use super::held::Held;
use super::subscription::Subscription;
use crate::xds::{PerType, TypeUrl};

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
    /// Latest NACK.
    pub last_nack: Option<Nack>,
    /// Responses sent.
    pub responses: u64,
    /// Resources the client holds: those of the layers it was last brought up to date with
    /// (wildcard) or the names it subscribed to, whichever applies (an estimate for debug pages).
    pub resources: usize,
}

/// What a [`TypeStatus`] is refreshed from: either variant's per-type state, borrowed.
pub(super) struct StatusOf<'a> {
    pub(super) subscription: &'a Subscription,
    pub(super) nonce: &'a Option<String>,
    pub(super) sent_version: &'a Option<String>,
    pub(super) acked_version: &'a Option<String>,
    pub(super) last_nack: &'a Option<Nack>,
    pub(super) responses: u64,
    pub(super) held: &'a Held,
}

impl TypeStatus {
    /// Brings the debug copy up to date. It is refreshed after every message of every stream,
    /// so its strings keep their buffers (`clone_from`): building it anew each time was a
    /// tenth of the server's time under churn (perf).
    pub(super) fn refresh(&mut self, from: StatusOf<'_>) {
        self.subscription.clone_from(from.subscription);
        self.nonce.clone_from(from.nonce);
        self.sent_version.clone_from(from.sent_version);
        self.acked_version.clone_from(from.acked_version);
        self.last_nack.clone_from(from.last_nack);
        self.responses = from.responses;
        self.resources = from.held.count(from.subscription);
    }
}

/// Refreshes one debug copy per type.
pub(super) fn refresh_all<'a, S: 'a>(
    types: impl IntoIterator<Item = (&'a TypeUrl, &'a S)>,
    out: &mut PerType<TypeStatus>,
    view: impl Fn(&'a S) -> StatusOf<'a>,
) {
    for (t, s) in types {
        out.get_or_default(*t).refresh(view(s));
    }
}
