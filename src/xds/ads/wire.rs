//! ADS on the wire: the two streaming methods of `AggregatedDiscoveryService`, framed by
//! wayfinder as a tower service.
//!
//! tonic's generated server would do this, at a cost that grows with the mesh. Its encoder
//! writes every response into a buffer that each stream then keeps at the size of its largest
//! response (a sidecar's route configuration for a thousand services is half a megabyte), and
//! each response would first copy every resource out of the shared snapshot. Here a response
//! is written as pieces: its small fields, and each resource's shared encoded bytes, never
//! copied ([`Encoded`]); a request is read into a buffer that is let go once it is decoded,
//! and a state-of-the-world request's resource names are decoded only when they differ from
//! the previous request's ([`SotwRequest`]).
//!
//! The formats are gRPC's (each message after a 5-byte prefix: a compression flag, then its
//! length, big-endian; the status in trailers) and protobuf's (a repeated message field is
//! each element's tag and length, then the element; fields may come in any order, so a
//! response's fields are encoded by prost and its resources appended).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::Frame;
use http_body_util::BodyExt;
use prost::Message;
use tokio::sync::mpsc;
use tonic::Status;
use tonic::body::Body;

use crate::xds::TypeUrl;
use crate::xds::pb::core::ControlPlane;
use crate::xds::pb::discovery::{
    DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource as DeltaResource,
};
use crate::xds::resource::Resource;

/// The gRPC service name.
pub(super) const SERVICE: &str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
const SOTW_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// The largest request accepted (a sidecar's request names every cluster it knows).
pub(super) const MAX_REQUEST: usize = 16 << 20;

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
    /// The message's bytes after the 5-byte prefix, joined (for tests).
    pub fn message(&self) -> Vec<u8> {
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

/// A state-of-the-world request as the server reads it: every field but the resource names
/// decoded as usual, the names kept as the bytes they came in (shared with the request's
/// buffer) with a hash of them all. A sidecar's endpoint ACK repeats every cluster name it
/// knows; when the hash is the one of its previous request, the names need not be decoded,
/// allocated or compared.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SotwRequest {
    /// The request, without its resource names.
    pub request: DiscoveryRequest,
    names: Vec<Bytes>,
    names_hash_state: NamesHash,
}

/// A running hash of names in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct NamesHash(u64);

impl NamesHash {
    /// Chains `name` in: each name is hashed seeded by the hash so far and its length, so
    /// order and boundaries count, without copying anything.
    fn add(&mut self, name: &[u8]) {
        let seed = self.0.rotate_left(17) ^ name.len() as u64;
        self.0 = xxhash_rust::xxh3::xxh3_64_with_seed(name, seed);
    }
}

impl SotwRequest {
    /// A hash of the resource names, in order: equal names, equal hash.
    pub fn names_hash(&self) -> u64 {
        self.names_hash_state.0
    }

    /// The resource names, decoded; a name that is not UTF-8 is an error naming it.
    pub fn names(&self) -> Result<Vec<String>, String> {
        self.names
            .iter()
            .map(|n| {
                String::from_utf8(n.to_vec()).map_err(|_| {
                    format!(
                        "resource name {:?} is not UTF-8",
                        String::from_utf8_lossy(n)
                    )
                })
            })
            .collect()
    }
}

impl From<DiscoveryRequest> for SotwRequest {
    fn from(mut request: DiscoveryRequest) -> Self {
        let mut out = Self::default();
        for name in std::mem::take(&mut request.resource_names) {
            out.names_hash_state.add(name.as_bytes());
            out.names.push(Bytes::from(name));
        }
        out.request = request;
        out
    }
}

impl Message for SotwRequest {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.request.encode_raw(buf);
        for name in &self.names {
            prost::encoding::bytes::encode(3, name, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if tag != 3 {
            return self.request.merge_field(tag, wire_type, buf, ctx);
        }
        let mut name = Bytes::new();
        prost::encoding::bytes::merge(wire_type, &mut name, buf, ctx)?;
        self.names_hash_state.add(&name);
        self.names.push(name);
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.request.encoded_len()
            + self
                .names
                .iter()
                .map(|n| prost::encoding::bytes::encoded_len(3, n))
                .sum::<usize>()
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// The messages of a request stream, decoded one at a time.
pub(super) struct Requests<M> {
    body: Body,
    buf: BytesMut,
    _message: PhantomData<M>,
}

impl<M: Message + Default> Requests<M> {
    pub(super) fn new(body: Body) -> Self {
        Self {
            body,
            buf: BytesMut::new(),
            _message: PhantomData,
        }
    }

    /// The next message; `None` when the client closed its side.
    pub(super) async fn message(&mut self) -> Result<Option<M>, Status> {
        loop {
            if let Some(message) = self.decode()? {
                return Ok(Some(message));
            }
            match self.body.frame().await {
                None if self.buf.is_empty() => return Ok(None),
                None => return Err(Status::internal("the request stream ended mid-message")),
                Some(Err(status)) => return Err(status),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    fn decode(&mut self) -> Result<Option<M>, Status> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        if self.buf[0] != 0 {
            return Err(Status::unimplemented(
                "compressed requests are not supported (send grpc-encoding identity)",
            ));
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        let len = len as usize;
        if len > MAX_REQUEST {
            return Err(Status::resource_exhausted(format!(
                "a request of {len} bytes is larger than the {MAX_REQUEST} accepted"
            )));
        }
        if self.buf.len() < 5 + len {
            self.buf.reserve(5 + len - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(5);
        let bytes = self.buf.split_to(len);
        if self.buf.is_empty() {
            // Let the buffer go: a stream should not keep its largest request's size.
            self.buf = BytesMut::new();
        }
        M::decode(bytes.freeze())
            .map(Some)
            .map_err(|err| Status::invalid_argument(format!("malformed request: {err}")))
    }
}

/// The response body: each message's pieces as data frames, then the status as trailers.
pub(super) struct ResponseBody {
    rx: mpsc::Receiver<Result<Encoded, Status>>,
    pending: VecDeque<Bytes>,
    done: bool,
}

impl ResponseBody {
    pub(super) fn new(rx: mpsc::Receiver<Result<Encoded, Status>>) -> Self {
        Self {
            rx,
            pending: VecDeque::new(),
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
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match self.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(encoded))) => self.pending.extend(encoded.pieces),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::pb::cluster::Cluster;

    fn resources() -> Vec<Arc<Resource>> {
        // One small resource (copied into the piece) and one large (shared).
        let small = Cluster {
            name: "small".into(),
            ..Default::default()
        };
        let large = Cluster {
            name: "large".into(),
            alt_stat_name: "x".repeat(4 * COPY_BELOW),
            ..Default::default()
        };
        vec![
            Arc::new(Resource::encode("small", &small)),
            Arc::new(Resource::encode("large", &large)),
        ]
    }

    #[test]
    fn a_sotw_response_decodes_as_the_message_prost_would_write() {
        let response = SotwResponse {
            version_info: "v1".into(),
            resources: resources(),
            type_url: TypeUrl::Cluster,
            nonce: "7".into(),
            identifier: "wayfinder".into(),
        };
        let encoded = response.encode();
        assert!(
            encoded.pieces.len() > 1,
            "the large resource is its own piece"
        );
        let decoded = DiscoveryResponse::decode(&*encoded.message()).expect("decodes");
        assert_eq!(decoded, response.to_proto());
        let all: Vec<u8> = encoded.pieces.iter().flat_map(|p| p.to_vec()).collect();
        assert_eq!(all[0], 0, "not compressed");
        let len = u32::from_be_bytes([all[1], all[2], all[3], all[4]]) as usize;
        assert_eq!(len, all.len() - 5, "the prefix gives the message length");
    }

    #[test]
    fn a_delta_response_decodes_as_the_message_prost_would_write() {
        let response = DeltaResponse {
            system_version_info: "0123".into(),
            resources: resources(),
            removed: vec!["gone".into()],
            type_url: TypeUrl::Cluster,
            nonce: "8".into(),
            identifier: "wayfinder".into(),
        };
        let decoded =
            DeltaDiscoveryResponse::decode(&*response.encode().message()).expect("decodes");
        assert_eq!(decoded, response.to_proto());
    }

    /// A request body delivered in these chunks.
    fn body(chunks: Vec<Vec<u8>>) -> Body {
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, Status>(Frame::data(Bytes::from(c))));
        Body::new(http_body_util::StreamBody::new(futures::stream::iter(
            frames,
        )))
    }

    fn framed(message: &impl Message) -> Vec<u8> {
        let bytes = message.encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&bytes);
        out
    }

    fn request(type_url: &str) -> DiscoveryRequest {
        DiscoveryRequest {
            type_url: type_url.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_sotw_request_keeps_its_names_as_bytes_with_a_hash() {
        let names = ["outbound|80||a", "outbound|80||b"];
        let request = DiscoveryRequest {
            type_url: "t".into(),
            response_nonce: "3".into(),
            resource_names: names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        };
        let decoded = SotwRequest::decode(&*request.encode_to_vec()).expect("decodes");
        assert_eq!(decoded.request.type_url, "t");
        assert_eq!(decoded.request.response_nonce, "3");
        assert!(decoded.request.resource_names.is_empty());
        assert_eq!(decoded.names().expect("UTF-8"), names);
        assert_eq!(decoded, SotwRequest::from(request.clone()));
        let again = SotwRequest::decode(&*request.encode_to_vec()).expect("decodes");
        assert_eq!(again.names_hash(), decoded.names_hash());
        let reordered = DiscoveryRequest {
            resource_names: vec![names[1].into(), names[0].into()],
            ..request.clone()
        };
        assert_ne!(
            SotwRequest::from(reordered).names_hash(),
            decoded.names_hash()
        );
        let joined = DiscoveryRequest {
            resource_names: vec![format!("{}{}", names[0], names[1])],
            ..request
        };
        assert_ne!(SotwRequest::from(joined).names_hash(), decoded.names_hash());
        let bad = SotwRequest {
            names: vec![Bytes::from_static(&[0xff, 0xfe])],
            ..Default::default()
        };
        assert!(bad.names().expect_err("refused").contains("not UTF-8"));
    }

    #[tokio::test]
    async fn requests_split_across_frames_or_sharing_one_are_read_whole() {
        let a = framed(&request("a"));
        let b = framed(&request("b"));
        let c = framed(&request("c"));
        // a and the first 3 bytes of b in one frame; the rest of b and all of c in the next.
        let mut first = a.clone();
        first.extend_from_slice(&b[..3]);
        let mut second = b[3..].to_vec();
        second.extend_from_slice(&c);
        let mut requests = Requests::<DiscoveryRequest>::new(body(vec![first, second]));
        for expected in ["a", "b", "c"] {
            let got = requests.message().await.expect("valid").expect("a message");
            assert_eq!(got.type_url, expected);
        }
        assert_eq!(requests.message().await.expect("clean end"), None);
    }

    #[tokio::test]
    async fn a_compressed_truncated_or_malformed_request_is_a_clear_error() {
        let mut compressed = framed(&request("a"));
        compressed[0] = 1;
        let err = Requests::<DiscoveryRequest>::new(body(vec![compressed]))
            .message()
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::Unimplemented);
        assert!(err.message().contains("compressed"), "{err}");

        let whole = framed(&request("a"));
        let truncated = whole[..whole.len() - 1].to_vec();
        let err = Requests::<DiscoveryRequest>::new(body(vec![truncated]))
            .message()
            .await
            .expect_err("refused");
        assert!(err.message().contains("mid-message"), "{err}");

        let garbage = vec![0, 0, 0, 0, 2, 0xff, 0xff];
        let err = Requests::<DiscoveryRequest>::new(body(vec![garbage]))
            .message()
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("malformed request"), "{err}");
    }
}
