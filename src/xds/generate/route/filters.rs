//! The per-route pieces of VirtualService HTTP rules: fault injection, CORS, header changes.

use wayfinder_config::{
    CorsPolicy, FaultAbort, FaultDelay, GRPC_STATUS_CODES, Headers, HttpFaultInjection, Percent,
    StringMatch,
};

use super::super::policy::duration;
use super::super::proto::bool_value;
use super::http::string;
use crate::xds::pb::common_fault;
use crate::xds::pb::core::{self, HeaderValue, HeaderValueOption};
use crate::xds::pb::cors;
use crate::xds::pb::fault;
use crate::xds::pb::matcher::StringMatcher;
use crate::xds::pb::route::Route;
use crate::xds::pb::types::{FractionalPercent, fractional_percent::DenominatorType};

pub(super) fn fault(f: &HttpFaultInjection) -> fault::HttpFault {
    fault::HttpFault {
        delay: f.delay.as_ref().and_then(delay),
        abort: f.abort.as_ref().and_then(abort),
        ..Default::default()
    }
}

fn delay(d: &FaultDelay) -> Option<common_fault::FaultDelay> {
    let fixed = d.fixed_delay?;
    Some(common_fault::FaultDelay {
        fault_delay_secifier: Some(common_fault::fault_delay::FaultDelaySecifier::FixedDelay(
            duration(fixed.0),
        )),
        percentage: Some(percentage(d.percentage, d.percent)),
    })
}

fn abort(a: &FaultAbort) -> Option<fault::FaultAbort> {
    let error = match (a.http_status, &a.grpc_status) {
        (Some(code), _) => fault::fault_abort::ErrorType::HttpStatus(code),
        (None, Some(name)) => fault::fault_abort::ErrorType::GrpcStatus(grpc_code(name)?),
        _ => return None,
    };
    Some(fault::FaultAbort {
        error_type: Some(error),
        percentage: Some(percentage(a.percentage, None)),
        ..Default::default()
    })
}

/// Fault percentages: `percentage` per million (Istio's `value * 10000`), the deprecated
/// integer `percent` per hundred, 100 % when neither is set.
fn percentage(p: Option<Percent>, legacy: Option<i32>) -> FractionalPercent {
    match (p, legacy) {
        (Some(p), _) => per_million(p.value),
        (None, Some(n)) => FractionalPercent {
            numerator: u32::try_from(n).unwrap_or(0),
            denominator: DenominatorType::Hundred as i32,
        },
        (None, None) => per_million(100.0),
    }
}

pub(super) fn per_million(percent: f64) -> FractionalPercent {
    let numerator = (percent.clamp(0.0, 100.0) * 10_000.0).round() as u32;
    FractionalPercent {
        numerator,
        denominator: DenominatorType::Million as i32,
    }
}

fn grpc_code(name: &str) -> Option<u32> {
    GRPC_STATUS_CODES
        .iter()
        .position(|c| *c == name)
        .and_then(|i| u32::try_from(i).ok())
}

pub(super) fn cors_policy(c: &CorsPolicy) -> cors::CorsPolicy {
    let mut origins: Vec<StringMatcher> = c.allow_origins.iter().map(string).collect();
    origins.extend(
        c.allow_origin
            .iter()
            .map(|o| string(&StringMatch::Exact(o.clone()))),
    );
    cors::CorsPolicy {
        allow_origin_string_match: origins,
        allow_methods: c.allow_methods.join(","),
        allow_headers: c.allow_headers.join(","),
        expose_headers: c.expose_headers.join(","),
        max_age: c
            .max_age
            .map(|d| d.0.as_secs().to_string())
            .unwrap_or_default(),
        allow_credentials: c.allow_credentials.and_then(bool_value),
        forward_not_matching_preflights: c
            .unmatched_preflights
            .as_deref()
            .map(|m| m != "IGNORE")
            .and_then(bool_value),
        ..Default::default()
    }
}

pub(super) type HeaderOps = (
    Vec<HeaderValueOption>,
    Vec<String>,
    Vec<HeaderValueOption>,
    Vec<String>,
);

pub(super) fn header_ops(h: &Headers) -> HeaderOps {
    let ops = |o: Option<&wayfinder_config::HeaderOperations>| {
        let Some(o) = o else {
            return (Vec::new(), Vec::new());
        };
        let value =
            |k: &String, v: &String, action: core::header_value_option::HeaderAppendAction| {
                HeaderValueOption {
                    header: Some(HeaderValue {
                        key: k.clone(),
                        value: v.clone(),
                        ..Default::default()
                    }),
                    append_action: action as i32,
                    ..Default::default()
                }
            };
        use core::header_value_option::HeaderAppendAction as A;
        let mut add: Vec<HeaderValueOption> = o
            .set
            .iter()
            .map(|(k, v)| value(k, v, A::OverwriteIfExistsOrAdd))
            .collect();
        add.extend(
            o.add
                .iter()
                .map(|(k, v)| value(k, v, A::AppendIfExistsOrAdd)),
        );
        (add, o.remove.clone())
    };
    let (req_add, req_remove) = ops(h.request.as_ref());
    let (resp_add, resp_remove) = ops(h.response.as_ref());
    (req_add, req_remove, resp_add, resp_remove)
}

pub(super) fn apply_headers(route: &mut Route, h: &Headers) {
    let (req_add, req_remove, resp_add, resp_remove) = header_ops(h);
    route.request_headers_to_add = req_add;
    route.request_headers_to_remove = req_remove;
    route.response_headers_to_add = resp_add;
    route.response_headers_to_remove = resp_remove;
}
