//! Istio's AuthorizationPolicy as Envoy's RBAC filters: the HTTP filter
//! (`envoy.filters.http.rbac`) for HTTP chains, the network filter (`envoy.filters.network.rbac`)
//! for TCP chains. Istio's builder (`pilot/pkg/security/authz/builder`) is the reference, and
//! `tests.rs` compares the output with what it generates for its own test policies, field for
//! field.
//!
//! - The policies that apply to a workload are grouped by action, and each non-empty group
//!   is one filter, in the order AUDIT (an RBAC filter with action `LOG`), DENY, ALLOW: a
//!   request must pass every filter, so a DENY match wins over an ALLOW, and an ALLOW filter
//!   (any ALLOW policy) denies what none of its policies match.
//! - Each rule of each policy is one Envoy policy named `ns[NS]-policy[NAME]-rule[N]`, `N`
//!   its position in `rules` (see `rule.rs` for how a rule is translated); a policy without
//!   rules is one policy that never matches (so an ALLOW policy without rules denies all).
//! - A policy annotated `istio.io/dry-run: "true"` goes to the filter's shadow rules: Envoy
//!   evaluates it and counts the result (stat prefix `istio_dry_run_allow_` or
//!   `istio_dry_run_deny_`) without enforcing it.
//! - `CUSTOM` policies are not built here: they need an external authorizer, which wayfinder
//!   does not configure, and they are refused before they reach the model.

mod matchers;
mod rule;

use std::collections::HashMap;

use wayfinder_config::ConfigMeta;
use wayfinder_config::authorization_policy::{Action, AuthorizationPolicy};

use super::proto::any;
use crate::xds::pb::hcm::{HttpFilter, http_filter};
use crate::xds::pb::http_rbac::Rbac as HttpRbac;
use crate::xds::pb::listener::{Filter, filter};
use crate::xds::pb::network_rbac::Rbac as NetworkRbac;
use crate::xds::pb::rbac::{Policy, Rbac, rbac::Action as RbacAction};

/// The annotation that makes a policy's rules shadow rules.
pub(crate) const DRY_RUN: &str = "istio.io/dry-run";

/// The HTTP RBAC filter's name.
pub(crate) const HTTP_FILTER: &str = "envoy.filters.http.rbac";
/// The network RBAC filter's name.
pub(crate) const NETWORK_FILTER: &str = "envoy.filters.network.rbac";

/// A policy that applies to the workload, with its metadata (name, namespace, annotations).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Applied<'a> {
    pub(crate) meta: &'a ConfigMeta,
    pub(crate) policy: &'a AuthorizationPolicy,
}

/// The HTTP filters of `policies`, in Envoy's order: AUDIT, DENY, ALLOW. `trust_domain` is the
/// mesh's (`--trust-domain`). None when no policy applies.
pub(crate) fn http_filters(policies: &[Applied<'_>], trust_domain: &str) -> Vec<HttpFilter> {
    groups(policies, false, trust_domain)
        .into_iter()
        .map(|(rules, shadow_rules)| {
            let config = HttpRbac {
                shadow_rules_stat_prefix: shadow_stat_prefix(shadow_rules.as_ref()).into(),
                rules,
                shadow_rules,
                ..Default::default()
            };
            HttpFilter {
                name: HTTP_FILTER.into(),
                config_type: Some(http_filter::ConfigType::TypedConfig(any(&config))),
                ..Default::default()
            }
        })
        .collect()
}

/// The network filters of `policies` for a TCP chain: HTTP-only fields drop an ALLOW rule and
/// are left out of a DENY or AUDIT one (see `rule.rs`).
pub(crate) fn network_filters(policies: &[Applied<'_>], trust_domain: &str) -> Vec<Filter> {
    groups(policies, true, trust_domain)
        .into_iter()
        .map(|(rules, shadow_rules)| {
            let config = NetworkRbac {
                shadow_rules_stat_prefix: shadow_stat_prefix(shadow_rules.as_ref()).into(),
                stat_prefix: "tcp.".into(),
                rules,
                shadow_rules,
                ..Default::default()
            };
            Filter {
                name: NETWORK_FILTER.into(),
                config_type: Some(filter::ConfigType::TypedConfig(any(&config))),
            }
        })
        .collect()
}

/// Enforced and shadow rules per non-empty action group, in filter order.
fn groups(
    policies: &[Applied<'_>],
    tcp: bool,
    trust_domain: &str,
) -> Vec<(Option<Rbac>, Option<Rbac>)> {
    [
        (Action::Audit, RbacAction::Log),
        (Action::Deny, RbacAction::Deny),
        (Action::Allow, RbacAction::Allow),
    ]
    .into_iter()
    .filter_map(|(action, rbac)| {
        let group: Vec<&Applied<'_>> = policies
            .iter()
            .filter(|p| p.policy.action == action)
            .collect();
        (!group.is_empty()).then(|| build(&group, rbac, tcp, trust_domain))
    })
    .collect()
}

/// One filter's rules: the enforced policies' and the dry-run ones', each `None` when the
/// group has no such policy (whatever their rules gave).
fn build(
    group: &[&Applied<'_>],
    action: RbacAction,
    tcp: bool,
    trust_domain: &str,
) -> (Option<Rbac>, Option<Rbac>) {
    let mut enforced: Option<HashMap<String, Policy>> = None;
    let mut shadow: Option<HashMap<String, Policy>> = None;
    for applied in group {
        let target = if dry_run(applied.meta) {
            &mut shadow
        } else {
            &mut enforced
        };
        let policies = target.get_or_insert_with(HashMap::new);
        let (ns, name) = (&applied.meta.namespace, &applied.meta.name);
        let key = |i: usize| format!("ns[{ns}]-policy[{name}]-rule[{i}]");
        let rules = applied.policy.rules.as_deref().unwrap_or_default();
        if rules.is_empty() {
            policies.insert(key(0), never());
        }
        for (i, r) in rules.iter().enumerate() {
            let Some(r) = r else { continue };
            match rule::policy(ns, r, tcp, action, trust_domain) {
                Ok(policy) => {
                    policies.insert(key(i), policy);
                }
                Err(why) => tracing::debug!(
                    "AuthorizationPolicy {ns}/{name}: rule {i} left out of the {} filter: {why}",
                    if tcp { "TCP" } else { "HTTP" },
                ),
            }
        }
    }
    let rbac = |policies: HashMap<String, Policy>| Rbac {
        action: action as i32,
        policies,
        ..Default::default()
    };
    (enforced.map(rbac), shadow.map(rbac))
}

/// Istio's reading of the dry-run annotation: Go's `strconv.ParseBool`, anything else false.
fn dry_run(meta: &ConfigMeta) -> bool {
    matches!(
        meta.annotations.get(DRY_RUN).map(String::as_str),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True")
    )
}

/// The stat prefix of the shadow rules' results, by their action. Istio names it after the
/// shadow rules' action, reading ALLOW when there are none, so every filter without dry-run
/// policies has the ALLOW prefix; LOG shadow rules have none.
fn shadow_stat_prefix(shadow: Option<&Rbac>) -> &'static str {
    match shadow.map_or(RbacAction::Allow as i32, |s| s.action) {
        a if a == RbacAction::Allow as i32 => "istio_dry_run_allow_",
        a if a == RbacAction::Deny as i32 => "istio_dry_run_deny_",
        _ => "",
    }
}

/// A policy that matches nothing: what a policy without rules is.
fn never() -> Policy {
    use crate::xds::pb::rbac::{Permission, Principal, permission, principal};
    let not_any_rule = Permission {
        rule: Some(permission::Rule::NotRule(Box::new(Permission {
            rule: Some(permission::Rule::Any(true)),
        }))),
    };
    let not_any_id = Principal {
        identifier: Some(principal::Identifier::NotId(Box::new(Principal {
            identifier: Some(principal::Identifier::Any(true)),
        }))),
    };
    Policy {
        permissions: vec![not_any_rule],
        principals: vec![not_any_id],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
