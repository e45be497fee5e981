//! The HTTP side: one handler that meets the fault, parses the path and calls the verb.

use std::sync::Arc;

use axum::Router;
use axum::body::{Bytes, to_bytes};
use axum::extract::{Request, State as With};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::Value;

use super::access_review;
use super::discovery;
use super::kinds::KINDS;
use super::list;
use super::objects;
use super::params::{Query, ReadParams};
use super::route::{self, Route, Target};
use super::state::Shared;
use super::status::{ApiError, json_response};
use super::token_review;
use super::watch::{self, Spec, Start};
use super::{Call, Fault};

/// Largest request body taken (the real server's limit is 3 MiB per object; lists are bigger).
const BODY_LIMIT: usize = 64 << 20;

/// The fake's routes: everything goes through [`handle`].
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// What a request is, for the counts.
enum Class {
    List(&'static str),
    Watch(&'static str),
    Write,
    Other,
}

async fn handle(With(shared): With<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let route = route::parse(parts.uri.path());
    let query = Query::parse(&parts.uri);
    let class = classify(&route, &parts.method, query.as_ref().ok());
    let call = call(&route, &parts.method, matches!(class, Class::Watch(_)));
    let gate = gate(&shared).await;
    {
        let mut st = shared.lock();
        st.counts.calls.extend(call);
        match class {
            Class::List(plural) => *st.counts.lists.entry(plural.to_owned()).or_insert(0) += 1,
            Class::Watch(plural) => *st.counts.watches.entry(plural.to_owned()).or_insert(0) += 1,
            Class::Write => st.counts.writes += 1,
            Class::Other => {}
        }
    }
    let result = match (gate, query) {
        (Err(e), _) | (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(query)) => match to_bytes(body, BODY_LIMIT).await {
            Ok(body) => serve(&shared, route, &parts.method, &parts.headers, &query, body).await,
            Err(e) => Err(ApiError::bad_request(format!(
                "reading the request body: {e}"
            ))),
        },
    };
    result.unwrap_or_else(|e| {
        if e.code() == 410 {
            shared.lock().counts.gone += 1;
        }
        e.into_response()
    })
}

fn classify(route: &Route, method: &Method, query: Option<&Query>) -> Class {
    match (route, method) {
        (Route::Collection(t), &Method::GET) => {
            let plural = KINDS[t.slot].plural;
            let watch = query
                .and_then(|q| q.flag("watch").ok().flatten())
                .unwrap_or(false);
            if watch {
                Class::Watch(plural)
            } else {
                Class::List(plural)
            }
        }
        (Route::Object(..), &Method::GET) => Class::Other,
        (Route::Collection(_) | Route::Object(..), _) => Class::Write,
        _ => Class::Other,
    }
}

/// The request as RBAC sees it (verb, group, resource), if it is an API call.
fn call(route: &Route, method: &Method, watch: bool) -> Option<Call> {
    let (group, resource, collection) = match route {
        Route::Collection(t) => (KINDS[t.slot].group, KINDS[t.slot].plural.to_owned(), true),
        Route::Object(t, _) if t.status => {
            let kind = &KINDS[t.slot];
            (kind.group, format!("{}/status", kind.plural), false)
        }
        Route::Object(t, _) => (KINDS[t.slot].group, KINDS[t.slot].plural.to_owned(), false),
        Route::TokenReviews => ("authentication.k8s.io", "tokenreviews".to_owned(), true),
        Route::SubjectAccessReviews => (
            "authorization.k8s.io",
            "subjectaccessreviews".to_owned(),
            true,
        ),
        _ => return None,
    };
    let verb = match (method, collection) {
        (&Method::GET, true) if watch => "watch",
        (&Method::GET, true) => "list",
        (&Method::GET, false) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "deletecollection",
        (&Method::DELETE, false) => "delete",
        _ => return None,
    };
    Some(Call {
        verb: verb.to_owned(),
        group: group.to_owned(),
        resource,
    })
}

/// Meets the fault: `Err` for a status fault; held while the fault is `Hang` (until it
/// changes, or the server stops).
async fn gate(shared: &Shared) -> Result<(), ApiError> {
    let mut stops = shared.stops();
    loop {
        let mut control = shared.control();
        let fault = shared.lock().fault.clone();
        match fault {
            Fault::None => return Ok(()),
            Fault::Status(code) => return Err(ApiError::fault(code)),
            Fault::Hang => {}
        }
        tokio::select! {
            _ = control.changed() => {}
            _ = stops.changed() => return Err(ApiError::fault(503)),
        }
    }
}

async fn serve(
    shared: &Arc<Shared>,
    route: Route,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    body: Bytes,
) -> Result<Response, ApiError> {
    let host = || {
        headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("127.0.0.1")
            .to_owned()
    };
    let manager = field_manager(headers, query);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    match (route, method.clone()) {
        (Route::Version, Method::GET) => Ok(json(discovery::version())),
        (Route::TokenReviews, Method::POST) => token_review::review(shared, &body),
        (Route::SubjectAccessReviews, Method::POST) => access_review::review(shared, &body),
        (Route::Api, Method::GET) => Ok(json(discovery::api(&host()))),
        (Route::Apis, Method::GET) => Ok(json(discovery::apis())),
        (Route::Group(g), Method::GET) => Ok(json(discovery::api_group(g))),
        (Route::Resources(g, v), Method::GET) => Ok(json(discovery::resources(g, v))),
        (Route::Collection(t), Method::GET) => read(shared, &t, query).await,
        (Route::Collection(t), Method::POST) => objects::create(shared, &t, &body, &manager),
        (Route::Collection(t), Method::DELETE) => objects::delete_collection(shared, &t, query),
        (Route::Object(t, name), Method::GET) => objects::get(shared, &t, &name),
        (Route::Object(t, name), Method::PUT) => {
            objects::replace(shared, &t, &name, &body, &manager)
        }
        (Route::Object(t, name), Method::PATCH) => {
            objects::patch(shared, &t, &name, content_type, &body, &manager)
        }
        (Route::Object(t, name), Method::DELETE) => objects::delete(shared, &t, &name, &body),
        (Route::Unknown, _) => Err(ApiError::no_route()),
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn json(value: Value) -> Response {
    json_response(StatusCode::OK, Bytes::from(value.to_string()))
}

/// `fieldManager`, else the User-Agent's product (`kube-rs/…` → `kube-rs`), as the server
/// names managers.
fn field_manager(headers: &HeaderMap, query: &Query) -> String {
    if let Some(m) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.to_owned();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|h| h.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|m| !m.is_empty())
        .unwrap_or("unknown")
        .to_owned()
}

/// A GET on a collection: a list, or a watch.
async fn read(shared: &Arc<Shared>, t: &Target, query: &Query) -> Result<Response, ApiError> {
    let p = ReadParams::parse(query, &KINDS[t.slot], t.namespace.as_deref())?;
    if !p.watch {
        return list::list(shared, t.slot, t.version, &p).await;
    }
    let start = match (p.rv.filter(|rv| *rv > 0), p.send_initial) {
        (None, initial) => Start::Now {
            initial: initial.unwrap_or(true),
            end_mark: initial == Some(true),
        },
        (Some(rv), initial) => {
            let current = shared.lock().rv;
            if rv > current && !shared.wait_for_rv(rv).await {
                return Err(ApiError::too_large(rv, shared.lock().rv));
            }
            if initial == Some(true) {
                Start::Now {
                    initial: true,
                    end_mark: true,
                }
            } else {
                Start::After(rv)
            }
        }
    };
    let spec = Spec {
        slot: t.slot,
        version: t.version,
        filter: p.filter,
        start,
        bookmarks: p.bookmarks,
        timeout: p.timeout,
    };
    Ok(watch::open(shared, spec))
}
