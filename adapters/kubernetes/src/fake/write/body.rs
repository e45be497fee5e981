//! How a request body becomes the object to store: its type and key, the resourceVersion
//! precondition, the status subresource rules, server-set metadata, and its labels.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::Mode;
use crate::fake::kinds::Kind;
use crate::fake::meta;
use crate::fake::status::ApiError;
use crate::fake::store::{Key, Labels};

pub(super) fn check_type(
    obj: &Map<String, Value>,
    kind: &Kind,
    api_version: &str,
) -> Result<(), ApiError> {
    let field = |f: &str| obj.get(f).and_then(Value::as_str).filter(|s| !s.is_empty());
    if let Some(av) = field("apiVersion")
        && av != api_version
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({api_version})"
        )));
    }
    if let Some(k) = field("kind")
        && k != kind.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            kind.kind
        )));
    }
    Ok(())
}

/// The object's (namespace, name), from the path and the body, set into the body.
pub(super) fn key_of(
    kind: &Kind,
    obj: &mut Map<String, Value>,
    (path_namespace, path_name, mode): (Option<&str>, Option<&str>, Mode),
    exists: impl Fn(&Key) -> bool,
) -> Result<Key, ApiError> {
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
    let text = |m: &Map<String, Value>, f: &str| {
        m.get(f)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let namespace = if kind.namespaced {
        match (path_namespace, text(meta, "namespace")) {
            (Some(path), Some(body)) if path != body => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on \
                     the request",
                ));
            }
            (Some(path), _) => path.to_owned(),
            (None, body) => body.unwrap_or_else(|| "default".to_owned()),
        }
    } else {
        String::new()
    };
    let name = match (path_name, text(meta, "name")) {
        (Some(url), Some(body)) if url != body => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body}) does not match the name on the URL ({url})"
            )));
        }
        (Some(url), _) => url.to_owned(),
        (None, Some(body)) => body,
        (None, None) => match text(meta, "generateName") {
            Some(prefix) if mode == Mode::Create => loop {
                let name = meta::generated_name(&prefix);
                if !exists(&(namespace.clone(), name.clone())) {
                    break name;
                }
            },
            _ => {
                let what = "Required value: name or generateName is required";
                return Err(ApiError::invalid(kind, "", "metadata.name", what));
            }
        },
    };
    meta::check_name(kind.plural, &name)
        .map_err(|what| ApiError::invalid(kind, &name, "metadata.name", &what))?;
    meta.insert("name".to_owned(), json!(name));
    if kind.namespaced {
        meta.insert("namespace".to_owned(), json!(namespace));
    } else {
        meta.remove("namespace");
    }
    Ok((namespace, name))
}

pub(super) fn check_rv(
    kind: &Kind,
    key: &Key,
    obj: &Map<String, Value>,
    current: u64,
) -> Result<(), ApiError> {
    let Some(rv) = obj
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Ok(());
    };
    if rv.parse::<u64>().is_err() {
        let what = format!("Invalid value: \"{rv}\": must be a decimal number");
        return Err(ApiError::invalid(
            kind,
            &key.1,
            "metadata.resourceVersion",
            &what,
        ));
    }
    if rv != current.to_string() {
        let why = "the object has been modified; please apply your changes to the latest \
                   version and try again";
        return Err(ApiError::conflict(kind, &key.1, why));
    }
    Ok(())
}

/// Applies the status subresource rules to the body.
pub(super) fn shape_status(
    kind: &Kind,
    mode: Mode,
    obj: &mut Map<String, Value>,
    old: Option<&Value>,
) {
    let old_status = old.and_then(|o| o.get("status")).cloned();
    match mode {
        Mode::Status => {
            let status = obj.remove("status");
            if let Some(Value::Object(old)) = old {
                *obj = old.clone();
            }
            match status {
                Some(s) => obj.insert("status".to_owned(), s),
                None => obj.remove("status"),
            };
        }
        Mode::Update if kind.status => {
            match old_status {
                Some(s) => obj.insert("status".to_owned(), s),
                None => obj.remove("status"),
            };
        }
        Mode::Create if kind.status => {
            // What the server's create strategies leave: Nodes register with their status;
            // Namespaces start Active and Pods Pending; the rest start without status.
            match kind.plural {
                "nodes" if kind.group.is_empty() => None,
                "namespaces" => obj.insert("status".to_owned(), json!({ "phase": "Active" })),
                "pods" => obj.insert("status".to_owned(), json!({ "phase": "Pending" })),
                _ => obj.remove("status"),
            };
        }
        Mode::Apply if kind.plural == "namespaces" && !obj.contains_key("status") => {
            obj.insert("status".to_owned(), json!({ "phase": "Active" }));
        }
        _ => {}
    }
}

/// Sets uid, creationTimestamp and generation; keeps the deletion marks the server owns.
pub(super) fn server_metadata(mode: Mode, obj: &mut Map<String, Value>, old: Option<&Value>) {
    let old_meta = |f: &str| {
        old.and_then(|o| o.get("metadata"))
            .and_then(|m| m.get(f))
            .cloned()
    };
    let content_changed = old.is_none_or(|o| content(o) != content_of(obj));
    let generation = match old_meta("generation").and_then(|g| g.as_i64()) {
        Some(g) if old.is_some() => g + i64::from(content_changed && mode != Mode::Status),
        _ => 1,
    };
    let Some(Value::Object(meta)) = obj.get_mut("metadata") else {
        return;
    };
    let uid = old_meta("uid").unwrap_or_else(|| json!(meta::uid()));
    let created = old_meta("creationTimestamp").unwrap_or_else(|| json!(meta::now()));
    meta.insert("uid".to_owned(), uid);
    meta.insert("creationTimestamp".to_owned(), created);
    meta.insert("generation".to_owned(), json!(generation));
    meta.remove("selfLink");
    meta.remove("resourceVersion");
    meta.remove("managedFields");
    if mode != Mode::Apply {
        for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
            match old_meta(field) {
                Some(v) => meta.insert(field.to_owned(), v),
                None => meta.remove(field),
            };
        }
    }
}

/// Everything but `metadata` and `status`: what the generation counts changes of.
fn content(v: &Value) -> Map<String, Value> {
    v.as_object().map(content_of).unwrap_or_default()
}

fn content_of(obj: &Map<String, Value>) -> Map<String, Value> {
    obj.iter()
        .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Whether the new body equals the stored object, versions and managedFields aside.
pub(super) fn unchanged(before: &Value, after: &Map<String, Value>) -> bool {
    let mut before = before.clone();
    if let Some(Value::Object(meta)) = before.get_mut("metadata") {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    before.as_object() == Some(after)
}

pub(super) fn labels(
    kind: &Kind,
    key: &Key,
    obj: &Map<String, Value>,
) -> Result<Arc<Labels>, ApiError> {
    match obj.get("metadata").and_then(|m| m.get("labels")) {
        None | Some(Value::Null) => Ok(Arc::default()),
        Some(v) => serde_json::from_value::<Labels>(v.clone())
            .map(Arc::new)
            .map_err(|_| {
                let what = "Invalid value: label values must be strings";
                ApiError::invalid(kind, &key.1, "metadata.labels", what)
            }),
    }
}
