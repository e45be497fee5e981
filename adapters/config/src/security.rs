//! Istio's security policies of `security.istio.io`: `PeerAuthentication` and
//! `AuthorizationPolicy` are read (in `v1` and `v1beta1`, as configuration kinds:
//! `crate::peer_authentication`, `crate::authorization_policy`); `RequestAuthentication`, any
//! version, is refused.
//!
//! Wayfinder does not enforce it yet, and skipping it would fail open: a mesh moved from Istio
//! would lose its JWT requirements without a word. So it is refused as an error of its
//! document (the rest of its file is read as usual), logged at ERROR, listed as refused on
//! `/debug/configz`, and makes `wayfinder validate` exit 1. So is a policy wayfinder reads in a
//! version Istio does not serve (`v1alpha1`, a typo): skipped, its `STRICT` or its DENY rules
//! would be lost the same way.

use wayfinder_registry::RegistryError;

use crate::documents::{Head, Origin, TypeMeta};
use crate::objects::Rejected;

/// The API group of Istio's security policies.
pub(crate) const GROUP: &str = "security.istio.io";

/// The versions of [`GROUP`] wayfinder reads its kinds in; they share one schema.
pub(crate) const VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// The policy kinds wayfinder refuses until it enforces them.
pub(crate) const KINDS: [&str; 1] = ["RequestAuthentication"];

/// The kinds wayfinder reads.
const READ: [&str; 2] = ["PeerAuthentication", "AuthorizationPolicy"];

/// True for a policy of a kind wayfinder reads, in a version it reads.
pub(crate) fn is_read(meta: &TypeMeta) -> bool {
    meta.group() == GROUP
        && VERSIONS.contains(&meta.version())
        && READ.contains(&meta.kind.as_str())
}

/// True for a security policy wayfinder refuses: one it does not enforce, in any version of
/// its group, or one it reads in a version it does not read.
pub(crate) fn is_policy(meta: &TypeMeta) -> bool {
    meta.group() == GROUP
        && (KINDS.contains(&meta.kind.as_str())
            || (READ.contains(&meta.kind.as_str()) && !is_read(meta)))
}

/// Why a policy is refused, for log lines and reports.
pub(crate) fn message(meta: &TypeMeta) -> String {
    if READ.contains(&meta.kind.as_str()) {
        return format!(
            "{meta}: wayfinder reads {} of {GROUP}/{{{}}} only; refused rather than ignored, so \
             that what it requires is not silently dropped",
            meta.kind,
            VERSIONS.join(","),
        );
    }
    format!(
        "{meta}: wayfinder does not enforce {} policies yet; refused rather than ignored, so \
         that requests they would refuse are not silently allowed",
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
