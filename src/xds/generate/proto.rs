//! Small builders for the protobuf pieces every generator uses.

use prost::{Message, Name};

use crate::xds::pb::core::{
    self, AggregatedConfigSource, ApiVersion, ConfigSource, SocketAddress, config_source,
    socket_address,
};
use crate::xds::pb::protobuf::{Any, BoolValue, Duration, UInt32Value};

/// Packs a message into an `Any`.
pub(super) fn any<M: Message + Name>(message: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: message.encode_to_vec(),
    }
}

/// A whole number of seconds.
pub(super) fn seconds(seconds: i64) -> Option<Duration> {
    Some(Duration { seconds, nanos: 0 })
}

/// A `UInt32Value`.
pub(super) fn u32_value(value: u32) -> Option<UInt32Value> {
    Some(UInt32Value { value })
}

/// A `BoolValue`.
pub(super) fn bool_value(value: bool) -> Option<BoolValue> {
    Some(BoolValue { value })
}

/// "Fetch this over the ADS stream", v3, as Istio writes it. `initial_fetch_timeout: 0s`
/// disables the fetch timer: a proxy waits for the resource rather than warming without it.
pub(super) fn ads() -> Option<ConfigSource> {
    Some(ConfigSource {
        config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
            AggregatedConfigSource {},
        )),
        initial_fetch_timeout: seconds(0),
        resource_api_version: ApiVersion::V3 as i32,
        ..Default::default()
    })
}

/// A TCP socket address.
pub(super) fn socket_address(address: &str, port: u16) -> Option<core::Address> {
    Some(core::Address {
        address: Some(core::address::Address::SocketAddress(SocketAddress {
            address: address.to_string(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(port))),
            ..Default::default()
        })),
    })
}
