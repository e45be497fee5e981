//! Content versions for messages whose encoding is not canonical.
//!
//! prost encodes a protobuf map from a `HashMap`, in that map's iteration order, which differs
//! between two maps holding the same entries. A message with a map of more than one entry
//! (a route with both a fault and a CORS policy in `typed_per_filter_config`) can therefore
//! encode to different bytes for the same content, and a hash of the bytes would change
//! without a change. For those messages the version is a hash of a canonical walk of the
//! decoded message instead: fields in number order, map entries in key order.

use prost_reflect::{DynamicMessage, MapKey, Value};
use xxhash_rust::xxh3::Xxh3;

use crate::xds::pb::protobuf::Any;
use crate::xds::resource::Version;

/// The canonical version of an encoded message, or `None` if its type is not among the
/// compiled descriptors (then the caller keeps the byte hash).
pub(crate) fn version(any: &Any) -> Option<Version> {
    let pool = crate::xds::json::pool().ok()?;
    let name = any.type_url.rsplit('/').next()?;
    let descriptor = pool.get_message_by_name(name)?;
    let message = DynamicMessage::decode(descriptor, any.value.as_slice()).ok()?;
    let mut hasher = Xxh3::new();
    hash_message(&message, &mut hasher);
    Some(Version(hasher.digest()))
}

fn hash_message(message: &DynamicMessage, h: &mut Xxh3) {
    for (field, value) in message.fields() {
        h.update(&field.number().to_le_bytes());
        hash_value(value, h);
    }
    h.update(&[0xff]);
}

fn hash_value(value: &Value, h: &mut Xxh3) {
    match value {
        Value::Bool(b) => h.update(&[u8::from(*b)]),
        Value::I32(n) | Value::EnumNumber(n) => h.update(&n.to_le_bytes()),
        Value::I64(n) => h.update(&n.to_le_bytes()),
        Value::U32(n) => h.update(&n.to_le_bytes()),
        Value::U64(n) => h.update(&n.to_le_bytes()),
        Value::F32(n) => h.update(&n.to_bits().to_le_bytes()),
        Value::F64(n) => h.update(&n.to_bits().to_le_bytes()),
        Value::String(s) => {
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Value::Bytes(b) => {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        }
        Value::Message(m) => hash_message(m, h),
        Value::List(items) => {
            h.update(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|v| hash_value(v, h));
        }
        Value::Map(map) => {
            let mut entries: Vec<(&MapKey, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            h.update(&(entries.len() as u64).to_le_bytes());
            for (key, value) in entries {
                hash_value(&Value::from(key.clone()), h);
                hash_value(value, h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::pb::route::Route;
    use crate::xds::resource::Resource;

    #[test]
    fn map_order_does_not_change_the_version() {
        let entry = |n: &str| {
            (
                n.to_string(),
                Any {
                    type_url: format!("type.googleapis.com/x.{n}"),
                    value: vec![],
                },
            )
        };
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..20 {
            let route = Route {
                name: "r".into(),
                typed_per_filter_config: [entry("a"), entry("b"), entry("c")].into_iter().collect(),
                ..Default::default()
            };
            let r = Resource::encode("r", &route);
            seen.insert(version(&r.any()).expect("Route has a descriptor"));
        }
        assert_eq!(seen.len(), 1);
    }
}
