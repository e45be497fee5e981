//! One AuthorizationPolicy rule as one Envoy RBAC `Policy`, following Istio's `model.New` and
//! `Model.Generate` (`pilot/pkg/security/authz/model/model.go`) field for field:
//!
//! - each `from` is one principal (their list is ORed), each `to` one permission; each is an
//!   AND (`and_ids`, `and_rules`, even of one item; `any` when empty) of its fields, in Istio's
//!   order: principals, request principals, service accounts, trust domains, namespaces,
//!   remote IPs, IPs, then the `when` conditions of the principal side in their order; hosts,
//!   methods, paths, ports, then the permission side's `when` conditions;
//! - a field is an OR of its values (`or_ids`, `or_rules`, even of one) and a NOT of the OR of
//!   its `not` values; the JWT fields and Envoy metadata build their matcher from all values
//!   at once, with no OR around it;
//! - a value that cannot be used (an HTTP field on a TCP port, an address that does not parse)
//!   drops the whole rule of an ALLOW policy (it allows less) and only that value of a DENY or
//!   AUDIT one (which then matches more, so denies more); a `when` key Istio does not know
//!   drops the rule whatever the action.
//!
//! Peer principals are matched against the trust domain in force: a principal of the form
//! `TD/ns/NS/sa/SA` whose trust domain is `cluster.local` (Istio's default), or a pattern that
//! matches the mesh's, is rewritten to the mesh's (Istio's `ReplaceTrustDomainAliases`, with no
//! aliases).

use std::borrow::Cow;

use wayfinder_config::authorization_policy::{Condition, Rule};

mod values;

use self::values::{
    and_ids, and_rules, extended_permission, extended_principal, id, one_permission, one_principal,
    rule,
};
use crate::xds::pb::rbac::{
    Permission, Policy, Principal, permission, principal, rbac::Action as RbacAction,
};

/// Why a rule gives no policy; for the log and debug pages.
pub(super) type Skip = String;

/// The Envoy policy of `rule` of a policy in `namespace`, for an HTTP or a TCP chain, in a
/// filter of `action`; `Err` when Istio would skip the rule.
pub(super) fn policy(
    namespace: &str,
    rule: &Rule,
    tcp: bool,
    action: RbacAction,
    trust_domain: &str,
) -> Result<Policy, Skip> {
    let (base_principal, base_permission) = conditions(&rule.when)?;
    let mut principals = Vec::new();
    for from in &rule.from {
        let mut fields = Vec::new();
        if let Some(s) = &from.source {
            fields.push(Field::new(
                SOURCE_PRINCIPAL,
                migrate(&s.principals, trust_domain),
                migrate(&s.not_principals, trust_domain),
                Gen::Principal,
            ));
            fields.push(Field::borrowed(
                "request.auth.principal",
                &s.request_principals,
                &s.not_request_principals,
                Gen::RequestPrincipal,
            ));
            fields.push(Field::borrowed(
                "source.serviceAccount",
                &s.service_accounts,
                &s.not_service_accounts,
                Gen::ServiceAccount,
            ));
            fields.push(Field::new(
                "source.trustDomain",
                dedup(&s.trust_domains),
                dedup(&s.not_trust_domains),
                Gen::TrustDomain,
            ));
            fields.push(Field::borrowed(
                "source.namespace",
                &s.namespaces,
                &s.not_namespaces,
                Gen::Namespace,
            ));
            fields.push(Field::borrowed(
                "remote.ip",
                &s.remote_ip_blocks,
                &s.not_remote_ip_blocks,
                Gen::RemoteIp,
            ));
            fields.push(Field::borrowed(
                "source.ip",
                &s.ip_blocks,
                &s.not_ip_blocks,
                Gen::SourceIp,
            ));
        }
        fields.extend(base_principal.iter().cloned());
        principals.push(and_ids(principal_items(&fields, namespace, tcp, action)?));
    }
    if rule.from.is_empty() {
        principals.push(and_ids(principal_items(
            &base_principal,
            namespace,
            tcp,
            action,
        )?));
    }
    let mut permissions = Vec::new();
    for to in &rule.to {
        let mut fields = Vec::new();
        if let Some(o) = &to.operation {
            fields.push(Field::borrowed(
                ":authority",
                &o.hosts,
                &o.not_hosts,
                Gen::Host,
            ));
            fields.push(Field::borrowed(
                ":method",
                &o.methods,
                &o.not_methods,
                Gen::Method,
            ));
            fields.push(Field::borrowed(
                "path-matcher",
                &o.paths,
                &o.not_paths,
                Gen::Path,
            ));
            fields.push(Field::borrowed(
                "destination.port",
                &o.ports,
                &o.not_ports,
                Gen::DestinationPort,
            ));
        }
        fields.extend(base_permission.iter().cloned());
        permissions.push(and_rules(permission_items(&fields, tcp, action)?));
    }
    if rule.to.is_empty() {
        permissions.push(and_rules(permission_items(&base_permission, tcp, action)?));
    }
    Ok(Policy {
        permissions,
        principals,
        ..Default::default()
    })
}

const SOURCE_PRINCIPAL: &str = "source.principal";

/// How a field's values become matchers (Istio's generators).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gen {
    // The principal side.
    SourceIp,
    RemoteIp,
    Namespace,
    TrustDomain,
    ServiceAccount,
    Principal,
    RequestPrincipal,
    Audiences,
    Presenter,
    Header,
    Claims,
    // The permission side.
    DestinationIp,
    DestinationPort,
    Sni,
    EnvoyFilter,
    Host,
    Method,
    Path,
}

impl Gen {
    /// Built from all values at once, with no OR around (Istio's extended generators).
    fn extended(self) -> bool {
        matches!(
            self,
            Gen::RequestPrincipal
                | Gen::Audiences
                | Gen::Presenter
                | Gen::Claims
                | Gen::EnvoyFilter
        )
    }

    /// Refused on TCP chains.
    fn http_only(self) -> bool {
        matches!(
            self,
            Gen::RequestPrincipal
                | Gen::Audiences
                | Gen::Presenter
                | Gen::Header
                | Gen::Claims
                | Gen::Host
                | Gen::Method
                | Gen::Path
        )
    }
}

/// A field (or `when` condition) with its values.
#[derive(Clone, Debug)]
struct Field<'a> {
    key: &'a str,
    values: Cow<'a, [String]>,
    not_values: Cow<'a, [String]>,
    kind: Gen,
}

impl<'a> Field<'a> {
    fn new(
        key: &'a str,
        values: Cow<'a, [String]>,
        not_values: Cow<'a, [String]>,
        kind: Gen,
    ) -> Self {
        Self {
            key,
            values,
            not_values,
            kind,
        }
    }

    fn borrowed(key: &'a str, values: &'a [String], not_values: &'a [String], kind: Gen) -> Self {
        Self::new(key, values.into(), not_values.into(), kind)
    }
}

/// The `when` conditions, split into the principal side and the permission side.
fn conditions(when: &[Condition]) -> Result<(Vec<Field<'_>>, Vec<Field<'_>>), Skip> {
    let (mut principal, mut permission) = (Vec::new(), Vec::new());
    for c in when {
        let k = c.key.as_str();
        let kind = match k {
            "destination.ip" => Gen::DestinationIp,
            "destination.port" => Gen::DestinationPort,
            "connection.sni" => Gen::Sni,
            _ if k.starts_with("experimental.envoy.filters.") => Gen::EnvoyFilter,
            "source.ip" => Gen::SourceIp,
            "remote.ip" => Gen::RemoteIp,
            "source.namespace" => Gen::Namespace,
            "source.trustDomain" => Gen::TrustDomain,
            "source.serviceAccount" => Gen::ServiceAccount,
            SOURCE_PRINCIPAL => Gen::Principal,
            "request.auth.principal" => Gen::RequestPrincipal,
            "request.auth.audiences" => Gen::Audiences,
            "request.auth.presenter" => Gen::Presenter,
            _ if k.starts_with("request.headers") => Gen::Header,
            _ if k.starts_with("request.auth.claims") => Gen::Claims,
            _ => return Err(format!("unknown attribute {k}")),
        };
        let field = Field::borrowed(k, &c.values, &c.not_values, kind);
        let permission_side = matches!(
            kind,
            Gen::DestinationIp | Gen::DestinationPort | Gen::Sni | Gen::EnvoyFilter
        );
        if permission_side {
            permission.push(field);
        } else {
            principal.push(field);
        }
    }
    Ok((principal, permission))
}

/// What an unusable value does: in an ALLOW filter it drops the rule, otherwise the value.
fn check<T>(result: Result<T, String>, action: RbacAction) -> Result<Option<T>, Skip> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if action == RbacAction::Allow => Err(e),
        Err(_) => Ok(None),
    }
}

/// The two sides of an Envoy policy, which Istio builds alike: principals (who asks) and
/// permissions (what is asked).
trait Side: Sized {
    fn or(items: Vec<Self>) -> Self;
    fn not(item: Self) -> Self;
}

impl Side for Principal {
    fn or(ids: Vec<Self>) -> Self {
        id(principal::Identifier::OrIds(principal::Set { ids }))
    }

    fn not(item: Self) -> Self {
        id(principal::Identifier::NotId(Box::new(item)))
    }
}

impl Side for Permission {
    fn or(rules: Vec<Self>) -> Self {
        rule(permission::Rule::OrRules(permission::Set { rules }))
    }

    fn not(item: Self) -> Self {
        rule(permission::Rule::NotRule(Box::new(item)))
    }
}

/// The AND items of one side: per field, the OR of its values (or the extended generator's
/// one item for all of them), then the NOT of its `not` values'.
fn items<S: Side>(
    fields: &[Field<'_>],
    action: RbacAction,
    one: impl Fn(&Field<'_>, &str) -> Result<S, String>,
    extended: impl Fn(&Field<'_>, &[String]) -> Result<S, String>,
) -> Result<Vec<S>, Skip> {
    let mut and = Vec::new();
    for f in fields {
        for (values, negate) in [(&f.values, false), (&f.not_values, true)] {
            if values.is_empty() {
                continue;
            }
            let item = if f.kind.extended() {
                check(extended(f, values), action)?
            } else {
                let mut or = Vec::new();
                for v in values.iter() {
                    or.extend(check(one(f, v), action)?);
                }
                (!or.is_empty()).then(|| S::or(or))
            };
            and.extend(item.map(|i| if negate { S::not(i) } else { i }));
        }
    }
    Ok(and)
}

fn principal_items(
    fields: &[Field<'_>],
    namespace: &str,
    tcp: bool,
    action: RbacAction,
) -> Result<Vec<Principal>, Skip> {
    items(
        fields,
        action,
        |f, v| one_principal(f, v, namespace, tcp),
        |f, values| extended_principal(f, values, tcp),
    )
}

fn permission_items(
    fields: &[Field<'_>],
    tcp: bool,
    action: RbacAction,
) -> Result<Vec<Permission>, Skip> {
    items(
        fields,
        action,
        |f, v| one_permission(f, v, tcp),
        extended_permission,
    )
}

/// Peer principals in the mesh's trust domain (see the module's docs).
fn migrate<'a>(values: &'a [String], trust_domain: &str) -> Cow<'a, [String]> {
    if values.iter().all(|v| migrated(v, trust_domain).is_none()) {
        return values.into();
    }
    let each = values.iter();
    each.map(|v| migrated(v, trust_domain).unwrap_or_else(|| v.clone()))
        .collect::<Vec<_>>()
        .into()
}

/// `TD/ns/NS/sa/SA` rewritten to the mesh's trust domain, when Istio would.
fn migrated(principal: &str, trust_domain: &str) -> Option<String> {
    let parts: Vec<&str> = principal.split('/').collect();
    let [td, rest @ ..] = parts.as_slice() else {
        return None;
    };
    if parts.len() != 5 || *td == "*" {
        return None;
    }
    let prefix_match =
        |a: &str, pattern: &str| pattern.strip_suffix('*').is_some_and(|p| a.starts_with(p));
    let suffix_match =
        |a: &str, pattern: &str| pattern.strip_prefix('*').is_some_and(|s| a.ends_with(s));
    let matches = *td == trust_domain
        || prefix_match(td, trust_domain)
        || prefix_match(trust_domain, td)
        || suffix_match(td, trust_domain)
        || suffix_match(trust_domain, td)
        || *td == "cluster.local";
    if !matches || suffix_match(trust_domain, td) {
        return None;
    }
    let migrated = format!("{trust_domain}/{}", rest.join("/"));
    (migrated != principal).then_some(migrated)
}

/// Values without repeats, in their order (Istio's trust-domain expansion, with no aliases).
fn dedup(values: &[String]) -> Cow<'_, [String]> {
    let mut seen: Vec<&String> = Vec::new();
    if values.iter().all(|v| {
        let new = !seen.contains(&v);
        seen.push(v);
        new
    }) {
        return values.into();
    }
    let mut out: Vec<String> = Vec::new();
    for v in values {
        if !out.contains(v) {
            out.push(v.clone());
        }
    }
    out.into()
}
