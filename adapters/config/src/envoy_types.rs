//! Envoy's message descriptors, compiled by `build.rs` from the vendored `.proto` files, and
//! reading an EnvoyFilter patch's value as the Envoy message its `applyTo` names (Istio's
//! `BuildXDSObjectFromStruct`). The server prints and patches xDS resources with the same
//! descriptors.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage};

use crate::envoy_filter::ApplyTo;

static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptors.bin"));

/// The descriptors, decoded once. An error only if the build embedded a broken set.
pub fn pool() -> Result<&'static DescriptorPool, String> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// The Envoy message a patch's value is, by what it applies to; `None` for what no proxy is
/// patched with here (`EXTENSION_CONFIG`, `BOOTSTRAP`).
pub fn message_type(apply_to: ApplyTo) -> Option<&'static str> {
    Some(match apply_to {
        ApplyTo::Listener => "envoy.config.listener.v3.Listener",
        ApplyTo::FilterChain => "envoy.config.listener.v3.FilterChain",
        ApplyTo::NetworkFilter => "envoy.config.listener.v3.Filter",
        ApplyTo::ListenerFilter => "envoy.config.listener.v3.ListenerFilter",
        ApplyTo::HttpFilter => {
            "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter"
        }
        ApplyTo::RouteConfiguration => "envoy.config.route.v3.RouteConfiguration",
        ApplyTo::VirtualHost => "envoy.config.route.v3.VirtualHost",
        ApplyTo::HttpRoute => "envoy.config.route.v3.Route",
        ApplyTo::Cluster => "envoy.config.cluster.v3.Cluster",
        ApplyTo::ExtensionConfig | ApplyTo::Bootstrap | ApplyTo::Invalid => return None,
    })
}

/// A patch value read.
#[derive(Debug)]
pub struct PatchValue {
    /// The message.
    pub message: DynamicMessage,
    /// What it was read without: fields the message does not have (Envoy may be newer than
    /// these descriptors), as Istio's strict reading warns of them.
    pub warning: Option<String>,
}

/// Reads `json` as the message of `apply_to`, as Istio does: unknown fields are left out
/// with a warning; a value of another shape, or an `Any` of a type these descriptors do not
/// have, is an error. `Ok(None)` when `apply_to` patches nothing here.
pub fn read_patch_value(
    apply_to: ApplyTo,
    json: &serde_json::Value,
) -> Result<Option<PatchValue>, String> {
    let Some(type_name) = message_type(apply_to) else {
        return Ok(None);
    };
    let desc = pool()?
        .get_message_by_name(type_name)
        .ok_or_else(|| format!("no descriptor of {type_name}"))?;
    let strict = match DynamicMessage::deserialize(desc.clone(), json) {
        Ok(message) => {
            return Ok(Some(PatchValue {
                message,
                warning: None,
            }));
        }
        Err(err) => err,
    };
    let lenient = DeserializeOptions::new().deny_unknown_fields(false);
    let message = DynamicMessage::deserialize_with_options(desc, json, &lenient)
        .map_err(|e| format!("not a {type_name}: {e}"))?;
    Ok(Some(PatchValue {
        message,
        warning: Some(format!(
            "read without what {type_name} does not have: {strict}"
        )),
    }))
}
