//! A stream's response body: the messages its task queues, written as the connection takes
//! them (each message's small resources copied into chunks within the push budget), then the
//! status in trailers.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::Frame;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;
use tonic::body::Body;

use super::{ChunkBudget, Encoded};

/// What a stream queues for its response body: a message, or the status that ends the
/// stream. Boxed: tokio makes a queue's first block of 32 slots with the channel and keeps it,
/// so unboxed every stream held 32 messages' room (3.9 KB; heaptrack at 2,000 sidecars).
pub(crate) type Queued = Box<Result<Outgoing, Status>>;

/// One message for the response body, and whom to tell when the connection has taken its
/// last piece (the push throttle waits for that).
pub(crate) struct Outgoing {
    pub(crate) encoded: Encoded,
    pub(crate) delivered: Option<oneshot::Sender<()>>,
}

/// The response body: each message's pieces as data frames, then the status as trailers.
///
/// hyper asks for the next frame only while the stream's HTTP/2 send buffer has room
/// (`SEND_BUFFER` in `server/grpc.rs`), so a copied chunk is made when the connection is ready
/// to take it, and only with room in the push budget.
pub(crate) struct ResponseBody {
    rx: mpsc::Receiver<Queued>,
    /// The message being written.
    current: Option<Outgoing>,
    /// A large resource's shared bytes, to write next.
    shared: Option<Bytes>,
    budget: ChunkBudget,
    done: bool,
}

impl ResponseBody {
    pub(crate) fn new(rx: mpsc::Receiver<Queued>, budget: ChunkBudget) -> Self {
        Self {
            rx,
            current: None,
            shared: None,
            budget,
            done: false,
        }
    }

    /// The next piece of the current message, if it has any left; `Pending` while the push
    /// budget has no room for a chunk.
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(shared) = self.shared.take() {
            return Poll::Ready(Some(shared));
        }
        let Some(out) = &mut self.current else {
            return Poll::Ready(None);
        };
        if let Some(head) = out.encoded.take_head() {
            return Poll::Ready(Some(head));
        }
        while !out.encoded.is_done() {
            let permit = ready!(self.budget.poll_take(cx, out.encoded.next_chunk()));
            let mut chunk = BytesMut::with_capacity(permit.size());
            self.shared = out.encoded.fill(&mut chunk, permit.size());
            if !chunk.is_empty() {
                return Poll::Ready(Some(permit.wrap(chunk)));
            }
            if let Some(shared) = self.shared.take() {
                return Poll::Ready(Some(shared));
            }
        }
        Poll::Ready(None)
    }

    /// Tells the stream when the current message's last piece has gone to the connection.
    fn finish_if_done(&mut self) {
        if self.shared.is_some() {
            return;
        }
        if let Some(out) = &mut self.current
            && out.encoded.is_done()
        {
            if let Some(delivered) = out.delivered.take() {
                let _ = delivered.send(());
            }
            self.current = None;
        }
    }
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        loop {
            if let Some(piece) = ready!(self.poll_piece(cx)) {
                self.budget.progress.touch();
                self.finish_if_done();
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            self.finish_if_done();
            if self.done {
                return Poll::Ready(None);
            }
            match self.rx.poll_recv(cx).map(|q| q.map(|q| *q)) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(out))) => self.current = Some(out),
                Poll::Ready(Some(Err(status))) => {
                    self.done = true;
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers(&status)))));
                }
                Poll::Ready(None) => {
                    self.done = true;
                    let ok = Status::ok("");
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers(&ok)))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.current.is_none() && self.shared.is_none()
    }
}

fn trailers(status: &Status) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        map.insert(Status::GRPC_STATUS, http::HeaderValue::from(13));
    }
    map
}

/// A gRPC response carrying `body`.
pub(crate) fn response(body: ResponseBody) -> http::Response<Body> {
    let mut response = http::Response::new(Body::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// The answer to a path that is not an ADS method.
pub(crate) fn unimplemented() -> Result<http::Response<Body>, Infallible> {
    Ok(Status::unimplemented("unknown method").into_http())
}
