//! Reading and writing the fields of `prost-reflect` messages by name, as the patchers need:
//! a string, a nested message, a list of messages, a port.

use prost_reflect::{DynamicMessage, Value};

/// The string field `name` of `m` (empty when unset).
pub(super) fn string(m: &DynamicMessage, name: &str) -> String {
    m.get_field_by_name(name)
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// True when `m` has the field `name` set.
pub(super) fn has(m: &DynamicMessage, name: &str) -> bool {
    m.has_field_by_name(name)
}

/// The message field `name` of `m`, when set.
pub(super) fn message(m: &DynamicMessage, name: &str) -> Option<DynamicMessage> {
    if !m.has_field_by_name(name) {
        return None;
    }
    m.get_field_by_name(name)
        .and_then(|v| v.as_message().cloned())
}

/// The message field `name` of `m`, set (to its default) when it was not. `None` when `m` has
/// no such message field.
pub(super) fn message_mut<'a>(
    m: &'a mut DynamicMessage,
    name: &str,
) -> Option<&'a mut DynamicMessage> {
    m.get_field_by_name_mut(name)?.as_message_mut()
}

/// The repeated field `name` of `m`. `None` when `m` has no such field.
pub(super) fn list_mut<'a>(m: &'a mut DynamicMessage, name: &str) -> Option<&'a mut Vec<Value>> {
    m.get_field_by_name_mut(name)?.as_list_mut()
}

/// The strings of the repeated field `name` of `m`.
pub(super) fn strings(m: &DynamicMessage, name: &str) -> Vec<String> {
    m.get_field_by_name(name)
        .and_then(|v| {
            v.as_list().map(|l| {
                l.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// A listener's port (`address.socket_address.port_value`), 0 when it has none.
pub(super) fn listener_port(listener: &DynamicMessage) -> u32 {
    message(listener, "address")
        .and_then(|a| message(&a, "socket_address"))
        .and_then(|s| s.get_field_by_name("port_value").and_then(|v| v.as_u32()))
        .unwrap_or(0)
}

/// A `google.protobuf.UInt32Value` field's value.
pub(super) fn wrapped_u32(m: &DynamicMessage, name: &str) -> Option<u32> {
    message(m, name).and_then(|w| w.get_field_by_name("value").and_then(|v| v.as_u32()))
}
