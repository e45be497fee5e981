//! Istio's security policies of `security.istio.io`: `PeerAuthentication`,
//! `AuthorizationPolicy` and `RequestAuthentication` are read in `v1` and `v1beta1`, as
//! configuration kinds (`crate::peer_authentication`, `crate::authorization_policy`,
//! `crate::request_authentication`).
//!
//! One of them in a version Istio does not serve (`v1alpha1`, a typo) is refused rather than
//! skipped: skipping would fail open, a mesh moved from Istio losing its `STRICT`, its DENY
//! rules or its JWT rules without a word. It is an error of its document (the rest of its file
//! is read as usual), logged at ERROR, listed as refused on `/debug/configz`, and makes
//! `wayfinder validate` exit 1.

use wayfinder_registry::RegistryError;

use crate::documents::{Head, Origin, TypeMeta};
use crate::objects::Rejected;

/// The API group of Istio's security policies.
pub(crate) const GROUP: &str = "security.istio.io";

/// The versions of [`GROUP`] wayfinder reads its kinds in; they share one schema.
pub(crate) const VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// The kinds of the group, all of which wayfinder reads.
const READ: [&str; 3] = [
    "PeerAuthentication",
    "AuthorizationPolicy",
    "RequestAuthentication",
];

/// True for a policy of a kind wayfinder reads, in a version it reads.
pub(crate) fn is_read(meta: &TypeMeta) -> bool {
    is_policy_kind(meta) && VERSIONS.contains(&meta.version())
}

/// True for a security policy wayfinder refuses: one of its kinds in a version it does not
/// read.
pub(crate) fn is_policy(meta: &TypeMeta) -> bool {
    is_policy_kind(meta) && !is_read(meta)
}

fn is_policy_kind(meta: &TypeMeta) -> bool {
    meta.group() == GROUP && READ.contains(&meta.kind.as_str())
}

/// Why a policy is refused, for log lines and reports.
pub(crate) fn message(meta: &TypeMeta) -> String {
    format!(
        "{meta}: wayfinder reads {} of {GROUP}/{{{}}} only; refused rather than ignored, so \
         that what it requires is not silently dropped",
        meta.kind,
        VERSIONS.join(","),
    )
}

/// The refusal of the policy at `origin`.
pub(crate) fn refuse(origin: Origin, head: Head) -> Rejected {
    let error = RegistryError::Invalid {
        origin: origin.to_string(),
        detail: message(&head.meta),
    };
    Rejected {
        origin,
        head: Some(head),
        error,
    }
}
