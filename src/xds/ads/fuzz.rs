//! One request stream without the network, for the fuzzer (`fuzz/` at the repository root;
//! built with the `fuzzing` feature only): the body's frames are read as the server reads
//! them (`wire::Requests`: the gRPC prefix, `--max-request-bytes`, the request budget, the
//! shape checks, the decoding), the first request's node becomes a [`Proxy`], and every
//! request goes through the stream's state machine ([`StreamState`] or [`DeltaState`])
//! against a snapshot; then a second snapshot is pushed. The stream loop's waiting (admission,
//! the aggregate's readiness, the outbox) is left out.

use std::sync::Arc;

use bytes::Bytes;
use futures::stream;
use http_body::Frame;
use http_body_util::StreamBody;
use tonic::Status;
use tonic::body::Body;

use super::errors::StreamError;
use super::protocol::Protocol;
use super::wire::Requests;
use super::{DeltaState, Limits, StreamState, read_limits};
use crate::xds::XdsSnapshot;
use crate::xds::proxy::Proxy;

/// Which method the stream called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// `StreamAggregatedResources`.
    Sotw,
    /// `DeltaAggregatedResources`.
    Delta,
}

/// Serves one stream whose request body arrives as `frames` (the client's DATA frames, then
/// the end of the stream) under `limits` (their request budget is the stream's alone), from
/// `first`, then pushes `second`. The number of responses the stream sent, or the status that
/// refused it.
pub async fn serve(
    variant: Variant,
    frames: Vec<Bytes>,
    limits: &Limits,
    domain: &str,
    snapshots: [&XdsSnapshot; 2],
) -> Result<usize, Status> {
    let frames = frames.into_iter().map(|f| Ok::<_, Status>(Frame::data(f)));
    let body = Body::new(StreamBody::new(stream::iter(frames)));
    let [first, second] = snapshots;
    let result = match variant {
        Variant::Sotw => run::<StreamState>(body, limits, domain, first, second).await,
        Variant::Delta => run::<DeltaState>(body, limits, domain, first, second).await,
    };
    result.map_err(Status::from)
}

/// The stream loop of `AdsServer::run`, without its waiting.
async fn run<P: Protocol>(
    body: Body,
    limits: &Limits,
    domain: &str,
    first: &XdsSnapshot,
    second: &XdsSnapshot,
) -> Result<usize, StreamError> {
    let limits = read_limits(limits, Default::default());
    let max_names = limits.max_names;
    let mut requests = Requests::<P::Request>::new(body, limits);
    let Some(request) = requests.message().await? else {
        return Ok(0);
    };
    let node = P::node(&request).ok_or(StreamError::NoNode)?;
    let proxy = Arc::new(Proxy::from_node(node, domain)?);
    let mut state = P::new(proxy, "wayfinder-fuzz".into()).with_max_names(max_names);
    let mut debug = crate::xds::PerType::default();
    let mut sent = 0;
    let mut next = Some(request);
    loop {
        let request = match next.take() {
            Some(request) => request,
            None => match requests.message().await? {
                Some(request) => request,
                None => break,
            },
        };
        let outcome = state.on_request(&request, first)?;
        drop(request);
        sent += encode::<P>(outcome.responses);
        state.status_into(&mut debug);
    }
    sent += encode::<P>(state.on_snapshot(second));
    state.status_into(&mut debug);
    Ok(sent)
}

/// Encodes responses as the stream would send them; how many.
fn encode<P: Protocol>(responses: Vec<P::Response>) -> usize {
    let n = responses.len();
    for response in responses {
        let (_summary, encoded) = P::encode(response);
        drop(encoded.into_message());
    }
    n
}
