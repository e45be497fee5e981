//! RequestAuthentication as Envoy's JWT filter (`envoy.filters.http.jwt_authn`), as istiod's
//! `policy_applier.go` builds it:
//!
//! - the JWT rules of every RequestAuthentication that applies to the workload, in issuer order
//!   (stable), are providers `origins-0`, `origins-1`, …, each putting the verified payload in
//!   the request's metadata under `payload` (where AuthorizationPolicy's `requestPrincipals`
//!   and `request.auth.*` rules read it), with the rule's audiences, token locations, forwarded
//!   headers and the space-delimited claims (`permission`, `scope` and the rule's);
//! - one requirement for every path: any provider's valid token, or none at all
//!   (`allow_missing`); with several providers, a present token must also be valid for one of
//!   them. So an invalid token is refused (401) and a request without one passes, for
//!   AuthorizationPolicy to decide; CORS preflights pass;
//! - the keys are inlined: a rule's `jwks`, else what the control plane fetched for its
//!   `jwksUri` or issuer (`crate::jwks`), else a key nobody can sign with;
//! - gateways clear the route cache after verification, so that routes can match claims.
//!
//! It goes in every HTTP chain of the workload's inbound listener and of a gateway's, before
//! the RBAC filters. TCP chains have no JWT: AuthorizationPolicy's JWT fields are HTTP-only
//! there (see `authz/rule.rs`).

use std::sync::Arc;

use wayfinder_config::request_authentication::JwtRule;

use super::proto::any;
use crate::jwks::JwksTable;
use crate::xds::pb::core::{DataSource, data_source};
use crate::xds::pb::hcm::{HttpFilter, http_filter};
use crate::xds::pb::jwt_authn::{
    JwtAuthentication, JwtClaimToHeader, JwtHeader, JwtProvider, JwtRequirement,
    JwtRequirementAndList, JwtRequirementOrList, RequirementRule, jwt_provider,
    jwt_requirement::RequiresType, requirement_rule::RequirementType,
};
use crate::xds::pb::protobuf::Empty;
use crate::xds::pb::route::{RouteMatch, route_match};

/// The JWT filter's name.
pub(crate) const JWT_FILTER: &str = "envoy.filters.http.jwt_authn";

/// The metadata key the verified payload goes under (AuthorizationPolicy reads it there).
pub(crate) const PAYLOAD: &str = "payload";

/// A JWT rule with the keys to inline for it (the rule's own, fetched ones, or the fallback).
pub(crate) struct Keyed<'a> {
    pub(crate) rule: &'a JwtRule,
    pub(crate) jwks: Option<Arc<str>>,
}

/// The keys of each rule of `rules`, from the rule or from `table`.
pub(crate) fn keyed<'a>(rules: &[&'a JwtRule], table: &JwksTable) -> Vec<Keyed<'a>> {
    rules
        .iter()
        .map(|rule| Keyed {
            rule,
            jwks: if rule.jwks.is_empty() {
                table.jwks(&rule.issuer, &rule.jwks_uri)
            } else {
                // Proxies verify with public keys only, and their configuration is shown on
                // debug pages: private key material someone left in (validation warns) goes.
                Some(
                    crate::jwks::without_private_keys(&rule.jwks, false)
                        .map_or_else(|| rule.jwks.as_str().into(), Arc::from),
                )
            },
        })
        .collect()
}

/// The JWT filter of `rules` (every rule of the RequestAuthentications that apply), for a
/// gateway (`clear_route_cache`) or a sidecar; none without rules with keys.
pub(crate) fn filter(rules: &[Keyed<'_>], gateway: bool) -> Option<HttpFilter> {
    let mut sorted: Vec<&Keyed<'_>> = rules.iter().filter(|r| r.jwks.is_some()).collect();
    sorted.sort_by(|a, b| a.rule.issuer.cmp(&b.rule.issuer));
    if sorted.is_empty() {
        return None;
    }
    let names: Vec<String> = (0..sorted.len()).map(|i| format!("origins-{i}")).collect();
    let providers = names
        .iter()
        .zip(&sorted)
        .map(|(name, keyed)| (name.clone(), provider(keyed, gateway)))
        .collect();
    let config = JwtAuthentication {
        providers,
        rules: vec![RequirementRule {
            r#match: Some(RouteMatch {
                path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
                ..Default::default()
            }),
            requirement_type: Some(RequirementType::Requires(requirement(&names))),
        }],
        bypass_cors_preflight: true,
        ..Default::default()
    };
    Some(HttpFilter {
        name: JWT_FILTER.into(),
        config_type: Some(http_filter::ConfigType::TypedConfig(any(&config))),
        ..Default::default()
    })
}

fn provider(keyed: &Keyed<'_>, gateway: bool) -> JwtProvider {
    let rule = keyed.rule;
    let mut claims: Vec<String> = ["permission", "scope"]
        .into_iter()
        .map(String::from)
        .chain(rule.space_delimited_claims.iter().cloned())
        .collect();
    claims.sort();
    claims.dedup();
    JwtProvider {
        issuer: rule.issuer.clone(),
        audiences: rule.audiences.clone(),
        forward: rule.forward_original_token,
        from_headers: rule
            .from_headers
            .iter()
            .map(|h| JwtHeader {
                name: h.name.clone(),
                value_prefix: h.prefix.clone(),
            })
            .collect(),
        from_params: rule.from_params.clone(),
        from_cookies: rule.from_cookies.clone(),
        forward_payload_header: rule.output_payload_to_header.clone(),
        payload_in_metadata: PAYLOAD.into(),
        normalize_payload_in_metadata: Some(jwt_provider::NormalizePayload {
            space_delimited_claims: claims,
        }),
        claim_to_headers: rule
            .output_claim_to_headers
            .iter()
            .map(|c| JwtClaimToHeader {
                header_name: c.header.clone(),
                claim_name: c.claim.clone(),
                ..Default::default()
            })
            .collect(),
        clear_route_cache: gateway,
        jwks_source_specifier: keyed.jwks.as_ref().map(|jwks| {
            jwt_provider::JwksSourceSpecifier::LocalJwks(DataSource {
                specifier: Some(data_source::Specifier::InlineString(jwks.to_string())),
                ..Default::default()
            })
        }),
        ..Default::default()
    }
}

/// Any provider's valid token, or none; with several providers, a present token must be valid
/// for one (Istio's outer OR with the AND of "this provider or missing").
fn requirement(names: &[String]) -> JwtRequirement {
    let one = |name: &String| requires(RequiresType::ProviderName(name.clone()));
    let or_missing = |name: &String| {
        requires(RequiresType::RequiresAny(JwtRequirementOrList {
            requirements: vec![one(name), requires(RequiresType::AllowMissing(Empty {}))],
        }))
    };
    match names {
        [name] => or_missing(name),
        _ => {
            let mut any: Vec<JwtRequirement> = names.iter().map(one).collect();
            any.push(requires(RequiresType::RequiresAll(JwtRequirementAndList {
                requirements: names.iter().map(or_missing).collect(),
            })));
            requires(RequiresType::RequiresAny(JwtRequirementOrList {
                requirements: any,
            }))
        }
    }
}

fn requires(requires_type: RequiresType) -> JwtRequirement {
    JwtRequirement {
        requires_type: Some(requires_type),
    }
}
