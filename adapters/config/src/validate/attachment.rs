//! What a security policy applies to, as `AuthorizationPolicy` and `RequestAuthentication`
//! share it: `selector`, `targetRef` and `targetRefs` (Istio's `validateOneOfSelectorType`,
//! `validateWorkloadSelector`, `validatePolicyTargetReference(s)`).

use super::Problems;
use super::names::check_labels;
use crate::authorization_policy::PolicyTargetReference;
use crate::common::LabelSelector;

/// At most one of `selector`, `targetRef` and `targetRefs`; selector labels as every
/// selector's (none is a warning); each target as [`check_target`]; and a warning on targets,
/// which wayfinder does not serve.
pub(super) fn check_attachment(
    p: &mut Problems,
    selector: Option<&LabelSelector>,
    target_ref: Option<&PolicyTargetReference>,
    target_refs: &[PolicyTargetReference],
) {
    let set: Vec<&str> = [
        ("selector", selector.is_some()),
        ("targetRef", target_ref.is_some()),
        ("targetRefs", !target_refs.is_empty()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    if set.len() > 1 {
        p.error(
            "spec",
            format!(
                "sets {}: set only one of selector, targetRef and targetRefs",
                set.join(" and ")
            ),
        );
    }
    if let Some(selector) = selector {
        if selector.match_labels.is_empty() {
            p.warn(
                "spec.selector.matchLabels",
                "no labels: the policy applies to every workload of its namespace (of the \
                 mesh, in the root namespace)",
            );
        }
        check_labels(p, "spec.selector.matchLabels", &selector.match_labels);
    }
    if let Some(target) = target_ref {
        check_target(p, "spec.targetRef", target);
    }
    for (i, target) in target_refs.iter().enumerate() {
        check_target(p, &format!("spec.targetRefs[{i}]"), target);
    }
    // As in Istio, sidecars and Istio Gateways are selected by labels only.
    for (field, set) in [
        ("spec.targetRef", target_ref.is_some()),
        ("spec.targetRefs", !target_refs.is_empty()),
    ] {
        if set {
            p.warn(
                field,
                "attaches the policy to Kubernetes Gateway API gateways and waypoints, which \
                 wayfinder does not serve: it applies to no sidecar or gateway here (use a \
                 selector)",
            );
        }
    }
}

/// The kinds a policy can target, with their API groups (`core` for the empty group).
const TARGET_KINDS: [(&str, &str); 4] = [
    ("core", "Service"),
    ("networking.istio.io", "ServiceEntry"),
    ("gateway.networking.k8s.io", "Gateway"),
    ("gateway.networking.k8s.io", "GatewayClass"),
];

fn check_target(p: &mut Problems, path: &str, target: &PolicyTargetReference) {
    if target.name.is_empty() {
        p.error(format!("{path}.name"), "is required");
    }
    if !target.namespace.is_empty() {
        p.error(
            format!("{path}.namespace"),
            "must not be set: a policy can only target resources of its own namespace",
        );
    }
    let group = match target.group.as_str() {
        "" => "core",
        group => group,
    };
    if TARGET_KINDS.contains(&(group, target.kind.as_str())) {
        return;
    }
    match TARGET_KINDS.iter().find(|(_, kind)| *kind == target.kind) {
        Some((expected, kind)) => p.error(
            format!("{path}.group"),
            format!(
                "{:?} is not the group of a targetable {kind}: expected {}",
                target.group,
                if *expected == "core" {
                    "\"\" (the core group)"
                } else {
                    expected
                }
            ),
        ),
        None => p.error(
            format!("{path}.kind"),
            format!(
                "{:?} cannot be targeted: expected Service, ServiceEntry (group \
                 networking.istio.io), or Gateway or GatewayClass (group \
                 gateway.networking.k8s.io)",
                target.kind
            ),
        ),
    }
}
