//! What a request path names: discovery documents, a collection, or one object.

use super::kinds::{self, KINDS};

/// A parsed request path.
#[derive(Debug)]
pub(super) enum Route {
    /// `/version`.
    Version,
    /// `/api`.
    Api,
    /// `/apis`.
    Apis,
    /// `/apis/{group}`.
    Group(&'static str),
    /// `/api/v1` or `/apis/{group}/{version}`.
    Resources(&'static str, &'static str),
    /// `…/{plural}` or `…/namespaces/{ns}/{plural}`.
    Collection(Target),
    /// `…/{plural}/{name}[/status]` or `…/namespaces/{ns}/{plural}/{name}[/status]`.
    Object(Target, String),
    /// `/apis/authentication.k8s.io/v1/tokenreviews`.
    TokenReviews,
    /// `/apis/authorization.k8s.io/v1/subjectaccessreviews`.
    SubjectAccessReviews,
    /// Anything else.
    Unknown,
}

/// The kind, version and namespace a path names.
#[derive(Clone, Debug)]
pub(super) struct Target {
    /// Storage slot of the kind.
    pub(super) slot: usize,
    /// Version in the path.
    pub(super) version: &'static str,
    /// Namespace in the path (namespaced kinds; `None` for all namespaces).
    pub(super) namespace: Option<String>,
    /// Whether the path ends in `/status`.
    pub(super) status: bool,
}

/// Parses a request path.
pub(super) fn parse(path: &str) -> Route {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["version"] => Route::Version,
        ["api"] => Route::Api,
        ["apis"] => Route::Apis,
        ["api", "v1"] => Route::Resources("", "v1"),
        ["api", "v1", rest @ ..] => resource("", "v1", rest),
        ["apis", group] => match kinds::groups().into_iter().find(|g| g == group) {
            Some(group) => Route::Group(group),
            None => Route::Unknown,
        },
        ["apis", group, version] => match served(group, version) {
            Some((group, version)) => Route::Resources(group, version),
            None => Route::Unknown,
        },
        ["apis", "authentication.k8s.io", "v1", "tokenreviews"] => Route::TokenReviews,
        ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => {
            Route::SubjectAccessReviews
        }
        ["apis", group, version, rest @ ..] => resource(group, version, rest),
        _ => Route::Unknown,
    }
}

fn served(group: &str, version: &str) -> Option<(&'static str, &'static str)> {
    KINDS.iter().find_map(|k| {
        let v = k.version(version)?;
        (k.group == group).then_some((k.group, v))
    })
}

fn resource(group: &str, version: &str, rest: &[&str]) -> Route {
    let target = |plural: &str, namespace: Option<&str>, status: bool| {
        let (slot, version) = kinds::by_path(group, version, plural)?;
        let kind = &KINDS[slot];
        if namespace.is_some() && !kind.namespaced || status && !kind.status {
            return None;
        }
        Some(Target {
            slot,
            version,
            namespace: namespace.map(str::to_owned),
            status,
        })
    };
    let route = match rest {
        ["namespaces", ns, plural] if *plural != "status" => {
            target(plural, Some(ns), false).map(Route::Collection)
        }
        ["namespaces", ns, plural, name] => {
            target(plural, Some(ns), false).map(|t| Route::Object(t, (*name).to_owned()))
        }
        ["namespaces", ns, plural, name, "status"] => {
            target(plural, Some(ns), true).map(|t| Route::Object(t, (*name).to_owned()))
        }
        [plural] => target(plural, None, false).map(Route::Collection),
        [plural, name] => target(plural, None, false)
            .filter(|t| !KINDS[t.slot].namespaced)
            .map(|t| Route::Object(t, (*name).to_owned())),
        [plural, name, "status"] => target(plural, None, true)
            .filter(|t| !KINDS[t.slot].namespaced)
            .map(|t| Route::Object(t, (*name).to_owned())),
        _ => None,
    };
    route.unwrap_or(Route::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(path: &str) -> Option<(&'static str, Option<String>, String, bool)> {
        match parse(path) {
            Route::Object(t, name) => Some((KINDS[t.slot].plural, t.namespace, name, t.status)),
            _ => None,
        }
    }

    #[test]
    fn paths() {
        assert!(matches!(parse("/version"), Route::Version));
        assert!(matches!(parse("/api/v1"), Route::Resources("", "v1")));
        assert!(matches!(
            parse("/apis/networking.istio.io/v1alpha3"),
            Route::Resources(_, "v1alpha3")
        ));
        assert!(matches!(
            parse("/api/v1/services"),
            Route::Collection(Target {
                namespace: None,
                ..
            })
        ));
        assert!(matches!(
            parse("/api/v1/namespaces/a/services"),
            Route::Collection(Target {
                namespace: Some(_),
                ..
            })
        ));
        assert_eq!(
            object("/api/v1/namespaces/a/services/x"),
            Some(("services", Some("a".into()), "x".into(), false))
        );
        assert_eq!(
            object("/api/v1/namespaces/x"),
            Some(("namespaces", None, "x".into(), false))
        );
        assert_eq!(
            object("/api/v1/namespaces/x/status"),
            Some(("namespaces", None, "x".into(), true))
        );
        assert_eq!(
            object("/api/v1/nodes/n1/status"),
            Some(("nodes", None, "n1".into(), true))
        );
        assert_eq!(
            object("/apis/networking.istio.io/v1beta1/namespaces/a/virtualservices/vs/status"),
            Some(("virtualservices", Some("a".into()), "vs".into(), true))
        );
        assert!(matches!(parse("/api/v1/services/x"), Route::Unknown));
        assert!(matches!(
            parse("/api/v1/namespaces/a/nodes"),
            Route::Unknown
        ));
        assert!(matches!(
            parse("/apis/discovery.k8s.io/v1/namespaces/a/endpointslices/x/status"),
            Route::Unknown
        ));
        assert!(matches!(
            parse("/apis/discovery.k8s.io/v2/endpointslices"),
            Route::Unknown
        ));
        assert!(matches!(parse("/healthz"), Route::Unknown));
        assert!(matches!(
            parse("/apis/authorization.k8s.io/v1/subjectaccessreviews"),
            Route::SubjectAccessReviews
        ));
        assert_eq!(
            object("/api/v1/namespaces/a/secrets/tls"),
            Some(("secrets", Some("a".into()), "tls".into(), false))
        );
        assert!(matches!(
            parse("/api/v1/namespaces/a/secrets/tls/status"),
            Route::Unknown
        ));
    }
}
