//! Eureka's JSON as the adapter reads it: the `/apps` and `/apps/delta` documents, parsed
//! leniently (see the crate docs' list of quirks), and parse errors that name the field.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The document `GET /apps` and `GET /apps/delta` answer.
#[derive(Deserialize)]
struct AppsDocument {
    applications: Applications,
}

/// The registry, or a delta of it.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Applications {
    /// The reconcile hashcode of the server's whole registry (`UP_2_`).
    #[serde(rename = "apps__hashcode", default, deserialize_with = "opt_string")]
    pub(crate) hashcode: Option<String>,
    /// Applications; an object when there is one (older encoders), missing when there is none.
    #[serde(default)]
    pub(crate) application: OneOrMany<Application>,
}

/// One application (`PAYMENT`) and its instances.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Application {
    /// Upper-cased application name.
    #[serde(default, deserialize_with = "opt_string")]
    pub(crate) name: Option<String>,
    /// Its instances; an object when there is one.
    #[serde(default)]
    pub(crate) instance: OneOrMany<Instance>,
}

/// One registered instance, with the fields the adapter uses; the rest is ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Instance {
    #[serde(default, deserialize_with = "opt_string")]
    pub(crate) instance_id: Option<String>,
    #[serde(default, deserialize_with = "opt_string")]
    pub(crate) host_name: Option<String>,
    #[serde(default, deserialize_with = "opt_string")]
    pub(crate) app: Option<String>,
    #[serde(default, deserialize_with = "opt_string")]
    pub(crate) ip_addr: Option<String>,
    #[serde(default, deserialize_with = "opt_string")]
    pub(crate) status: Option<String>,
    #[serde(default, alias = "overriddenstatus", deserialize_with = "opt_string")]
    pub(crate) overridden_status: Option<String>,
    #[serde(default)]
    pub(crate) port: Option<PortInfo>,
    #[serde(default)]
    pub(crate) secure_port: Option<PortInfo>,
    #[serde(default)]
    pub(crate) data_center_info: Option<DataCenterInfo>,
    /// User metadata without Eureka's type markers (`@class`, `class: …EmptyMap`).
    #[serde(default, deserialize_with = "metadata")]
    pub(crate) metadata: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "opt_string")]
    pub(crate) vip_address: Option<String>,
    /// `ADDED`, `MODIFIED` or `DELETED` in a delta.
    #[serde(default, deserialize_with = "opt_string")]
    pub(crate) action_type: Option<String>,
}

/// `{"$": 8080, "@enabled": "true"}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub(crate) struct PortInfo {
    #[serde(rename = "$", deserialize_with = "port_number")]
    pub(crate) number: u16,
    #[serde(rename = "@enabled", default, deserialize_with = "opt_bool")]
    pub(crate) enabled: Option<bool>,
}

/// Where an instance runs: `MyOwn`, or `Amazon` with an `availability-zone`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct DataCenterInfo {
    #[serde(default, deserialize_with = "opt_string")]
    pub(crate) name: Option<String>,
    #[serde(default, deserialize_with = "metadata")]
    pub(crate) metadata: BTreeMap<String, String>,
}

impl Instance {
    /// Eureka's key of an instance within its application: `instanceId`, else `hostName`
    /// (old servers), else `ipAddr`.
    pub(crate) fn id(&self) -> &str {
        [&self.instance_id, &self.host_name, &self.ip_addr]
            .into_iter()
            .flatten()
            .find(|s| !s.is_empty())
            .map_or("", String::as_str)
    }
}

/// A list that older XStream/Jettison encoders send as a bare object when it has one element,
/// and that may be `null` or missing when it has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OneOrMany<T>(pub(crate) Vec<T>);

impl<T> Default for OneOrMany<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A visitor rather than `#[serde(untagged)]`, so that an error inside an element keeps
        // its own message (and serde_json its line and column).
        struct OneOrManyVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for OneOrManyVisitor<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array, an object or null")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(OneOrMany(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let one = T::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(OneOrMany(vec![one]))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(OneOrMany(Vec::new()))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(OneOrMany(Vec::new()))
            }
        }
        deserializer.deserialize_any(OneOrManyVisitor(PhantomData))
    }
}

/// A string that may arrive as a number or a bool; `null` is none.
fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        v @ (Value::Number(_) | Value::Bool(_)) => Ok(Some(v.to_string())),
        other => Err(de::Error::custom(format!(
            "invalid type: {}, expected a string",
            kind(&other)
        ))),
    }
}

/// `"true"`/`"false"` as Eureka sends them, or a JSON bool.
fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(b)),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
        other => Err(de::Error::custom(format!(
            "invalid @enabled {other}, expected \"true\" or \"false\""
        ))),
    }
}

/// A port number, as a JSON number or a numeric string.
fn port_number<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    let value = Value::deserialize(d)?;
    let number = match &value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    number
        .and_then(|n| u16::try_from(n).ok())
        .ok_or_else(|| de::Error::custom(format!("invalid port number {value}")))
}

/// A string map with scalar values; `@`-keys and `class: java.util.Collections$EmptyMap` (the
/// type markers of Eureka's encoders) and `null` values are dropped.
fn metadata<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let map = Option::<Map<String, Value>>::deserialize(d)?.unwrap_or_default();
    let mut out = BTreeMap::new();
    for (key, value) in map {
        let value = match value {
            Value::Null => continue,
            Value::String(s) => s,
            v @ (Value::Number(_) | Value::Bool(_)) => v.to_string(),
            other => {
                return Err(de::Error::custom(format!(
                    "metadata {key:?}: invalid type: {}, expected a string",
                    kind(&other)
                )));
            }
        };
        if key.starts_with('@') || (key == "class" && value == EMPTY_MAP) {
            continue;
        }
        out.insert(key, value);
    }
    Ok(out)
}

/// The class name Eureka's encoders put in an empty metadata map.
const EMPTY_MAP: &str = "java.util.Collections$EmptyMap";

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Parses an `/apps` or `/apps/delta` body. The error is serde_json's message (with line and
/// column), preceded by the path of the offending field when the JSON itself is well formed
/// (`applications.application[0].instance[1].port: invalid port number "abc" at line …`).
pub(crate) fn parse_applications(body: &[u8]) -> Result<Applications, String> {
    match serde_json::from_slice::<AppsDocument>(body) {
        Ok(doc) => Ok(doc.applications),
        Err(err) if err.is_data() => match locate(body) {
            Some(path) => Err(format!("{path}: {err}")),
            None => Err(err.to_string()),
        },
        Err(err) => Err(err.to_string()),
    }
}

/// The path of the first field that does not deserialize, found by trying each field of a
/// failing object on its own (every field below `applications` is optional, so a one-field
/// object fails only when that field is bad). Errors are rare; the cost does not matter.
fn locate(body: &[u8]) -> Option<String> {
    let root: Value = serde_json::from_slice(body).ok()?;
    let apps = root.get("applications")?.as_object()?;
    let (key, value) = failing_field::<Applications>(apps)?;
    let mut path = format!("applications.{key}");
    if key != "application" {
        return Some(path);
    }
    let (index, app) = failing_element::<Application>(value)?;
    path.push_str(&index);
    let (key, value) = failing_field::<Application>(app.as_object()?)?;
    path.push('.');
    path.push_str(key);
    if key != "instance" {
        return Some(path);
    }
    let (index, instance) = failing_element::<Instance>(value)?;
    path.push_str(&index);
    let (key, _) = failing_field::<Instance>(instance.as_object()?)?;
    path.push('.');
    path.push_str(key);
    Some(path)
}

fn failing_field<T: DeserializeOwned>(object: &Map<String, Value>) -> Option<(&str, &Value)> {
    object.iter().find_map(|(key, value)| {
        let alone = Map::from_iter([(key.clone(), value.clone())]);
        serde_json::from_value::<T>(Value::Object(alone))
            .is_err()
            .then_some((key.as_str(), value))
    })
}

/// The failing element of a [`OneOrMany`] value and its index (`[2]`, or nothing for a bare
/// object).
fn failing_element<T: DeserializeOwned>(value: &Value) -> Option<(String, &Value)> {
    let fails = |v: &Value| serde_json::from_value::<T>(v.clone()).is_err();
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find(|(_, v)| fails(v))
            .map(|(i, v)| (format!("[{i}]"), v)),
        Value::Object(_) if fails(value) => Some((String::new(), value)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
