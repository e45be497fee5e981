//! `AuthorizationPolicy`, as Istio's `ValidateAuthorizationPolicy` checks it
//! (`pkg/config/validation/validation.go`, with the value checks of
//! `pkg/config/security/security.go`):
//!
//! - what the policy applies to: at most one of `selector`, `targetRef` and `targetRefs`;
//!   selector labels as every selector's (a selector without labels is a warning); a target
//!   named, in the policy's namespace, and a `Service`, a `ServiceEntry`, or a Kubernetes
//!   `Gateway` or `GatewayClass`;
//! - the action: `provider` only with `CUSTOM`, which needs rules and a provider name and
//!   cannot match on identities; `DENY` needs rules (`{}` denies everything);
//! - each rule: no `null` rule; each `from` has a non-empty `source` and each `to` a non-empty
//!   `operation`; `serviceAccounts` not with `principals` or `namespaces`; no empty value;
//!   addresses and CIDR ranges, ports 0 to 65535, service accounts (`SA` or `NS/SA`, no `*`,
//!   at most 16), trust domains (`*` only at an end, no `/`) and path templates (`{*}`, `{**}`
//!   as whole segments, `{**}` the last operator, literal segments of URL path characters);
//! - each `when` condition: a key Istio's builder knows, with values or not-values, each
//!   checked as its attribute's (addresses, ports, service accounts, trust domains).
//!
//! Where wayfinder differs from Istio:
//!
//! - A policy attached by `targetRef(s)` gets a warning: Istio applies it to Gateway API
//!   gateways and waypoints, which wayfinder does not serve, and (as Istio) never to sidecars.
//! - `CUSTOM` is refused: it needs an external authorizer, which wayfinder does not configure
//!   yet (the rest of Istio's `CUSTOM` checks still run, so every problem shows at once).
//! - A rule with HTTP-only fields (hosts, methods, paths, request principals, `when` on request
//!   headers or JWT attributes) gets one warning saying what happens on TCP ports: an ALLOW
//!   rule is left out there, a DENY or AUDIT rule loses those fields and matches more (every
//!   connection, when nothing else restricts it). It replaces Istio's DENY-only warning, which
//!   also took trust domains for HTTP-only.
//! - Selector labels must be Kubernetes labels, as in every other kind here; Istio refuses
//!   only empty keys and `*`, which this covers.
//! - `when` keys must be exactly those Istio's builder reads: Istio's validation lets
//!   `request.headersX[a]` through, and empty names (`request.auth.claims[][a]`,
//!   `experimental.envoy.filters.[a]`), which its builder then drops or mangles. A key is
//!   checked even when the condition has no values.
//! - Addresses are parsed with Rust's `IpAddr`: an IPv6 zone (`fe80::1%eth0`), which Go
//!   accepts and Envoy does not, is refused.
//! - Every bad value is reported at its own index, where Istio stops at the first one of some
//!   fields (empty values, service accounts).
//! - `from: []` and `to: []` read as absent, so Istio's "must not be empty" for them cannot
//!   fire (as in Istio, whose proto JSON decoding leaves an empty list unset); `rules: []` is
//!   no rules, as there.
//! - The `istio.io/dry-run` annotation is metadata, not spec, and is not checked here.

mod attribute;
mod values;

use self::attribute::Attribute;
use self::values::{Values, check_values};
use super::Problems;
use super::attachment::check_attachment;
use crate::authorization_policy::{
    Action, AuthorizationPolicy, Condition, Operation, Rule, Source,
};

pub(super) fn check(ap: &AuthorizationPolicy, p: &mut Problems) {
    check_attachment(
        p,
        ap.selector.as_ref(),
        ap.target_ref.as_ref(),
        &ap.target_refs,
    );
    check_action(ap, p);
    let custom = ap.action == Action::Custom;
    for (i, rule) in ap.rules.iter().flatten().enumerate() {
        let path = format!("spec.rules[{i}]");
        match rule {
            None => p.error(
                path,
                "is null: remove it, or write {} for a rule that matches every request",
            ),
            Some(rule) => {
                tcp_warning(ap.action, rule, &path, p);
                check_rule(custom, rule, &path, p);
            }
        }
    }
}

/// `action` and `provider`, and what the action needs of `rules`.
fn check_action(ap: &AuthorizationPolicy, p: &mut Problems) {
    let no_rules = ap.rules.as_ref().is_none_or(Vec::is_empty);
    if ap.action == Action::Custom {
        p.error(
            "spec.action",
            "CUSTOM needs an external authorizer (a MeshConfig extension provider), which \
             wayfinder does not configure yet; the policy is refused rather than ignored, so \
             that what it would deny is not silently allowed",
        );
        if !no_rules && ap.provider.as_ref().is_none_or(|pr| pr.name.is_empty()) {
            p.error(
                "spec.provider.name",
                "is required with action CUSTOM: the name of a MeshConfig extension provider",
            );
        }
    } else if ap.provider.is_some() {
        p.error(
            "spec.provider",
            format!(
                "is only for action CUSTOM, and this policy's action is {}: remove it",
                ap.action.name()
            ),
        );
    }
    if no_rules {
        match ap.action {
            Action::Custom => p.error(
                "spec.rules",
                "CUSTOM without rules never applies: add an empty rule {} to send every \
                 request to the provider",
            ),
            Action::Deny => p.error(
                "spec.rules",
                "DENY without rules never matches: add an empty rule {} to deny every request",
            ),
            Action::Allow | Action::Audit => {}
        }
    }
}

fn check_rule(custom: bool, rule: &Rule, path: &str, p: &mut Problems) {
    for (j, from) in rule.from.iter().enumerate() {
        let path = format!("{path}.from[{j}].source");
        match &from.source {
            None => p.error(
                path,
                "is required: leave `from` out of the rule to match every source",
            ),
            Some(source) => check_source(custom, source, &path, p),
        }
    }
    for (j, to) in rule.to.iter().enumerate() {
        let path = format!("{path}.to[{j}].operation");
        match &to.operation {
            None => p.error(
                path,
                "is required: leave `to` out of the rule to match every operation",
            ),
            Some(operation) => check_operation(operation, &path, p),
        }
    }
    for (k, condition) in rule.when.iter().enumerate() {
        check_condition(custom, condition, &format!("{path}.when[{k}]"), p);
    }
}

/// A source's fields, in declaration order, with their names in YAML.
fn source_fields(s: &Source) -> [(&'static str, &[String], Values); 14] {
    [
        ("principals", &s.principals, Values::Any),
        ("notPrincipals", &s.not_principals, Values::Any),
        ("requestPrincipals", &s.request_principals, Values::Any),
        (
            "notRequestPrincipals",
            &s.not_request_principals,
            Values::Any,
        ),
        ("namespaces", &s.namespaces, Values::Any),
        ("notNamespaces", &s.not_namespaces, Values::Any),
        (
            "serviceAccounts",
            &s.service_accounts,
            Values::ServiceAccount,
        ),
        (
            "notServiceAccounts",
            &s.not_service_accounts,
            Values::ServiceAccount,
        ),
        ("trustDomains", &s.trust_domains, Values::TrustDomain),
        ("notTrustDomains", &s.not_trust_domains, Values::TrustDomain),
        ("ipBlocks", &s.ip_blocks, Values::Ip),
        ("notIpBlocks", &s.not_ip_blocks, Values::Ip),
        ("remoteIpBlocks", &s.remote_ip_blocks, Values::Ip),
        ("notRemoteIpBlocks", &s.not_remote_ip_blocks, Values::Ip),
    ]
}

/// An operation's fields, in declaration order, with their names in YAML.
fn operation_fields(o: &Operation) -> [(&'static str, &[String], Values); 8] {
    [
        ("hosts", &o.hosts, Values::Any),
        ("notHosts", &o.not_hosts, Values::Any),
        ("ports", &o.ports, Values::Port),
        ("notPorts", &o.not_ports, Values::Port),
        ("methods", &o.methods, Values::Any),
        ("notMethods", &o.not_methods, Values::Any),
        ("paths", &o.paths, Values::Path),
        ("notPaths", &o.not_paths, Values::Path),
    ]
}

/// How many of [`source_fields`] come first and are identities, which CUSTOM cannot match on.
const IDENTITY_FIELDS: usize = 10;

/// The source fields only HTTP requests have (JWT identities).
fn http_only_source_field(name: &str) -> bool {
    matches!(name, "requestPrincipals" | "notRequestPrincipals")
}

fn check_source(custom: bool, s: &Source, path: &str, p: &mut Problems) {
    let fields = source_fields(s);
    if fields.iter().all(|(_, values, _)| values.is_empty()) {
        p.error(
            path,
            "is empty: set at least one field, or leave `from` out of the rule to match every \
             source",
        );
    }
    let identities = [
        &s.principals,
        &s.not_principals,
        &s.namespaces,
        &s.not_namespaces,
    ];
    let with_identities = identities.iter().any(|v| !v.is_empty());
    for (i, (name, values, kind)) in fields.into_iter().enumerate() {
        if values.is_empty() {
            continue;
        }
        let field = format!("{path}.{name}");
        if custom && i < IDENTITY_FIELDS {
            p.error(&field, "not supported with action CUSTOM");
        }
        if kind == Values::ServiceAccount && with_identities {
            p.error(
                &field,
                "cannot be combined with principals, notPrincipals, namespaces or \
                 notNamespaces in the same source: a service account already names its \
                 namespace and identity",
            );
        }
        check_values(p, &field, values, kind);
    }
}

fn check_operation(o: &Operation, path: &str, p: &mut Problems) {
    let fields = operation_fields(o);
    if fields.iter().all(|(_, values, _)| values.is_empty()) {
        p.error(
            path,
            "is empty: set at least one field, or leave `to` out of the rule to match every \
             operation",
        );
    }
    for (name, values, kind) in fields {
        check_values(p, &format!("{path}.{name}"), values, kind);
    }
}

fn check_condition(custom: bool, c: &Condition, path: &str, p: &mut Problems) {
    let attribute = if c.key.is_empty() {
        p.error(format!("{path}.key"), "is required");
        None
    } else {
        match Attribute::parse(&c.key) {
            Ok(a) => {
                if custom && a.custom_unsupported() {
                    p.error(format!("{path}.key"), "not supported with action CUSTOM");
                }
                Some(a)
            }
            Err(e) => {
                p.error(format!("{path}.key"), e);
                None
            }
        }
    };
    if c.values.is_empty() && c.not_values.is_empty() {
        p.error(path, "needs values or notValues (or both)");
    }
    let kind = attribute.map_or(Values::Any, Attribute::values);
    check_values(p, &format!("{path}.values"), &c.values, kind);
    check_values(p, &format!("{path}.notValues"), &c.not_values, kind);
}

/// The warning about a rule with HTTP-only fields: what it does on TCP ports, where the
/// builder cannot use them (`wayfinder::xds`'s `rule.rs`, after Istio's builder).
fn tcp_warning(action: Action, rule: &Rule, path: &str, p: &mut Problems) {
    if action == Action::Custom {
        return;
    }
    let mut http: Vec<&str> = Vec::new();
    let mut add = |name: &'static str, values: &[String]| {
        if !values.is_empty() && !http.contains(&name) {
            http.push(name);
        }
    };
    for source in rule.from.iter().filter_map(|f| f.source.as_ref()) {
        for (name, values, _) in source_fields(source) {
            if http_only_source_field(name) {
                add(name, values);
            }
        }
    }
    for operation in rule.to.iter().filter_map(|t| t.operation.as_ref()) {
        for (name, values, kind) in operation_fields(operation) {
            if kind != Values::Port {
                add(name, values);
            }
        }
    }
    for c in &rule.when {
        let http_key = Attribute::parse(&c.key).is_ok_and(Attribute::http_only);
        if http_key && !http.contains(&c.key.as_str()) {
            http.push(&c.key);
        }
    }
    if http.is_empty() {
        return;
    }
    let fields = http.join(", ");
    let message = match action {
        Action::Allow | Action::Custom => format!(
            "on TCP ports this rule is left out (it uses HTTP-only fields: {fields}), so it \
             allows no TCP connection"
        ),
        Action::Deny | Action::Audit => {
            let mut message = format!(
                "on TCP ports the HTTP-only fields ({fields}) are left out, so the rule \
                 matches more"
            );
            if matches_every_connection_on_tcp(rule) {
                message.push_str(if action == Action::Deny {
                    ": here every connection, so it denies all TCP traffic to the workloads \
                     it applies to; add to.operation.ports to keep it to HTTP ports"
                } else {
                    ": here every connection, so all TCP traffic is audited"
                });
            }
            message
        }
    };
    p.warn(path, message);
}

/// Whether, with its HTTP-only fields left out, the rule matches every TCP connection: some
/// source and some operation keep no field (or there are none), and no `when` condition is
/// left.
fn matches_every_connection_on_tcp(rule: &Rule) -> bool {
    let tcp_condition = |operation_side: bool| {
        rule.when.iter().any(|c| {
            Attribute::parse(&c.key)
                .is_ok_and(|a| !a.http_only() && a.operation_side() == operation_side)
        })
    };
    let any_source = rule.from.is_empty()
        || rule.from.iter().any(|f| {
            f.source.as_ref().is_none_or(|s| {
                source_fields(s)
                    .iter()
                    .all(|(name, values, _)| values.is_empty() || http_only_source_field(name))
            })
        });
    let any_operation = rule.to.is_empty()
        || rule.to.iter().any(|t| {
            t.operation
                .as_ref()
                .is_none_or(|o| o.ports.is_empty() && o.not_ports.is_empty())
        });
    any_source && any_operation && !tcp_condition(false) && !tcp_condition(true)
}
