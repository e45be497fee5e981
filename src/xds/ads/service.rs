//! The ADS methods as a tower service: each call spawns its stream's task and answers with a
//! response body the task feeds.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tonic::body::Body;

use super::wire::{self, Method, Progress, Requests, ResponseBody};
use super::{AdsServer, ConnectionEnd, DeltaState, PeerAddr, QUEUE, StreamState, Transport};
use crate::ca::SecurePeer;

/// The ADS methods as a service for tonic's router: each call spawns the stream's task and
/// answers with a body fed by it (see `ads/wire.rs` for why this is not tonic's generated server).
#[derive(Clone)]
pub struct AdsService {
    server: AdsServer,
}

impl AdsService {
    pub(super) fn new(server: AdsServer) -> Self {
        Self { server }
    }
}

impl tonic::server::NamedService for AdsService {
    const NAME: &'static str = wire::SERVICE;
}

impl tower_service::Service<http::Request<Body>> for AdsService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let Some(method) = Method::from_path(request.uri().path()) else {
            return Box::pin(async { wire::unimplemented() });
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let server = self.server.clone();
        let end = request
            .extensions()
            .get::<ConnectionEnd>()
            .cloned()
            .unwrap_or_default();
        let peer = request.extensions().get::<PeerAddr>().map(|p| p.0);
        let transport = match request.extensions().get::<SecurePeer>() {
            Some(secure) => Transport::Secure(secure.certificate.clone()),
            None => Transport::Plain,
        };
        let limits = server.inner.read_limits.clone();
        let progress = Arc::new(Progress::default());
        let budget = server.inner.push_budget.for_stream(progress.clone());
        let body = request.into_body();
        match method {
            Method::Sotw => {
                let requests = Requests::new(body, limits);
                let serve =
                    server.serve::<StreamState>(requests, tx, progress, end, peer, transport);
                tokio::spawn(serve);
            }
            Method::Delta => {
                let requests = Requests::new(body, limits);
                let serve =
                    server.serve::<DeltaState>(requests, tx, progress, end, peer, transport);
                tokio::spawn(serve);
            }
        }
        Box::pin(async move { Ok(wire::response(ResponseBody::new(rx, budget))) })
    }
}
