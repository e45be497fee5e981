//! The tool's side of the wire: responses cut to what a simulated client reads, with resource
//! bytes left as slices of the received message, and a state-of-the-world request whose names
//! are shared rather than copied.
//!
//! The clients share two cores with the server, so what they spend is taken from the server's
//! figures. Decoding Envoy's full message types copied every resource (a sidecar's initial
//! configuration is about a megabyte) and every ACK cloned the thousand cluster names it
//! repeats; both showed at the top of a `perf` profile of the tool.

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes};
use prost::Message;
use prost::encoding::{DecodeContext, WireType};
use wayfinder::xds::pb::core::Node;

/// `google.protobuf.Any` cut to its value (the type URL is the response's). A value larger
/// than [`crate::stream::KEEP`] is kept cut to its first bytes (what the clients read of it,
/// a name, comes first); `len` is its length on the wire either way.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawAny {
    pub(crate) value: Bytes,
    pub(crate) len: usize,
}

impl Message for RawAny {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.value.is_empty() {
            prost::encoding::bytes::encode(2, &self.value, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if tag != 2 {
            return prost::encoding::skip_field(wire_type, tag, buf, ctx);
        }
        prost::encoding::bytes::merge(wire_type, &mut self.value, buf, ctx)?;
        self.len = self.value.len();
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        match self.value.is_empty() {
            true => 0,
            false => prost::encoding::bytes::encoded_len(2, &self.value),
        }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// A response read as it streams in: its resources (field 2 of both response messages) one
/// by one, and those larger than [`crate::stream::KEEP`] cut.
pub(crate) trait Streamed: Message + Default {
    /// Adds a resource of `len` bytes of which `prefix` are the first.
    fn push_cut(&mut self, prefix: &[u8], len: usize);
}

impl Streamed for SotwResponse {
    fn push_cut(&mut self, prefix: &[u8], _len: usize) {
        // An `Any`: the type URL (1), then the value (2).
        if let Some(any) = cut_any(prefix) {
            self.resources.push(any);
        }
    }
}

impl Streamed for DeltaResponse {
    fn push_cut(&mut self, prefix: &[u8], _len: usize) {
        // A `Resource`: the name (3) and version (1), then the `Any` (2).
        let mut resource = RawResource::default();
        for (tag, field, len) in fields(prefix) {
            match tag {
                3 => resource.name = String::from_utf8_lossy(field).into_owned(),
                2 => {
                    resource.resource = cut_any(field).or_else(|| (len == 0).then(RawAny::default))
                }
                _ => {}
            }
        }
        self.resources.push(resource);
    }
}

/// The `Any` whose encoding starts with `prefix`, its value cut to what `prefix` holds.
fn cut_any(prefix: &[u8]) -> Option<RawAny> {
    fields(prefix)
        .find(|(tag, _, _)| *tag == 2)
        .map(|(_, value, len)| RawAny {
            value: Bytes::copy_from_slice(value),
            len,
        })
}

/// The length-delimited fields of a message's first bytes: tag, the bytes of the field that
/// `prefix` holds, and the field's whole length. Stops at the first field it cannot read.
fn fields(mut prefix: &[u8]) -> impl Iterator<Item = (u32, &[u8], usize)> {
    std::iter::from_fn(move || {
        let (tag, wire_type) = prost::encoding::decode_key(&mut prefix).ok()?;
        if wire_type != WireType::LengthDelimited {
            return None;
        }
        let len = usize::try_from(prost::encoding::decode_varint(&mut prefix).ok()?).ok()?;
        let (field, rest) = prefix.split_at(len.min(prefix.len()));
        prefix = rest;
        Some((tag, field, len))
    })
}

/// `DiscoveryResponse` cut to what a client reads.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SotwResponse {
    #[prost(string, tag = "1")]
    pub(crate) version_info: String,
    #[prost(message, repeated, tag = "2")]
    pub(crate) resources: Vec<RawAny>,
    #[prost(string, tag = "4")]
    pub(crate) type_url: String,
    #[prost(string, tag = "5")]
    pub(crate) nonce: String,
}

/// `DeltaDiscoveryResponse` cut to what a client reads.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct DeltaResponse {
    #[prost(message, repeated, tag = "2")]
    pub(crate) resources: Vec<RawResource>,
    #[prost(string, tag = "4")]
    pub(crate) type_url: String,
    #[prost(string, tag = "5")]
    pub(crate) nonce: String,
    #[prost(string, repeated, tag = "6")]
    pub(crate) removed_resources: Vec<String>,
}

/// `Resource` (of a delta response) cut to its name and content.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct RawResource {
    #[prost(message, optional, tag = "2")]
    pub(crate) resource: Option<RawAny>,
    #[prost(string, tag = "3")]
    pub(crate) name: String,
}

/// A subscription's names, sorted, with their encoding as `resource_names` fields, made once
/// and shared by every client that asks for the same list (a sidecar's endpoint ACK repeats
/// a thousand names).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Names {
    list: Vec<String>,
    encoded: Bytes,
}

impl Names {
    pub(crate) fn new(list: Vec<String>) -> Self {
        let mut encoded = Vec::new();
        for name in &list {
            prost::encoding::string::encode(3, name, &mut encoded);
        }
        Self {
            list,
            encoded: encoded.into(),
        }
    }
}

impl std::ops::Deref for Names {
    type Target = Vec<String>;
    fn deref(&self) -> &Vec<String> {
        &self.list
    }
}

/// A `DiscoveryRequest` whose resource names are a list shared by every client that asks for
/// the same (encoding only; the tool never decodes requests).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SotwRequest {
    pub(crate) version_info: String,
    pub(crate) node: Option<Node>,
    pub(crate) resource_names: Arc<Names>,
    pub(crate) type_url: String,
    pub(crate) response_nonce: String,
}

impl Message for SotwRequest {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        // As prost's derived code: proto3 leaves empty strings out.
        fn string(tag: u32, s: &String, buf: &mut impl BufMut) {
            if !s.is_empty() {
                prost::encoding::string::encode(tag, s, buf);
            }
        }
        string(1, &self.version_info, buf);
        if let Some(node) = &self.node {
            prost::encoding::message::encode(2, node, buf);
        }
        buf.put_slice(&self.resource_names.encoded);
        string(4, &self.type_url, buf);
        string(5, &self.response_nonce, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let string = |tag, s: &String| {
            if s.is_empty() {
                0
            } else {
                prost::encoding::string::encoded_len(tag, s)
            }
        };
        string(1, &self.version_info)
            + self
                .node
                .as_ref()
                .map_or(0, |n| prost::encoding::message::encoded_len(2, n))
            + self.resource_names.encoded.len()
            + string(4, &self.type_url)
            + string(5, &self.response_nonce)
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// The state-of-the-world method.
pub(crate) const SOTW: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
/// The delta method.
pub(crate) const DELTA: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";
