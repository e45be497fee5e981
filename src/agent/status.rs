//! The agent's status port (pilot-agent's 15020), for the kubelet and for Prometheus:
//!
//! - `/healthz/ready`: 200 once the newest Envoy epoch is `LIVE` and has received its first
//!   clusters and listeners from the control plane (accepted or rejected, as Istio counts
//!   them), 503 with the reason otherwise;
//! - `/app-health/<container>/<probe>`: the application probes Istio's injector rewrites to
//!   the agent, each defined in the JSON of `ISTIO_KUBE_APP_PROBERS` (`httpGet` or
//!   `tcpSocket`, with `timeoutSeconds`), run against the application on `127.0.0.1` or the
//!   probe's `host`;
//! - `/stats/prometheus`: Envoy's stats, from its admin.
//!
//! The port takes any peer (the kubelet is not on loopback), serves HTTP/1.1 only, within
//! [`SLOTS`] connections and a header-read timeout, and says nothing secret: Envoy's admin
//! stays on loopback, and only the three read-only paths above reach it.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::probe::{Outcome, Probe};
use super::supervisor::read_admin;

/// Connections the status port serves at once.
pub const SLOTS: usize = 64;
/// How long a request's headers may take.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long Envoy's admin may take to answer.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The probes by path (`/app-health/<container>/readyz`).
pub type Probers = BTreeMap<String, Probe>;

/// Reads `ISTIO_KUBE_APP_PROBERS`; an invalid value stops the agent with the reason.
pub fn probers(json: Option<&str>) -> anyhow::Result<Probers> {
    let Some(json) = json.filter(|j| !j.trim().is_empty()) else {
        return Ok(Probers::new());
    };
    let probers: Probers = serde_json::from_str(json).map_err(|e| {
        anyhow::anyhow!(
            "ISTIO_KUBE_APP_PROBERS is not a map of paths to httpGet or tcpSocket probes: {e}"
        )
    })?;
    for (path, p) in &probers {
        if !path.starts_with("/app-health/") {
            anyhow::bail!("ISTIO_KUBE_APP_PROBERS: {path:?} does not start with /app-health/");
        }
        p.check(false)
            .map_err(|why| anyhow::anyhow!("ISTIO_KUBE_APP_PROBERS: {path}: {why}"))?;
    }
    Ok(probers)
}

#[derive(Clone)]
struct Status {
    /// The newest epoch's admin address file.
    admin: watch::Receiver<Option<PathBuf>>,
    probers: Arc<Probers>,
    client: reqwest::Client,
}

/// Binds `0.0.0.0:PORT` and serves the status port until `shutdown`.
pub async fn serve(
    port: u16,
    admin: watch::Receiver<Option<PathBuf>>,
    probers: Probers,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
        .await
        .map_err(|e| anyhow::anyhow!("status port {port}: {e}"))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "status port listening");
    let state = Status {
        admin,
        probers: Arc::new(probers),
        client: reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(|e| anyhow::anyhow!("HTTP client: {e}"))?,
    };
    let router = Router::new()
        .route("/healthz/ready", get(ready))
        .route("/stats/prometheus", get(prometheus))
        .fallback(app_health)
        .with_state(state);
    Ok(tokio::spawn(crate::net::http::serve(
        "status",
        listener,
        router,
        SLOTS,
        HEADER_TIMEOUT,
        shutdown,
    )))
}

impl Status {
    fn admin(&self) -> Option<SocketAddr> {
        let file = self.admin.borrow().clone()?;
        read_admin(&file)
    }

    async fn admin_get(&self, path: &str) -> Result<(StatusCode, String), String> {
        let admin = self.admin().ok_or("Envoy's admin is not up")?;
        let response = self
            .client
            .get(format!("http://{admin}{path}"))
            .timeout(ADMIN_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("Envoy's admin: {e}"))?;
        let status =
            StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let body = response
            .text()
            .await
            .map_err(|e| format!("Envoy's admin: {e}"))?;
        Ok((status, body))
    }

    /// Is the newest epoch live, with its first configuration received?
    async fn envoy_ready(&self) -> Result<(), String> {
        let (status, body) = self.admin_get("/ready").await?;
        if status != StatusCode::OK {
            return Err(format!("Envoy is {}", body.trim()));
        }
        let (_, stats) = self
            .admin_get(
                "/stats?filter=^(cluster_manager%5C.cds|listener_manager%5C.lds)%5C.update_(success|rejected)$",
            )
            .await?;
        let count = |prefix: &str| -> u64 {
            stats
                .lines()
                .filter(|l| l.starts_with(prefix))
                .filter_map(|l| l.split_once(": ")?.1.trim().parse::<u64>().ok())
                .sum()
        };
        if count("cluster_manager.cds.") == 0 || count("listener_manager.lds.") == 0 {
            return Err(
                "Envoy has not received its configuration from the control plane yet".into(),
            );
        }
        Ok(())
    }
}

async fn ready(State(status): State<Status>) -> Response {
    match status.envoy_ready().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn prometheus(State(status): State<Status>) -> Response {
    match status.admin_get("/stats/prometheus").await {
        Ok((code, body)) => (code, body).into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

async fn app_health(State(status): State<Status>, uri: Uri) -> Response {
    let Some(probe) = status.probers.get(uri.path()) else {
        return (StatusCode::NOT_FOUND, "no such path\n").into_response();
    };
    // The application's own status where it answered, as Istio's agent passes it on.
    match probe.run(&status.client).await {
        Outcome::Pass(code) => code
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::OK)
            .into_response(),
        Outcome::Fail(why, code) => (
            code.and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            format!("{why}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probers_read_istio_injector_json_and_refuse_what_cannot_run() {
        let p = probers(Some(
            r#"{"/app-health/app/readyz": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 3},
                "/app-health/app/livez": {"tcpSocket": {"port": 8080}}}"#,
        ))
        .unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p["/app-health/app/readyz"].timeout_seconds, 3);
        assert_eq!(p["/app-health/app/livez"].timeout_seconds, 1);
        let exec = r#"{"/app-health/a/readyz": {"exec": {"command": ["true"]}}}"#;
        let err = probers(Some(exec)).unwrap_err().to_string();
        assert!(err.contains("the kubelet's"), "{err}");
        assert!(probers(None).unwrap().is_empty());
        for (json, expected) in [
            ("{nope", "is not a map"),
            (
                r#"{"/x": {"tcpSocket": {"port": 1}}}"#,
                "does not start with /app-health/",
            ),
            (r#"{"/app-health/a/readyz": {}}"#, "exactly one of"),
            (
                r#"{"/app-health/a/readyz": {"httpGet": {"port": 1, "scheme": "HTTPS"}}}"#,
                "HTTP only",
            ),
        ] {
            let err = probers(Some(json)).unwrap_err().to_string();
            assert!(err.contains(expected), "{json}: {err}");
        }
    }
}
