//! The reading side: gRPC messages out of a request body, and the state-of-the-world request
//! whose names stay undecoded while they repeat.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use prost::Message;
use tonic::Status;
use tonic::body::Body;

use super::MAX_REQUEST;
use crate::xds::pb::discovery::{DeltaDiscoveryRequest, DiscoveryRequest};

/// A state-of-the-world request as the server reads it: every field but the resource names
/// decoded as usual, the names only hashed. A sidecar's endpoint ACK repeats every cluster
/// name it knows (60 KB for a thousand services); when the hash is the one of its previous
/// request, the names need not be decoded, allocated or compared, and when it is not, they
/// are read again from the message, which the request keeps. Decode with
/// [`SotwRequest::from_message`]: `Message::decode` alone has nowhere to keep the message, so
/// its names would be lost (their hash is kept).
#[derive(Clone, Debug, Default)]
pub struct SotwRequest {
    /// The request, without its resource names.
    pub request: DiscoveryRequest,
    /// The message as received (for a request made by [`From`], as encoded).
    raw: Bytes,
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
    /// Decodes a request, keeping `message` to read its names from if they are needed.
    pub fn from_message(message: Bytes) -> Result<Self, prost::DecodeError> {
        let mut request = Self::decode(message.clone())?;
        request.raw = message;
        Ok(request)
    }

    /// A hash of the resource names, in order: equal names, equal hash.
    pub fn names_hash(&self) -> u64 {
        self.names_hash_state.0
    }

    /// The resource names, decoded; a name that is not UTF-8 is an error naming it.
    pub fn names(&self) -> Result<Vec<String>, String> {
        self.name_bytes()
            .map(|n| {
                String::from_utf8(n.to_vec()).map_err(|_| {
                    format!(
                        "resource name {:?} is not UTF-8",
                        String::from_utf8_lossy(&n)
                    )
                })
            })
            .collect()
    }

    /// Field 3 of the kept message, each occurrence in order (the message decoded once
    /// already, so it is well formed).
    fn name_bytes(&self) -> impl Iterator<Item = Bytes> + '_ {
        let mut buf = self.raw.clone();
        std::iter::from_fn(move || {
            while buf.has_remaining() {
                let (tag, wire_type) = prost::encoding::decode_key(&mut buf).ok()?;
                if tag == 3 {
                    let len = prost::encoding::decode_varint(&mut buf).ok()? as usize;
                    return (len <= buf.remaining()).then(|| buf.split_to(len));
                }
                prost::encoding::skip_field(wire_type, tag, &mut buf, Default::default()).ok()?;
            }
            None
        })
    }
}

impl PartialEq for SotwRequest {
    fn eq(&self, other: &Self) -> bool {
        self.request == other.request
            && self.names_hash_state == other.names_hash_state
            && self.name_bytes().eq(other.name_bytes())
    }
}

impl From<DiscoveryRequest> for SotwRequest {
    fn from(request: DiscoveryRequest) -> Self {
        let raw = Bytes::from(request.encode_to_vec());
        let mut out = Self::from_message(raw.clone()).unwrap_or_default();
        out.raw = raw;
        out
    }
}

impl Message for SotwRequest {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.request.encode_raw(buf);
        for name in self.name_bytes() {
            prost::encoding::bytes::encode(3, &name, buf);
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
        prost::encoding::check_wire_type(prost::encoding::WireType::LengthDelimited, wire_type)?;
        // Hashed where it lies when the name is in the buffer's current chunk (always, for a
        // request read whole): no copy, no reference count per name.
        let mut chunk = buf.chunk();
        let before = chunk.len();
        if let Ok(len) = prost::encoding::decode_varint(&mut chunk)
            && let Some(name) = chunk.get(..len as usize)
        {
            self.names_hash_state.add(name);
            let used = before - chunk.len() + name.len();
            buf.advance(used);
            return Ok(());
        }
        let mut name = Bytes::new();
        prost::encoding::bytes::merge(wire_type, &mut name, buf, ctx)?;
        self.names_hash_state.add(&name);
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.request.encoded_len()
            + self
                .name_bytes()
                .map(|n| prost::encoding::bytes::encoded_len(3, &n))
                .sum::<usize>()
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// A message a request stream carries.
pub(crate) trait RequestMessage: Sized {
    /// Decodes one message.
    fn from_bytes(message: Bytes) -> Result<Self, prost::DecodeError>;
}

impl RequestMessage for SotwRequest {
    fn from_bytes(message: Bytes) -> Result<Self, prost::DecodeError> {
        Self::from_message(message)
    }
}

impl RequestMessage for DeltaDiscoveryRequest {
    fn from_bytes(message: Bytes) -> Result<Self, prost::DecodeError> {
        Self::decode(message)
    }
}

/// The messages of a request stream, decoded one at a time.
pub(crate) struct Requests<M> {
    body: Body,
    buf: BytesMut,
    _message: PhantomData<M>,
}

impl<M: RequestMessage> Requests<M> {
    pub(crate) fn new(body: Body) -> Self {
        Self {
            body,
            buf: BytesMut::new(),
            _message: PhantomData,
        }
    }

    /// The next message; `None` when the client closed its side.
    pub(crate) async fn message(&mut self) -> Result<Option<M>, Status> {
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
        M::from_bytes(bytes.freeze())
            .map(Some)
            .map_err(|err| Status::invalid_argument(format!("malformed request: {err}")))
    }
}
