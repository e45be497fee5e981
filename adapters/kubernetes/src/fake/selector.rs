//! Label and field selectors, as list and watch requests give them.
//!
//! Labels: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, joined by commas
//! (all must hold). Fields: `f=v`, `f==v`, `f!=v` joined by commas, for `metadata.name`,
//! `metadata.namespace` and the few extra fields the real server supports per kind (pods:
//! `spec.nodeName`, `status.phase`, …; core events: `involvedObject.*`, `reason`, `type`, …;
//! secrets: `type`). A field the object lacks compares as `""`: the fake does no defaulting,
//! so a Secret stored without a `type` (a real server would have made it `Opaque`) is
//! selected by `type!=…` and not by `type=Opaque`.

use serde_json::Value;

use super::kinds::Kind;
use super::store::{Key, Labels, Stored};

/// A parsed label selector; empty selects everything.
#[derive(Clone, Debug, Default)]
pub(super) struct LabelSelector(Vec<LabelReq>);

#[derive(Clone, Debug)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl LabelSelector {
    /// Parses a `labelSelector`; the error is the server's message.
    pub(super) fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        for part in split_outside_parens(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_req(part).ok_or_else(|| {
                format!("unable to parse requirement: found '{part}', expected: identifier")
            })?);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether these labels are selected.
    pub(super) fn matches(&self, labels: &Labels) -> bool {
        self.0.iter().all(|req| match req {
            LabelReq::Exists(k) => labels.contains_key(k),
            LabelReq::NotExists(k) => !labels.contains_key(k),
            LabelReq::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            LabelReq::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
        })
    }
}

fn split_outside_parens(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_req(part: &str) -> Option<LabelReq> {
    let key = |k: &str| {
        let k = k.trim();
        valid_key(k).then(|| k.to_owned())
    };
    if let Some(k) = part.strip_prefix('!') {
        return key(k).map(LabelReq::NotExists);
    }
    if let Some(open) = part.find('(') {
        let close = part
            .rfind(')')
            .filter(|c| *c > open && part[c + 1..].trim().is_empty())?;
        let mut head = part[..open].split_whitespace();
        let (k, op) = (key(head.next()?)?, head.next()?);
        let values = part[open + 1..close]
            .split(',')
            .map(|v| v.trim().to_owned())
            .collect();
        return match (op, head.next()) {
            ("in", None) => Some(LabelReq::In(k, values)),
            ("notin", None) => Some(LabelReq::NotIn(k, values)),
            _ => None,
        };
    }
    for (op, negate) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = part.split_once(op) {
            let values = vec![v.trim().to_owned()];
            let k = key(k)?;
            return Some(if negate {
                LabelReq::NotIn(k, values)
            } else {
                LabelReq::In(k, values)
            });
        }
    }
    key(part).map(LabelReq::Exists)
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// A parsed field selector; empty selects everything.
#[derive(Clone, Debug, Default)]
pub(super) struct FieldSelector(Vec<FieldReq>);

#[derive(Clone, Debug)]
struct FieldReq {
    field: String,
    value: String,
    negate: bool,
}

/// Extra fields the real server lets clients select on, by kind.
fn extra_fields(kind: &Kind) -> &'static [&'static str] {
    match (kind.group, kind.plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "namespaces") => &["status.phase"],
        ("", "secrets") => &["type"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses a `fieldSelector` for `kind`; the error is the server's message.
    pub(super) fn parse(text: &str, kind: &Kind) -> Result<FieldSelector, String> {
        let mut reqs = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, negate) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(format!(
                    "invalid selector: '{text}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            let known = matches!(field, "metadata.name" | "metadata.namespace")
                || extra_fields(kind).contains(&field);
            if !known {
                return Err(format!("field label not supported: {field}"));
            }
            reqs.push(FieldReq {
                field: field.to_owned(),
                value: value.trim().to_owned(),
                negate,
            });
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether the object `key` with this stored form is selected.
    pub(super) fn matches(&self, key: &Key, stored: &Stored) -> bool {
        let mut parsed: Option<Value> = None;
        self.0.iter().all(|req| {
            let actual = match req.field.as_str() {
                "metadata.name" => key.1.clone(),
                "metadata.namespace" => key.0.clone(),
                path => {
                    let object = parsed.get_or_insert_with(|| {
                        serde_json::from_slice(&stored.json).unwrap_or(Value::Null)
                    });
                    field_text(object, path)
                }
            };
            (actual == req.value) != req.negate
        })
    }
}

/// A field's value as a selector compares it: strings as they are, other scalars as JSON,
/// missing fields as `""`.
fn field_text(object: &Value, path: &str) -> String {
    let value = path
        .split('.')
        .try_fold(object, |v, segment| v.get(segment));
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Everything a list or watch selects by: namespace, labels and fields.
#[derive(Clone, Debug, Default)]
pub(super) struct Filter {
    /// `Some(ns)` for a namespaced request path.
    pub(super) namespace: Option<String>,
    /// `labelSelector`.
    pub(super) labels: LabelSelector,
    /// `fieldSelector`.
    pub(super) fields: FieldSelector,
}

impl Filter {
    /// Whether the object `key` in this form is selected.
    pub(super) fn matches(&self, key: &Key, stored: &Stored) -> bool {
        self.namespace.as_ref().is_none_or(|ns| *ns == key.0)
            && self.labels.matches(&stored.labels)
            && self.fields.matches(key, stored)
    }
}
