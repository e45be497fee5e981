//! Proto3 JSON for encoded resources, as Envoy's own config dump prints them.
//!
//! envoy-types has no JSON support, so the message descriptors are compiled from the vendored
//! .proto files (by `wayfinder-config`'s `build.rs`) and resources are printed through
//! `prost-reflect`. Used by
//! `/debug/config_dump` and the golden tests.

use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use serde_json::{Value, json};

use crate::xds::pb::protobuf::Any;

/// The descriptors compiled from the vendored protos (`wayfinder_config::envoy_types`, which
/// reads EnvoyFilter values with them), decoded once.
pub(crate) fn pool() -> Result<&'static DescriptorPool, String> {
    wayfinder_config::envoy_types::pool()
}

/// Prints an `Any` as JSON with an `@type` field and proto field names. A message whose type is
/// not among the vendored descriptors prints as `{"@type": ..., "error": ...}` rather than
/// failing: this is a debugging aid.
pub fn any_to_json(any: &Any) -> Value {
    match render(any) {
        Ok(value) => value,
        Err(error) => json!({ "@type": any.type_url, "error": error }),
    }
}

/// The sensitive fields of Envoy's TLS messages (`udpa.annotations.sensitive`): a
/// `TlsCertificate`'s `private_key` and `password`, and a generic secret.
const SENSITIVE: [&str; 3] = ["private_key", "password", "secret"];

/// Replaces the inline bytes of every sensitive field of `value` with `[redacted]`, as Envoy's
/// own config dump does: what a debug page shows never holds a private key. A file path stays.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                if SENSITIVE.contains(&key.as_str())
                    && let Value::Object(source) = field
                {
                    for inline in ["inline_bytes", "inline_string"] {
                        if let Some(v) = source.get_mut(inline) {
                            *v = Value::String("[redacted]".into());
                        }
                    }
                } else {
                    redact(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

fn render(any: &Any) -> Result<Value, String> {
    use crate::xds::pb::mesh::{PROXY_CONFIG_TYPE, ProxyConfig};
    if any.type_url == PROXY_CONFIG_TYPE {
        // Istio's message, written by hand rather than described (see `pb::mesh`).
        let message = <ProxyConfig as prost::Message>::decode(any.value.as_slice())
            .map_err(|e| e.to_string())?;
        let mut value = serde_json::to_value(message).map_err(|e| e.to_string())?;
        if let Value::Object(map) = &mut value {
            map.insert("@type".into(), Value::String(any.type_url.clone()));
        }
        return Ok(value);
    }
    let pool = pool()?;
    let name = any.type_url.rsplit('/').next().unwrap_or_default();
    let descriptor = pool
        .get_message_by_name(name)
        .ok_or_else(|| format!("no descriptor for {name}; see scripts/vendor-envoy-protos"))?;
    let message =
        DynamicMessage::decode(descriptor, any.value.as_slice()).map_err(|e| e.to_string())?;
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .stringify_64_bit_integers(false);
    let mut value = message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| e.to_string())?;
    if let Value::Object(map) = &mut value {
        map.insert("@type".into(), Value::String(any.type_url.clone()));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::pb::cluster::Cluster;
    use crate::xds::resource::Resource;

    #[test]
    fn prints_resources_with_their_type_and_nested_anys() {
        let r = Resource::encode(
            "x",
            &Cluster {
                name: "x".into(),
                ..Default::default()
            },
        );
        let v = any_to_json(&r.any());
        assert_eq!(v["name"], "x");
        assert_eq!(
            v["@type"],
            "type.googleapis.com/envoy.config.cluster.v3.Cluster"
        );
        let unknown = Any {
            type_url: "type.googleapis.com/foo.Bar".into(),
            value: vec![],
        };
        assert!(
            any_to_json(&unknown)["error"]
                .as_str()
                .unwrap()
                .contains("foo.Bar")
        );
    }
}
