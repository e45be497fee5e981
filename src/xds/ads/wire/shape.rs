//! A request's shape, read from its bytes before anything of it is decoded: how many entries
//! its lists hold, and how long its node id, node metadata and short string fields are.
//!
//! Decoding allocates per entry, not per byte: an empty resource name is 2 bytes on the wire
//! and a 24-byte `String` in memory, so a 4 MiB request of empty names decodes into about
//! 50 MB. The shape gives the limits (names per request, node sizes) and an estimate of what
//! decoding will allocate ([`Shape::decoded_cost`]), both checked before prost allocates
//! anything. The scan walks the message's top level, and one level into the node and the
//! error detail, without allocating.

use bytes::Buf;
use prost::DecodeError;
use prost::encoding::{WireType, decode_key, decode_varint, skip_field};

/// Where a request type keeps the fields the scan looks at (field numbers from Envoy's
/// `discovery.proto`).
#[derive(Debug)]
pub(crate) struct Layout {
    /// The `node` field.
    node: u32,
    /// Repeated fields: names, locators, map entries.
    lists: &'static [u32],
    /// The `error_detail` field (a `google.rpc.Status`).
    error_detail: u32,
    /// Short string fields, by number and name: echoed versions, nonces, the type URL.
    short: &'static [(u32, &'static str)],
}

/// `DiscoveryRequest`.
pub(crate) const SOTW: Layout = Layout {
    node: 2,
    lists: &[3, 7],
    error_detail: 6,
    short: &[(1, "version_info"), (4, "type_url"), (5, "response_nonce")],
};

/// `DeltaDiscoveryRequest` (field 5 is `initial_resource_versions`, a map: one entry each).
pub(crate) const DELTA: Layout = Layout {
    node: 1,
    lists: &[3, 4, 5, 8, 9],
    error_detail: 7,
    short: &[(2, "type_url"), (6, "response_nonce")],
};

/// `Node` fields: `id`, `metadata`, and its lists (`extensions`, `client_features`,
/// `listening_addresses`, `dynamic_parameters`).
const NODE_ID: u32 = 1;
const NODE_METADATA: u32 = 3;
const NODE_LISTS: [u32; 4] = [9, 10, 11, 12];
/// `google.rpc.Status.details`.
const STATUS_DETAILS: u32 = 3;

/// Bytes decoding is estimated to allocate per list entry of the request (a `String` or a
/// map entry, with the allocator's minimum for its contents).
const ENTRY_COST: usize = 64;
/// Per entry of a node list or an error's details: a struct of several strings.
const NESTED_ENTRY_COST: usize = 256;
/// Per byte of node metadata: a `Struct` is maps of values, each entry tens of bytes in
/// memory for a few on the wire.
const METADATA_COST: usize = 32;

/// The longest short string field accepted: wayfinder's own versions and nonces, which
/// clients echo, are tens of bytes, and type URLs under a hundred.
pub(crate) const MAX_SHORT_FIELD: usize = 1024;

/// What [`scan`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Bytes of the message.
    pub(crate) bytes: usize,
    /// Entries of the request's lists.
    pub(crate) names: usize,
    /// Bytes of the node id (the longest, if the node came in parts).
    pub(crate) node_id: usize,
    /// Bytes of the node metadata, encoded.
    pub(crate) node_metadata: usize,
    /// Entries of the node's lists and of the error detail's details.
    pub(crate) nested: usize,
    /// The longest short string field, by name, when one is longer than
    /// [`MAX_SHORT_FIELD`].
    pub(crate) long_field: Option<(&'static str, usize)>,
}

impl Shape {
    /// An estimate of the bytes the decoded request holds, message included (a decoded
    /// request keeps its message, or copies of its strings).
    pub(crate) fn decoded_cost(&self) -> usize {
        self.bytes
            .saturating_add(self.names.saturating_mul(ENTRY_COST))
            .saturating_add(self.nested.saturating_mul(NESTED_ENTRY_COST))
            .saturating_add(self.node_metadata.saturating_mul(METADATA_COST))
    }
}

/// Reads the shape of `message`, a request laid out as `layout` says. Fails only where prost
/// would fail to decode the message's framing.
pub(crate) fn scan(message: &[u8], layout: &Layout) -> Result<Shape, DecodeError> {
    let mut shape = Shape {
        bytes: message.len(),
        ..Shape::default()
    };
    for field in fields(message) {
        let (tag, wire_type, value) = field?;
        if wire_type != WireType::LengthDelimited {
            continue;
        }
        if layout.lists.contains(&tag) {
            shape.names += 1;
        } else if tag == layout.node {
            scan_node(value, &mut shape)?;
        } else if tag == layout.error_detail {
            shape.nested += count(value, STATUS_DETAILS)?;
        } else if let Some((_, name)) = layout.short.iter().find(|(t, _)| *t == tag)
            && value.len() > MAX_SHORT_FIELD
        {
            shape.long_field = Some((name, value.len()));
        }
    }
    Ok(shape)
}

fn scan_node(node: &[u8], shape: &mut Shape) -> Result<(), DecodeError> {
    for field in fields(node) {
        let (tag, wire_type, value) = field?;
        if wire_type != WireType::LengthDelimited {
            continue;
        }
        match tag {
            NODE_ID => shape.node_id = shape.node_id.max(value.len()),
            NODE_METADATA => shape.node_metadata += value.len(),
            t if NODE_LISTS.contains(&t) => shape.nested += 1,
            _ => {}
        }
    }
    Ok(())
}

/// Occurrences of length-delimited field `tag` in `message`.
fn count(message: &[u8], tag: u32) -> Result<usize, DecodeError> {
    let mut n = 0;
    for field in fields(message) {
        let (t, wire_type, _) = field?;
        n += usize::from(t == tag && wire_type == WireType::LengthDelimited);
    }
    Ok(n)
}

/// The top-level fields of a message: tag, wire type, and for length-delimited fields their
/// bytes (empty for the others, which are skipped).
fn fields(mut buf: &[u8]) -> impl Iterator<Item = Result<(u32, WireType, &[u8]), DecodeError>> {
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || !buf.has_remaining() {
            return None;
        }
        let field = next_field(&mut buf);
        failed = field.is_err();
        Some(field)
    })
}

fn next_field<'a>(buf: &mut &'a [u8]) -> Result<(u32, WireType, &'a [u8]), DecodeError> {
    let (tag, wire_type) = decode_key(buf)?;
    let field = *buf;
    // prost checks the length against what is left (its errors are the decoder's own).
    skip_field(wire_type, tag, buf, Default::default())?;
    if wire_type != WireType::LengthDelimited {
        return Ok((tag, wire_type, &[]));
    }
    let mut value = field;
    decode_varint(&mut value)?;
    let len = value.len() - buf.len();
    Ok((tag, wire_type, &value[..len]))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use prost::Message;

    use super::*;
    use crate::xds::pb::core::{Extension, Node};
    use crate::xds::pb::discovery::{DeltaDiscoveryRequest, DiscoveryRequest};
    use crate::xds::pb::protobuf::{Struct, Value, value::Kind};
    use crate::xds::pb::rpc::Status;

    fn node(id: &str, metadata_entries: usize, extensions: usize) -> Node {
        let fields = (0..metadata_entries)
            .map(|i| {
                let value = Value {
                    kind: Some(Kind::StringValue("v".into())),
                };
                (format!("K{i}"), value)
            })
            .collect();
        Node {
            id: id.into(),
            metadata: Some(Struct { fields }),
            extensions: vec![Extension::default(); extensions],
            ..Node::default()
        }
    }

    #[test]
    fn a_sotw_request_is_measured_without_decoding_it() {
        let request = DiscoveryRequest {
            version_info: "v".repeat(2000),
            node: Some(node(
                "sidecar~10.0.0.1~a.default~default.svc.cluster.local",
                3,
                5,
            )),
            resource_names: vec!["a".into(), String::new(), "c".into()],
            type_url: "t".into(),
            error_detail: Some(Status {
                message: "no".into(),
                details: vec![Default::default(); 2],
                ..Status::default()
            }),
            ..DiscoveryRequest::default()
        };
        let bytes = request.encode_to_vec();
        let shape = scan(&bytes, &SOTW).expect("well framed");
        assert_eq!(shape.bytes, bytes.len());
        assert_eq!(shape.names, 3, "an empty name counts");
        assert_eq!(shape.node_id, 52);
        let metadata = request.node.as_ref().and_then(|n| n.metadata.as_ref());
        assert_eq!(
            shape.node_metadata,
            metadata.map_or(0, Message::encoded_len)
        );
        assert_eq!(shape.nested, 5 + 2, "extensions and error details");
        assert_eq!(shape.long_field, Some(("version_info", 2000)));
        assert!(shape.decoded_cost() > bytes.len());
    }

    #[test]
    fn a_delta_request_counts_names_of_both_lists_and_map_entries() {
        let request = DeltaDiscoveryRequest {
            resource_names_subscribe: vec!["a".into(); 4],
            resource_names_unsubscribe: vec!["b".into(); 2],
            initial_resource_versions: HashMap::from([("x".into(), "1".into())]),
            response_nonce: "n".into(),
            ..DeltaDiscoveryRequest::default()
        };
        let shape = scan(&request.encode_to_vec(), &DELTA).expect("well framed");
        assert_eq!(shape.names, 7);
        assert_eq!(shape.long_field, None);
    }

    #[test]
    fn a_million_empty_names_cost_far_more_than_their_bytes() {
        let request = DiscoveryRequest {
            resource_names: vec![String::new(); 1_000_000],
            ..DiscoveryRequest::default()
        };
        let bytes = request.encode_to_vec();
        assert_eq!(bytes.len(), 2_000_000);
        let shape = scan(&bytes, &SOTW).expect("well framed");
        assert_eq!(shape.names, 1_000_000);
        assert!(shape.decoded_cost() >= 24 * 1_000_000, "{shape:?}");
    }

    #[test]
    fn broken_framing_is_an_error_not_a_panic() {
        // Field 3, length 5, one byte of it.
        assert!(scan(&[0x1a, 0x05, b'a'], &SOTW).is_err());
        // A varint that never ends.
        assert!(scan(&[0x08, 0xff, 0xff], &SOTW).is_err());
        // A node whose inner framing is broken.
        assert!(scan(&[0x12, 0x02, 0x0a, 0x05], &SOTW).is_err());
        assert_eq!(scan(&[], &SOTW).expect("empty").names, 0);
    }
}
