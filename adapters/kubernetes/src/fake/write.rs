//! The one write path, shared by HTTP requests and the test helpers: server-set metadata,
//! optimistic concurrency, the status subresource rules, finalizers and the history record.

mod body;

use std::sync::Arc;

use axum::body::Bytes;
use serde_json::{Map, Value, json};

use super::kinds::KINDS;
use super::meta;
use super::state::State;
use super::status::ApiError;
use super::store::{Change, ChangeType, Key, Labels, Stored};
use body::{check_rv, check_type, key_of, labels, server_metadata, shape_status, unchanged};

/// Which write this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// `POST`: the object must not exist; the server resets its status where a `/status`
    /// subresource owns it.
    Create,
    /// `PUT`/`PATCH` on the object: it must exist; its status is kept where a `/status`
    /// subresource owns it.
    Update,
    /// `PUT`/`PATCH` on `/status`: it must exist; only its status changes.
    Status,
    /// The test helper: creates or replaces, status and all.
    Apply,
}

/// A write of one object.
#[derive(Debug)]
pub(super) struct Write<'a> {
    /// Storage slot of the kind.
    pub(super) slot: usize,
    /// The version it is written at.
    pub(super) version: &'static str,
    /// The namespace of the request path, if any.
    pub(super) namespace: Option<&'a str>,
    /// The name of the request path, if any.
    pub(super) name: Option<&'a str>,
    /// The body.
    pub(super) object: Value,
    /// Which write.
    pub(super) mode: Mode,
    /// The field manager recorded in `managedFields`.
    pub(super) manager: &'a str,
}

/// `DeleteOptions.preconditions`.
#[derive(Debug, Default)]
pub(super) struct Preconditions {
    /// The uid the object must have.
    pub(super) uid: Option<String>,
    /// The resourceVersion the object must have.
    pub(super) rv: Option<String>,
}

/// Parses a stored object.
pub(super) fn parse(stored: &Stored) -> Value {
    serde_json::from_slice(&stored.json).unwrap_or(Value::Null)
}

impl State {
    /// Writes one object; returns what is stored now (the old object for a write that
    /// changes nothing, which, as in Kubernetes, takes no resourceVersion and sends no event).
    pub(super) fn write(&mut self, w: Write<'_>) -> Result<Stored, ApiError> {
        let kind = &KINDS[w.slot];
        let Value::Object(mut obj) = w.object else {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        };
        check_type(&obj, kind, &kind.api_version(w.version))?;
        obj.remove("apiVersion");
        obj.remove("kind");
        let path = (w.namespace, w.name, w.mode);
        let key = key_of(kind, &mut obj, path, |key| {
            self.stores[w.slot].objects.contains_key(key)
        })?;
        let old = self.stores[w.slot].objects.get(&key).cloned();
        let old_value = old.as_ref().map(parse);
        match (w.mode, &old) {
            (Mode::Create, Some(_)) => return Err(ApiError::already_exists(kind, &key.1)),
            (Mode::Update | Mode::Status, None) => return Err(ApiError::not_found(kind, &key.1)),
            (Mode::Update | Mode::Status, Some(old)) => check_rv(kind, &key, &obj, old.rv)?,
            _ => {}
        }
        shape_status(kind, w.mode, &mut obj, old_value.as_ref());
        server_metadata(w.mode, &mut obj, old_value.as_ref());
        if let (Some(old), Some(before)) = (&old, &old_value)
            && w.mode != Mode::Apply
        {
            if unchanged(before, &obj) {
                return Ok(old.clone());
            }
            let terminating = before.pointer("/metadata/deletionTimestamp").is_some();
            let finalizers = obj
                .get("metadata")
                .and_then(|m| m.get("finalizers"))
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty());
            if terminating && !finalizers {
                return Ok(self.delete_now(w.slot, key, old.clone(), Value::Object(obj)));
            }
        }
        let subresource = (w.mode == Mode::Status).then_some("status");
        meta::record_manager(
            &mut obj,
            old_value.as_ref(),
            w.manager,
            &kind.api_version(w.version),
            subresource,
        );
        let labels = labels(kind, &key, &obj)?;
        self.rv += 1;
        let rv = self.rv;
        let stored = stored(obj, rv, labels);
        let change = if old.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.record(w.slot, key, change, stored.clone(), old);
        Ok(stored)
    }

    /// Deletes an object: at once, or, when it has finalizers and `graceful`, by marking it
    /// with a `deletionTimestamp` (it goes when an update removes the last finalizer).
    /// Returns its last state.
    pub(super) fn delete(
        &mut self,
        slot: usize,
        key: Key,
        pre: &Preconditions,
        graceful: bool,
    ) -> Result<Stored, ApiError> {
        let kind = &KINDS[slot];
        let Some(old) = self.stores[slot].objects.get(&key).cloned() else {
            return Err(ApiError::not_found(kind, &key.1));
        };
        let mut value = parse(&old);
        let field = |f: &str| value.pointer(f).and_then(Value::as_str).map(str::to_owned);
        if let Some(uid) = &pre.uid
            && field("/metadata/uid").as_ref() != Some(uid)
        {
            let why = format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                field("/metadata/uid").unwrap_or_default()
            );
            return Err(ApiError::conflict(kind, &key.1, &why));
        }
        if let Some(rv) = &pre.rv
            && *rv != old.rv.to_string()
        {
            let why = format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in \
                 object meta: {}",
                old.rv
            );
            return Err(ApiError::conflict(kind, &key.1, &why));
        }
        let finalizers = value
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if !(graceful && finalizers) {
            return Ok(self.delete_now(slot, key, old, value));
        }
        if value.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(old);
        }
        value["metadata"]["deletionTimestamp"] = json!(meta::now());
        value["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        self.rv += 1;
        let Value::Object(obj) = value else {
            return Ok(old);
        };
        let stored = stored(obj, self.rv, old.labels.clone());
        self.record(slot, key, ChangeType::Modified, stored.clone(), Some(old));
        Ok(stored)
    }

    /// Removes `key` (whose current form is `old`, last content `value`) with a new version.
    fn delete_now(&mut self, slot: usize, key: Key, old: Stored, value: Value) -> Stored {
        self.rv += 1;
        let obj = match value {
            Value::Object(obj) => obj,
            _ => Map::new(),
        };
        let stored = stored(obj, self.rv, old.labels.clone());
        self.record(slot, key, ChangeType::Deleted, stored.clone(), Some(old));
        stored
    }

    fn record(
        &mut self,
        slot: usize,
        key: Key,
        kind: ChangeType,
        object: Stored,
        prev: Option<Stored>,
    ) {
        let rv = object.rv;
        self.stores[slot].record(Change {
            rv,
            key,
            kind,
            object,
            prev,
        });
    }
}

/// Serializes an object (without `apiVersion` and `kind`) at resourceVersion `rv`.
fn stored(mut obj: Map<String, Value>, rv: u64, labels: Arc<Labels>) -> Stored {
    if let Some(Value::Object(m)) = obj.get_mut("metadata") {
        m.insert("resourceVersion".to_owned(), json!(rv.to_string()));
    }
    let json = serde_json::to_vec(&obj).unwrap_or_else(|_| b"{}".to_vec());
    Stored {
        json: Bytes::from(json),
        labels,
        rv,
    }
}
