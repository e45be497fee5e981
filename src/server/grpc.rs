//! The ADS port: wayfinder's own accept loop around hyper's HTTP/2 server (gRPC is HTTP/2
//! with prior knowledge), so that each connection can be closed at its own age.
//!
//! tonic's server has a maximum connection age, but the same for every connection, so the
//! proxies that connected together after a restart would all reconnect together 30 minutes
//! later. Here each connection draws its age (`Limits::connection_age`, ±10%). At that age, or
//! when the server shuts down, the connection sends `GOAWAY` (no new streams) and ends its ADS
//! streams with `UNAVAILABLE`, which clients answer by reconnecting on a new connection,
//! perhaps to another replica; after `max_connection_age_grace` it is dropped.
//!
//! A connection is also closed when it has no stream for `idle_timeout` (from its first
//! byte, so a socket that never sends the HTTP/2 preface is closed too, and after its last
//! stream ended), and when it does not answer a keepalive ping. Each connection may hold only
//! `max_streams_per_connection` streams, and its flow-control windows are small
//! ([`WINDOW`]): what a client may send before the server reads it is bounded per connection,
//! and what the server reads is bounded by the request budget.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use std::net::SocketAddr;

use super::tls::{self, Secure};
use crate::ca::{CertificateService, SecurePeer};
use crate::net::accept::{Accepted, Acceptor, Slot};
use crate::xds::ads::{AdsService, ConnectionEnd, Limits, PeerAddr};

/// Why a connection closes, as its streams' clients are told.
const AT_AGE: &str = "the connection reached its maximum age (--max-connection-age)";
const SHUTDOWN: &str = "the server is shutting down";

/// The HTTP/2 flow-control windows of a connection and of each stream: what a client may send
/// before the server reads it. HTTP/2's own default; hyper's is 1 MiB, which a client could
/// fill on every connection with requests the server is not reading yet.
pub(crate) const WINDOW: u32 = 64 << 10;

/// What one stream's HTTP/2 send buffer may hold before hyper stops asking its body for more:
/// a stream's share of the push budget is at most this and one chunk (16 KiB each). hyper's
/// default is 400 KiB, which 160 streams of clients that do not read would fill the 64 MiB
/// budget with. Fewer frames buffered also keep h2's frame slab small, which grows to the most
/// frames a connection ever buffered and keeps that size: with 400 KiB the server held
/// 169 MiB for 2,000 sidecars at 1,000 services, with 64 KiB 162 MiB, with 16 KiB 143 MiB.
pub(crate) const SEND_BUFFER: usize = 16 << 10;

/// How long an idle connection has to close after its `GOAWAY` before it is dropped.
const IDLE_CLOSE: Duration = Duration::from_secs(1);

/// How long a client of the secure port has to finish its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Serves ADS on `listener` until `shutdown`, then waits for the connections to close.
/// `slots` is how many connections may be open at once. With `secure`, each connection is
/// TLS first, and the certificate API is served beside ADS.
pub(super) async fn serve(
    listener: TcpListener,
    ads: AdsService,
    limits: Limits,
    slots: usize,
    shutdown: CancellationToken,
    secure: Option<Secure>,
) {
    let what = if secure.is_some() {
        "secure-grpc"
    } else {
        "grpc"
    };
    let acceptor = Acceptor::new(listener, what, slots, limits.max_connections_per_peer);
    let limits = Arc::new(limits);
    acceptor
        .serve(&shutdown, |accepted| {
            // Without TCP_NODELAY a small response waits for the ACK of the one before it
            // (Nagle): ~40 ms per round trip of the protocol, measured with examples/xds_load.
            let _ = accepted.tcp.set_nodelay(true);
            let (ads, limits, shutdown) = (ads.clone(), limits.clone(), shutdown.clone());
            let Accepted { tcp, peer, slot } = accepted;
            // Each kind of connection is its own boxed task: a TLS connection's state
            // (rustls' session inline) would otherwise make every plaintext one as large.
            let task: Pin<Box<dyn Future<Output = ()> + Send>> = match &secure {
                None => {
                    let routes = Routes { ads, secure: None };
                    Box::pin(connection(tcp, peer, slot, routes, limits, shutdown))
                }
                Some(secure) => Box::pin(secure_connection(
                    tcp,
                    peer,
                    slot,
                    secure.clone(),
                    ads,
                    limits,
                    shutdown,
                )),
            };
            task
        })
        .await;
}

/// A secure-port connection: the TLS handshake within [`HANDSHAKE`], then [`connection`] with
/// the peer's certificate on every request.
async fn secure_connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    slot: Slot,
    secure: Secure,
    ads: AdsService,
    limits: Arc<Limits>,
    shutdown: CancellationToken,
) {
    let handshake = tokio::time::timeout(HANDSHAKE, secure.acceptor.accept(tcp));
    let tls = tokio::select! {
        tls = handshake => tls,
        () = shutdown.cancelled() => return,
    };
    match tls {
        Ok(Ok(tls)) => {
            let certificate = tls::peer_certificate(&tls);
            let peer_info = SecurePeer {
                addr: peer,
                certificate,
            };
            let routes = Routes {
                ads,
                secure: Some((secure.certificates, peer_info)),
            };
            connection(tls, peer, slot, routes, limits, shutdown).await;
        }
        Ok(Err(err)) => {
            tracing::info!(%peer, %err, "refusing a secure-port connection: TLS handshake failed");
        }
        Err(_) => {
            tracing::info!(%peer, timeout = ?HANDSHAKE, "refusing a secure-port connection: no TLS handshake in time");
        }
    }
}

/// Where a connection's requests go: ADS, and on the secure port the certificate API, each
/// request told who its peer is.
struct Routes {
    ads: AdsService,
    secure: Option<(CertificateService, SecurePeer)>,
}

/// A request's answer. Boxed: hyper keeps each stream's service future (or, once it is
/// done, the response body, in the same slot) for the stream's whole life, so an inline
/// certificate-API future would make every ADS stream as large.
type Answer =
    Pin<Box<dyn Future<Output = Result<http::Response<tonic::body::Body>, Infallible>> + Send>>;

impl Routes {
    fn call(&self, mut request: http::Request<tonic::body::Body>) -> Answer {
        if let Some((certificates, peer)) = &self.secure {
            request.extensions_mut().insert(peer.clone());
            if request.uri().path() == crate::ca::PATH {
                let certificates = certificates.clone();
                return Box::pin(async move { Ok(certificates.call(request).await) });
            }
        }
        let mut ads = self.ads.clone();
        ads.call(request)
    }
}

/// Serves one connection until the client closes it, it reaches its age, it is idle, or
/// `shutdown`.
async fn connection<IO>(
    io: IO,
    peer: SocketAddr,
    slot: Slot,
    routes: Routes,
    limits: Arc<Limits>,
    shutdown: CancellationToken,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let end = ConnectionEnd::default();
    let streams = Arc::new(watch::Sender::new(0usize));
    let routes = Arc::new(routes);
    let service = {
        let end = end.clone();
        let streams = streams.clone();
        hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let mut request = request.map(tonic::body::Body::new);
            request.extensions_mut().insert(end.clone());
            request.extensions_mut().insert(PeerAddr(peer));
            let open = OpenStream::new(streams.clone());
            let routes = routes.clone();
            let answer = routes.call(request);
            async move {
                let response = answer.await?;
                Ok::<_, Infallible>(response.map(|body| tonic::body::Body::new(open.watch(body))))
            }
        })
    };
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_streams_per_connection)
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_send_buf_size(SEND_BUFFER)
        .keep_alive_interval(limits.keepalive_interval)
        .keep_alive_timeout(limits.keepalive_timeout)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let age = limits.connection_age();
    let aged = async {
        match age {
            Some(age) => tokio::time::sleep(age).await,
            None => std::future::pending().await,
        }
    };
    let idle = idle(streams.subscribe(), limits.idle_timeout);
    let (why, grace) = tokio::select! {
        result = conn.as_mut() => {
            if let Err(err) = result {
                tracing::debug!(%peer, %err, "ADS connection ended");
            }
            return;
        }
        () = aged => (AT_AGE, limits.max_connection_age_grace),
        () = shutdown.cancelled() => (SHUTDOWN, limits.max_connection_age_grace),
        () = end.aborted() => {
            tracing::debug!(%peer, "dropping an ADS connection whose client stopped reading");
            return;
        }
        () = idle => {
            tracing::debug!(%peer, timeout = ?limits.idle_timeout, "closing an ADS connection without streams");
            ("the connection is idle", IDLE_CLOSE)
        }
    };
    conn.as_mut().graceful_shutdown();
    end.end(why);
    let closed = async {
        tokio::select! {
            () = end.aborted() => {}
            _ = conn => {}
        }
    };
    if tokio::time::timeout(grace, closed).await.is_err() {
        tracing::debug!(%peer, why, "dropping an ADS connection still open after its grace period");
    }
    drop(slot);
}

/// Resolves once the connection has had no open stream for `timeout`.
async fn idle(mut streams: watch::Receiver<usize>, timeout: Duration) {
    loop {
        if streams.wait_for(|n| *n == 0).await.is_err() {
            return std::future::pending().await;
        }
        if tokio::time::timeout(timeout, streams.wait_for(|n| *n > 0))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// A stream of the connection, counted from its request until its response body is dropped
/// (hyper drops it when the stream ends).
struct OpenStream {
    streams: Arc<watch::Sender<usize>>,
}

impl OpenStream {
    fn new(streams: Arc<watch::Sender<usize>>) -> Self {
        streams.send_modify(|n| *n += 1);
        Self { streams }
    }

    /// `body`, which keeps this stream counted while it lives.
    fn watch(self, body: tonic::body::Body) -> Counted {
        Counted { body, _open: self }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.streams.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A response body that keeps its stream counted.
struct Counted {
    body: tonic::body::Body,
    _open: OpenStream,
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
