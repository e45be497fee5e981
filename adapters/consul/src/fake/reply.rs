//! How the fake answers: 200s shaped by the current fault, with Consul's `X-Consul-*` headers,
//! and plain-text errors with the bodies Consul sends.

use std::io;

use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;

use super::Fault;

/// The `X-Consul-*` facts of an answer.
pub(super) struct Meta {
    pub(super) index: u64,
    pub(super) consistency: &'static str,
    pub(super) acl: bool,
    /// `X-Consul-KnownLeader`.
    pub(super) known_leader: bool,
    /// `X-Consul-LastContact`, in milliseconds.
    pub(super) last_contact: u64,
}

/// A 200 answer, shaped by the fault; `meta` `None` for answers without `X-Consul-*` headers.
pub(super) async fn respond(body: Vec<u8>, fault: Fault, meta: Option<Meta>) -> Response {
    if let Fault::Slow(delay) = fault {
        tokio::time::sleep(delay).await;
    }
    let index = match fault {
        Fault::MissingIndex => None,
        Fault::IndexZero => Some(0),
        _ => meta.as_ref().map(|m| m.index.max(1)),
    };
    let mut response = Response::new(match fault {
        Fault::Malformed(text) => Body::from(text),
        Fault::Reset => reset_body(body),
        _ => Body::from(body),
    });
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(meta) = meta {
        if let Some(index) = index {
            h.insert(name("x-consul-index"), HeaderValue::from(index));
        }
        let known = if meta.known_leader { "true" } else { "false" };
        h.insert(
            name("x-consul-knownleader"),
            HeaderValue::from_static(known),
        );
        h.insert(
            name("x-consul-lastcontact"),
            HeaderValue::from(meta.last_contact),
        );
        let consistency = HeaderValue::from_static(meta.consistency);
        h.insert(name("x-consul-effective-consistency"), consistency);
        let policy = HeaderValue::from_static(if meta.acl { "deny" } else { "allow" });
        h.insert(name("x-consul-default-acl-policy"), policy);
    }
    response
}

fn name(n: &'static str) -> HeaderName {
    HeaderName::from_static(n)
}

/// The first half of `body`, then an error that makes hyper break the connection. The pause
/// between them lets hyper flush the headers and the first half to the socket first.
fn reset_body(body: Vec<u8>) -> Body {
    let mut head = Bytes::from(body);
    head.truncate((head.len() / 2).max(1));
    let head = futures::stream::iter([Ok::<Bytes, io::Error>(head)]);
    let tail = futures::stream::once(async {
        tokio::task::yield_now().await;
        Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "fault: connection reset",
        ))
    });
    Body::from_stream(head.chain(tail))
}

/// The answer to `Fault::Status(code)`, with the body Consul sends for that status.
pub(super) fn fault_status(code: u16) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match status.as_u16() {
        500 => "rpc error making call: No cluster leader",
        403 => "Permission denied",
        429 => "Your IP is issuing too many concurrent connections, please rate limit your calls\n",
        _ => status.canonical_reason().unwrap_or("Unknown error"),
    };
    text(status, body)
}

/// What a Consul server answers a request that needs a leader while it has none.
pub(super) fn no_leader() -> Response {
    text(StatusCode::INTERNAL_SERVER_ERROR, "No cluster leader")
}

pub(super) fn no_dc() -> Response {
    text(StatusCode::INTERNAL_SERVER_ERROR, "No path to datacenter")
}

pub(super) fn stopped() -> Response {
    text(StatusCode::SERVICE_UNAVAILABLE, "fake Consul stopped")
}

/// A plain-text answer, as Consul sends its errors.
pub(super) fn text(status: StatusCode, body: &str) -> Response {
    let mut response = Response::new(Body::from(body.to_owned()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
