//! The match conditions of HTTP rules, and the string and header matches other parts reuse.

use std::collections::BTreeMap;

use super::names::check_gateway_ref;
use super::virtual_service::check_source_conditions;
use super::{Problems, check_port, key_path, regex};
use crate::{HeaderMatch, HttpMatchRequest, StringMatch};

/// Pseudo-headers a match may name (HTTP/2's request pseudo-headers, as Istio allows).
const PSEUDO_HEADERS: [&str; 5] = [":method", ":scheme", ":authority", ":path", ":status"];

/// Checks the `match` list of the HTTP rule at `path`.
pub(super) fn check(matches: &[HttpMatchRequest], path: &str, p: &mut Problems) {
    for (i, m) in matches.iter().enumerate() {
        let path = format!("{path}.match[{i}]");
        // Envoy accepts an empty path prefix (it matches every path); the other pseudo-headers
        // need a value.
        if let Some(uri) = &m.uri {
            check_string_match(p, &format!("{path}.uri"), uri, true);
        }
        for (name, field) in [
            ("scheme", &m.scheme),
            ("method", &m.method),
            ("authority", &m.authority),
        ] {
            if let Some(sm) = field {
                check_string_match(p, &format!("{path}.{name}"), sm, false);
            }
        }
        check_header_matches(p, &format!("{path}.headers"), &m.headers, false);
        check_header_matches(
            p,
            &format!("{path}.withoutHeaders"),
            &m.without_headers,
            true,
        );
        for (name, hm) in &m.query_params {
            let field = key_path(&format!("{path}.queryParams"), name);
            if name.is_empty() {
                p.error(&field, "query parameter names cannot be empty");
            }
            check_header_match(p, &field, hm, false);
        }
        if let Some(port) = m.port {
            check_port(p, format!("{path}.port"), port);
        }
        check_source_conditions(p, &path, &m.source_labels, &m.source_namespace);
        for (j, gateway) in m.gateways.iter().enumerate() {
            check_gateway_ref(p, &format!("{path}.gateways[{j}]"), gateway);
        }
        if !m.stat_prefix.is_empty() {
            p.ignored(format!("{path}.statPrefix"));
        }
    }
}

/// A [`StringMatch`]: a non-empty value (an empty prefix only where `empty_prefix` allows it)
/// and, for a regex, valid RE2. The path names the variant: `….uri.regex`.
pub(super) fn check_string_match(
    p: &mut Problems,
    path: &str,
    m: &StringMatch,
    empty_prefix: bool,
) {
    match m {
        StringMatch::Exact(v) if v.is_empty() => p.error(format!("{path}.exact"), "is empty"),
        StringMatch::Prefix(v) if v.is_empty() && !empty_prefix => {
            p.error(format!("{path}.prefix"), "is empty")
        }
        StringMatch::Regex(re) => {
            if let Err(e) = regex::check_re2(re) {
                p.error(format!("{path}.regex"), e);
            }
        }
        _ => {}
    }
}

/// Header names as a match may write them: lowercase tokens (Envoy compares lowercased names),
/// or a pseudo-header.
pub(super) fn check_header_name(p: &mut Problems, field: &str, name: &str) {
    let problem = if name.is_empty() {
        "header names cannot be empty".to_owned()
    } else if name.starts_with("@request.auth.claims") {
        "routing on JWT claims is not supported: wayfinder does not validate JWTs".to_owned()
    } else if PSEUDO_HEADERS.contains(&name) {
        return;
    } else if !is_token(name) {
        format!("{name:?} is not a valid header name")
    } else if name.bytes().any(|b| b.is_ascii_uppercase()) {
        format!(
            "header names are matched in lower case: write {:?}",
            name.to_ascii_lowercase()
        )
    } else {
        return;
    };
    p.error(field, problem);
}

/// True for an HTTP token (RFC 9110 `tchar`s), the characters of a header name.
pub(super) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn check_header_matches(
    p: &mut Problems,
    field: &str,
    headers: &BTreeMap<String, HeaderMatch>,
    negated: bool,
) {
    for (name, hm) in headers {
        let field = key_path(field, name);
        check_header_name(p, &field, name);
        check_header_match(p, &field, hm, negated);
    }
}

/// At most one of exact, prefix and regex; none means "present". An exact value may be empty
/// (an empty header); a prefix may not.
fn check_header_match(p: &mut Problems, field: &str, m: &HeaderMatch, negated: bool) {
    let set = [m.exact.is_some(), m.prefix.is_some(), m.regex.is_some()];
    if set.into_iter().filter(|s| *s).count() > 1 {
        p.error(field, "set at most one of exact, prefix and regex");
        return;
    }
    if m.prefix.as_deref() == Some("") {
        p.error(format!("{field}.prefix"), "is empty");
    }
    match m.regex.as_deref() {
        // Istio reads `regex: "*"` in withoutHeaders as "present"; wayfinder's route generator
        // passes regexes to Envoy as they are, where this one would be refused.
        Some("*") if negated => p.error(
            format!("{field}.regex"),
            "\"*\" is not a regular expression: to match a header that is present, write {}",
        ),
        Some(re) => {
            if let Err(e) = regex::check_re2(re) {
                p.error(format!("{field}.regex"), e);
            }
        }
        None => {}
    }
}
