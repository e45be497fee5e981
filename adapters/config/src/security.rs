//! Istio's security policies of `security.istio.io`: `PeerAuthentication` is read (in `v1`
//! and `v1beta1`, as a configuration kind: `crate::peer_authentication`);
//! `AuthorizationPolicy` and `RequestAuthentication`, any version, are refused.
//!
//! Wayfinder does not enforce those two yet, and skipping them would fail open: a mesh moved
//! from Istio would lose its DENY rules and its JWT requirements without a word. So each is
//! refused as an error of its document (the rest of its file is read as usual), logged at
//! ERROR, listed as refused on `/debug/configz`, and makes `wayfinder validate` exit 1. So is a
//! `PeerAuthentication` in a version Istio does not serve (`v1alpha1`, a typo): skipped, its
//! `STRICT` would be lost the same way.

use wayfinder_registry::RegistryError;

use crate::documents::{Head, Origin, TypeMeta};
use crate::objects::Rejected;

/// The API group of Istio's security policies.
pub(crate) const GROUP: &str = "security.istio.io";

/// The versions of [`GROUP`] wayfinder reads `PeerAuthentication` in; they share one schema.
pub(crate) const VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// The policy kinds wayfinder refuses until it enforces them.
pub(crate) const KINDS: [&str; 2] = ["AuthorizationPolicy", "RequestAuthentication"];

/// The kind wayfinder reads.
const PEER_AUTHENTICATION: &str = "PeerAuthentication";

/// True for a `PeerAuthentication` in a version wayfinder reads.
pub(crate) fn is_read(meta: &TypeMeta) -> bool {
    meta.group() == GROUP && VERSIONS.contains(&meta.version()) && meta.kind == PEER_AUTHENTICATION
}

/// True for a security policy wayfinder refuses: one it does not enforce, in any version of
/// its group, or a `PeerAuthentication` in a version it does not read.
pub(crate) fn is_policy(meta: &TypeMeta) -> bool {
    meta.group() == GROUP
        && (KINDS.contains(&meta.kind.as_str())
            || (meta.kind == PEER_AUTHENTICATION && !is_read(meta)))
}

/// Why a policy is refused, for log lines and reports.
pub(crate) fn message(meta: &TypeMeta) -> String {
    if meta.kind == PEER_AUTHENTICATION {
        return format!(
            "{meta}: wayfinder reads PeerAuthentication of {GROUP}/{{{}}} only; refused rather \
             than ignored, so that the mutual TLS it requires is not silently dropped",
            VERSIONS.join(","),
        );
    }
    format!(
        "{meta}: wayfinder does not enforce {} policies yet; refused rather than ignored, so \
         that traffic they would deny is not silently allowed",
        meta.kind
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
