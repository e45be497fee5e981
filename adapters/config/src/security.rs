//! Istio's security policies: `AuthorizationPolicy`, `PeerAuthentication` and
//! `RequestAuthentication` of `security.istio.io`, any version.
//!
//! Wayfinder does not enforce them yet, and skipping them would fail open: a mesh moved from
//! Istio would lose its DENY rules and its mTLS requirements without a word. So each is refused
//! as an error of its document (the rest of its file is read as usual), logged at ERROR, listed
//! as refused on `/debug/configz`, and makes `wayfinder validate` exit 1.

use wayfinder_registry::RegistryError;

use crate::documents::{Head, Origin, TypeMeta};
use crate::objects::Rejected;

/// The API group of Istio's security policies.
pub(crate) const GROUP: &str = "security.istio.io";

/// The policy kinds wayfinder refuses until it enforces them.
pub(crate) const KINDS: [&str; 3] = [
    "AuthorizationPolicy",
    "PeerAuthentication",
    "RequestAuthentication",
];

/// True for a security policy, in any version of its group.
pub(crate) fn is_policy(meta: &TypeMeta) -> bool {
    meta.group() == GROUP && KINDS.contains(&meta.kind.as_str())
}

/// Why a policy is refused, for log lines and reports.
pub(crate) fn message(meta: &TypeMeta) -> String {
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
