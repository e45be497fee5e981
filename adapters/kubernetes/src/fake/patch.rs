//! PATCH bodies: JSON merge patch (RFC 7386), which also stands in for strategic merge patch,
//! and JSON patch (RFC 6902). Server-side apply (`application/apply-patch+yaml`) is not served.

use serde_json::{Map, Value};

use super::status::ApiError;

/// The patch formats the fake takes, by `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PatchType {
    /// `application/merge-patch+json` and `application/strategic-merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
}

impl PatchType {
    /// The format of a `Content-Type`; 415 for others.
    pub(super) fn from_content_type(content_type: &str) -> Result<PatchType, ApiError> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                Ok(PatchType::Merge)
            }
            "application/json-patch+json" => Ok(PatchType::Json),
            _ => Err(ApiError::unsupported_patch(media)),
        }
    }
}

/// Applies `patch` to `target`.
pub(super) fn apply(kind: PatchType, target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    match kind {
        PatchType::Merge => {
            merge(target, patch);
            Ok(())
        }
        PatchType::Json => json_patch(target, patch),
    }
}

/// RFC 7386: objects merge key by key, `null` removes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (k, v) in patch {
            if v.is_null() {
                target.remove(k);
            } else {
                merge(target.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn bad(why: impl Into<String>) -> ApiError {
    ApiError::bad_request(why.into())
}

/// RFC 6902: `add`, `remove`, `replace`, `move`, `copy`, `test`, in order, all or nothing.
fn json_patch(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| bad("json patch must be an array of operations"))?;
    let mut doc = target.clone();
    for op in ops {
        let field = |f: &str| op.get(f).and_then(Value::as_str);
        let path = field("path").ok_or_else(|| bad("json patch operation without a path"))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| bad("json patch operation without a value"))
        };
        match field("op").unwrap_or("") {
            "add" => add(&mut doc, path, value()?)?,
            "remove" => {
                remove(&mut doc, path)?;
            }
            "replace" => {
                remove(&mut doc, path)?;
                add(&mut doc, path, value()?)?;
            }
            "move" => {
                let from = field("from").ok_or_else(|| bad("move without from"))?;
                let moved = remove(&mut doc, from)?;
                add(&mut doc, path, moved)?;
            }
            "copy" => {
                let from = field("from").ok_or_else(|| bad("copy without from"))?;
                let copied = doc
                    .pointer(from)
                    .cloned()
                    .ok_or_else(|| bad(format!("missing path {from}")))?;
                add(&mut doc, path, copied)?;
            }
            "test" => {
                if doc.pointer(path) != Some(&value()?) {
                    return Err(bad(format!("test failed at {path}")));
                }
            }
            other => return Err(bad(format!("unknown json patch operation {other:?}"))),
        }
    }
    *target = doc;
    Ok(())
}

/// Splits a JSON pointer into its parent pointer and last token (unescaped).
fn split(path: &str) -> Result<(&str, String), ApiError> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| bad(format!("invalid json pointer {path:?}")))?;
    Ok((parent, last.replace("~1", "/").replace("~0", "~")))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), ApiError> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.insert(last, value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let at = if last == "-" {
                a.len()
            } else {
                last.parse()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| bad(format!("invalid index in {path}")))?
            };
            a.insert(at, value);
            Ok(())
        }
        _ => Err(bad(format!("missing path {parent}"))),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, ApiError> {
    let (parent, last) = split(path)?;
    let removed = match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => m.remove(&last),
        Some(Value::Array(a)) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => Some(a.remove(i)),
            _ => None,
        },
        _ => None,
    };
    removed.ok_or_else(|| bad(format!("missing path {path}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({ "a": "b", "c": { "d": "e", "f": "g" } });
        apply(
            PatchType::Merge,
            &mut doc,
            &json!({ "a": "z", "c": { "f": null } }),
        )
        .unwrap_or(());
        assert_eq!(doc, json!({ "a": "z", "c": { "d": "e" } }));
    }

    #[test]
    fn json_patch_ops() {
        let mut doc = json!({ "spec": { "hosts": ["a"] }, "x": 1 });
        let patch = json!([
            { "op": "add", "path": "/spec/hosts/-", "value": "b" },
            { "op": "replace", "path": "/x", "value": 2 },
            { "op": "test", "path": "/x", "value": 2 },
            { "op": "move", "from": "/x", "path": "/y" },
        ]);
        assert!(apply(PatchType::Json, &mut doc, &patch).is_ok());
        assert_eq!(doc, json!({ "spec": { "hosts": ["a", "b"] }, "y": 2 }));
        let failing = json!([{ "op": "test", "path": "/y", "value": 3 }]);
        assert!(apply(PatchType::Json, &mut doc, &failing).is_err());
        assert!(PatchType::from_content_type("application/apply-patch+yaml").is_err());
    }
}
