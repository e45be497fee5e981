//! Debug pages (on `--http-addr`) and monitoring (on `--monitoring-addr`), with Istio's paths.
//!
//! `/debug/*` answers loopback peers, and other peers with the bearer token of
//! `--debug-token-file` (see [`trust`]); `/ready` and the monitoring port are open.
//!
//! | path | what |
//! |---|---|
//! | `/ready` | 200 once every registry synced (or the sync timeout passed), else 503; with `--ready-requires-healthy`, also 503 while a registry is degraded |
//! | `/ui` | a web view of these pages for people (see `debug/ui.rs`): the HTML, its style and script; loopback peers, and others when a token file is set |
//! | `/debug` | this list |
//! | `/debug/registryz` | per registry: status, last error and its services; merge conflicts |
//! | `/debug/endpointz[?svc=HOST]` | merged services with every endpoint and its registry |
//! | `/debug/configz[?kind=&namespace=&name=&start=&limit=&spec=]` | configuration sources (status, last error), the MeshConfig file's settings and errors, every document and object refused now with its error, and the objects in force a page at a time (see `debug/configz.rs`) |
//! | `/debug/syncz` | per connected proxy: id, kind, cluster, version, identity, peer address, connected since; per type sent/acked version and nonce, when sent, `status` (`SYNCED`, `STALE`, `NACKED`, `NOT SENT`), seconds unacknowledged, last NACK |
//! | `/debug/config_dump?proxyID=ID` | what that proxy is served now, as JSON, and per type under `sync` its state and the resources that differ from what it holds |
//! | `/debug/push_status` | the latest pushes and their totals per type |
//! | `/debug/leaderz` | the replicas' leader election: the Lease (`null` without one), this replica's identity, whether it leads, the holder last seen (see [`crate::leader`]) |
//! | `/metrics` (monitoring) | Prometheus text |
//! | `/version` (monitoring) | build version |
//!
//! istiod's names for the same pages answer too (`ALIASES`), behind the same rule:
//! `/debug/adsz` and `/debug/connections` (the connected proxies: `/debug/syncz`),
//! `/debug/instancesz` and `/debug/endpointShardz` (services and their endpoints:
//! `/debug/endpointz`), `/debug/list` (`/debug`). istiod's other pages (`/debug/cachez`,
//! `/debug/sidecarz`, `/debug/pprof/`, …) have no counterpart and answer 404.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

mod configz;
mod ui;

use crate::mesh_config::MeshStatus;
use crate::metrics::Exposition;
use crate::snapshot::{Health, SnapshotReader};
use crate::xds::ads::AdsServer;

pub mod trust;

pub use trust::DebugToken;

#[derive(Clone)]
struct Debug {
    model: SnapshotReader,
    ads: AdsServer,
    mesh: tokio::sync::watch::Receiver<Arc<MeshStatus>>,
    ready_requires_healthy: bool,
    leader: crate::leader::Leader,
}

const PAGES: [(&str, &str); 10] = [
    (
        "/ready",
        "200 once every registry synced or the sync timeout passed",
    ),
    (
        "/debug/registryz",
        "registries: status, last error, services; merge conflicts",
    ),
    (
        "/debug/endpointz",
        "merged services and their endpoints (?svc=HOST to filter)",
    ),
    (
        "/debug/configz",
        "configuration sources, MeshConfig, what they refuse, the objects in force (?kind=&namespace=&name=&start=&limit=&spec=)",
    ),
    (
        "/debug/syncz",
        "connected proxies and their per-type xDS state",
    ),
    ("/debug/config_dump", "what a proxy is served (?proxyID=ID)"),
    (
        "/debug/push_status",
        "the latest 256 pushes: proxy, type, resources, bytes, time since publication",
    ),
    (
        "/debug/leaderz",
        "leader election: the Lease, this replica's identity, whether it leads",
    ),
    ("/debug", "this list"),
    (
        "/ui",
        "a web view of these pages, for a browser (HTML; data from the pages above)",
    ),
];

/// istiod's debug paths that have a page here, and the page each answers as. istiod's
/// `/debug/endpointz` is itself the old name of its `/debug/endpointShardz`; its
/// `/debug/instancesz` lists the services each connected proxy is an instance of, which
/// wayfinder shows by service (every endpoint with its address and labels).
const ALIASES: [(&str, Page); 5] = [
    ("/debug/adsz", Page::Syncz),
    ("/debug/connections", Page::Syncz),
    ("/debug/instancesz", Page::Endpointz),
    ("/debug/endpointShardz", Page::Endpointz),
    ("/debug/list", Page::List),
];

/// A page an alias answers as.
#[derive(Clone, Copy)]
enum Page {
    Syncz,
    Endpointz,
    List,
}

impl Page {
    fn path(self) -> &'static str {
        match self {
            Page::Syncz => "/debug/syncz",
            Page::Endpointz => "/debug/endpointz",
            Page::List => "/debug",
        }
    }
}

/// The debug HTTP routes. With `ready_requires_healthy`, `/ready` also answers 503 while any
/// registry or configuration source is degraded (its last item was an error), for deployments
/// that would rather send proxies to another replica than serve a registry's last good state.
///
/// `/debug/*` answers loopback peers, and others that send `token` as a bearer token; see
/// [`trust`] for the rule. The server must provide each request's
/// `ConnectInfo<SocketAddr>`: without it every request counts as from another host.
pub fn router(
    model: SnapshotReader,
    ads: AdsServer,
    mesh: tokio::sync::watch::Receiver<Arc<MeshStatus>>,
    ready_requires_healthy: bool,
    token: Option<DebugToken>,
    leader: crate::leader::Leader,
) -> Router {
    let ui = ui::router(token.clone());
    let mut router = Router::new()
        .route("/debug", get(list))
        .route("/debug/registryz", get(registryz))
        .route("/debug/endpointz", get(endpointz))
        .route("/debug/configz", get(configz::configz))
        .route("/debug/syncz", get(syncz))
        .route("/debug/config_dump", get(config_dump))
        .route("/debug/push_status", get(push_status))
        .route("/debug/leaderz", get(leaderz));
    for (alias, page) in ALIASES {
        let handler = match page {
            Page::Syncz => get(syncz),
            Page::Endpointz => get(endpointz),
            Page::List => get(list),
        };
        router = router.route(alias, handler);
    }
    router
        // Every route above needs trust; `/ready`, below, stays open for probes.
        .route_layer(middleware::from_fn_with_state(token, trust::require))
        .route("/ready", get(ready))
        .merge(ui)
        .with_state(Debug {
            model,
            ads,
            mesh,
            ready_requires_healthy,
            leader,
        })
}

/// The monitoring HTTP routes.
pub fn monitoring_router(metrics: Arc<Exposition>) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/version", get(version))
        .with_state(metrics)
}

async fn ready(State(d): State<Debug>) -> Response {
    let statuses = d.model.statuses();
    let (registries, configs) = (&statuses.registries, &statuses.config_sources);
    if d.model.is_ready() {
        if !d.ready_requires_healthy {
            return (StatusCode::OK, "ready\n").into_response();
        }
        let degraded: Vec<String> = registries
            .iter()
            .chain(configs)
            .filter(|s| s.health == Health::Degraded)
            .map(|s| s.id.to_string())
            .collect();
        if degraded.is_empty() {
            return (StatusCode::OK, "ready\n").into_response();
        }
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: degraded: {}\n", degraded.join(", ")),
        )
            .into_response();
    }
    let waiting: Vec<String> = registries
        .iter()
        .chain(configs)
        .filter(|s| !s.synced)
        .map(|s| s.id.to_string())
        .collect();
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("not ready: waiting for {}\n", waiting.join(", ")),
    )
        .into_response()
}

async fn list() -> Json<Value> {
    let pages = PAGES
        .iter()
        .map(|(path, what)| json!({"path": path, "what": what}));
    let aliases = ALIASES.iter().map(
        |(path, page)| json!({"path": path, "what": format!("istiod's name for {}", page.path())}),
    );
    Json(pages.chain(aliases).collect())
}

async fn leaderz(State(d): State<Debug>) -> Json<Value> {
    Json(d.leader.page())
}

async fn registryz(State(d): State<Debug>) -> Json<Value> {
    let snapshot = d.model.snapshot();
    let statuses = d.model.statuses();
    let registries: Vec<Value> = statuses
        .registries
        .iter()
        .map(|status| {
            let services: Vec<Value> = snapshot
                .sources
                .iter()
                .find(|s| s.registry == status.id)
                .map(|s| {
                    s.services
                        .values()
                        .map(|r| json!({"service": r.service, "endpoints": r.endpoints.len()}))
                        .collect()
                })
                .unwrap_or_default();
            json!({ "status": status, "services": services })
        })
        .collect();
    Json(json!({
        "snapshot_version": snapshot.version,
        "registries": registries,
        "conflicts": snapshot.conflicts,
    }))
}

async fn endpointz(
    State(d): State<Debug>,
    Query(q): Query<HashMap<String, String>>,
) -> Json<Value> {
    let snapshot = d.model.snapshot();
    let filter = q.get("svc");
    let services: Vec<Value> = snapshot
        .services
        .iter()
        .filter(|(key, _)| filter.is_none_or(|f| *key.hostname == **f))
        .map(|(key, merged)| {
            json!({
                "service": key.to_string(),
                "registries": merged.registries,
                "ports": merged.service.ports,
                "endpoints": merged.endpoints,
            })
        })
        .collect();
    Json(Value::Array(services))
}

async fn push_status(State(d): State<Debug>) -> Json<Value> {
    let pushes = d.ads.pushes();
    let mut totals: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for p in &pushes {
        let t = totals.entry(p.r#type).or_default();
        t.0 += 1;
        t.1 += p.bytes as u64;
    }
    let totals: BTreeMap<&str, Value> = totals
        .into_iter()
        .map(|(t, (n, bytes))| (t, json!({"pushes": n, "bytes": bytes})))
        .collect();
    Json(json!({
        "snapshot_version": d.ads.current().model().version,
        "totals": totals,
        "pushes": pushes,
    }))
}

async fn syncz(State(d): State<Debug>) -> Json<Value> {
    Json(d.ads.syncz())
}

async fn config_dump(State(d): State<Debug>, Query(q): Query<HashMap<String, String>>) -> Response {
    let Some(id) = q.get("proxyID") else {
        return (
            StatusCode::BAD_REQUEST,
            "config_dump needs ?proxyID=ID (see /debug/syncz)\n",
        )
            .into_response();
    };
    match d.ads.config_dump(id) {
        Some(dump) => Json(dump).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("no connected proxy with id {id:?} (see /debug/syncz)\n"),
        )
            .into_response(),
    }
}

async fn render_metrics(State(m): State<Arc<Exposition>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.render(),
    )
        .into_response()
}

async fn version() -> Json<Value> {
    Json(json!({ "name": "wayfinder", "version": env!("CARGO_PKG_VERSION") }))
}
