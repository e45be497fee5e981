//! Istio's MERGE of one Envoy message into another (`pkg/proto/merge`, Go's `proto.Merge`
//! with durations replaced), on `prost-reflect` messages: every field set in the patch is
//! written into the object, scalars replaced, messages merged, lists appended (replaced by
//! `MERGE_AND_REPLACE_LIST`), map entries replaced; a `google.protobuf.Duration` is replaced
//! whole, so `10s` over `1.5s` is 10 s, not 10.5.
//!
//! Filters' `typed_config`s are `Any`s, whose bytes a field-wise merge would replace: the
//! callers that merge filters unpack both first ([`merge_any`]), as Istio's
//! `MergeAnyWithAny`.

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, ReflectMessage, Value};

/// `google.protobuf.Duration`, replaced rather than merged.
const DURATION: &str = "google.protobuf.Duration";

/// Merges `src` into `dst` (messages of one type); `replace_lists` for
/// `MERGE_AND_REPLACE_LIST`.
pub(super) fn merge(dst: &mut DynamicMessage, src: &DynamicMessage, replace_lists: bool) {
    for (field, value) in src.fields() {
        match value {
            Value::List(items) if !replace_lists => {
                if let Value::List(list) = dst.get_field_mut(&field) {
                    list.extend(items.iter().cloned());
                }
            }
            Value::Map(entries) => {
                if let Value::Map(map) = dst.get_field_mut(&field) {
                    map.extend(entries.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            Value::Message(m) if m.descriptor().full_name() != DURATION => {
                if let Value::Message(into) = dst.get_field_mut(&field) {
                    merge(into, m, replace_lists);
                }
            }
            other => dst.set_field(&field, other.clone()),
        }
    }
}

/// An `Any` (a `google.protobuf.Any` message) unpacked: its type and its message, when the
/// type is among Envoy's descriptors.
pub(super) fn unpack(
    pool: &DescriptorPool,
    any: &DynamicMessage,
) -> Result<DynamicMessage, String> {
    let type_url = any
        .get_field_by_name("type_url")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let name = type_url.rsplit('/').next().unwrap_or_default();
    let desc = pool
        .get_message_by_name(name)
        .ok_or_else(|| format!("unknown type {type_url:?}"))?;
    let bytes = any
        .get_field_by_name("value")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    DynamicMessage::decode(desc, bytes).map_err(|e| format!("{type_url}: {e}"))
}

/// `message` packed into `any` (its type URL and bytes).
pub(super) fn pack(any: &mut DynamicMessage, message: &DynamicMessage) {
    let type_url = format!("type.googleapis.com/{}", message.descriptor().full_name());
    any.set_field_by_name("type_url", Value::String(type_url));
    any.set_field_by_name("value", Value::Bytes(message.encode_to_vec().into()));
}

/// Istio's `MergeAnyWithAny`: the patch's `Any` merged into the object's, both unpacked, when
/// they hold one type; otherwise an error (and the object's stays).
pub(super) fn merge_any(
    pool: &DescriptorPool,
    dst: &mut DynamicMessage,
    src: &DynamicMessage,
) -> Result<(), String> {
    let mut into = unpack(pool, dst)?;
    let from = unpack(pool, src)?;
    if into.descriptor() != from.descriptor() {
        return Err(format!(
            "cannot merge {} into {}",
            from.descriptor().full_name(),
            into.descriptor().full_name()
        ));
    }
    merge(&mut into, &from, false);
    pack(dst, &into);
    Ok(())
}
