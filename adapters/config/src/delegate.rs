//! VirtualService delegation, as Istio merges it (`pilot/pkg/model/virtualservice.go`): a root
//! VirtualService's HTTP rule with `delegate` is replaced by the delegate's rules, each
//! narrowed to the root rule's matches and inheriting the root rule's policies it does not set.
//!
//! A delegate is a VirtualService without hosts. Each of its rules' matches must fall within
//! one of the root rule's (a prefix under the root's prefix, the same exact path, no regex
//! beside another kind of match, the same header values, …); a delegate rule whose matches
//! conflict with all of the root's is left out ([`merge_http_routes`]). Which delegate a rule
//! names, and whether its namespace may use it, is the server's (`src/snapshot/delegates.rs`).

use std::collections::BTreeMap;

use crate::common::StringMatch;
use crate::virtual_service::{HeaderMatch, HttpMatchRequest, HttpRoute};

/// The rules a root rule with `delegate` becomes: each of `delegate` merged with `root`,
/// leaving out those whose matches conflict with the root's. The delegate's destinations keep
/// their short hosts relative to `delegate_namespace`.
pub fn merge_http_routes(
    root: &HttpRoute,
    delegate: &[HttpRoute],
    delegate_namespace: &str,
) -> Vec<HttpRoute> {
    delegate
        .iter()
        .filter_map(|sub| merge_http_route(root, sub, delegate_namespace))
        .collect()
}

fn merge_http_route(root: &HttpRoute, sub: &HttpRoute, namespace: &str) -> Option<HttpRoute> {
    let matches = merge_matches(&root.matches, &sub.matches)?;
    let mut out = sub.clone();
    out.matches = matches;
    out.name = joined(&root.name, &sub.name);
    out.delegate = None;
    out.delegate_namespace = Some(namespace.into());
    inherit(&mut out.rewrite, &root.rewrite);
    inherit(&mut out.direct_response, &root.direct_response);
    inherit(&mut out.timeout, &root.timeout);
    inherit(&mut out.retries, &root.retries);
    inherit(&mut out.fault, &root.fault);
    inherit(&mut out.mirror, &root.mirror);
    inherit(&mut out.mirror_percent, &root.mirror_percent);
    inherit(&mut out.mirror_percentage, &root.mirror_percentage);
    inherit(&mut out.cors_policy, &root.cors_policy);
    inherit(&mut out.headers, &root.headers);
    if out.mirrors.is_empty() {
        out.mirrors = root.mirrors.clone();
    }
    Some(out)
}

/// `field` takes `root`'s value when it has none.
fn inherit<T: Clone>(field: &mut Option<T>, root: &Option<T>) {
    if field.is_none() {
        field.clone_from(root);
    }
}

/// Istio's names of merged objects: `root-delegate`, or whichever is given.
fn joined(root: &str, sub: &str) -> String {
    match (root.is_empty(), sub.is_empty()) {
        (_, true) => root.to_string(),
        (true, false) => sub.to_string(),
        (false, false) => format!("{root}-{sub}"),
    }
}

/// Istio's `mergeHTTPMatchRequests`: every delegate match merged with each root match it does
/// not conflict with; `None` (a conflict) when one of them fits no root match.
fn merge_matches(
    root: &[HttpMatchRequest],
    sub: &[HttpMatchRequest],
) -> Option<Vec<HttpMatchRequest>> {
    if root.is_empty() {
        return Some(sub.to_vec());
    }
    if sub.is_empty() {
        return Some(root.to_vec());
    }
    let mut out = Vec::new();
    for leaf in sub {
        let before = out.len();
        for r in root.iter().filter(|r| !conflicts(r, leaf)) {
            out.push(merge_match(r, leaf));
        }
        if out.len() == before {
            return None;
        }
    }
    Some(out)
}

/// Istio's `mergeHTTPMatchRequest`: the delegate's conditions, with the root's where the
/// delegate gives none.
fn merge_match(root: &HttpMatchRequest, leaf: &HttpMatchRequest) -> HttpMatchRequest {
    let mut out = leaf.clone();
    out.name = joined(&root.name, &leaf.name);
    inherit(&mut out.uri, &root.uri);
    inherit(&mut out.scheme, &root.scheme);
    inherit(&mut out.method, &root.method);
    inherit(&mut out.authority, &root.authority);
    inherit(&mut out.port, &root.port);
    merged(&mut out.headers, &root.headers);
    merged(&mut out.without_headers, &root.without_headers);
    merged(&mut out.query_params, &root.query_params);
    merged(&mut out.source_labels, &root.source_labels);
    if out.source_namespace.is_empty() {
        out.source_namespace.clone_from(&root.source_namespace);
    }
    if out.gateways.is_empty() {
        out.gateways.clone_from(&root.gateways);
    }
    if out.stat_prefix.is_empty() {
        out.stat_prefix.clone_from(&root.stat_prefix);
    }
    out
}

/// `map` with `root`'s entries it does not have (Istio's `maps.MergeCopy(root, leaf)`: the
/// leaf's win).
fn merged<V: Clone>(map: &mut BTreeMap<String, V>, root: &BTreeMap<String, V>) {
    for (k, v) in root {
        map.entry(k.clone()).or_insert_with(|| v.clone());
    }
}

/// A string match as its three kinds.
#[derive(Clone, Copy, Default)]
struct Kinds<'a> {
    exact: Option<&'a str>,
    prefix: Option<&'a str>,
    regex: Option<&'a str>,
}

impl<'a> From<&'a StringMatch> for Kinds<'a> {
    fn from(m: &'a StringMatch) -> Self {
        match m {
            StringMatch::Exact(s) => Kinds {
                exact: Some(s),
                ..Default::default()
            },
            StringMatch::Prefix(s) => Kinds {
                prefix: Some(s),
                ..Default::default()
            },
            StringMatch::Regex(s) => Kinds {
                regex: Some(s),
                ..Default::default()
            },
        }
    }
}

impl<'a> From<&'a HeaderMatch> for Kinds<'a> {
    fn from(m: &'a HeaderMatch) -> Self {
        Kinds {
            exact: m.exact.as_deref(),
            prefix: m.prefix.as_deref(),
            regex: m.regex.as_deref(),
        }
    }
}

/// Istio's `hasConflict`: the leaf match does not fall within the root's.
fn conflicts(root: &HttpMatchRequest, leaf: &HttpMatchRequest) -> bool {
    let pairs = [
        (&root.uri, &leaf.uri),
        (&root.scheme, &leaf.scheme),
        (&root.method, &leaf.method),
        (&root.authority, &leaf.authority),
    ];
    if pairs
        .iter()
        .any(|(r, l)| string_conflict(r.as_ref().map(Kinds::from), l.as_ref().map(Kinds::from)))
    {
        return true;
    }
    for (root_map, leaf_map) in [
        (&root.headers, &leaf.headers),
        (&root.without_headers, &leaf.without_headers),
        (&root.query_params, &leaf.query_params),
    ] {
        let conflict = leaf_map
            .iter()
            .any(|(k, l)| string_conflict(root_map.get(k).map(Kinds::from), Some(Kinds::from(l))));
        if conflict {
            return true;
        }
    }
    if root.ignore_uri_case != leaf.ignore_uri_case {
        return true;
    }
    if let (Some(r), Some(l)) = (root.port, leaf.port)
        && r > 0
        && l > 0
        && r != l
    {
        return true;
    }
    if !root.source_namespace.is_empty() && leaf.source_namespace != root.source_namespace {
        return true;
    }
    if leaf
        .source_labels
        .iter()
        .any(|(k, v)| root.source_labels.get(k).is_some_and(|r| r != v))
    {
        return true;
    }
    !root.gateways.is_empty()
        && !leaf.gateways.is_empty()
        && leaf.gateways.iter().any(|g| !root.gateways.contains(g))
}

/// Istio's `stringMatchConflict`: no conflict when either is missing; a regex conflicts with
/// any other kind; under an exact root only the same exact value fits; under a prefix root,
/// a prefix or exact value that starts with it.
fn string_conflict(root: Option<Kinds<'_>>, leaf: Option<Kinds<'_>>) -> bool {
    let (Some(root), Some(leaf)) = (root, leaf) else {
        return false;
    };
    let any = |k: &Kinds<'_>| k.exact.is_some() || k.prefix.is_some();
    if root.regex.is_some() && (leaf.regex.is_some() || any(&leaf)) {
        return true;
    }
    if leaf.regex.is_some() && (root.regex.is_some() || any(&root)) {
        return true;
    }
    if let Some(exact) = root.exact.filter(|e| !e.is_empty()) {
        return leaf.prefix.is_some() || leaf.exact != Some(exact);
    }
    if let Some(prefix) = root.prefix.filter(|p| !p.is_empty()) {
        if let Some(p) = leaf.prefix {
            return !p.starts_with(prefix);
        }
        if let Some(e) = leaf.exact {
            return !e.starts_with(prefix);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(yaml: &str) -> HttpRoute {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn uris(routes: &[HttpRoute]) -> Vec<Vec<String>> {
        routes
            .iter()
            .map(|r| {
                r.matches
                    .iter()
                    .map(|m| format!("{:?}", m.uri.as_ref().unwrap()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn delegate_rules_are_narrowed_to_the_root_s_matches_and_conflicts_left_out() {
        let root = route(
            "name: reviews\nmatch: [{uri: {prefix: /reviews}}]\ntimeout: 3s\ndelegate: {name: d}\n",
        );
        let delegate = [
            route(
                "name: v2\nmatch: [{uri: {prefix: /reviews/v2}}]\nroute: [{destination: {host: reviews, subset: v2}}]\n",
            ),
            route(
                "match: [{uri: {exact: /reviews}}]\nroute: [{destination: {host: reviews}}]\ntimeout: 1s\n",
            ),
            // Outside the root's prefix: left out, as Istio leaves it.
            route("match: [{uri: {prefix: /ratings}}]\nroute: [{destination: {host: ratings}}]\n"),
            // No match of its own: the root's.
            route("route: [{destination: {host: reviews, subset: v1}}]\n"),
        ];
        let merged = merge_http_routes(&root, &delegate, "bookinfo");
        assert_eq!(
            uris(&merged),
            [
                vec!["Prefix(\"/reviews/v2\")".to_string()],
                vec!["Exact(\"/reviews\")".to_string()],
                vec!["Prefix(\"/reviews\")".to_string()],
            ]
        );
        let names: Vec<&str> = merged.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["reviews-v2", "reviews", "reviews"]);
        // Policies the delegate rule leaves out come from the root's.
        let timeouts: Vec<_> = merged.iter().map(|r| r.timeout.map(|t| t.0)).collect();
        assert_eq!(
            timeouts,
            [
                Some(std::time::Duration::from_secs(3)),
                Some(std::time::Duration::from_secs(1)),
                Some(std::time::Duration::from_secs(3))
            ]
        );
        assert!(
            merged.iter().all(
                |r| r.delegate.is_none() && r.delegate_namespace.as_deref() == Some("bookinfo")
            )
        );
    }

    #[test]
    fn string_matches_conflict_as_istio_s() {
        let k = |exact: Option<&'static str>,
                 prefix: Option<&'static str>,
                 regex: Option<&'static str>| {
            Some(Kinds {
                exact,
                prefix,
                regex,
            })
        };
        let cases = [
            (
                k(None, Some("/a"), None),
                k(None, Some("/a/b"), None),
                false,
            ),
            (k(None, Some("/a/b"), None), k(None, Some("/a"), None), true),
            (k(Some("/a"), None, None), k(Some("/a"), None, None), false),
            (k(Some("/a"), None, None), k(None, Some("/a"), None), true),
            (k(None, None, Some("/a.*")), k(None, Some("/a"), None), true),
            (k(None, Some("/a"), None), k(None, None, Some("/a.*")), true),
            (None, k(None, None, Some("x")), false),
        ];
        for (root, leaf, want) in cases {
            assert_eq!(string_conflict(root, leaf), want);
        }
    }
}
