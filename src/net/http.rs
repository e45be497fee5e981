//! The HTTP ports (debug, monitoring): HTTP/1.1 connections within their slots
//! ([`super::accept`]), each closed when a request's headers take longer than the header-read
//! timeout, which also bounds how long a kept-alive connection may sit idle between requests.
//! Each request carries its peer's address as axum's `ConnectInfo<SocketAddr>`.
//!
//! axum's own `serve` has no header timeout and no connection limit: an idle socket stayed
//! open for ever, and 27,000 of them left the process without descriptors.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::net::accept::{Accepted, Acceptor};

/// How long a connection may take to finish its request once the server shuts down.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `shutdown`, at most `slots` connections at once.
pub(crate) async fn serve(
    what: &'static str,
    listener: TcpListener,
    router: Router,
    slots: usize,
    header_timeout: Duration,
    shutdown: CancellationToken,
) {
    let acceptor = Acceptor::new(listener, what, slots, 0);
    acceptor
        .serve(&shutdown, |accepted| {
            connection(accepted, router.clone(), header_timeout, shutdown.clone())
        })
        .await;
}

async fn connection(
    accepted: Accepted,
    router: Router,
    header_timeout: Duration,
    shutdown: CancellationToken,
) {
    let Accepted { tcp, peer, slot } = accepted;
    let service = hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
        request
            .extensions_mut()
            .insert(ConnectInfo::<SocketAddr>(peer));
        router.clone().call(request)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(tcp), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(err) = result {
                tracing::debug!(%peer, %err, "HTTP connection ended");
            }
        }
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn).await;
        }
    }
    drop(slot);
}
