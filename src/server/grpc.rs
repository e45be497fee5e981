//! The ADS port: wayfinder's own accept loop around hyper's HTTP/2 server (gRPC is HTTP/2
//! with prior knowledge), so that each connection can be closed at its own age.
//!
//! tonic's server has a maximum connection age, but the same for every connection, so the
//! proxies that connected together after a restart would all reconnect together 30 minutes
//! later. Here each connection draws its age (`Limits::connection_age`, ±10%). At that age, or
//! when the server shuts down, the connection sends `GOAWAY` (no new streams) and ends its ADS
//! streams with `UNAVAILABLE`, which clients answer by reconnecting on a new connection,
//! perhaps to another replica; after `max_connection_age_grace` it is dropped.

use std::convert::Infallible;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::xds::ads::{AdsService, ConnectionEnd, Limits};

/// Why a connection closes, as its streams' clients are told.
const AT_AGE: &str = "the connection reached its maximum age (--max-connection-age)";
const SHUTDOWN: &str = "the server is shutting down";

/// Serves ADS on `listener` until `shutdown`, then waits for the connections to close.
pub(super) async fn serve(
    listener: TcpListener,
    ads: AdsService,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        match accepted {
            Ok((tcp, _)) => {
                // Without TCP_NODELAY a small response waits for the ACK of the one before it
                // (Nagle): ~40 ms per round trip of the protocol, measured with
                // examples/xds_load.
                let _ = tcp.set_nodelay(true);
                let age = limits.connection_age();
                let grace = limits.max_connection_age_grace;
                connections.spawn(connection(tcp, ads.clone(), age, grace, shutdown.clone()));
            }
            Err(err) => {
                // Out of file descriptors, most likely: give connections time to close
                // rather than spin.
                tracing::warn!(%err, "cannot accept an ADS connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    while connections.join_next().await.is_some() {}
}

/// Serves one connection until the client closes it, it reaches `age`, or `shutdown`.
async fn connection(
    tcp: TcpStream,
    ads: AdsService,
    age: Option<Duration>,
    grace: Duration,
    shutdown: CancellationToken,
) {
    let end = ConnectionEnd::default();
    let service = {
        let end = end.clone();
        hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let mut request = request.map(tonic::body::Body::new);
            request.extensions_mut().insert(end.clone());
            let mut ads = ads.clone();
            async move {
                let response: Result<_, Infallible> = ads.call(request).await;
                response
            }
        })
    };
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(tcp), service);
    tokio::pin!(conn);
    let aged = async {
        match age {
            Some(age) => tokio::time::sleep(age).await,
            None => std::future::pending().await,
        }
    };
    let why = tokio::select! {
        result = conn.as_mut() => {
            if let Err(err) = result {
                tracing::debug!(%err, "ADS connection ended");
            }
            return;
        }
        () = aged => AT_AGE,
        () = shutdown.cancelled() => SHUTDOWN,
    };
    conn.as_mut().graceful_shutdown();
    end.end(why);
    if tokio::time::timeout(grace, conn).await.is_err() {
        tracing::debug!(
            why,
            "dropping an ADS connection still open after the grace period"
        );
    }
}
