//! An ADS stream on the raw HTTP/2 channel, with the gRPC framing done here so that a client
//! holds nothing between messages, and little of a message while it comes.
//!
//! tonic's `Streaming` reads every message into one buffer that keeps the capacity of the
//! largest message it has read for as long as the stream lives: at 10,000 services a
//! full-mesh sidecar's route configuration is 5 MB, and the tool held 11 MB per sidecar (5.4 GB
//! for 500 of them). Reading each message whole into a buffer of its own size still held
//! 7.9 GB for 2,000 sidecars receiving at once, and ran the machine out of memory at 5,000.
//! So a response is read field by field as its bytes come: each resource is decoded when it
//! is whole, and one larger than [`KEEP`] is kept cut to its first bytes (the clients read
//! only its name there) while the rest is counted and dropped.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use prost::Message;
use prost::encoding::WireType;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::body::Body;
use tonic::transport::Channel;
use tower_service::Service;

use crate::wire::Streamed;

/// The most bytes of one resource a client keeps: larger ones are cut (a full-mesh route
/// configuration, 5 MB at 10,000 services).
pub(crate) const KEEP: usize = 64 << 10;

/// The responses of one ADS stream.
pub(crate) struct Incoming<M> {
    body: Body,
    /// Bytes received and not yet read: at most one field's (or a cut resource's first
    /// [`KEEP`] bytes).
    pending: BytesMut,
    /// The message being read, and its bytes not yet read; `None` between messages.
    message: Option<(M, usize)>,
    /// A resource being cut: its first bytes, once they are here, and how many of its bytes
    /// are still to come (and be dropped).
    cut: Option<Cut>,
    _message: PhantomData<M>,
}

struct Cut {
    prefix: Option<Bytes>,
    len: usize,
    skip: usize,
}

/// Opens an ADS stream of `method` on `channel`, sending `requests` as they come.
pub(crate) async fn open<Req, Resp>(
    mut channel: Channel,
    method: &'static str,
    requests: ReceiverStream<Req>,
) -> Result<Incoming<Resp>, String>
where
    Req: Message + Send + 'static,
    Resp: Streamed,
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
        message: None,
        cut: None,
        _message: PhantomData,
    })
}

impl<M: Streamed> Incoming<M> {
    /// The next message; `None` when the server ended the stream with OK.
    pub(crate) async fn message(&mut self) -> Result<Option<M>, Status> {
        loop {
            if let Some(message) = self.read()? {
                return Ok(Some(message));
            }
            let Some(frame) = self.body.frame().await else {
                return Ok(None);
            };
            let frame = frame?;
            match frame.into_data() {
                Ok(data) => self.pending.put(data),
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

    /// Reads what `pending` holds: the message, once it is whole.
    fn read(&mut self) -> Result<Option<M>, Status> {
        loop {
            let Some((message, left)) = &mut self.message else {
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
                self.pending.advance(5);
                self.message = Some((M::default(), len));
                continue;
            };
            if let Some(cut) = &mut self.cut {
                if cut.prefix.is_none() {
                    let want = KEEP.min(*left);
                    if self.pending.len() < want {
                        return Ok(None);
                    }
                    cut.prefix = Some(self.pending.split_to(want).freeze());
                    *left -= want;
                }
                let drop = cut.skip.min(self.pending.len());
                self.pending.advance(drop);
                cut.skip -= drop;
                *left -= drop;
                if cut.skip > 0 {
                    return Ok(None);
                }
                let prefix = cut.prefix.take().unwrap_or_default();
                message.push_cut(&prefix, cut.len);
                self.cut = None;
                continue;
            }
            if *left == 0 {
                let message = self.message.take().map(|(m, _)| m);
                if self.pending.is_empty() {
                    // Let go of the buffer: a stream holds nothing between messages.
                    self.pending = BytesMut::new();
                }
                return Ok(message);
            }
            // A field: its key and length, then its bytes.
            let mut head = &self.pending[..];
            let Ok((tag, wire_type)) = prost::encoding::decode_key(&mut head) else {
                return short(self.pending.len(), *left);
            };
            let field_len = match wire_type {
                WireType::LengthDelimited => match prost::encoding::decode_varint(&mut head) {
                    Ok(n) => n as usize,
                    Err(_) => return short(self.pending.len(), *left),
                },
                WireType::Varint => match prost::encoding::decode_varint(&mut head) {
                    Ok(_) => 0,
                    Err(_) => return short(self.pending.len(), *left),
                },
                WireType::SixtyFourBit => 8,
                WireType::ThirtyTwoBit => 4,
                _ => return Err(Status::internal("an unsupported field in a response")),
            };
            let head_len = self.pending.len() - head.len();
            if tag == 2 && wire_type == WireType::LengthDelimited && field_len > KEEP {
                self.pending.advance(head_len);
                *left -= head_len;
                self.cut = Some(Cut {
                    prefix: None,
                    len: field_len,
                    skip: field_len - KEEP,
                });
                continue;
            }
            let whole = head_len + field_len;
            if self.pending.len() < whole {
                return Ok(None);
            }
            let field = self.pending.split_to(whole);
            *left -= whole;
            message
                .merge(field)
                .map_err(|e| Status::internal(format!("an undecodable response: {e}")))?;
        }
    }
}

/// A field's key or length not yet whole in `pending` bytes: more are needed, unless the
/// message (`left` bytes more) has no more.
fn short<M>(pending: usize, left: usize) -> Result<Option<M>, Status> {
    match pending >= left.min(20) {
        true => Err(Status::internal("a truncated response")),
        false => Ok(None),
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
