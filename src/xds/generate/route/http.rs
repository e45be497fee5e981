//! VirtualService HTTP rules as Envoy routes (istio/istio `pilot/pkg/networking/core/route`).
//!
//! Rules keep their order (first match wins); a rule with several match blocks becomes one
//! route per block. Istio's defaults apply where a field is absent: no timeout, Istio's
//! default retry policy, 100 % for fault and mirror percentages, redirect code 301.

use std::collections::HashMap;

use wayfinder_config::{HeaderMatch, HttpMatchRequest, HttpRetry, HttpRoute, StringMatch};

use super::super::policy::duration;
use super::super::proto::{any, bool_value, seconds, u32_value};
use super::Destinations;
use super::filters::{apply_headers, cors_policy, fault, header_ops, per_million};
use crate::xds::pb::core::{self, DataSource, data_source};
use crate::xds::pb::matcher::{
    RegexMatchAndSubstitute, RegexMatcher, StringMatcher, string_matcher,
};
use crate::xds::pb::previous_hosts::PreviousHostsPredicate;
use crate::xds::pb::route::{
    DirectResponseAction, HeaderMatcher, QueryParameterMatcher, RedirectAction, RetryPolicy, Route,
    RouteAction, RouteMatch, WeightedCluster, header_matcher, query_parameter_matcher,
    redirect_action, retry_policy, route, route_action, route_match, weighted_cluster,
};

/// The filter names Envoy looks up per-route configuration under.
pub(crate) const FAULT_FILTER: &str = "envoy.filters.http.fault";
/// The CORS filter's name.
pub(crate) const CORS_FILTER: &str = "envoy.filters.http.cors";

/// Istio's default retry conditions (`MeshConfig.defaultHttpRetryPolicy` unset).
const RETRY_ON: &str =
    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";

/// Who the routes are for: sidecars, or a gateway known by these names (`ns/name`, and
/// `name` when the VirtualService shares the gateway's namespace).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bound<'a> {
    /// Sidecars (`mesh`).
    Mesh,
    /// A gateway.
    Gateway(&'a [String]),
}

/// The routes of a VirtualService's HTTP rules that apply to listener port `port`.
pub(crate) fn routes(
    rules: &[HttpRoute],
    port: u16,
    bound: Bound<'_>,
    dest: &Destinations<'_>,
) -> Vec<Route> {
    let mut out = Vec::new();
    for rule in rules {
        // A rule a delegate gave resolves short hosts in the delegate's namespace.
        let scoped;
        let dest = match rule.delegate_namespace.as_deref() {
            Some(namespace) => {
                scoped = dest.in_namespace(namespace);
                &scoped
            }
            None => dest,
        };
        if rule.matches.is_empty() {
            out.push(convert(rule, None, dest));
            continue;
        }
        for m in rule.matches.iter().filter(|m| applies(m, port, bound)) {
            out.push(convert(rule, Some(m), dest));
        }
    }
    out
}

/// A match block applies on `port` when it names no port or that port, and no gateways or
/// the ones the routes are for.
fn applies(m: &HttpMatchRequest, port: u16, bound: Bound<'_>) -> bool {
    let gateways = m.gateways.is_empty()
        || match bound {
            Bound::Mesh => m.gateways.iter().any(|g| g == "mesh"),
            Bound::Gateway(names) => m.gateways.iter().any(|g| names.contains(g)),
        };
    m.port.is_none_or(|p| p == u32::from(port)) && gateways
}

fn convert(rule: &HttpRoute, m: Option<&HttpMatchRequest>, dest: &Destinations<'_>) -> Route {
    let name = match m.map(|m| m.name.as_str()).filter(|n| !n.is_empty()) {
        Some(match_name) if !rule.name.is_empty() => format!("{}.{match_name}", rule.name),
        Some(match_name) => match_name.to_string(),
        None => rule.name.clone(),
    };
    let mut route = Route {
        name,
        r#match: Some(route_match(m)),
        action: Some(action(rule, m, dest)),
        ..Default::default()
    };
    let mut per_filter = HashMap::new();
    if let Some(f) = &rule.fault {
        per_filter.insert(FAULT_FILTER.to_string(), any(&fault(f)));
    }
    if let Some(c) = &rule.cors_policy {
        per_filter.insert(CORS_FILTER.to_string(), any(&cors_policy(c)));
    }
    route.typed_per_filter_config = per_filter;
    if let Some(h) = &rule.headers {
        apply_headers(&mut route, h);
    }
    route
}

/// Istio's default route action to one cluster: no timeout, default retries.
pub(crate) fn default_action(cluster: String) -> route::Action {
    route::Action::Route(RouteAction {
        cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster)),
        timeout: seconds(0),
        retry_policy: retry(None),
        ..Default::default()
    })
}

fn route_match(m: Option<&HttpMatchRequest>) -> RouteMatch {
    let mut out = RouteMatch {
        path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
        ..Default::default()
    };
    let Some(m) = m else { return out };
    if let Some(uri) = &m.uri {
        out.path_specifier = Some(match uri {
            StringMatch::Exact(p) => route_match::PathSpecifier::Path(p.clone()),
            StringMatch::Prefix(p) => route_match::PathSpecifier::Prefix(p.clone()),
            StringMatch::Regex(r) => route_match::PathSpecifier::SafeRegex(regex(r)),
        });
    }
    if m.ignore_uri_case {
        out.case_sensitive = bool_value(false);
    }
    let mut headers: Vec<HeaderMatcher> =
        m.headers.iter().map(|(k, v)| header(k, v, false)).collect();
    headers.extend(m.without_headers.iter().map(|(k, v)| header(k, v, true)));
    for (pseudo, value) in [
        (":method", &m.method),
        (":authority", &m.authority),
        (":scheme", &m.scheme),
    ] {
        if let Some(v) = value {
            headers.push(HeaderMatcher {
                name: pseudo.into(),
                header_match_specifier: Some(header_matcher::HeaderMatchSpecifier::StringMatch(
                    string(v),
                )),
                ..Default::default()
            });
        }
    }
    // Istio sorts header matchers by name, so the route's bytes do not depend on map order.
    headers.sort_by(|a, b| {
        a.name
            .cmp(&b.name)
            .then(a.invert_match.cmp(&b.invert_match))
    });
    out.headers = headers;
    out.query_parameters = m
        .query_params
        .iter()
        .map(|(name, v)| QueryParameterMatcher {
            name: name.clone(),
            query_parameter_match_specifier: Some(match to_string_matcher(v) {
                Some(s) => query_parameter_matcher::QueryParameterMatchSpecifier::StringMatch(s),
                None => query_parameter_matcher::QueryParameterMatchSpecifier::PresentMatch(true),
            }),
        })
        .collect();
    out
}

fn header(name: &str, m: &HeaderMatch, invert: bool) -> HeaderMatcher {
    let specifier = match to_string_matcher(m) {
        Some(s) => header_matcher::HeaderMatchSpecifier::StringMatch(s),
        None => header_matcher::HeaderMatchSpecifier::PresentMatch(true),
    };
    HeaderMatcher {
        name: name.to_string(),
        header_match_specifier: Some(specifier),
        invert_match: invert,
        // `withoutHeaders: {x: {exact: v}}` must also match requests without `x` at all.
        treat_missing_header_as_empty: invert,
    }
}

fn to_string_matcher(m: &HeaderMatch) -> Option<StringMatcher> {
    let sm = match (&m.exact, &m.prefix, &m.regex) {
        (Some(e), _, _) => StringMatch::Exact(e.clone()),
        (_, Some(p), _) => StringMatch::Prefix(p.clone()),
        (_, _, Some(r)) => StringMatch::Regex(r.clone()),
        _ => return None,
    };
    Some(string(&sm))
}

pub(crate) fn string(m: &StringMatch) -> StringMatcher {
    let pattern = match m {
        StringMatch::Exact(s) => string_matcher::MatchPattern::Exact(s.clone()),
        StringMatch::Prefix(s) => string_matcher::MatchPattern::Prefix(s.clone()),
        StringMatch::Regex(r) => string_matcher::MatchPattern::SafeRegex(regex(r)),
    };
    StringMatcher {
        match_pattern: Some(pattern),
        ..Default::default()
    }
}

fn regex(r: &str) -> RegexMatcher {
    RegexMatcher {
        regex: r.to_string(),
        ..Default::default()
    }
}

fn action(
    rule: &HttpRoute,
    m: Option<&HttpMatchRequest>,
    dest: &Destinations<'_>,
) -> route::Action {
    if let Some(r) = &rule.redirect {
        let code = match r.redirect_code.unwrap_or(301) {
            302 => redirect_action::RedirectResponseCode::Found,
            303 => redirect_action::RedirectResponseCode::SeeOther,
            307 => redirect_action::RedirectResponseCode::TemporaryRedirect,
            308 => redirect_action::RedirectResponseCode::PermanentRedirect,
            _ => redirect_action::RedirectResponseCode::MovedPermanently,
        };
        return route::Action::Redirect(RedirectAction {
            host_redirect: r.authority.clone(),
            port_redirect: r.port.unwrap_or(0),
            path_rewrite_specifier: (!r.uri.is_empty())
                .then(|| redirect_action::PathRewriteSpecifier::PathRedirect(r.uri.clone())),
            scheme_rewrite_specifier: (!r.scheme.is_empty())
                .then(|| redirect_action::SchemeRewriteSpecifier::SchemeRedirect(r.scheme.clone())),
            response_code: code as i32,
            ..Default::default()
        });
    }
    if let Some(d) = &rule.direct_response {
        let body = d.body.as_ref().and_then(|b| {
            let specifier = match (&b.string, &b.bytes) {
                (Some(s), _) => data_source::Specifier::InlineString(s.clone()),
                (_, Some(b)) => data_source::Specifier::InlineString(b.clone()),
                _ => return None,
            };
            Some(DataSource {
                specifier: Some(specifier),
                ..Default::default()
            })
        });
        return route::Action::DirectResponse(DirectResponseAction {
            status: d.status,
            body,
            ..Default::default()
        });
    }
    let mut action = RouteAction {
        timeout: Some(
            rule.timeout
                .map_or(crate::xds::pb::protobuf::Duration::default(), |t| {
                    duration(t.0)
                }),
        ),
        retry_policy: retry(rule.retries.as_deref()),
        ..Default::default()
    };
    set_destinations(&mut action, rule, dest);
    if let Some(rw) = &rule.rewrite {
        if !rw.uri.is_empty() {
            // An exact match is rewritten whole; a prefix match has its prefix replaced.
            let exact = matches!(m.and_then(|m| m.uri.as_ref()), Some(StringMatch::Exact(_)));
            if exact {
                action.regex_rewrite = Some(RegexMatchAndSubstitute {
                    pattern: Some(regex(".*")),
                    substitution: rw.uri.clone(),
                });
            } else {
                action.prefix_rewrite = rw.uri.clone();
            }
        }
        if let Some(rr) = &rw.uri_regex_rewrite {
            action.regex_rewrite = Some(RegexMatchAndSubstitute {
                pattern: Some(regex(&rr.pattern)),
                substitution: rr.rewrite.clone(),
            });
        }
        if !rw.authority.is_empty() {
            action.host_rewrite_specifier = Some(
                route_action::HostRewriteSpecifier::HostRewriteLiteral(rw.authority.clone()),
            );
        }
    }
    if let Some(mirror) = &rule.mirror {
        let percent = rule
            .mirror_percentage
            .map(|p| p.value)
            .or(rule.mirror_percent.map(f64::from));
        action.request_mirror_policies = vec![route_action::RequestMirrorPolicy {
            cluster: dest.cluster(mirror),
            runtime_fraction: Some(core::RuntimeFractionalPercent {
                default_value: Some(per_million(percent.unwrap_or(100.0))),
                ..Default::default()
            }),
            trace_sampled: bool_value(false),
            ..Default::default()
        }];
    }
    route::Action::Route(action)
}

/// One destination → `cluster`; several → weighted clusters (zero weights dropped, as Istio).
fn set_destinations(action: &mut RouteAction, rule: &HttpRoute, dest: &Destinations<'_>) {
    let live: Vec<_> = rule
        .route
        .iter()
        .filter(|d| rule.route.len() == 1 || d.weight.unwrap_or(0) > 0)
        .collect();
    for d in &live {
        super::super::policy::add_hash_policies(action, dest.hash_policies(&d.destination));
    }
    if let [only] = live.as_slice() {
        action.cluster_specifier = Some(route_action::ClusterSpecifier::Cluster(
            dest.cluster(&only.destination),
        ));
        return;
    }
    let clusters = live
        .iter()
        .map(|d| {
            let mut weight = weighted_cluster::ClusterWeight {
                name: dest.cluster(&d.destination),
                weight: u32_value(u32::try_from(d.weight.unwrap_or(0)).unwrap_or(0)),
                ..Default::default()
            };
            if let Some(h) = &d.headers {
                let (req_add, req_remove, resp_add, resp_remove) = header_ops(h);
                weight.request_headers_to_add = req_add;
                weight.request_headers_to_remove = req_remove;
                weight.response_headers_to_add = resp_add;
                weight.response_headers_to_remove = resp_remove;
            }
            weight
        })
        .collect();
    action.cluster_specifier = Some(route_action::ClusterSpecifier::WeightedClusters(
        WeightedCluster {
            clusters,
            ..Default::default()
        },
    ));
}

/// Istio's retry policy: the default when unset, none for `attempts: 0`; status codes in
/// `retryOn` become retriable status codes.
fn retry(r: Option<&HttpRetry>) -> Option<RetryPolicy> {
    let mut policy = RetryPolicy {
        retry_on: RETRY_ON.into(),
        num_retries: u32_value(2),
        retry_host_predicate: vec![retry_policy::RetryHostPredicate {
            name: "envoy.retry_host_predicates.previous_hosts".into(),
            config_type: Some(retry_policy::retry_host_predicate::ConfigType::TypedConfig(
                any(&PreviousHostsPredicate {}),
            )),
        }],
        host_selection_retry_max_attempts: 5,
        retriable_status_codes: vec![503],
        ..Default::default()
    };
    let Some(r) = r else { return Some(policy) };
    if r.attempts <= 0 {
        return None;
    }
    policy.num_retries = u32_value(u32::try_from(r.attempts).unwrap_or(0));
    if !r.retry_on.is_empty() {
        let (codes, names): (Vec<&str>, Vec<&str>) = r
            .retry_on
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .partition(|s| s.parse::<u32>().is_ok());
        policy.retriable_status_codes = codes.iter().filter_map(|c| c.parse().ok()).collect();
        let mut names: Vec<&str> = names;
        if !policy.retriable_status_codes.is_empty() && !names.contains(&"retriable-status-codes") {
            names.push("retriable-status-codes");
        }
        policy.retry_on = names.join(",");
    }
    policy.per_try_timeout = r.per_try_timeout.map(|d| duration(d.0));
    Some(policy)
}

/// True when a route carries more than one per-filter configuration: its encoding then
/// depends on map order (see `canonical.rs`).
pub(crate) fn has_unordered_maps(route: &Route) -> bool {
    route.typed_per_filter_config.len() > 1
}
