//! `/debug/configz`: the configuration sources, what they refuse now, and the objects in
//! force, listed by name a page at a time.
//!
//! One answer never holds the whole configuration: a file of 75,000 VirtualServices made one
//! 61 MB answer that took 5.8 s to build. Objects are listed by `kind`, `namespace`, `name`,
//! `origin` and `warnings`, at most `limit` of them from `start`; specs are shown only for a
//! small page (`?spec=true`, or a `name` filter, which picks one object per kind). Filters:
//!
//! | parameter | |
//! |---|---|
//! | `kind`, `namespace`, `name` | exact match; each narrows objects and refusals |
//! | `start` | index of the first object of the page (default 0) |
//! | `limit` | objects per page: default 100, at most 1,000, at most 20 with specs |
//! | `spec` | `true` to show each object's spec, `false` to leave it out even with `name` |
//!
//! The answer: `snapshot_version`, `sources` (each source's health, counts and last error),
//! `jwks` (each JWT issuer's keys the control plane fetches: `issuer`, `uri` (empty: OpenID
//! discovery), `fetched` (whether it has keys), `fetched_at`, `bytes` and the last `error`),
//! `credentials` (gateways' Secrets, never their bytes: each cluster's `watching`, `synced`,
//! `secrets` count and last `error`; each credential the Gateways name with the Gateways that
//! name it and, per namespace holding a Secret of that name, whether it `serves` (or the
//! `error` why not); and the answers about who may read them), `mesh_config` (the
//! `--meshConfig` file's `path`, its last good `config` as read, the `warnings` about fields
//! not acted on, and the `error` that keeps its latest change out of force), `envoy_filters`
//! (each EnvoyFilter patch left out, or not applied to a resource, in the snapshot in force:
//! `{key: {kind, namespace, name}, message}`; at most 1,000),
//! `refused` (every document and object refused now, by every source, as `{source, file,
//! document, line, kind, namespace, name, error}`; an entry leaves when it is fixed; at most
//! 1,000, with `refused_total`), `objects` (the page), `total` (objects matching the
//! filters) and `next` (the `start` of the next page, or `null`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use serde_json::{Value, json};
use wayfinder_config::{ConfigObject, Refusal};

use super::Debug;
use crate::credentials::Credentials;
use crate::jwks::JwksTable;

/// Objects per page when `limit` is not given.
const DEFAULT_LIMIT: usize = 100;
/// The most objects one page holds.
const MAX_LIMIT: usize = 1000;
/// The most objects one page holds with their specs.
const MAX_WITH_SPEC: usize = 20;
/// The most refusals one answer lists.
const MAX_REFUSED: usize = 1000;

/// What a request asks for.
struct Page {
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    start: usize,
    limit: usize,
    spec: bool,
}

impl Page {
    fn from_query(q: &HashMap<String, String>) -> Self {
        let text = |key: &str| q.get(key).filter(|v| !v.is_empty()).cloned();
        let number = |key: &str| q.get(key).and_then(|v| v.parse::<usize>().ok());
        let name = text("name");
        let spec = match q.get("spec").map(String::as_str) {
            Some("true" | "1") => true,
            Some(_) => false,
            None => name.is_some(),
        };
        let most = if spec { MAX_WITH_SPEC } else { MAX_LIMIT };
        Self {
            kind: text("kind"),
            namespace: text("namespace"),
            name,
            start: number("start").unwrap_or(0),
            limit: number("limit").unwrap_or(DEFAULT_LIMIT).clamp(1, most),
            spec,
        }
    }

    fn matches(&self, kind: Option<&str>, namespace: Option<&str>, name: Option<&str>) -> bool {
        let is = |want: &Option<String>, have: Option<&str>| {
            want.as_deref().is_none_or(|w| have == Some(w))
        };
        is(&self.kind, kind) && is(&self.namespace, namespace) && is(&self.name, name)
    }

    fn object(&self, object: &ConfigObject) -> Value {
        let mut value = json!({
            "kind": object.kind(),
            "namespace": object.meta.namespace,
            "name": object.meta.name,
            "origin": object.meta.origin,
            "warnings": object.meta.warnings,
        });
        if self.spec {
            value["spec"] = json!(object.spec);
            redact_private_keys(&mut value["spec"]);
        }
        value
    }
}

pub(super) async fn configz(
    State(d): State<Debug>,
    Query(q): Query<HashMap<String, String>>,
) -> Json<Value> {
    let page = Page::from_query(&q);
    let snapshot = d.model.snapshot();
    let statuses = d.model.statuses();
    let sources = &statuses.config_sources;
    let matching = snapshot.config.objects.values().filter(|o| {
        page.matches(
            Some(o.kind().name()),
            Some(&o.meta.namespace),
            Some(&o.meta.name),
        )
    });
    let mut total = 0;
    let mut objects = Vec::new();
    for (index, object) in matching.enumerate() {
        total += 1;
        if index >= page.start && objects.len() < page.limit {
            objects.push(page.object(object));
        }
    }
    let end = page.start.saturating_add(objects.len());
    let next = (end < total && !objects.is_empty()).then_some(end);
    let refused = sources.iter().flat_map(|s| {
        s.refused
            .iter()
            .filter(|r| page.matches(r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()))
            .map(|r| refusal(s.id.as_str(), r))
    });
    let (mut refused_total, mut listed) = (0, Vec::new());
    for entry in refused {
        refused_total += 1;
        if listed.len() < MAX_REFUSED {
            listed.push(entry);
        }
    }
    let mesh = d.mesh.borrow().clone();
    Json(json!({
        "snapshot_version": snapshot.version,
        "sources": *sources,
        "jwks": jwks(d.ads.current().keys()),
        "credentials": credentials(&snapshot, d.ads.current().credentials()),
        "mesh_config": mesh,
        "envoy_filters": d.ads.current().envoy_filter_failures().into_iter().take(MAX_REFUSED).collect::<Vec<_>>(),
        "refused": listed,
        "refused_total": refused_total,
        "objects": objects,
        "total": total,
        "next": next,
    }))
}

/// The JWT keys the control plane fetches, without the keys themselves.
fn jwks(table: &JwksTable) -> Value {
    let entries = table.entries().iter().map(|(key, fetched)| {
        json!({
            "issuer": key.issuer,
            "uri": key.uri,
            "fetched": fetched.jwks.is_some(),
            "fetched_at": fetched.fetched_at,
            "bytes": fetched.jwks.as_ref().map(|j| j.len()),
            "error": fetched.error,
        })
    });
    Value::Array(entries.collect())
}

/// Gateways' credentials: what is read, what the Gateways name and who may read them, never
/// a Secret's bytes.
fn credentials(model: &crate::snapshot::Snapshot, table: &Credentials) -> Value {
    use wayfinder_config::credentials::{SecretRef, cert_info};
    let clusters = table.clusters().iter().map(|(id, c)| {
        json!({
            "cluster": id,
            "watching": c.watching,
            "synced": c.synced,
            "secrets": c.secrets.len(),
            "error": c.error,
        })
    });
    let referenced = crate::credentials::referenced(model)
        .into_iter()
        .map(|(name, by)| {
            // The namespaces holding a Secret of that name, in the primary cluster: any namespace
            // for a bare name, which is the gateway proxy's.
            let found = SecretRef::parse(&name, "*").ok().map(|r| {
                let primary = table.cluster("").and_then(|c| table.clusters().get(c));
                let secrets = primary.into_iter().flat_map(|c| &c.secrets);
                secrets
                    .filter(|((ns, n), _)| {
                        **n == *r.name && (r.namespace == "*" || **ns == *r.namespace)
                    })
                    .map(|((ns, _), secret)| match cert_info(secret) {
                        Ok(_) => json!({"namespace": ns, "serves": true}),
                        Err(e) => json!({"namespace": ns, "serves": false, "error": e}),
                    })
                    .collect::<Vec<_>>()
            });
            json!({"credential": name, "gateways": by, "secrets": found.unwrap_or_default()})
        });
    let access = table.decisions().iter().map(|(id, d)| {
        json!({
            "cluster": id.cluster,
            "namespace": id.namespace,
            "service_account": id.service_account,
            "allowed": d.allowed.is_ok(),
            "reason": d.allowed.as_ref().err(),
            "age_seconds": d.at.elapsed().as_secs(),
        })
    });
    json!({
        "clusters": clusters.collect::<Vec<_>>(),
        "referenced": referenced.collect::<Vec<_>>(),
        "access": access.collect::<Vec<_>>(),
    })
}

/// Members of a JWK that are private key material (`k`: a symmetric key, refused by
/// validation, is one whole).
const PRIVATE_MEMBERS: [&str; 7] = ["d", "p", "q", "dp", "dq", "qi", "k"];

/// A RequestAuthentication's inline `jwks` that holds private key material (which validation
/// warns about) is not shown: a debug page never shows a key.
fn redact_private_keys(spec: &mut Value) {
    let Some(rules) = spec.get_mut("jwtRules").and_then(Value::as_array_mut) else {
        return;
    };
    for rule in rules {
        let private = rule["jwks"]
            .as_str()
            .and_then(|jwks| serde_json::from_str::<Value>(jwks).ok())
            .and_then(|jwks| jwks["keys"].as_array().cloned())
            .is_some_and(|keys| {
                keys.iter()
                    .any(|k| PRIVATE_MEMBERS.iter().any(|m| k.get(m).is_some()))
            });
        if private {
            rule["jwks"] = json!("(not shown: it holds private key material)");
        }
    }
}

fn refusal(source: &str, r: &Refusal) -> Value {
    json!({
        "source": source,
        "file": r.file,
        "document": r.document,
        "line": r.line,
        "kind": r.kind,
        "namespace": r.namespace,
        "name": r.name,
        "error": r.error,
    })
}
