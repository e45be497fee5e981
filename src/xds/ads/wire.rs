//! ADS on the wire: the two streaming methods of `AggregatedDiscoveryService`, framed by
//! wayfinder as a tower service.
//!
//! tonic's generated server would do this, at a cost that grows with the mesh. Its encoder
//! writes every response into a buffer that each stream then keeps at the size of its largest
//! response (a sidecar's route configuration for a thousand services is half a megabyte), and
//! each response would first copy every resource out of the shared snapshot. Here a response
//! is queued as the snapshot's resources and written as the connection takes it ([`Encoded`]):
//! its small fields, large resources as their shared encoded bytes, and small ones copied
//! into chunks within the push budget (`wire/chunks.rs`). A request is read into a buffer
//! that is let go once it is decoded (its size, and what decoding allocates, taken from a
//! budget every stream shares until the server has handled it), and a state-of-the-world
//! request's resource names are decoded only when they differ from the previous request's
//! ([`SotwRequest`]).
//!
//! The formats are gRPC's (each message after a 5-byte prefix: a compression flag, then its
//! length, big-endian; the status in trailers) and protobuf's (a repeated message field is
//! each element's tag and length, then the element; fields may come in any order, so a
//! response's fields are encoded by prost and its resources appended).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;

use crate::xds::TypeUrl;
use crate::xds::generate::{Picked, Place};
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

/// Resources smaller than this are copied into chunks; larger ones go out as pieces of their
/// own (the snapshot's shared bytes). Most endpoint assignments and clusters are smaller, so
/// most of a full-mesh sidecar's bytes are copies, made as the connection takes them.
const COPY_BELOW: usize = 512;

/// The most bytes one copied chunk holds: HTTP/2's default frame size.
pub(crate) const CHUNK: usize = 16 << 10;

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
    pub resources: Picked,
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
    pub resources: Picked,
    /// Names the client should drop.
    pub removed: Vec<Arc<str>>,
    /// Their type.
    pub type_url: TypeUrl,
    /// The nonce the client's next request acknowledges.
    pub nonce: String,
    /// `control_plane.identifier`.
    pub identifier: Arc<str>,
}

/// One gRPC message, prefix included, written as the connection takes it: its small fields
/// (the head), then its resources, each a field header and the resource's encoded bytes.
/// Small resources are copied into chunks of at most 16 KiB, each made only when the
/// connection asks for the next and paid for from the push budget; large ones go out as the
/// snapshot's shared bytes, never copied. A queued message costs a few pointers to the
/// snapshot's layers (or its list of resources), not its bytes.
#[derive(Debug)]
pub struct Encoded {
    /// The prefix and the fields before the resources; taken when written.
    head: Option<Bytes>,
    /// The resources.
    resources: Picked,
    /// Where the resources not yet written start; `None` once all are.
    next: Option<Place>,
    /// Each resource wrapped in a delta `Resource` message (with its name and version).
    delta: bool,
    /// Bytes on the wire.
    len: usize,
    /// Bytes written so far.
    written: usize,
    /// How many resources, and their encoded bytes (for logs and metrics).
    count: usize,
    resource_bytes: usize,
}

/// What encoding a response measures of its resources in one walk: how many, their bytes,
/// and the bytes of their fields in the message.
struct Measured {
    count: usize,
    bytes: usize,
    fields: usize,
}

impl Measured {
    fn of(resources: &Picked, field: impl Fn(&Resource) -> usize) -> Self {
        let mut m = Self {
            count: 0,
            bytes: 0,
            fields: 0,
        };
        for r in resources.iter() {
            m.count += 1;
            m.bytes += r.encoded().len();
            m.fields += field(r);
        }
        m
    }
}

impl Encoded {
    fn new(head: &impl Message, measured: Measured, resources: Picked, delta: bool) -> Self {
        let rest = measured.fields;
        let message = head.encoded_len() + rest;
        let mut bytes = BytesMut::with_capacity(5 + head.encoded_len());
        bytes.put_u8(0);
        bytes.put_u32(message as u32);
        head.encode_raw(&mut bytes);
        Self {
            head: Some(bytes.freeze()),
            next: (rest > 0).then(Place::default),
            resources,
            delta,
            len: 5 + message,
            written: 0,
            count: measured.count,
            resource_bytes: measured.bytes,
        }
    }

    /// How many resources the message carries.
    pub fn resources(&self) -> usize {
        self.count
    }

    /// The encoded bytes of its resources.
    pub fn resource_bytes(&self) -> usize {
        self.resource_bytes
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no bytes at all (never for an encoded message).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes still to write, or [`CHUNK`] if more: the size of the next chunk.
    fn next_chunk(&self) -> usize {
        (self.len - self.written).min(CHUNK)
    }

    /// The head, once.
    fn take_head(&mut self) -> Option<Bytes> {
        let head = self.head.take()?;
        self.written += head.len();
        Some(head)
    }

    /// True once every byte has been written.
    fn is_done(&mut self) -> bool {
        self.head.is_none() && self.next.is_none()
    }

    /// Writes the next resources into `chunk` while they fit in `room` bytes. When a large
    /// resource comes next, its field header is written and its shared bytes returned, to go
    /// out after `chunk`.
    fn fill(&mut self, chunk: &mut BytesMut, room: usize) -> Option<Bytes> {
        let delta = self.delta;
        let fits = |chunk: &BytesMut, r: &Resource| {
            let len = r.encoded().len();
            let copied = field_header_len(delta, r) + if len >= COPY_BELOW { 0 } else { len };
            chunk.is_empty() || chunk.len() + copied <= room
        };
        let before = chunk.len();
        let mut shared = None;
        let Some(place) = &self.next else {
            return None;
        };
        let mut walk = self.resources.walk(place).peekable();
        while let Some((_, r)) = walk.next_if(|(_, r)| fits(chunk, r)) {
            put_field_header(delta, chunk, r);
            if r.encoded().len() >= COPY_BELOW {
                shared = Some(r.encoded().clone());
                break;
            }
            chunk.put_slice(r.encoded());
        }
        let next = walk.next().map(|(i, r)| self.resources.place_of(i, r));
        drop(walk);
        self.next = next;
        self.written += chunk.len() - before + shared.as_ref().map_or(0, Bytes::len);
        shared
    }

    /// The whole message after its 5-byte prefix, copied (for tests and the fuzzer).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn into_message(mut self) -> Vec<u8> {
        let mut all = Vec::with_capacity(self.len);
        all.extend_from_slice(&self.take_head().unwrap_or_default());
        loop {
            let mut chunk = BytesMut::new();
            let shared = self.fill(&mut chunk, CHUNK);
            all.extend_from_slice(&chunk);
            match shared {
                Some(bytes) => all.extend_from_slice(&bytes),
                None if self.is_done() => break,
                None => {}
            }
        }
        all.drain(..5.min(all.len()));
        all
    }
}

/// What comes before a resource's encoded bytes: for state of the world, the `resources`
/// field's tag and length; for delta, that of the `Resource` message, its name and version,
/// and the tag and length of its `resource` field.
fn put_field_header(delta: bool, chunk: &mut BytesMut, r: &Resource) {
    if delta {
        put_tag_and_len(chunk, 2, delta_inner_len(r));
        chunk.put_slice(r.delta_head());
    }
    put_tag_and_len(chunk, 2, r.encoded().len());
}

/// The length of what [`put_field_header`] writes.
fn field_header_len(delta: bool, r: &Resource) -> usize {
    let len = r.encoded().len();
    match delta {
        true => field_len(2, delta_inner_len(r)) - len,
        false => field_len(2, len) - len,
    }
}

/// A delta `Resource` message's length: its name and version (encoded once per resource),
/// then the `Any` (field 2).
fn delta_inner_len(r: &Resource) -> usize {
    r.delta_head().len() + field_len(2, r.encoded().len())
}

/// A length-delimited field's tag and length.
fn put_tag_and_len(buf: &mut BytesMut, field: u32, len: usize) {
    prost::encoding::encode_key(field, prost::encoding::WireType::LengthDelimited, buf);
    prost::encoding::encode_varint(len as u64, buf);
}

/// The length of a length-delimited field holding `len` bytes.
fn field_len(field: u32, len: usize) -> usize {
    prost::encoding::key_len(field) + prost::encoding::encoded_len_varint(len as u64) + len
}

impl SotwResponse {
    /// The response as a gRPC message to write; resources are not copied until written.
    pub fn encode(self) -> Encoded {
        let measured = Measured::of(&self.resources, |r| field_len(2, r.encoded().len()));
        let head = self.head();
        Encoded::new(&head, measured, self.resources, false)
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
}

impl DeltaResponse {
    /// The response as a gRPC message to write; resources are not copied until written.
    pub fn encode(self) -> Encoded {
        let measured = Measured::of(&self.resources, |r| field_len(2, delta_inner_len(r)));
        let head = self.head();
        Encoded::new(&head, measured, self.resources, true)
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
}

mod body;
mod chunks;
mod requests;
mod shape;
#[cfg(test)]
mod tests;

pub(crate) use body::{Outgoing, Queued, ResponseBody, response, unimplemented};
pub(crate) use chunks::{ChunkBudget, Progress, PushBudget};
pub use requests::SotwRequest;
pub(crate) use requests::{Budgeted, ReadError, ReadLimits, RequestMessage, Requests};
