//! The reading side: gRPC messages out of a request body, and the state-of-the-world request
//! whose names stay undecoded while they repeat.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use prost::Message;
use tonic::Status;
use tonic::body::Body;

use super::MAX_REQUEST;
use crate::xds::pb::discovery::DiscoveryRequest;

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
pub(crate) struct Requests<M> {
    body: Body,
    buf: BytesMut,
    _message: PhantomData<M>,
}

impl<M: Message + Default> Requests<M> {
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
        M::decode(bytes.freeze())
            .map(Some)
            .map_err(|err| Status::invalid_argument(format!("malformed request: {err}")))
    }
}
