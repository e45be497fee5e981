//! The fake's HTTP routes (axum) and how faults shape GET answers.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use futures::StreamExt;
use serde::Deserialize;

use super::{Fault, Instance, Shared, render};

type AppState = Arc<Shared>;

pub(super) fn router(shared: AppState) -> Router {
    Router::new()
        .route("/eureka/apps", get(full))
        .route("/eureka/apps/delta", get(delta))
        .route("/eureka/apps/{app}", get(app).post(register))
        .route("/eureka/apps/{app}/{id}", put(heartbeat).delete(deregister))
        .route(
            "/eureka/apps/{app}/{id}/status",
            put(set_status).delete(clear_status),
        )
        .with_state(shared)
}

/// Which GET is being answered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Get {
    Full,
    Delta,
    App,
}

async fn full(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    answer(&shared, &headers, Get::Full, "").await
}

async fn delta(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    answer(&shared, &headers, Get::Delta, "").await
}

async fn app(
    State(shared): State<AppState>,
    Path(app): Path<String>,
    headers: HeaderMap,
) -> Response {
    answer(&shared, &headers, Get::App, &app.to_ascii_uppercase()).await
}

/// A GET answer: 406 without `Accept: application/json`, else the fault's answer or the
/// registry's.
async fn answer(shared: &Shared, headers: &HeaderMap, what: Get, app: &str) -> Response {
    let accepts_json = headers
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains("application/json")));
    if !accepts_json {
        let why = "this fake Eureka answers JSON only: send Accept: application/json";
        return (StatusCode::NOT_ACCEPTABLE, why).into_response();
    }
    let mut fault = shared.fault.clone();
    let fault = match fault.wait_for(|f| *f != Fault::Hang).await {
        Ok(fault) => (*fault).clone(),
        // The fake was dropped while the request was held.
        Err(_) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
    };
    let body = {
        let mut state = shared.lock();
        match what {
            Get::Full => state.counts.full += 1,
            Get::Delta => state.counts.delta += 1,
            Get::App => {}
        }
        match (&fault, what) {
            (Fault::Status(code), _) => {
                let status =
                    StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return (status, format!("injected fault: HTTP {code}")).into_response();
            }
            (Fault::Malformed(body), _) => return json(body.clone()),
            (Fault::DeltaForbidden, Get::Delta) => return StatusCode::FORBIDDEN.into_response(),
            (_, Get::Full) => render::full(&state),
            (_, Get::Delta) => render::delta(&mut state, fault == Fault::WrongHashcode),
            (_, Get::App) => match render::app(&state, app) {
                Some(body) => body,
                None => return StatusCode::NOT_FOUND.into_response(),
            },
        }
    };
    if fault == Fault::Reset {
        let half = Bytes::copy_from_slice(&body.as_bytes()[..body.len() / 2]);
        // The error comes after a pause, so that the status and the first half are sent
        // before the connection is aborted.
        let abort = async {
            tokio::task::yield_now().await;
            Err(std::io::Error::other("injected fault: connection reset"))
        };
        let chunks = futures::stream::once(async { Ok(half) }).chain(futures::stream::once(abort));
        let body = Body::from_stream(chunks);
        return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    json(body)
}

fn json(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `POST /eureka/apps/{APP}` with `{"instance": {…}}`, read as the adapter reads instances.
async fn register(
    State(shared): State<AppState>,
    Path(app): Path<String>,
    body: Bytes,
) -> Response {
    #[derive(Deserialize)]
    struct Registration {
        instance: crate::api::Instance,
    }
    let registration = match serde_json::from_slice::<Registration>(&body) {
        Ok(r) => r.instance,
        Err(err) => return (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
    };
    let id = registration.id().to_string();
    let enabled = |p: &Option<crate::api::PortInfo>, default: bool| {
        p.as_ref()
            .filter(|p| p.enabled.unwrap_or(default))
            .map(|p| p.number)
    };
    let zone = registration
        .data_center_info
        .as_ref()
        .filter(|dc| dc.name.as_deref() == Some("Amazon"))
        .and_then(|dc| dc.metadata.get("availability-zone").cloned());
    let instance = Instance {
        app: app.to_ascii_uppercase(),
        instance_id: id,
        host_name: registration.host_name.clone().unwrap_or_default(),
        ip_addr: registration.ip_addr.clone().unwrap_or_default(),
        port: enabled(&registration.port, true),
        secure_port: enabled(&registration.secure_port, false),
        status: registration.status.clone().unwrap_or_else(|| "UP".into()),
        vip_address: registration.vip_address.clone(),
        metadata: registration.metadata.clone(),
        availability_zone: zone,
    };
    shared.lock().register(instance);
    StatusCode::NO_CONTENT.into_response()
}

async fn heartbeat(
    State(shared): State<AppState>,
    Path((app, id)): Path<(String, String)>,
) -> StatusCode {
    let state = shared.lock();
    let known = state
        .apps
        .get(&app.to_ascii_uppercase())
        .is_some_and(|instances| instances.contains_key(&id));
    if known {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}

async fn deregister(
    State(shared): State<AppState>,
    Path((app, id)): Path<(String, String)>,
) -> StatusCode {
    found(shared.lock().deregister(&app, &id))
}

/// `PUT …/status?value=S`: the status and its override become `S`, as in Eureka.
async fn set_status(
    State(shared): State<AppState>,
    Path((app, id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> StatusCode {
    let Some(value) = query.get("value") else {
        return StatusCode::BAD_REQUEST;
    };
    found(shared.lock().modify(&app, &id, |r| {
        r.instance.status = value.clone();
        r.overridden_status = value.clone();
    }))
}

/// `DELETE …/status[?value=S]`: removes the override; the status becomes `S` (else `UNKNOWN`).
async fn clear_status(
    State(shared): State<AppState>,
    Path((app, id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> StatusCode {
    let status = query
        .get("value")
        .cloned()
        .unwrap_or_else(|| "UNKNOWN".into());
    found(shared.lock().modify(&app, &id, |r| {
        r.instance.status = status;
        r.overridden_status = "UNKNOWN".into();
    }))
}

fn found(known: bool) -> StatusCode {
    if known {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}
