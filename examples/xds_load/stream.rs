//! An ADS stream on the raw HTTP/2 channel, with the gRPC framing done here so that a client
//! holds nothing between messages.
//!
//! tonic's `Streaming` reads every message into one buffer that keeps the capacity of the
//! largest message it has read for as long as the stream lives: at 10,000 services a
//! full-mesh sidecar's route configuration is 5 MB, and the tool held 11 MB per sidecar (5.4 GB
//! for 500 of them; 5,000 would not fit the machine). Here each message is read into a buffer
//! of its own size, decoded, and dropped with the response.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use prost::Message;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::body::Body;
use tonic::transport::Channel;
use tower_service::Service;

/// The responses of one ADS stream.
pub(crate) struct Incoming<M> {
    body: Body,
    /// Bytes received and not yet decoded: at most one message's prefix and body.
    pending: BytesMut,
    _message: PhantomData<M>,
}

/// Opens an ADS stream of `method` on `channel`, sending `requests` as they come.
pub(crate) async fn open<Req, Resp>(
    mut channel: Channel,
    method: &'static str,
    requests: ReceiverStream<Req>,
) -> Result<Incoming<Resp>, String>
where
    Req: Message + Send + 'static,
    Resp: Message + Default,
{
    let frames = requests.map(|req| Ok::<_, Status>(Frame::data(frame(&req))));
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(method)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(Body::new(StreamBody::new(frames)))
        .map_err(|e| format!("a request: {e}"))?;
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .map_err(|e| format!("connection not ready: {e}"))?;
    let response = channel
        .call(request)
        .await
        .map_err(|e| format!("open the stream: {e}"))?;
    // A refusal before any message comes as a response of headers only.
    if let Some(status) = Status::from_header_map(response.headers())
        && status.code() != tonic::Code::Ok
    {
        return Err(format!("open the stream: {status}"));
    }
    Ok(Incoming {
        body: response.into_body(),
        pending: BytesMut::new(),
        _message: PhantomData,
    })
}

impl<M: Message + Default> Incoming<M> {
    /// The next message; `None` when the server ended the stream with OK.
    pub(crate) async fn message(&mut self) -> Result<Option<M>, Status> {
        loop {
            if let Some(message) = self.decoded()? {
                return Ok(Some(message));
            }
            let Some(frame) = self.body.frame().await else {
                return Ok(None);
            };
            let frame = frame?;
            match frame.into_data() {
                Ok(data) => self.take(data),
                Err(frame) => {
                    if let Some(trailers) = frame.trailers_ref()
                        && let Some(status) = Status::from_header_map(trailers)
                        && status.code() != tonic::Code::Ok
                    {
                        return Err(status);
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Appends received bytes; once a message's prefix is known, room for exactly the rest.
    fn take(&mut self, data: Bytes) {
        if self.pending.len() < 5 && self.pending.len() + data.len() >= 5 {
            let mut prefix = [0u8; 5];
            let have = self.pending.len();
            prefix[..have].copy_from_slice(&self.pending);
            prefix[have..].copy_from_slice(&data[..5 - have]);
            let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
            self.pending
                .reserve((5 + len).saturating_sub(self.pending.len()));
        }
        self.pending.put(data);
    }

    /// The message `pending` holds whole, if it does; what follows it stays pending.
    fn decoded(&mut self) -> Result<Option<M>, Status> {
        if self.pending.len() < 5 {
            return Ok(None);
        }
        if self.pending[0] != 0 {
            return Err(Status::internal("a compressed response"));
        }
        let len = u32::from_be_bytes([
            self.pending[1],
            self.pending[2],
            self.pending[3],
            self.pending[4],
        ]) as usize;
        if self.pending.len() < 5 + len {
            return Ok(None);
        }
        let mut message = self.pending.split_to(5 + len).freeze();
        message.advance(5);
        if self.pending.is_empty() {
            // Let go of the buffer the message came in: its bytes now belong to the message.
            self.pending = BytesMut::new();
        }
        M::decode(message)
            .map(Some)
            .map_err(|e| Status::internal(format!("an undecodable response: {e}")))
    }
}

/// `req` as one gRPC message: uncompressed flag, length, bytes.
fn frame(req: &impl Message) -> Bytes {
    let len = req.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    req.encode_raw(&mut buf);
    buf.freeze()
}
