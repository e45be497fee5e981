//! Error answers as the real server gives them: a `Status` object (`kind: Status`,
//! `status: Failure`, a reason, a message, details naming the object) with the HTTP code.

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::kinds::Kind;

/// A failed request: the HTTP code and the `Status` it is answered with.
#[derive(Clone, Debug)]
pub(super) struct ApiError {
    code: u16,
    reason: &'static str,
    message: String,
    details: Option<Value>,
}

/// `services` or `virtualservices.networking.istio.io`, as messages name a resource.
fn qualified(kind: &Kind) -> String {
    if kind.group.is_empty() {
        kind.plural.to_owned()
    } else {
        format!("{}.{}", kind.plural, kind.group)
    }
}

fn details(kind: &Kind, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": kind.plural });
    if !kind.group.is_empty() {
        d["group"] = json!(kind.group);
    }
    d
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String) -> ApiError {
        ApiError {
            code,
            reason,
            message,
            details: None,
        }
    }

    fn with(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// 404: the object does not exist.
    pub(super) fn not_found(kind: &Kind, name: &str) -> ApiError {
        let message = format!("{} \"{name}\" not found", qualified(kind));
        ApiError::new(404, "NotFound", message).with(details(kind, name))
    }

    /// 409: a create of an object that exists.
    pub(super) fn already_exists(kind: &Kind, name: &str) -> ApiError {
        let message = format!("{} \"{name}\" already exists", qualified(kind));
        ApiError::new(409, "AlreadyExists", message).with(details(kind, name))
    }

    /// 409: a write based on an older resourceVersion (or failed preconditions).
    pub(super) fn conflict(kind: &Kind, name: &str, why: &str) -> ApiError {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            qualified(kind)
        );
        ApiError::new(409, "Conflict", message).with(details(kind, name))
    }

    /// 422: the object breaks a validation rule on `field`.
    pub(super) fn invalid(kind: &Kind, name: &str, field: &str, what: &str) -> ApiError {
        let message = format!("{} \"{name}\" is invalid: {field}: {what}", kind.kind);
        let cause = json!({ "reason": "FieldValueInvalid", "message": what, "field": field });
        let mut d = details(kind, name);
        d["kind"] = json!(kind.kind);
        d["causes"] = json!([cause]);
        ApiError::new(422, "Invalid", message).with(d)
    }

    /// 400.
    pub(super) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message.into())
    }

    /// 404 for a path the server does not serve.
    pub(super) fn no_route() -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
        )
        .with(json!({}))
    }

    /// 405.
    pub(super) fn method_not_allowed() -> ApiError {
        let message = "the server does not allow this method on the requested resource";
        ApiError::new(405, "MethodNotAllowed", message.into()).with(json!({}))
    }

    /// 415 for a PATCH in a format the fake does not take.
    pub(super) fn unsupported_patch(content_type: &str) -> ApiError {
        let message = format!(
            "the body of the request was in an unknown format ({content_type}) - accepted media \
             types include: application/json-patch+json, application/merge-patch+json, \
             application/strategic-merge-patch+json"
        );
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    /// 410 `Expired` for a resourceVersion older than the compaction point.
    pub(super) fn too_old(requested: u64, compacted: u64) -> ApiError {
        let message = format!("too old resource version: {requested} ({compacted})");
        ApiError::new(410, "Expired", message)
    }

    /// 410 `Expired` for a continue token older than the compaction point.
    pub(super) fn continue_expired() -> ApiError {
        let message = "The provided continue parameter is too old to display a consistent list \
                       result. You can start a new list without the continue parameter.";
        ApiError::new(410, "Expired", message.into())
    }

    /// 504 for a resourceVersion newer than any the server has reached.
    pub(super) fn too_large(requested: u64, current: u64) -> ApiError {
        let message = format!("Too large resource version: {requested}, current: {current}");
        let cause =
            json!({ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" });
        ApiError::new(504, "Timeout", message)
            .with(json!({ "causes": [cause], "retryAfterSeconds": 1 }))
    }

    /// The answer of `Fault::Status(code)`.
    pub(super) fn fault(code: u16) -> ApiError {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "",
        };
        let text = StatusCode::from_u16(code)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Unknown");
        ApiError::new(code, reason, format!("fault injected by the fake: {text}"))
    }

    /// The HTTP code.
    pub(super) fn code(&self) -> u16 {
        self.code
    }

    /// The `Status` object.
    pub(super) fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        if !self.reason.is_empty() {
            status["reason"] = json!(self.reason);
        }
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }

    /// The answer.
    pub(super) fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(status, Bytes::from(self.to_status().to_string()))
    }
}

/// A JSON answer.
pub(super) fn json_response(status: StatusCode, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
