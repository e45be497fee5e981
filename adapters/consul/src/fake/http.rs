//! The HTTP side of the fake: routes, ACL checks, faults and the blocking-query wait.
//!
//! A read goes: parse the query (400), find the datacenter (500 `No path to datacenter`),
//! check the token (403), refuse a read that needs a leader when there is none (500), then
//! faults, then, with `index` > 0, wait until the resource's index passes it, a snapshot
//! restore happens, or `wait` (plus jitter) runs out.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State as With};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, put};
use tokio::sync::watch;

use super::Fault;
use super::dc::Dc;
use super::json::{self, HealthFilter};
use super::params::Query;
use super::reply::{Meta, fault_status, no_dc, no_leader, respond, stopped, text};
use super::state::{Shared, State};
use super::write;

/// The fake's routes.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/catalog/services", get(catalog_services))
        .route("/v1/catalog/datacenters", get(datacenters))
        .route("/v1/health/service/{service}", get(health_service))
        .route("/v1/status/leader", get(status_leader))
        .route("/v1/catalog/register", put(write::register))
        .route("/v1/catalog/deregister", put(write::deregister))
        .with_state(shared)
}

async fn catalog_services(
    With(shared): With<Arc<Shared>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    let response = read(&shared, raw.as_deref(), &headers, None).await;
    shared.lock().counts.catalog_services += 1;
    response
}

async fn health_service(
    With(shared): With<Arc<Shared>>,
    Path(service): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    let response = read(&shared, raw.as_deref(), &headers, Some(&service)).await;
    *shared.lock().counts.health.entry(service).or_insert(0) += 1;
    response
}

/// `GET /v1/catalog/datacenters`: not blocking, no ACL, no `X-Consul-*` headers.
async fn datacenters(With(shared): With<Arc<Shared>>) -> Response {
    let response = unblocked(&shared, |st| json_body(&st.dcs)).await;
    shared.lock().counts.datacenters += 1;
    response
}

/// `GET /v1/status/leader`: the leader's address as a JSON string (`"127.0.0.1:8300"`), or
/// `""` when the cluster has none. Not blocking, no ACL, no `X-Consul-*` headers; `dc` asks
/// another datacenter's servers.
async fn status_leader(With(shared): With<Arc<Shared>>, RawQuery(raw): RawQuery) -> Response {
    let response = match Query::parse(raw.as_deref()) {
        Err(reason) => text(StatusCode::BAD_REQUEST, reason),
        Ok(q) => {
            unblocked(&shared, |st| match st.find_dc(q.dc.as_deref()) {
                None => Err(Box::new(no_dc())),
                Some(_) => json_body(&st.leader()),
            })
            .await
        }
    };
    shared.lock().counts.status_leader += 1;
    response
}

/// A read that never blocks: faults apply (a hang holds it), then `render` makes the body or
/// the refusal.
async fn unblocked(
    shared: &Shared,
    render: impl Fn(&State) -> Result<Vec<u8>, Box<Response>>,
) -> Response {
    let mut held = None;
    let mut arrival = None;
    loop {
        let mut control = shared.control();
        let answer = {
            let st = shared.lock();
            let arrival = arrival.get_or_insert_with(|| st.new_request_fault.clone());
            match effective(arrival, || st.fault.clone()) {
                _ if st.closed => Err(stopped()),
                Fault::Status(code) => Err(fault_status(code)),
                Fault::Hang => Ok(None),
                fault => render(&st)
                    .map(|body| Some((body, fault)))
                    .map_err(|refusal| *refusal),
            }
        };
        match answer {
            Err(response) => return response,
            Ok(Some((body, fault))) => return respond(body, fault, None).await,
            Ok(None) => {
                held.get_or_insert_with(|| shared.hold());
                let _ = control.changed().await;
            }
        }
    }
}

/// The fault a request answers to: the new-request fault it arrived under, if any, else the
/// current one.
fn effective(arrival: &Fault, current: impl FnOnce() -> Fault) -> Fault {
    if *arrival == Fault::None {
        current()
    } else {
        arrival.clone()
    }
}

fn json_body<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Box<Response>> {
    serde_json::to_vec(value)
        .map_err(|e| Box::new(text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())))
}

/// What a read asks for.
enum Read {
    Catalog,
    Health {
        service: String,
        filter: HealthFilter,
    },
}

impl Read {
    fn service(&self) -> Option<&str> {
        match self {
            Read::Catalog => None,
            Read::Health { service, .. } => Some(service),
        }
    }

    fn index(&self, dc: &Dc) -> u64 {
        match self {
            Read::Catalog => dc.table_index,
            Read::Health { service, .. } => dc.service_index(service),
        }
    }

    fn watch(&self, dc: &Dc) -> watch::Receiver<()> {
        match self {
            Read::Catalog => dc.table_tx.subscribe(),
            Read::Health { service, .. } => dc.service_watch(service),
        }
    }

    fn render(&self, dc_name: &str, dc: &Dc) -> Vec<u8> {
        match self {
            Read::Catalog => json::catalog_services(dc),
            Read::Health { service, filter } => json::health(dc_name, dc, service, filter),
        }
    }
}

async fn read(
    shared: &Shared,
    raw: Option<&str>,
    headers: &HeaderMap,
    service: Option<&str>,
) -> Response {
    let q = match Query::parse(raw) {
        Ok(q) => q,
        Err(reason) => return text(StatusCode::BAD_REQUEST, reason),
    };
    let read = match (service, q.passing()) {
        (None, _) => Read::Catalog,
        (Some(service), Ok(passing)) => Read::Health {
            service: service.to_owned(),
            filter: HealthFilter {
                passing,
                tags: q.tags.clone(),
            },
        },
        (Some(_), Err(reason)) => return text(StatusCode::BAD_REQUEST, reason),
    };
    let arrival = {
        let st = shared.lock();
        if st.find_dc(q.dc.as_deref()).is_none() {
            return no_dc();
        }
        if let Some(denied) = check_acl(&st, q.token.as_deref(), headers) {
            return denied;
        }
        let arrival = st.new_request_fault.clone();
        // Without a leader only a server's own (stale) view can be read.
        if arrival == Fault::None && st.leader_lost.is_some() && !q.stale {
            return no_leader();
        }
        arrival
    };
    match wait(shared, &q, &read, &arrival).await {
        Ok((body, fault, meta)) => respond(body, fault, Some(meta)).await,
        Err(response) => response,
    }
}

/// Faults and the blocking wait; returns the body, the fault to answer with, and the meta.
/// `arrival` is the new-request fault the request arrived under ([`Fault::None`]: the current
/// fault applies).
async fn wait(
    shared: &Shared,
    q: &Query,
    read: &Read,
    arrival: &Fault,
) -> Result<(Vec<u8>, Fault, Meta), Response> {
    let deadline = tokio::time::Instant::now() + q.timeout();
    let mut restores = None;
    let mut timed_out = false;
    let mut held = None;
    loop {
        let mut control = shared.control();
        let mut change = {
            let st = shared.lock();
            let start = *restores.get_or_insert(st.restores);
            match effective(arrival, || st.fault_for(read.service())) {
                _ if st.closed => return Err(stopped()),
                Fault::Status(code) => return Err(fault_status(code)),
                Fault::Hang => None,
                fault => {
                    let Some((dc_name, dc)) = st.find_dc(q.dc.as_deref()) else {
                        return Err(no_dc());
                    };
                    let index = read.index(dc);
                    if q.index == 0 || index > q.index || timed_out || st.restores != start {
                        let (known_leader, last_contact) = st.leadership();
                        let meta = Meta {
                            index,
                            consistency: q.consistency(),
                            acl: st.token.is_some(),
                            known_leader,
                            last_contact,
                        };
                        return Ok((read.render(dc_name, dc), fault, meta));
                    }
                    Some(read.watch(dc))
                }
            }
        };
        held.get_or_insert_with(|| shared.hold());
        let hanging = change.is_none();
        tokio::select! {
            _ = control.changed() => {}
            () = changed(change.as_mut()) => {}
            () = tokio::time::sleep_until(deadline), if !hanging => timed_out = true,
        }
    }
}

/// Resolves when `rx` sees a change; never for `None` or a closed channel.
async fn changed(rx: Option<&mut watch::Receiver<()>>) {
    if let Some(rx) = rx
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending::<()>().await;
}

/// Checks the request's token when ACLs are on: from `?token=`, else `X-Consul-Token`, else
/// `Authorization: Bearer` (Consul's order). No token: 403 `Permission denied`; another token
/// than the required one: 403 `ACL not found`. `Some` is the refusal.
pub(super) fn check_acl(
    st: &State,
    query_token: Option<&str>,
    headers: &HeaderMap,
) -> Option<Response> {
    let required = st.token.as_deref()?;
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let bearer = header("authorization").and_then(|v| {
        let (scheme, value) = v.split_once(' ')?;
        let token = value.split_whitespace().next()?;
        scheme.eq_ignore_ascii_case("bearer").then_some(token)
    });
    let presented = query_token
        .filter(|t| !t.is_empty())
        .or(header("x-consul-token").filter(|t| !t.is_empty()))
        .or(bearer);
    match presented {
        None => Some(text(StatusCode::FORBIDDEN, "Permission denied")),
        Some(token) if token == required => None,
        Some(_) => Some(text(StatusCode::FORBIDDEN, "ACL not found")),
    }
}
