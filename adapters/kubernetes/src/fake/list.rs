//! Lists: which resourceVersion a list is served at, and its pages.
//!
//! The resourceVersion follows the table "Semantics for get and list" of the API concepts:
//! unset is the most recent state; `"0"` is any state (here the current one, and, as the
//! real server's watch cache does, `limit` is then ignored); `N` with `NotOlderThan`, or with
//! no match and no limit, is a state not older than `N` (the current one); `N` with `Exact`,
//! or with no match and a limit, is exactly `N`, and 410 `Expired` once compacted. A continue
//! token carries the list's resourceVersion, so every page of one list shows the same state.

use std::ops::Bound;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;

use super::kinds::KINDS;
use super::params::{ReadParams, RvMatch, continue_token};
use super::state::Shared;
use super::status::{ApiError, json_response};

/// Answers a list of the kind in `slot` at `version`.
pub(super) async fn list(
    shared: &Shared,
    slot: usize,
    version: &'static str,
    p: &ReadParams,
) -> Result<Response, ApiError> {
    let kind = &KINDS[slot];
    let exact = match (&p.continue_from, p.rv, p.rv_match) {
        (Some((rv, _)), _, _) => Some(*rv),
        (None, Some(n), RvMatch::Exact) => Some(n),
        (None, Some(n), RvMatch::Unset) if n > 0 && p.limit.is_some() => Some(n),
        _ => None,
    };
    if let (None, Some(n)) = (&p.continue_from, p.rv.filter(|n| *n > 0)) {
        let current = shared.lock().rv;
        if n > current && !shared.wait_for_rv(n).await {
            return Err(ApiError::too_large(n, shared.lock().rv));
        }
    }
    let ignore_limit = p.rv == Some(0) && p.continue_from.is_none();
    let limit = if ignore_limit {
        usize::MAX
    } else {
        p.limit.unwrap_or(usize::MAX)
    };

    let st = shared.lock();
    let at = exact.unwrap_or(st.rv);
    let snapshot = st.stores[slot].at(at).map_err(|compacted| {
        if p.continue_from.is_some() {
            ApiError::continue_expired()
        } else {
            ApiError::too_old(at, compacted)
        }
    })?;
    let namespace = p.filter.namespace.as_deref();
    let start = match (&p.continue_from, namespace) {
        (Some((_, key)), _) => Bound::Excluded(key.clone()),
        (None, Some(ns)) => Bound::Included((ns.to_owned(), String::new())),
        (None, None) => Bound::Unbounded,
    };
    let api_version = kind.api_version(version);
    let mut items = Vec::with_capacity(64 * 1024);
    let (mut count, mut last, mut more) = (0usize, None, false);
    for (key, stored) in snapshot.range(start) {
        if namespace.is_some_and(|ns| ns != key.0) {
            break;
        }
        if !p.filter.matches(key, stored) {
            continue;
        }
        if count == limit {
            more = true;
            break;
        }
        if count > 0 {
            items.push(b',');
        }
        if kind.builtin {
            items.extend_from_slice(&stored.json);
        } else {
            stored.write_typed(&api_version, kind.kind, &mut items);
        }
        count += 1;
        last = Some(key);
    }
    let token = match (more, last) {
        (true, Some(key)) => Some(continue_token(at, key)),
        _ => None,
    };
    drop(snapshot);
    drop(st);

    let mut body = Vec::with_capacity(items.len() + 256);
    body.extend_from_slice(format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{api_version}\",\"metadata\":{{\"resourceVersion\":\"{at}\"",
        kind.kind
    ).as_bytes());
    if let Some(token) = token {
        body.extend_from_slice(format!(",\"continue\":\"{token}\"").as_bytes());
    }
    body.extend_from_slice(b"},\"items\":[");
    body.extend_from_slice(&items);
    body.extend_from_slice(b"]}");
    Ok(json_response(StatusCode::OK, Bytes::from(body)))
}
