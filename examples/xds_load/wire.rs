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

/// `google.protobuf.Any` cut to its value (the type URL is the response's).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct RawAny {
    #[prost(bytes = "bytes", tag = "2")]
    pub(crate) value: Bytes,
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
