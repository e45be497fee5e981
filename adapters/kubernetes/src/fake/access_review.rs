//! `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`, as the API server's RBAC
//! authorizer answers it: `201 Created` with the review's `spec` echoed and a `status`.
//!
//! A review of resource attributes is allowed when the test granted the review's `user` the
//! verb on the resource in the review's namespace ([`FakeApiServer::allow`]); the `reason`
//! then names a synthetic binding, as RBAC names the one that allowed it: `RBAC: allowed by
//! RoleBinding "list-secrets/gw" of Role "list-secrets" to ServiceAccount "ingress/gw"`
//! (a `ClusterRoleBinding` of a `ClusterRole` for a grant in every namespace). Anything else
//! is `allowed: false` without a reason, as RBAC gives when no rule allows it. Grants are to
//! users only: the review's `groups` are not consulted. As on the real server, a review
//! without a user or groups, or without exactly one of resource and non-resource
//! attributes, is refused with 422.
//!
//! [`FakeApiServer::allow`]: super::FakeApiServer::allow

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::kinds::Kind;
use super::state::Shared;
use super::status::{ApiError, json_response};

/// A grant of `verb` on `resource` to `user` (see [`FakeApiServer::allow`]).
///
/// [`FakeApiServer::allow`]: super::FakeApiServer::allow
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Grant {
    pub(super) user: String,
    /// `""`: every namespace.
    pub(super) namespace: String,
    pub(super) verb: String,
    /// `RESOURCE[.GROUP][/SUBRESOURCE]`, or `*`.
    pub(super) resource: String,
}

/// Answers the review of a `SubjectAccessReview` body.
pub(super) fn review(shared: &Shared, body: &Bytes) -> Result<Response, ApiError> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("SubjectAccessReview: {e}")))?;
    if review["kind"] != "SubjectAccessReview" {
        return Err(ApiError::bad_request(
            "the body is not a SubjectAccessReview",
        ));
    }
    let spec = &review["spec"];
    validate(spec)?;
    let user = text(spec, "/user");
    let attributes = &spec["resourceAttributes"];
    let grant = shared
        .lock()
        .grants
        .iter()
        .find(|g| g.user == user && allows(g, attributes))
        .cloned();
    let status = match grant {
        Some(grant) => json!({"allowed": true, "reason": reason(&grant)}),
        None => json!({"allowed": false}),
    };
    let answer = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    });
    shared.lock().counts.access_reviews += 1;
    Ok(json_response(
        StatusCode::CREATED,
        Bytes::from(answer.to_string()),
    ))
}

/// The review's kind, for the messages of its validation errors.
const REVIEW: Kind = Kind {
    group: "authorization.k8s.io",
    versions: &["v1"],
    plural: "subjectaccessreviews",
    singular: "subjectaccessreview",
    kind: "SubjectAccessReview",
    namespaced: false,
    builtin: true,
    status: false,
    short: &[],
};

/// The real server's checks of a review's spec (`ValidateSubjectAccessReviewSpec`).
fn validate(spec: &Value) -> Result<(), ApiError> {
    let present = |field: &str| spec.get(field).is_some_and(|v| !v.is_null());
    let invalid = |field: &str, what: &str| Err(ApiError::invalid(&REVIEW, "", field, what));
    match (
        present("resourceAttributes"),
        present("nonResourceAttributes"),
    ) {
        (true, true) => {
            return invalid(
                "spec.nonResourceAttributes",
                "cannot be specified in combination with resourceAttributes",
            );
        }
        (false, false) => {
            return invalid(
                "spec.resourceAttributes",
                "Required value: exactly one of nonResourceAttributes or resourceAttributes \
                 must be specified",
            );
        }
        _ => {}
    }
    let groups = spec["groups"].as_array().is_some_and(|g| !g.is_empty());
    if text(spec, "/user").is_empty() && !groups {
        return invalid(
            "spec.user",
            "Invalid value: \"\": at least one of user or group must be specified",
        );
    }
    Ok(())
}

/// Whether `grant` covers the resource attributes (`Null` for a non-resource review).
fn allows(grant: &Grant, attributes: &Value) -> bool {
    if attributes.is_null() {
        return false;
    }
    let namespace = text(attributes, "/namespace");
    let verb = text(attributes, "/verb");
    let mut resource = text(attributes, "/resource").to_owned();
    let group = text(attributes, "/group");
    if !group.is_empty() {
        resource = format!("{resource}.{group}");
    }
    let subresource = text(attributes, "/subresource");
    if !subresource.is_empty() {
        resource = format!("{resource}/{subresource}");
    }
    (grant.namespace.is_empty() || grant.namespace == namespace)
        && (grant.verb == "*" || grant.verb == verb)
        && (grant.resource == "*" || grant.resource == resource)
}

/// What RBAC says allowed it (`RBAC: allowed by …`, its `authorizingVisitor`), for a binding
/// named after the grant.
fn reason(grant: &Grant) -> String {
    let role = format!("{}-{}", grant.verb, grant.resource)
        .replace('*', "all")
        .replace('/', "-");
    let subject = match grant
        .user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    {
        Some((namespace, name)) => format!("ServiceAccount \"{name}/{namespace}\""),
        None => format!("User \"{}\"", grant.user),
    };
    if grant.namespace.is_empty() {
        format!(
            "RBAC: allowed by ClusterRoleBinding \"{role}\" of ClusterRole \"{role}\" to {subject}"
        )
    } else {
        format!(
            "RBAC: allowed by RoleBinding \"{role}/{ns}\" of Role \"{role}\" to {subject}",
            ns = grant.namespace
        )
    }
}

/// A string field, `""` when absent.
fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(user: &str, namespace: &str, verb: &str, resource: &str) -> Grant {
        Grant {
            user: user.into(),
            namespace: namespace.into(),
            verb: verb.into(),
            resource: resource.into(),
        }
    }

    #[test]
    fn a_grant_covers_its_verb_resource_and_namespace() {
        let g = grant("u", "a", "list", "secrets");
        let attrs = |ns: &str, verb: &str, group: &str, resource: &str, sub: &str| json!({"namespace": ns, "verb": verb, "group": group, "resource": resource, "subresource": sub});
        assert!(allows(&g, &attrs("a", "list", "", "secrets", "")));
        assert!(!allows(&g, &attrs("b", "list", "", "secrets", "")));
        assert!(!allows(&g, &attrs("a", "get", "", "secrets", "")));
        assert!(!allows(&g, &attrs("a", "list", "apps", "secrets", "")));
        assert!(!allows(&g, &attrs("a", "list", "", "secrets", "status")));
        assert!(!allows(&g, &Value::Null));
        let everywhere = grant("u", "", "*", "deployments.apps/scale");
        assert!(allows(
            &everywhere,
            &attrs("b", "patch", "apps", "deployments", "scale")
        ));
    }

    #[test]
    fn reasons_name_a_binding_as_rbac_does() {
        assert_eq!(
            reason(&grant(
                "system:serviceaccount:gw:ingress",
                "gw",
                "list",
                "secrets"
            )),
            "RBAC: allowed by RoleBinding \"list-secrets/gw\" of Role \"list-secrets\" to \
             ServiceAccount \"ingress/gw\""
        );
        assert_eq!(
            reason(&grant("alice", "", "get", "pods/log")),
            "RBAC: allowed by ClusterRoleBinding \"get-pods-log\" of ClusterRole \
             \"get-pods-log\" to User \"alice\""
        );
    }
}
