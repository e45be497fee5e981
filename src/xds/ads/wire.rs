//! ADS on the wire: the two streaming methods of `AggregatedDiscoveryService`, framed by
//! wayfinder as a tower service.
//!
//! tonic's generated server would do this, at a cost that grows with the mesh. Its encoder
//! writes every response into a buffer that each stream then keeps at the size of its largest
//! response (a sidecar's route configuration for a thousand services is half a megabyte), and
//! each response would first copy every resource out of the shared snapshot. Here a response
//! is written as pieces: its small fields, and each resource's shared encoded bytes, never
//! copied ([`Encoded`]); a request is read into a buffer that is let go once it is decoded (its size, and what decoding
//! allocates, taken from a budget every stream shares until the server has handled it),
//! and a state-of-the-world request's resource names are decoded only when they differ from
//! the previous request's ([`SotwRequest`]).
//!
//! The formats are gRPC's (each message after a 5-byte prefix: a compression flag, then its
//! length, big-endian; the status in trailers) and protobuf's (a repeated message field is
//! each element's tag and length, then the element; fields may come in any order, so a
//! response's fields are encoded by prost and its resources appended).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http_body::Frame;
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;
use tonic::body::Body;

use crate::xds::TypeUrl;
use crate::xds::pb::core::ControlPlane;
use crate::xds::pb::discovery::{
    DeltaDiscoveryResponse, DiscoveryResponse, Resource as DeltaResource,
};
use crate::xds::resource::Resource;

/// The gRPC service name.
pub(super) const SERVICE: &str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
const SOTW_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// Resources smaller than this are copied into the surrounding piece; larger ones go out as
/// pieces of their own (the shared bytes). A response's copied bytes are one allocation,
/// made when it is queued: cutting them into 16 KiB pieces made as the connection takes them
/// was tried and measured worse (about 20 MiB more RSS at 2,000 sidecars), since the allocator
/// keeps small freed blocks in its heaps but returns large ones to the system at once.
const COPY_BELOW: usize = 512;

/// Which method a request called.
pub(super) enum Method {
    /// `StreamAggregatedResources` (state of the world).
    Sotw,
    /// `DeltaAggregatedResources`.
    Delta,
}

impl Method {
    /// The method a request path names.
    pub(super) fn from_path(path: &str) -> Option<Self> {
        match path {
            SOTW_PATH => Some(Self::Sotw),
            DELTA_PATH => Some(Self::Delta),
            _ => None,
        }
    }
}

/// A state-of-the-world response. Its resources are the snapshot's, shared.
#[derive(Clone, Debug, PartialEq)]
pub struct SotwResponse {
    /// The version of what the client holds after it.
    pub version_info: String,
    /// The resources.
    pub resources: Vec<Arc<Resource>>,
    /// Their type.
    pub type_url: TypeUrl,
    /// The nonce the client's next request acknowledges.
    pub nonce: String,
    /// `control_plane.identifier`.
    pub identifier: Arc<str>,
}

/// A delta response. Its resources are the snapshot's, shared.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaResponse {
    /// The version of everything the client holds after it.
    pub system_version_info: String,
    /// Resources new or changed for the client, each sent with its name and version.
    pub resources: Vec<Arc<Resource>>,
    /// Names the client should drop.
    pub removed: Vec<Arc<str>>,
    /// Their type.
    pub type_url: TypeUrl,
    /// The nonce the client's next request acknowledges.
    pub nonce: String,
    /// `control_plane.identifier`.
    pub identifier: Arc<str>,
}

/// One gRPC message, prefix included, as pieces to write in order.
#[derive(Debug, Default)]
pub struct Encoded {
    pieces: Vec<Bytes>,
}

impl Encoded {
    /// The message's bytes after the 5-byte prefix, joined.
    #[cfg(test)]
    pub(crate) fn message(&self) -> Vec<u8> {
        let mut all: Vec<u8> = self.pieces.iter().flat_map(|p| p.iter().copied()).collect();
        all.drain(..5.min(all.len()));
        all
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum()
    }

    /// True for no bytes at all (never for an encoded message).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Builds the pieces of one message: the prefix, a head encoded by prost, then repeated
/// elements of one field, each a small prefix and shared bytes.
struct Pieces {
    pieces: Vec<Bytes>,
    current: BytesMut,
}

impl Pieces {
    /// `rest` is the length of everything after the head.
    fn new(head: &impl Message, rest: usize) -> Self {
        let len = head.encoded_len() + rest;
        let mut current = BytesMut::with_capacity(5 + head.encoded_len() + 64);
        current.put_u8(0);
        current.put_u32(len as u32);
        head.encode_raw(&mut current);
        Self {
            pieces: Vec::new(),
            current,
        }
    }

    /// Adds `bytes` without copying when they are large.
    fn put_shared(&mut self, bytes: &Bytes) {
        if bytes.len() < COPY_BELOW {
            self.current.put_slice(bytes);
        } else {
            self.pieces.push(self.current.split().freeze());
            self.pieces.push(bytes.clone());
        }
    }

    fn put_small(&mut self, bytes: &[u8]) {
        self.current.put_slice(bytes);
    }

    /// A length-delimited field's tag and length.
    fn put_field_header(&mut self, field: u32, len: usize) {
        let mut header = [0u8; 16];
        let mut buf = &mut header[..];
        prost::encoding::encode_key(field, prost::encoding::WireType::LengthDelimited, &mut buf);
        prost::encoding::encode_varint(len as u64, &mut buf);
        let used = 16 - buf.len();
        self.put_small(&header[..used]);
    }

    fn finish(mut self) -> Encoded {
        if !self.current.is_empty() {
            self.pieces.push(self.current.split().freeze());
        }
        Encoded {
            pieces: self.pieces,
        }
    }
}

/// The length of a length-delimited field holding `len` bytes.
fn field_len(field: u32, len: usize) -> usize {
    prost::encoding::key_len(field) + prost::encoding::encoded_len_varint(len as u64) + len
}

impl SotwResponse {
    /// The response as gRPC pieces; resources are not copied.
    pub fn encode(&self) -> Encoded {
        let rest = self
            .resources
            .iter()
            .map(|r| field_len(2, r.encoded().len()))
            .sum();
        let mut pieces = Pieces::new(&self.head(), rest);
        for r in &self.resources {
            pieces.put_field_header(2, r.encoded().len());
            pieces.put_shared(r.encoded());
        }
        pieces.finish()
    }

    /// The same response as Envoy's message type (a copy, for tests and tools).
    pub fn to_proto(&self) -> DiscoveryResponse {
        DiscoveryResponse {
            resources: self.resources.iter().map(|r| r.any()).collect(),
            ..self.head()
        }
    }

    fn head(&self) -> DiscoveryResponse {
        DiscoveryResponse {
            version_info: self.version_info.clone(),
            type_url: self.type_url.as_str().to_string(),
            nonce: self.nonce.clone(),
            control_plane: Some(ControlPlane {
                identifier: self.identifier.to_string(),
            }),
            ..Default::default()
        }
    }

    /// Bytes of the resources.
    pub fn bytes(&self) -> usize {
        self.resources.iter().map(|r| r.encoded().len()).sum()
    }
}

impl DeltaResponse {
    /// The response as gRPC pieces; resources are not copied.
    pub fn encode(&self) -> Encoded {
        // Each a `Resource` message: its name and version (encoded once per resource), then
        // the `Any` (field 2).
        let inner = |r: &Resource| r.delta_head().len() + field_len(2, r.encoded().len());
        let rest = self.resources.iter().map(|r| field_len(2, inner(r))).sum();
        let mut pieces = Pieces::new(&self.head(), rest);
        for r in &self.resources {
            pieces.put_field_header(2, inner(r));
            pieces.put_small(r.delta_head());
            pieces.put_field_header(2, r.encoded().len());
            pieces.put_shared(r.encoded());
        }
        pieces.finish()
    }

    /// The same response as Envoy's message type (a copy, for tests and tools).
    pub fn to_proto(&self) -> DeltaDiscoveryResponse {
        DeltaDiscoveryResponse {
            resources: self
                .resources
                .iter()
                .map(|r| DeltaResource {
                    name: r.name.to_string(),
                    version: r.version.to_string(),
                    resource: Some(r.any()),
                    ..Default::default()
                })
                .collect(),
            ..self.head()
        }
    }

    fn head(&self) -> DeltaDiscoveryResponse {
        DeltaDiscoveryResponse {
            system_version_info: self.system_version_info.clone(),
            type_url: self.type_url.as_str().to_string(),
            removed_resources: self.removed.iter().map(|n| n.to_string()).collect(),
            nonce: self.nonce.clone(),
            control_plane: Some(ControlPlane {
                identifier: self.identifier.to_string(),
            }),
            ..Default::default()
        }
    }

    /// Bytes of the resources.
    pub fn bytes(&self) -> usize {
        self.resources.iter().map(|r| r.encoded().len()).sum()
    }
}

/// One message for the response body, and whom to tell when the connection has taken its
/// last piece (the push throttle waits for that).
pub(super) struct Outgoing {
    pub(super) encoded: Encoded,
    pub(super) delivered: Option<oneshot::Sender<()>>,
}

/// The response body: each message's pieces as data frames, then the status as trailers.
pub(super) struct ResponseBody {
    rx: mpsc::Receiver<Result<Outgoing, Status>>,
    pending: VecDeque<Bytes>,
    delivered: Option<oneshot::Sender<()>>,
    done: bool,
}

impl ResponseBody {
    pub(super) fn new(rx: mpsc::Receiver<Result<Outgoing, Status>>) -> Self {
        Self {
            rx,
            pending: VecDeque::new(),
            delivered: None,
            done: false,
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
            if let Some(piece) = self.pending.pop_front() {
                if self.pending.is_empty()
                    && let Some(delivered) = self.delivered.take()
                {
                    let _ = delivered.send(());
                }
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match self.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(out))) => {
                    self.pending.extend(out.encoded.pieces);
                    self.delivered = out.delivered;
                }
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
        self.done && self.pending.is_empty()
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
pub(super) fn response(body: ResponseBody) -> http::Response<Body> {
    let mut response = http::Response::new(Body::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// The answer to a path that is not an ADS method.
pub(super) fn unimplemented() -> Result<http::Response<Body>, Infallible> {
    Ok(Status::unimplemented("unknown method").into_http())
}

mod requests;
mod shape;
#[cfg(test)]
mod tests;

pub use requests::SotwRequest;
pub(crate) use requests::{Budgeted, ReadError, ReadLimits, RequestMessage, Requests};
