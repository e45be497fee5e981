//! One value of a field, or all values of a JWT field, as a matcher: Istio's generators
//! (`pilot/pkg/security/authz/model/generator.go`), and the constructors of the policy's
//! items.

use super::{Field, Gen};
use crate::xds::generate::authz::matchers::{self as m, JWT_FILTER};
use crate::xds::generate::proto::any;
use crate::xds::pb::core::TypedExtensionConfig;
use crate::xds::pb::matcher::{MetadataMatcher, StringMatcher, ValueMatcher};
use crate::xds::pb::rbac::{Permission, Principal, permission, principal};
use crate::xds::pb::uri_template::UriTemplateMatchConfig;

pub(super) fn http_only(f: &Field<'_>, tcp: bool) -> Result<(), String> {
    if tcp && f.kind.http_only() {
        return Err(format!("{:?} is HTTP only", f.key));
    }
    Ok(())
}

/// One value of a principal-side field.
pub(super) fn one_principal(
    f: &Field<'_>,
    v: &str,
    namespace: &str,
    tcp: bool,
) -> Result<Principal, String> {
    http_only(f, tcp)?;
    Ok(match f.kind {
        Gen::SourceIp => id(principal::Identifier::DirectRemoteIp(m::cidr(v)?)),
        Gen::RemoteIp => id(principal::Identifier::RemoteIp(m::cidr(v)?)),
        Gen::Namespace => {
            let parts: Vec<String> = v.split('*').map(m::quote_meta).collect();
            authenticated(m::regex(&format!(".*/ns/{}/.*", parts.join(".*"))))
        }
        Gen::ServiceAccount => {
            let (ns, sa) = v.split_once('/').unwrap_or((namespace, v));
            authenticated(m::regex(&format!(
                "spiffe://.+/ns/{}/(.+/|)sa/{}(/.+)?",
                m::quote_meta(ns),
                m::quote_meta(sa)
            )))
        }
        Gen::TrustDomain => authenticated(if v == "*" {
            m::prefix("spiffe://", false)
        } else if let Some((start, end)) = v.split_once('*') {
            m::regex(&format!(
                "spiffe://{}[^/]*{}/.*",
                m::quote_meta(start),
                m::quote_meta(end)
            ))
        } else {
            m::prefix(&format!("spiffe://{v}/"), false)
        }),
        Gen::Principal => authenticated(m::string_with_prefix(v, "spiffe://")),
        Gen::Header => {
            let name = m::in_brackets(f.key.trim_start_matches("request.headers"))?;
            id(principal::Identifier::Header(m::header(name, v, false)))
        }
        other => return Err(format!("{other:?} has no principal")),
    })
}

/// The JWT fields: all values into one matcher.
pub(super) fn extended_principal(
    f: &Field<'_>,
    values: &[String],
    tcp: bool,
) -> Result<Principal, String> {
    http_only(f, tcp)?;
    Ok(match f.kind {
        Gen::RequestPrincipal => {
            let mut or: Vec<Principal> = values.iter().map(|v| request_principal(v)).collect();
            if or.len() == 1 {
                or.remove(0)
            } else {
                id(principal::Identifier::OrIds(principal::Set { ids: or }))
            }
        }
        Gen::Audiences => jwt_metadata(m::jwt_claim(&["aud"], values)),
        Gen::Presenter => jwt_metadata(m::jwt_claim(&["azp"], values)),
        Gen::Claims => {
            let claims = m::in_nested_brackets(f.key.trim_start_matches("request.auth.claims"))?;
            jwt_metadata(m::jwt_claim(&claims, values))
        }
        other => return Err(format!("{other:?} has no principal")),
    })
}

/// A request principal `ISS/SUB` (the last `/` splits, since issuers are URLs), with
/// Istio's wildcards on either side.
pub(super) fn request_principal(value: &str) -> Principal {
    let any = || m::regex(".+");
    let split = value.rfind('/').map(|i| (&value[..i], &value[i + 1..]));
    let (iss, sub): (StringMatcher, StringMatcher) = if value == "*" {
        (any(), any())
    } else if let Some(rest) = value.strip_prefix('*') {
        match split {
            Some(("*", sub)) => (any(), m::exact(sub, false)),
            Some((iss, sub)) => (m::suffix(&iss[1..], false), m::exact(sub, false)),
            None => (any(), m::suffix(rest, false)),
        }
    } else if let Some(start) = value.strip_suffix('*') {
        match split {
            Some((iss, "*")) => (m::exact(iss, false), any()),
            Some((iss, sub)) => (
                m::exact(iss, false),
                m::prefix(&sub[..sub.len() - 1], false),
            ),
            None => (m::prefix(start, false), any()),
        }
    } else {
        match split {
            Some((iss, sub)) => (m::exact(iss, false), m::exact(sub, false)),
            None => (m::exact(value, false), m::exact("", false)),
        }
    };
    id(principal::Identifier::AndIds(principal::Set {
        ids: vec![
            jwt_metadata(m::jwt_string("iss", iss)),
            jwt_metadata(m::jwt_string("sub", sub)),
        ],
    }))
}

/// One value of a permission-side field.
pub(super) fn one_permission(f: &Field<'_>, v: &str, tcp: bool) -> Result<Permission, String> {
    http_only(f, tcp)?;
    Ok(match f.kind {
        Gen::DestinationIp => rule(permission::Rule::DestinationIp(m::cidr(v)?)),
        Gen::DestinationPort => rule(permission::Rule::DestinationPort(m::port(v)?)),
        Gen::Sni => rule(permission::Rule::RequestedServerName(m::string(v))),
        Gen::Host => rule(permission::Rule::Header(m::header(":authority", v, true))),
        Gen::Method => rule(permission::Rule::Header(m::header(":method", v, false))),
        Gen::Path if v.contains("{*}") || v.contains("{**}") => {
            let template = UriTemplateMatchConfig {
                path_template: v.replace("{**}", "**").replace("{*}", "*"),
            };
            rule(permission::Rule::UriTemplate(TypedExtensionConfig {
                name: "uri-template".into(),
                typed_config: Some(any(&template)),
            }))
        }
        Gen::Path => rule(permission::Rule::UrlPath(m::path(v))),
        other => return Err(format!("{other:?} has no permission")),
    })
}

/// `experimental.envoy.filters.A.B[KEY]`: the metadata of filter `envoy.filters.A.B` at `KEY`
/// is one of the values (`[V]`: a list holding `V`).
pub(super) fn extended_permission(f: &Field<'_>, values: &[String]) -> Result<Permission, String> {
    let inner = f
        .key
        .trim_start_matches("experimental.")
        .trim_end_matches(']');
    let Some((filter, key)) = inner.split_once('[') else {
        return Err(format!("invalid key: {}", f.key));
    };
    let matchers: Vec<ValueMatcher> = values
        .iter()
        .map(
            |v| match v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
                Some(inner) => m::value_list(m::value_string(m::string(inner))),
                None => m::value_string(m::string(v)),
            },
        )
        .collect();
    #[allow(deprecated)] // Istio's form; `sourced_metadata` is the same match on the request.
    let metadata = permission::Rule::Metadata(m::metadata(filter, &[key], m::value_or(matchers)));
    Ok(rule(metadata))
}

/// The peer certificate's URI SAN (its SPIFFE id) matching `name`.
pub(super) fn authenticated(name: StringMatcher) -> Principal {
    id(principal::Identifier::Authenticated(
        principal::Authenticated {
            principal_name: Some(name),
        },
    ))
}

pub(super) fn jwt_metadata(metadata: MetadataMatcher) -> Principal {
    debug_assert_eq!(metadata.filter, JWT_FILTER);
    #[allow(deprecated)] // Istio's form; `sourced_metadata` is the same match on the request.
    id(principal::Identifier::Metadata(metadata))
}

pub(super) fn id(identifier: principal::Identifier) -> Principal {
    Principal {
        identifier: Some(identifier),
    }
}

pub(super) fn rule(rule: permission::Rule) -> Permission {
    Permission { rule: Some(rule) }
}

pub(super) fn and_ids(mut ids: Vec<Principal>) -> Principal {
    if ids.is_empty() {
        ids.push(id(principal::Identifier::Any(true)));
    }
    id(principal::Identifier::AndIds(principal::Set { ids }))
}

pub(super) fn and_rules(mut rules: Vec<Permission>) -> Permission {
    if rules.is_empty() {
        rules.push(rule(permission::Rule::Any(true)));
    }
    rule(permission::Rule::AndRules(permission::Set { rules }))
}
