//! The reading side: gRPC messages out of a request body, within the limits and the request
//! budget, and the state-of-the-world request whose names stay undecoded while they repeat.

use std::marker::PhantomData;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use prost::Message;
use tokio::time::Instant;
use tonic::Status;
use tonic::body::Body;

use super::shape::{self, Layout, Shape};
use crate::xds::ads::limits::{BUDGET_WAIT, RequestBudget, RequestPermit};
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
    /// Where its fields are, for [`shape::scan`].
    const LAYOUT: &'static Layout;

    /// Decodes one message.
    fn from_bytes(message: Bytes) -> Result<Self, prost::DecodeError>;
}

impl RequestMessage for SotwRequest {
    const LAYOUT: &'static Layout = &shape::SOTW;

    fn from_bytes(message: Bytes) -> Result<Self, prost::DecodeError> {
        Self::from_message(message)
    }
}

impl RequestMessage for DeltaDiscoveryRequest {
    const LAYOUT: &'static Layout = &shape::DELTA;

    fn from_bytes(message: Bytes) -> Result<Self, prost::DecodeError> {
        Self::decode(message)
    }
}

/// What a request stream may ask of the server: the limits on one message, and the budget
/// every stream's messages share.
#[derive(Clone, Debug)]
pub(crate) struct ReadLimits {
    /// The largest message.
    pub(crate) max_bytes: usize,
    /// The most list entries in one message.
    pub(crate) max_names: usize,
    /// The longest node id.
    pub(crate) max_node_id: usize,
    /// The largest node metadata, encoded.
    pub(crate) max_node_metadata: usize,
    /// How long a message may take to arrive whole once its prefix is read.
    pub(crate) message_wait: Duration,
    /// Bytes of requests the server holds at once.
    pub(crate) budget: RequestBudget,
}

/// Why a request stream cannot go on. Each is turned into a gRPC status in one place
/// (`ads.rs`); [`ReadError::Reset`] is the client's own doing and ends the stream quietly.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The message is compressed.
    #[error("compressed requests are not supported (send grpc-encoding identity)")]
    Compressed,
    /// The message is larger than `--max-request-bytes`.
    #[error("a request of {len} bytes is larger than the {max} accepted (--max-request-bytes)")]
    TooLarge {
        /// Its size, from its prefix.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The request budget has no room for the message.
    #[error(
        "the server holds as many request bytes as it may (--max-request-budget, {budget} bytes) \
         and could not take {need} more; retry later"
    )]
    Budget {
        /// Bytes the message needed.
        need: usize,
        /// The budget.
        budget: usize,
    },
    /// More list entries than `--max-names-per-request`.
    #[error(
        "a request with {names} resource names is more than the {max} accepted \
         (--max-names-per-request)"
    )]
    TooManyNames {
        /// Entries in the message.
        names: usize,
        /// The limit.
        max: usize,
    },
    /// A node id longer than `--max-node-id-bytes`.
    #[error("a node id of {len} bytes is longer than the {max} accepted (--max-node-id-bytes)")]
    NodeId {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Node metadata larger than `--max-node-metadata-bytes`.
    #[error(
        "node metadata of {len} bytes is larger than the {max} accepted \
         (--max-node-metadata-bytes)"
    )]
    NodeMetadata {
        /// Its size, encoded.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A short string field that is not short.
    #[error("{field} of {len} bytes is longer than the {max} accepted")]
    LongField {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The message did not arrive whole in time.
    #[error("a request did not arrive whole within {0:?} of its first bytes")]
    Slow(Duration),
    /// A new stream sent nothing in time.
    #[error("no request within {0:?} of opening the stream")]
    Silent(Duration),
    /// The message does not decode.
    #[error("malformed request: {0}")]
    Malformed(#[from] prost::DecodeError),
    /// The client closed its side in the middle of a message.
    #[error("the request stream ended mid-message")]
    Truncated,
    /// The request body failed: the client reset the stream or the connection broke.
    #[error("the request stream broke: {0}")]
    Reset(Status),
}

/// One decoded request, holding its bytes of the request budget until it is dropped. The
/// message is boxed: a decoded `DiscoveryRequest` is 600 bytes, and every place a stream's
/// task keeps one across an await (its first request, the next, the one being answered) took
/// that much room in every stream's task for the stream's life, idle or not.
#[derive(Debug)]
pub(crate) struct Budgeted<M> {
    message: Box<M>,
    _permit: RequestPermit,
}

impl<M> std::ops::Deref for Budgeted<M> {
    type Target = M;

    fn deref(&self) -> &M {
        &self.message
    }
}

/// A message being read: its length, its bytes of the budget, and when it must be whole.
struct Pending {
    len: usize,
    permit: RequestPermit,
    deadline: Instant,
}

/// The messages of a request stream, decoded one at a time.
///
/// [`Requests::message`] is cancel-safe: a message half read when the future is dropped
/// keeps its bytes, its place in the budget and its deadline for the next call.
pub(crate) struct Requests<M> {
    body: Body,
    buf: BytesMut,
    limits: ReadLimits,
    pending: Option<Pending>,
    /// Whether a message has been read whole: the stream is being served. Its later
    /// messages wait for room in the budget as long as it takes; only a new stream's first
    /// message is refused after [`BUDGET_WAIT`] (its client retries, perhaps elsewhere).
    served: bool,
    _message: PhantomData<M>,
}

impl<M: RequestMessage> Requests<M> {
    pub(crate) fn new(body: Body, limits: ReadLimits) -> Self {
        Self {
            body,
            buf: BytesMut::new(),
            limits,
            pending: None,
            served: false,
            _message: PhantomData,
        }
    }

    /// The first message of a stream, whose first bytes must come within `wait` (then it
    /// has as long as any message to arrive whole); `None` when the client closed its side.
    pub(crate) async fn first(&mut self, wait: Duration) -> Result<Option<Budgeted<M>>, ReadError> {
        let deadline = Instant::now() + wait;
        while self.buf.is_empty() {
            let more = tokio::time::timeout_at(deadline, self.fill(None))
                .await
                .map_err(|_| ReadError::Silent(wait))??;
            if !more {
                return Ok(None);
            }
        }
        self.message().await
    }

    /// The next message; `None` when the client closed its side.
    pub(crate) async fn message(&mut self) -> Result<Option<Budgeted<M>>, ReadError> {
        while self.buf.len() < 5 {
            if !self.fill(None).await? {
                return match self.buf.is_empty() {
                    true => Ok(None),
                    false => Err(ReadError::Truncated),
                };
            }
        }
        if self.pending.is_none() {
            self.pending = Some(self.start().await?);
        }
        let (len, deadline) = match &self.pending {
            Some(p) => (p.len, p.deadline),
            None => return Err(ReadError::Truncated),
        };
        while self.buf.len() < 5 + len {
            if !self.fill(Some(deadline)).await? {
                return Err(ReadError::Truncated);
            }
        }
        let Some(Pending { mut permit, .. }) = self.pending.take() else {
            return Err(ReadError::Truncated);
        };
        self.buf.advance(5);
        let bytes = self.buf.split_to(len).freeze();
        if self.buf.is_empty() {
            // Let the buffer go: a stream should not keep its largest request's size.
            self.buf = BytesMut::new();
        }
        let shape = shape::scan(&bytes, M::LAYOUT)?;
        self.check(&shape)?;
        let more = shape.decoded_cost().saturating_sub(len);
        if more > 0 {
            let wait = budget_wait(self.served);
            let decoding = self.limits.budget.take_decoding(more, wait).await;
            permit.set_decoding(decoding.ok_or_else(|| no_room(&self.limits, more))?);
        }
        let message = M::from_bytes(bytes)?;
        self.served = true;
        Ok(Some(Budgeted {
            message: Box::new(message),
            _permit: permit,
        }))
    }

    /// Reads a message's prefix and takes its size from the budget.
    async fn start(&mut self) -> Result<Pending, ReadError> {
        if self.buf[0] != 0 {
            return Err(ReadError::Compressed);
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        let len = len as usize;
        if len > self.limits.max_bytes {
            return Err(ReadError::TooLarge {
                len,
                max: self.limits.max_bytes,
            });
        }
        let permit = self.limits.budget.take(len, budget_wait(self.served)).await;
        let permit = permit.ok_or_else(|| no_room(&self.limits, len))?;
        if self.buf.len() < 5 + len {
            self.buf.reserve(5 + len - self.buf.len());
        }
        Ok(Pending {
            len,
            permit,
            deadline: Instant::now() + self.limits.message_wait,
        })
    }

    fn check(&self, shape: &Shape) -> Result<(), ReadError> {
        let l = &self.limits;
        if shape.names > l.max_names {
            return Err(ReadError::TooManyNames {
                names: shape.names,
                max: l.max_names,
            });
        }
        if shape.node_id > l.max_node_id {
            return Err(ReadError::NodeId {
                len: shape.node_id,
                max: l.max_node_id,
            });
        }
        if shape.node_metadata > l.max_node_metadata {
            return Err(ReadError::NodeMetadata {
                len: shape.node_metadata,
                max: l.max_node_metadata,
            });
        }
        if let Some((field, len)) = shape.long_field {
            return Err(ReadError::LongField {
                field,
                len,
                max: shape::MAX_SHORT_FIELD,
            });
        }
        Ok(())
    }

    /// Appends the body's next frame; false when the client closed its side.
    async fn fill(&mut self, deadline: Option<Instant>) -> Result<bool, ReadError> {
        let frame = match deadline {
            None => self.body.frame().await,
            Some(at) => tokio::time::timeout_at(at, self.body.frame())
                .await
                .map_err(|_| ReadError::Slow(self.limits.message_wait))?,
        };
        match frame {
            None => Ok(false),
            Some(Err(status)) => Err(ReadError::Reset(status)),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    self.buf.extend_from_slice(&data);
                }
                Ok(true)
            }
        }
    }
}

/// How long a stream waits for room in the request budget: at most [`BUDGET_WAIT`] for a new
/// stream, as long as it takes for one being `served`.
fn budget_wait(served: bool) -> Option<Duration> {
    match served {
        true => None,
        false => Some(BUDGET_WAIT),
    }
}

/// The refusal of a request that needs `need` bytes the budget has no room for.
fn no_room(limits: &ReadLimits, need: usize) -> ReadError {
    ReadError::Budget {
        need,
        budget: limits.budget.total(),
    }
}
