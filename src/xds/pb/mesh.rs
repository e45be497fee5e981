//! Istio's `istio.mesh.v1alpha1.ProxyConfig` (`mesh/v1alpha1/proxy.proto`), the PCDS resource:
//! only the fields wayfinder serves, with Istio's field numbers, so an agent that knows the
//! whole message reads them and one that knows this much skips the rest.
//!
//! Written by hand, as the CA's two messages are (`crate::ca`): the full message would bring
//! Istio's networking protos with it for three fields.

use super::protobuf::Int32Value;

/// The PCDS type URL.
pub const PROXY_CONFIG_TYPE: &str = "type.googleapis.com/istio.mesh.v1alpha1.ProxyConfig";

/// `istio.mesh.v1alpha1.ProxyConfig`, as far as wayfinder serves it.
#[derive(Clone, PartialEq, prost::Message, serde::Serialize, serde::Deserialize)]
pub struct ProxyConfig {
    /// Envoy's worker threads; absent: the agent's own setting.
    #[prost(message, optional, tag = "16")]
    #[serde(default, skip_serializing_if = "Option::is_none", with = "concurrency")]
    pub concurrency: Option<Int32Value>,
    /// Environment variables of the agent (`ProxyConfig`'s `environmentVariables`).
    #[prost(btree_map = "string, string", tag = "24")]
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub proxy_metadata: std::collections::BTreeMap<String, String>,
    /// The proxy image's flavour.
    #[prost(message, optional, tag = "35")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ProxyImage>,
}

/// `istio.networking.v1beta1.ProxyImage`.
#[derive(Clone, PartialEq, prost::Message, serde::Serialize, serde::Deserialize)]
pub struct ProxyImage {
    /// `default`, `debug`, `distroless`.
    #[prost(string, tag = "1")]
    pub image_type: String,
}

impl prost::Name for ProxyConfig {
    const NAME: &'static str = "ProxyConfig";
    const PACKAGE: &'static str = "istio.mesh.v1alpha1";

    fn type_url() -> String {
        PROXY_CONFIG_TYPE.to_string()
    }
}

/// The `Int32Value` wrapper as the plain number proto3 JSON writes.
mod concurrency {
    use super::Int32Value;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        v: &Option<Int32Value>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_i32(v.value),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Int32Value>, D::Error> {
        Ok(Option::<i32>::deserialize(d)?.map(|value| Int32Value { value }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn fields_have_istio_s_numbers() {
        let pc = ProxyConfig {
            concurrency: Some(Int32Value { value: 3 }),
            proxy_metadata: [("A".to_string(), "b".to_string())].into(),
            image: Some(ProxyImage {
                image_type: "debug".into(),
            }),
        };
        let bytes = pc.encode_to_vec();
        // Field 16, length-delimited: tag (16 << 3 | 2) = 130 as a varint, 0x82 0x01.
        assert_eq!(&bytes[..2], &[0x82, 0x01]);
        assert_eq!(ProxyConfig::decode(bytes.as_slice()).unwrap(), pc);
        let json = serde_json::to_value(&pc).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"concurrency": 3, "proxy_metadata": {"A": "b"}, "image": {"image_type": "debug"}})
        );
    }
}
