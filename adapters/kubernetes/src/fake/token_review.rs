//! `POST /apis/authentication.k8s.io/v1/tokenreviews`, as the API server answers it for
//! service-account tokens: `201 Created` with the review's `status`, `authenticated` only for
//! a token the test registered ([`FakeApiServer::add_token`]) whose audiences meet the
//! review's `spec.audiences` (none asked: the server's own, `https://kubernetes.default.svc`).
//! The user is `system:serviceaccount:NAMESPACE:NAME` in the groups
//! `system:serviceaccounts`, `system:serviceaccounts:NAMESPACE` and `system:authenticated`.
//!
//! [`FakeApiServer::add_token`]: super::FakeApiServer::add_token

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::state::Shared;
use super::status::{ApiError, json_response};

/// The API server's own audience, which a token without one is issued for.
pub(super) const API_AUDIENCE: &str = "https://kubernetes.default.svc";

/// A service-account token the fake knows.
#[derive(Clone, Debug)]
pub(super) struct Token {
    pub(super) namespace: String,
    pub(super) service_account: String,
    pub(super) audiences: Vec<String>,
}

/// Reviews the token of a `TokenReview` body.
pub(super) fn review(shared: &Shared, body: &Bytes) -> Result<Response, ApiError> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("TokenReview: {e}")))?;
    if review["kind"] != "TokenReview" {
        return Err(ApiError::bad_request("the body is not a TokenReview"));
    }
    let spec = &review["spec"];
    let token = spec["token"].as_str().unwrap_or("");
    let asked: Vec<String> = spec["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let targets = if asked.is_empty() {
        vec![API_AUDIENCE.to_owned()]
    } else {
        asked.clone()
    };
    let known = shared.lock().tokens.get(token).cloned();
    let status = match known {
        None => {
            json!({"user": {}, "error": "[invalid bearer token, service account token is not valid]"})
        }
        Some(t) => {
            let met: Vec<&String> = t.audiences.iter().filter(|a| targets.contains(a)).collect();
            if met.is_empty() {
                json!({
                    "user": {},
                    "error": format!("[invalid bearer token, token audiences {:?} is invalid for the target audiences {:?}]", t.audiences, targets),
                })
            } else {
                json!({
                    "authenticated": true,
                    "user": {
                        "username": format!("system:serviceaccount:{}:{}", t.namespace, t.service_account),
                        "uid": format!("uid-{}-{}", t.namespace, t.service_account),
                        "groups": [
                            "system:serviceaccounts",
                            format!("system:serviceaccounts:{}", t.namespace),
                            "system:authenticated",
                        ],
                    },
                    "audiences": met,
                })
            }
        }
    };
    let answer = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    });
    shared.lock().counts.token_reviews += 1;
    Ok(json_response(
        StatusCode::CREATED,
        Bytes::from(answer.to_string()),
    ))
}
