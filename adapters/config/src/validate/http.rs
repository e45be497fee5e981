//! One HTTP rule of a VirtualService: what it does (route, redirect, direct response), and the
//! redirect, direct response and rewrite themselves. Matches are checked in `http_match`;
//! retries, faults, mirrors, CORS and header changes in `http_policy`.

use super::virtual_service::{check_destination, check_weights};
use super::{Problems, check_duration, check_port, http_match, http_policy, regex};
use crate::{HttpDirectResponse, HttpRedirect, HttpRewrite, HttpRoute};

/// Envoy's `RedirectResponseCode`s; other codes cannot be expressed.
const REDIRECT_CODES: [u32; 5] = [301, 302, 303, 307, 308];
/// Istio refuses larger direct-response bodies: every proxy's configuration carries them.
const MAX_BODY: usize = 1024 * 1024;
/// Istio warns above this size.
const LARGE_BODY: usize = 100 * 1024;

/// Checks the HTTP rule at `path` (`spec.http[N]`).
pub(super) fn check_route(rule: &HttpRoute, path: &str, p: &mut Problems) {
    check_action(rule, path, p);
    http_match::check(&rule.matches, path, p);
    for (j, dest) in rule.route.iter().enumerate() {
        let field = format!("{path}.route[{j}]");
        check_destination(p, &format!("{field}.destination"), &dest.destination);
        if let Some(headers) = &dest.headers {
            http_policy::check_headers(p, &format!("{field}.headers"), headers);
        }
    }
    let weights: Vec<Option<i32>> = rule.route.iter().map(|d| d.weight).collect();
    check_weights(p, &format!("{path}.route"), &weights);
    if let Some(redirect) = &rule.redirect {
        check_redirect(p, &format!("{path}.redirect"), redirect);
    }
    if let Some(response) = &rule.direct_response {
        check_direct_response(p, &format!("{path}.directResponse"), response);
    }
    if let Some(rewrite) = &rule.rewrite {
        check_rewrite(rule, p, &format!("{path}.rewrite"), rewrite);
    }
    if let Some(timeout) = &rule.timeout {
        check_duration(p, format!("{path}.timeout"), timeout);
    }
    if let Some(retries) = &rule.retries {
        http_policy::check_retries(p, &format!("{path}.retries"), retries);
    }
    if let Some(fault) = &rule.fault {
        http_policy::check_fault(p, &format!("{path}.fault"), fault);
    }
    http_policy::check_mirror(rule, path, p);
    if let Some(cors) = &rule.cors_policy {
        http_policy::check_cors(p, &format!("{path}.corsPolicy"), cors);
    }
    if let Some(headers) = &rule.headers {
        http_policy::check_headers(p, &format!("{path}.headers"), headers);
    }
}

/// Exactly one of `route`, `redirect`, `directResponse` and `delegate`; rewrites and faults only
/// where requests are forwarded.
fn check_action(rule: &HttpRoute, path: &str, p: &mut Problems) {
    let answered = rule.redirect.is_some() || rule.direct_response.is_some();
    let actions: Vec<&str> = [
        ("route", !rule.route.is_empty()),
        ("redirect", rule.redirect.is_some()),
        ("directResponse", rule.direct_response.is_some()),
        ("delegate", rule.delegate.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    match actions.as_slice() {
        [] => p.error(
            path,
            "an HTTP rule needs one of route, redirect and directResponse",
        ),
        [_] => {}
        several => p.error(
            path,
            format!(
                "{} are all set: an HTTP rule takes exactly one of route, redirect, \
                 directResponse and delegate",
                several.join(", ")
            ),
        ),
    }
    if let Some(delegate) = &rule.delegate {
        if delegate.name.is_empty() {
            p.error(format!("{path}.delegate.name"), "is required");
        } else if !super::names::is_dns1123_label(&delegate.name) {
            p.error(
                format!("{path}.delegate.name"),
                format!("{:?} is not a DNS-1123 label", delegate.name),
            );
        }
        if !delegate.namespace.is_empty() && !super::names::is_dns1123_label(&delegate.namespace) {
            p.error(
                format!("{path}.delegate.namespace"),
                format!("{:?} is not a DNS-1123 label", delegate.namespace),
            );
        }
    }
    if answered && rule.rewrite.is_some() {
        p.error(
            format!("{path}.rewrite"),
            "cannot be used with redirect or directResponse: nothing is forwarded to rewrite",
        );
    }
    if answered && rule.fault.is_some() {
        p.error(
            format!("{path}.fault"),
            "cannot be used with redirect or directResponse (as in Istio)",
        );
    }
}

fn check_redirect(p: &mut Problems, path: &str, r: &HttpRedirect) {
    if r.uri.is_empty()
        && r.authority.is_empty()
        && r.port.is_none()
        && r.derive_port.is_none()
        && r.scheme.is_empty()
    {
        p.error(
            path,
            "a redirect needs at least one of uri, authority, port, derivePort and scheme",
        );
    }
    if let Some(code) = r.redirect_code
        && !REDIRECT_CODES.contains(&code)
    {
        p.error(
            format!("{path}.redirectCode"),
            format!("{code} is not a redirect code Envoy sends: use 301, 302, 303, 307 or 308"),
        );
    }
    if let Some(port) = r.port {
        check_port(p, format!("{path}.port"), port);
    }
    if let Some(derive) = &r.derive_port {
        let field = format!("{path}.derivePort");
        if derive != "FROM_PROTOCOL_DEFAULT" && derive != "FROM_REQUEST_PORT" {
            p.error(
                &field,
                format!("{derive:?} is not FROM_PROTOCOL_DEFAULT or FROM_REQUEST_PORT"),
            );
        }
        if r.port.is_some() {
            p.error(field, "cannot be used with port: set one of them");
        }
    }
    if !r.scheme.is_empty() && r.scheme != "http" && r.scheme != "https" {
        p.error(
            format!("{path}.scheme"),
            format!("{:?} is not http or https", r.scheme),
        );
    }
}

fn check_direct_response(p: &mut Problems, path: &str, r: &HttpDirectResponse) {
    if !(200..=599).contains(&r.status) {
        p.error(
            format!("{path}.status"),
            format!("HTTP status {} is out of range 200..=599", r.status),
        );
    }
    let Some(body) = &r.body else { return };
    let field = format!("{path}.body");
    let size = match (&body.string, &body.bytes) {
        (Some(_), Some(_)) => {
            p.error(&field, "set one of string and bytes");
            return;
        }
        (Some(text), None) => text.len(),
        (None, Some(bytes)) => {
            if !is_base64(bytes) {
                p.error(format!("{field}.bytes"), "is not base64");
            }
            bytes.len() / 4 * 3
        }
        (None, None) => 0,
    };
    if size > MAX_BODY {
        p.error(
            field,
            "the body is larger than 1MiB; serve large bodies from a service",
        );
    } else if size > LARGE_BODY {
        p.warn(
            field,
            "large bodies are copied into every proxy's configuration",
        );
    }
}

fn check_rewrite(rule: &HttpRoute, p: &mut Problems, path: &str, r: &HttpRewrite) {
    if r.uri.is_empty() && r.authority.is_empty() && r.uri_regex_rewrite.is_none() {
        p.error(
            path,
            "a rewrite needs at least one of uri, uriRegexRewrite and authority",
        );
    }
    if let Some(regex) = &r.uri_regex_rewrite {
        let field = format!("{path}.uriRegexRewrite");
        if !r.uri.is_empty() {
            p.error(&field, "cannot be used with uri: set one of them");
        }
        if let Err(e) = regex::check_re2(&regex.pattern) {
            p.error(format!("{field}.match"), e);
        }
        if regex.rewrite.is_empty() {
            p.error(format!("{field}.rewrite"), "is required");
        }
    }
    // Envoy has one host rewrite per route: a second source of the authority would be lost.
    let set_host = rule
        .headers
        .as_ref()
        .and_then(|h| h.request.as_ref())
        .is_some_and(|ops| {
            ops.set
                .keys()
                .chain(ops.add.keys())
                .any(|k| k.eq_ignore_ascii_case("host") || k.eq_ignore_ascii_case(":authority"))
        });
    if !r.authority.is_empty() && set_host {
        p.error(
            format!("{path}.authority"),
            "the authority is also set by headers.request: set it in one place",
        );
    }
}

fn is_base64(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    s.len().is_multiple_of(4)
        && s.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}
