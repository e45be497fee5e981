//! Verbs on objects: get, create, replace, patch, delete, delete collection.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::kinds::KINDS;
use super::params::{Query, ReadParams};
use super::patch::{self, PatchType};
use super::route::Target;
use super::state::Shared;
use super::status::{ApiError, json_response};
use super::store::{Key, Stored};
use super::write::{Mode, Preconditions, Write, parse};

/// The object's JSON as the path's version shows it.
fn typed(t: &Target, stored: &Stored) -> Vec<u8> {
    let kind = &KINDS[t.slot];
    let mut out = Vec::with_capacity(stored.json.len() + 64);
    stored.write_typed(&kind.api_version(t.version), kind.kind, &mut out);
    out
}

fn answer(status: StatusCode, t: &Target, stored: &Stored) -> Response {
    json_response(status, Bytes::from(typed(t, stored)))
}

fn key(t: &Target, name: &str) -> Key {
    (t.namespace.clone().unwrap_or_default(), name.to_owned())
}

fn body_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// `GET` an object (or its `/status`, which shows the whole object).
pub(super) fn get(shared: &Shared, t: &Target, name: &str) -> Result<Response, ApiError> {
    let st = shared.lock();
    match st.stores[t.slot].objects.get(&key(t, name)) {
        Some(stored) => Ok(answer(StatusCode::OK, t, stored)),
        None => Err(ApiError::not_found(&KINDS[t.slot], name)),
    }
}

/// `POST` to a collection. Created Events are also kept for `FakeApiServer::events`.
pub(super) fn create(
    shared: &Shared,
    t: &Target,
    body: &[u8],
    manager: &str,
) -> Result<Response, ApiError> {
    let kind = &KINDS[t.slot];
    if kind.namespaced && t.namespace.is_none() {
        return Err(ApiError::method_not_allowed());
    }
    let object = body_json(body)?;
    shared.commit(|st| {
        let stored = st.write(Write {
            slot: t.slot,
            version: t.version,
            namespace: t.namespace.as_deref(),
            name: None,
            object,
            mode: Mode::Create,
            manager,
        })?;
        let json = typed(t, &stored);
        if kind.plural == "events"
            && let Ok(event) = serde_json::from_slice(&json)
        {
            st.events.push(event);
        }
        Ok(json_response(StatusCode::CREATED, Bytes::from(json)))
    })
}

/// `PUT` an object or its `/status`.
pub(super) fn replace(
    shared: &Shared,
    t: &Target,
    name: &str,
    body: &[u8],
    manager: &str,
) -> Result<Response, ApiError> {
    let object = body_json(body)?;
    let stored = shared.commit(|st| st.write(update(t, name, object, manager)))?;
    Ok(answer(StatusCode::OK, t, &stored))
}

/// `PATCH` an object or its `/status`.
pub(super) fn patch(
    shared: &Shared,
    t: &Target,
    name: &str,
    content_type: &str,
    body: &[u8],
    manager: &str,
) -> Result<Response, ApiError> {
    let kind = PatchType::from_content_type(content_type)?;
    let patch_body = body_json(body)?;
    let stored = shared.commit(|st| {
        let Some(current) = st.stores[t.slot].objects.get(&key(t, name)) else {
            return Err(ApiError::not_found(&KINDS[t.slot], name));
        };
        let mut object = parse(current);
        patch::apply(kind, &mut object, &patch_body)?;
        st.write(update(t, name, object, manager))
    })?;
    Ok(answer(StatusCode::OK, t, &stored))
}

fn update<'a>(t: &'a Target, name: &'a str, object: Value, manager: &'a str) -> Write<'a> {
    Write {
        slot: t.slot,
        version: t.version,
        namespace: t.namespace.as_deref(),
        name: Some(name),
        object,
        mode: if t.status { Mode::Status } else { Mode::Update },
        manager,
    }
}

/// `DeleteOptions.preconditions` of a DELETE body, if any.
fn preconditions(body: &[u8]) -> Result<Preconditions, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Preconditions::default());
    }
    let options = body_json(body)?;
    let field = |f: &str| {
        options
            .pointer(f)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Ok(Preconditions {
        uid: field("/preconditions/uid"),
        rv: field("/preconditions/resourceVersion"),
    })
}

/// `DELETE` an object: answers its last state (marked for deletion if finalizers hold it).
pub(super) fn delete(
    shared: &Shared,
    t: &Target,
    name: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    if t.status {
        return Err(ApiError::method_not_allowed());
    }
    let pre = preconditions(body)?;
    let stored = shared.commit(|st| st.delete(t.slot, key(t, name), &pre, true))?;
    Ok(answer(StatusCode::OK, t, &stored))
}

/// `DELETE` a collection: deletes what the selectors pick and answers them as a list.
pub(super) fn delete_collection(
    shared: &Shared,
    t: &Target,
    q: &Query,
) -> Result<Response, ApiError> {
    let kind = &KINDS[t.slot];
    let p = ReadParams::parse(q, kind, t.namespace.as_deref())?;
    let (items, rv) = shared.commit(|st| {
        let keys: Vec<Key> = st.stores[t.slot]
            .objects
            .iter()
            .filter(|(key, stored)| p.filter.matches(key, stored))
            .map(|(key, _)| key.clone())
            .collect();
        let mut items = Vec::new();
        for key in keys {
            if let Ok(stored) = st.delete(t.slot, key, &Preconditions::default(), true) {
                if !items.is_empty() {
                    items.push(b',');
                }
                items.extend_from_slice(&typed(t, &stored));
            }
        }
        (items, st.rv)
    });
    let head = format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}},\"items\":[",
        kind.kind,
        kind.api_version(t.version)
    );
    let mut body = head.into_bytes();
    body.extend_from_slice(&items);
    body.extend_from_slice(b"]}");
    Ok(json_response(StatusCode::OK, Bytes::from(body)))
}
