//! The values of an AuthorizationPolicy's fields and `when` conditions, checked as Istio's
//! `pkg/config/security/security.go` checks them: addresses and CIDR ranges, ports, service
//! accounts, wildcards and path templates.

use std::net::IpAddr;

use super::super::Problems;

/// Istio's limit on service accounts per field (`CheckServiceAccount`).
const MAX_SERVICE_ACCOUNTS: usize = 16;

/// Istio's limit on a service account's length.
const MAX_SERVICE_ACCOUNT_LEN: usize = 320;

/// How the values of a field or a `when` attribute are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Values {
    /// Anything but empty.
    Any,
    /// Addresses or CIDR ranges.
    Ip,
    /// Port numbers.
    Port,
    /// `SA` or `NS/SA`.
    ServiceAccount,
    /// `*` at most once, at an end.
    Wildcard,
    /// A wildcard value without `/`.
    TrustDomain,
    /// A path, maybe a template.
    Path,
}

/// Each value of a list at `field`, as `kind`; every bad value is reported at its index.
pub(super) fn check_values(p: &mut Problems, field: &str, values: &[String], kind: Values) {
    if kind == Values::ServiceAccount && values.len() > MAX_SERVICE_ACCOUNTS {
        p.error(
            field,
            format!(
                "has {} service accounts: at most {MAX_SERVICE_ACCOUNTS} are allowed; split \
                 them over several sources",
                values.len()
            ),
        );
    }
    for (i, value) in values.iter().enumerate() {
        let problem = if value.is_empty() {
            Some("is empty".to_string())
        } else {
            match kind {
                Values::Any => None,
                Values::Ip => ip_problem(value),
                Values::Port => port_problem(value),
                Values::ServiceAccount => service_account_problem(value),
                Values::Wildcard => wildcard_problem(value),
                Values::TrustDomain => wildcard_problem(value).or_else(|| {
                    value
                        .contains('/')
                        .then(|| format!("{value:?} is not a trust domain: it cannot contain '/'"))
                }),
                Values::Path => path_template_problem(value),
            }
        };
        if let Some(message) = problem {
            p.error(format!("{field}[{i}]"), message);
        }
    }
}

/// An address or a CIDR range, IPv4 or IPv6, as Go's `netip.ParseAddr` and `ParsePrefix`
/// read them (a prefix length in decimal, without sign or leading zero).
fn ip_problem(value: &str) -> Option<String> {
    let Some((address, len)) = value.split_once('/') else {
        return value.parse::<IpAddr>().is_err().then(|| {
            format!(
                "{value:?} is not an IP address or CIDR range (e.g. 10.1.2.3, 10.1.0.0/16, \
                 2001:db8::/32)"
            )
        });
    };
    let Ok(ip) = address.parse::<IpAddr>() else {
        return Some(format!(
            "{value:?} is not a CIDR range: {address:?} is not an IP address"
        ));
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let decimal = !len.is_empty()
        && len.bytes().all(|b| b.is_ascii_digit())
        && (len == "0" || !len.starts_with('0'));
    if decimal && len.parse::<u32>().is_ok_and(|l| l <= max) {
        None
    } else {
        Some(format!(
            "{value:?} is not a CIDR range: the prefix length must be a number from 0 to {max}"
        ))
    }
}

/// A port as Istio's `ValidatePorts` reads it: a decimal number from 0 to 65535.
fn port_problem(value: &str) -> Option<String> {
    let ok =
        value.bytes().all(|b| b.is_ascii_digit()) && value.parse::<u32>().is_ok_and(|n| n <= 65535);
    (!ok).then(|| format!("{value:?} is not a port: expected a number from 0 to 65535"))
}

/// Istio's `CheckServiceAccount`: `SA` (in the policy's namespace) or `NS/SA`, no wildcard.
fn service_account_problem(value: &str) -> Option<String> {
    let expected = "expected SERVICE_ACCOUNT (in the policy's namespace) or \
                    NAMESPACE/SERVICE_ACCOUNT";
    if value.contains('*') {
        return Some(format!(
            "{value:?}: wildcards are not allowed in service accounts"
        ));
    }
    if value.matches('/').count() > 1 {
        return Some(format!("{value:?} has more than one '/': {expected}"));
    }
    if value.len() > MAX_SERVICE_ACCOUNT_LEN {
        return Some(format!(
            "is {} characters long: at most {MAX_SERVICE_ACCOUNT_LEN}",
            value.len()
        ));
    }
    match value.split_once('/') {
        Some(("", _)) => Some(format!("{value:?} has an empty namespace: {expected}")),
        Some((_, "")) => Some(format!(
            "{value:?} has an empty service account: {expected}"
        )),
        _ => None,
    }
}

/// Istio's `CheckWildcardValues`: exact, `prefix*`, `*suffix`, or `*`.
fn wildcard_problem(value: &str) -> Option<String> {
    match value.matches('*').count() {
        0 => None,
        1 if value.starts_with('*') || value.ends_with('*') => None,
        1 => Some(format!(
            "{value:?}: '*' is only allowed at the start or the end"
        )),
        _ => Some(format!("{value:?}: at most one '*' is allowed")),
    }
}

/// Istio's `CheckValidPathTemplate`: `{*}` and `{**}` only as whole segments, nothing but
/// literal segments after `{**}`, and in a template, segments of URL path characters.
fn path_template_problem(path: &str) -> Option<String> {
    let template = path.contains("{*}") || path.contains("{**}");
    let mut match_any = false;
    for segment in path.trim_matches('/').split('/') {
        match segment {
            "{*}" | "{**}" if match_any => {
                return Some(format!(
                    "{path:?}: {{**}} must be the last operator of a path template"
                ));
            }
            "{*}" => continue,
            "{**}" => {
                match_any = true;
                continue;
            }
            _ => {}
        }
        if segment.contains(['{', '}']) {
            return Some(format!(
                "{path:?}: '{{' and '}}' are only allowed in the operators {{*}} and {{**}}, \
                 each a whole segment"
            ));
        }
        if template && !is_literal(segment) {
            return Some(format!(
                "{path:?}: segment {segment:?} of a path template must be one or more \
                 letters, digits and -._~%!$&'()+,;:@="
            ));
        }
    }
    None
}

/// A path template's literal segment: RFC 3986 `pchar`s, as Istio's `validLiteral`.
fn is_literal(segment: &str) -> bool {
    !segment.is_empty()
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~%!$&'()+,;:@=".contains(&b))
}
