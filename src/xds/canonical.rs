//! Content versions for messages whose encoding is not canonical.
//!
//! prost encodes a protobuf map from a `HashMap`, in that map's iteration order, which differs
//! between two maps holding the same entries. A message with a map of more than one entry
//! (a route with both a fault and a CORS policy in `typed_per_filter_config`) can therefore
//! encode to different bytes for the same content, and a hash of the bytes would change
//! without a change. For those messages the version is a hash of a canonical walk of the
//! decoded message instead: fields in number order, map entries in key order, and an `Any`
//! of a known type walked as the message it holds (the RBAC policies of a listener's
//! filters are a map inside an `Any` inside an `Any`).

use prost_reflect::{DynamicMessage, MapKey, ReflectMessage, Value};
use xxhash_rust::xxh3::Xxh3;

use crate::xds::pb::protobuf::Any;
use crate::xds::resource::Version;

/// The canonical version of an encoded message, or `None` if its type is not among the
/// compiled descriptors (then the caller keeps the byte hash).
pub(crate) fn version(any: &Any) -> Option<Version> {
    let message = decode(&any.type_url, &any.value)?;
    let mut hasher = Xxh3::new();
    hash_message(&message, &mut hasher);
    Some(Version(hasher.digest()))
}

/// The message an `Any` holds, if its type is among the compiled descriptors.
fn decode(type_url: &str, value: &[u8]) -> Option<DynamicMessage> {
    let pool = crate::xds::json::pool().ok()?;
    let name = type_url.rsplit('/').next()?;
    let descriptor = pool.get_message_by_name(name)?;
    DynamicMessage::decode(descriptor, value).ok()
}

fn hash_message(message: &DynamicMessage, h: &mut Xxh3) {
    if message.descriptor().full_name() == "google.protobuf.Any"
        && let (Some(Value::String(type_url)), Some(Value::Bytes(value))) = (
            message.get_field_by_name("type_url").as_deref(),
            message.get_field_by_name("value").as_deref(),
        )
        && let Some(inner) = decode(type_url, value)
    {
        h.update(type_url.as_bytes());
        hash_message(&inner, h);
        return;
    }
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

    /// RBAC policies are a map inside the RBAC filter's `Any` inside the connection manager's
    /// `Any` inside a listener: the version of the listener does not depend on their order.
    #[test]
    fn maps_inside_nested_anys_do_not_change_the_version() {
        use prost::{Message, Name};

        use crate::xds::pb::hcm::{HttpConnectionManager, HttpFilter, http_filter};
        use crate::xds::pb::http_rbac::Rbac as HttpRbac;
        use crate::xds::pb::listener::{Filter, FilterChain, Listener, filter};
        use crate::xds::pb::rbac::{Policy, Rbac};
        fn any<M: Message + Name>(m: &M) -> Any {
            Any {
                type_url: M::type_url(),
                value: m.encode_to_vec(),
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..20 {
            let policies = ["a", "b", "c", "d"].map(|n| (n.to_string(), Policy::default()));
            let rbac = HttpRbac {
                rules: Some(Rbac {
                    policies: policies.into_iter().collect(),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let hcm = HttpConnectionManager {
                http_filters: vec![HttpFilter {
                    name: "envoy.filters.http.rbac".into(),
                    config_type: Some(http_filter::ConfigType::TypedConfig(any(&rbac))),
                    ..Default::default()
                }],
                ..Default::default()
            };
            let listener = Listener {
                name: "l".into(),
                filter_chains: vec![FilterChain {
                    filters: vec![Filter {
                        name: "hcm".into(),
                        config_type: Some(filter::ConfigType::TypedConfig(any(&hcm))),
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            };
            seen.insert(Resource::encode_unordered("l", &listener).version);
        }
        assert_eq!(seen.len(), 1);
    }
}
