//! What an HTTP rule does besides choosing a destination: retries, fault injection, mirroring,
//! CORS and header changes.

use super::http_match::{check_string_match, is_token};
use super::virtual_service::check_destination;
use super::{Problems, check_duration, check_percent, key_path};
use crate::{
    CorsPolicy, FaultAbort, FaultDelay, HeaderOperations, Headers, HttpFaultInjection, HttpRetry,
    HttpRoute,
};

/// Envoy's `retry_on` conditions (`x-envoy-retry-on` and `x-envoy-retry-grpc-on`), as Istio
/// lists them.
const RETRY_ON: [&str; 16] = [
    "5xx",
    "gateway-error",
    "reset",
    "reset-before-request",
    "connect-failure",
    "envoy-ratelimited",
    "retriable-4xx",
    "refused-stream",
    "retriable-status-codes",
    "retriable-headers",
    "http3-post-connect-failure",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

/// Methods a CORS policy may allow (Istio's list).
const CORS_METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE", "*",
];

/// Retries: attempts, per-try timeout and Envoy's `retry_on` conditions.
pub(super) fn check_retries(p: &mut Problems, path: &str, r: &HttpRetry) {
    if r.attempts < 0 {
        p.error(format!("{path}.attempts"), "cannot be negative");
    } else if r.attempts == 0
        && (r.per_try_timeout.is_some()
            || !r.retry_on.is_empty()
            || r.retry_remote_localities.is_some())
    {
        // As in Istio: the other settings suggest retries were wanted, but 0 disables them.
        p.error(
            format!("{path}.attempts"),
            "is 0, which disables retries, yet other retry settings are given: set attempts",
        );
    }
    if let Some(timeout) = &r.per_try_timeout {
        check_duration(p, format!("{path}.perTryTimeout"), timeout);
    }
    if !r.retry_on.is_empty() {
        for condition in r.retry_on.split(',').map(str::trim) {
            let is_status = condition
                .parse::<u16>()
                .is_ok_and(|c| (100..=599).contains(&c));
            if !is_status && !RETRY_ON.contains(&condition) {
                p.error(
                    format!("{path}.retryOn"),
                    format!(
                        "{condition:?} is not a retry condition: expected a comma-separated list \
                         of {} or HTTP status codes",
                        RETRY_ON.join(", ")
                    ),
                );
            }
        }
    }
    if let Some(backoff) = &r.backoff {
        check_duration(p, format!("{path}.backoff"), backoff);
        p.ignored(format!("{path}.backoff"));
    }
    if r.retry_ignore_previous_hosts.is_some() {
        p.ignored(format!("{path}.retryIgnorePreviousHosts"));
    }
}

/// Fault injection: a fixed delay and/or an abort with an HTTP or gRPC status.
pub(super) fn check_fault(p: &mut Problems, path: &str, f: &HttpFaultInjection) {
    if f.delay.is_none() && f.abort.is_none() {
        p.error(path, "a fault needs a delay, an abort or both");
    }
    if let Some(delay) = &f.delay {
        check_delay(p, &format!("{path}.delay"), delay);
    }
    if let Some(abort) = &f.abort {
        check_abort(p, &format!("{path}.abort"), abort);
    }
}

/// `mirror` with its percentages; `mirrors` is not supported yet.
pub(super) fn check_mirror(rule: &HttpRoute, path: &str, p: &mut Problems) {
    if let Some(mirror) = &rule.mirror {
        check_destination(p, &format!("{path}.mirror"), mirror);
    }
    if let Some(percentage) = &rule.mirror_percentage {
        check_percent(p, &format!("{path}.mirrorPercentage"), percentage);
    }
    if let Some(percent) = rule.mirror_percent {
        let field = format!("{path}.mirrorPercent");
        if percent > 100 {
            p.error(&field, format!("{percent} is out of range 0..=100"));
        }
        if rule.mirror_percentage.is_some() {
            p.error(
                field,
                "cannot be used with mirrorPercentage: set only mirrorPercentage",
            );
        } else {
            p.deprecated(field, "mirrorPercentage");
        }
    }
    if !rule.mirrors.is_empty() {
        let field = format!("{path}.mirrors");
        if rule.mirror.is_some() {
            p.error(&field, "cannot be used with mirror: set one of them");
        }
        p.ignored(field);
    }
}

/// CORS: origins, methods, header names and the preflight cache time.
pub(super) fn check_cors(p: &mut Problems, path: &str, c: &CorsPolicy) {
    for (i, origin) in c.allow_origins.iter().enumerate() {
        check_string_match(p, &format!("{path}.allowOrigins[{i}]"), origin, false);
    }
    if !c.allow_origin.is_empty() {
        for (i, origin) in c.allow_origin.iter().enumerate() {
            if origin.is_empty() {
                p.error(format!("{path}.allowOrigin[{i}]"), "is empty");
            }
        }
        p.deprecated(format!("{path}.allowOrigin"), "allowOrigins");
    }
    for (i, method) in c.allow_methods.iter().enumerate() {
        if !CORS_METHODS.contains(&method.as_str()) {
            p.error(
                format!("{path}.allowMethods[{i}]"),
                format!("{method:?} is not an HTTP method (methods are upper case)"),
            );
        }
    }
    for (list, names) in [
        ("allowHeaders", &c.allow_headers),
        ("exposeHeaders", &c.expose_headers),
    ] {
        for (i, name) in names.iter().enumerate() {
            if name != "*" && !is_token(name) {
                p.error(
                    format!("{path}.{list}[{i}]"),
                    format!("{name:?} is not a valid header name"),
                );
            }
        }
    }
    if let Some(max_age) = &c.max_age {
        // Access-Control-Max-Age is in whole seconds.
        if max_age.0.as_secs() < 1 || max_age.0.subsec_nanos() != 0 {
            p.error(
                format!("{path}.maxAge"),
                format!("{max_age} is not a whole number of seconds, at least 1s"),
            );
        }
    }
    if let Some(mode) = &c.unmatched_preflights
        && !["UNSPECIFIED", "FORWARD", "IGNORE"].contains(&mode.as_str())
    {
        p.error(
            format!("{path}.unmatchedPreflights"),
            format!("{mode:?} is not FORWARD or IGNORE"),
        );
    }
}

/// Header changes of a rule or a destination, following Envoy's rules: pseudo-headers cannot be
/// changed, except the authority of requests (`:authority` or `host` in `set` and `add`).
pub(super) fn check_headers(p: &mut Problems, path: &str, h: &Headers) {
    if let Some(ops) = &h.request {
        check_operations(p, &format!("{path}.request"), ops, true);
    }
    if let Some(ops) = &h.response {
        check_operations(p, &format!("{path}.response"), ops, false);
    }
}

fn check_operations(p: &mut Problems, path: &str, ops: &HeaderOperations, request: bool) {
    for (list, map) in [("set", &ops.set), ("add", &ops.add)] {
        for (name, value) in map {
            let field = key_path(&format!("{path}.{list}"), name);
            let authority =
                name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case(":authority");
            if !(request && authority) {
                check_operation_name(p, &field, name);
            }
            if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
                p.error(field, "header values cannot contain control characters");
            }
        }
    }
    for (i, name) in ops.remove.iter().enumerate() {
        check_operation_name(p, &format!("{path}.remove[{i}]"), name);
    }
}

fn check_operation_name(p: &mut Problems, field: &str, name: &str) {
    if name.is_empty() {
        p.error(field, "header names cannot be empty");
    } else if name.starts_with(':') || name.eq_ignore_ascii_case("host") {
        p.error(field, format!("{name:?} cannot be changed here"));
    }
}

fn check_delay(p: &mut Problems, path: &str, d: &FaultDelay) {
    if d.exponential_delay.is_some() {
        p.error(
            format!("{path}.exponentialDelay"),
            "not supported (as in Istio): use fixedDelay",
        );
    }
    match &d.fixed_delay {
        Some(delay) => check_duration(p, format!("{path}.fixedDelay"), delay),
        None if d.exponential_delay.is_none() => {
            p.error(format!("{path}.fixedDelay"), "is required");
        }
        None => {}
    }
    if let Some(percentage) = &d.percentage {
        check_percent(p, &format!("{path}.percentage"), percentage);
    }
    if let Some(percent) = d.percent {
        let field = format!("{path}.percent");
        if !(0..=100).contains(&percent) {
            p.error(&field, format!("{percent} is out of range 0..=100"));
        }
        if d.percentage.is_some() {
            p.error(field, "cannot be used with percentage: set only percentage");
        } else {
            p.deprecated(field, "percentage");
        }
    }
}

fn check_abort(p: &mut Problems, path: &str, a: &FaultAbort) {
    if a.http2_error.is_some() {
        p.error(
            format!("{path}.http2Error"),
            "not supported (as in Istio): use httpStatus or grpcStatus",
        );
    }
    match (a.http_status, &a.grpc_status) {
        (Some(_), Some(_)) => p.error(path, "set one of httpStatus and grpcStatus"),
        (None, None) if a.http2_error.is_none() => {
            p.error(path, "an abort needs httpStatus or grpcStatus");
        }
        (Some(status), None) if !(200..=599).contains(&status) => p.error(
            format!("{path}.httpStatus"),
            format!("HTTP status {status} is out of range 200..=599"),
        ),
        (None, Some(status)) if !crate::GRPC_STATUS_CODES.contains(&status.as_str()) => p.error(
            format!("{path}.grpcStatus"),
            format!("{status:?} is not a gRPC status name such as UNAVAILABLE or NOT_FOUND"),
        ),
        _ => {}
    }
    if let Some(percentage) = &a.percentage {
        check_percent(p, &format!("{path}.percentage"), percentage);
    }
}
