//! Encoded resources: each generated once per snapshot and shared by every proxy.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use prost::{Message, Name};
use xxhash_rust::xxh3::Xxh3;

use crate::xds::pb::discovery::Resource as DeltaResource;
use crate::xds::pb::protobuf::Any;

/// A content version: a 64-bit hash of encoded bytes, printed as 16 hex digits.
///
/// Because it depends only on content, two servers (or one server after a restart) give the
/// same version to the same content and never the same version to different content (short of
/// a hash collision), as the xDS protocol asks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(pub u64);

impl Version {
    /// The version of one encoded resource.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(xxhash_rust::xxh3::xxh3_64(bytes))
    }

    /// The version of a set of resources: a hash over their names and versions in name order.
    pub fn of_set<'a>(resources: impl IntoIterator<Item = &'a Resource>) -> Self {
        let mut hasher = Xxh3::new();
        for r in resources {
            hasher.update(r.name.as_bytes());
            hasher.update(&[0]);
            hasher.update(&r.version.0.to_le_bytes());
        }
        Self(hasher.digest())
    }
}

impl Version {
    /// Reads a version as [`fmt::Display`] writes it (16 hex digits); anything else is `None`,
    /// a version that is not one of ours.
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != 16 {
            return None;
        }
        u64::from_str_radix(text, 16).ok().map(Self)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// One xDS resource, encoded: its name, its content version and the `Any` that carries it,
/// encoded too. Responses are written from these bytes as they are (see `ads/wire.rs`): every
/// proxy that receives a resource is sent the same shared bytes.
#[derive(Clone)]
pub struct Resource {
    /// Resource name (a cluster, listener or route configuration name).
    pub name: Arc<str>,
    /// Hash of the encoded bytes.
    pub version: Version,
    /// The `Any` holding the message, encoded.
    encoded: Bytes,
    /// A delta `Resource` message's fields other than the `Any` (name and version), encoded
    /// on first use and shared by every delta stream that sends this resource.
    delta_head: OnceLock<Bytes>,
}

/// Its name, version and size: the bytes may be a gateway's private key (SDS).
impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resource")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("bytes", &self.encoded.len())
            .finish()
    }
}

impl PartialEq for Resource {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.version == other.version && self.encoded == other.encoded
    }
}

impl Resource {
    /// Encodes a message. The only place wayfinder serializes a resource.
    pub fn encode<M: Message + Name>(name: impl Into<Arc<str>>, message: &M) -> Self {
        let value = message.encode_to_vec();
        let version = Version::of_bytes(&value);
        Self::from_any(
            name.into(),
            version,
            &Any {
                type_url: M::type_url(),
                value,
            },
        )
    }

    /// Encodes a message that may hold a protobuf map with several entries, whose bytes vary
    /// with map order: its version is computed from a canonical walk of its content instead
    /// (see `canonical.rs`).
    pub fn encode_unordered<M: Message + Name>(name: impl Into<Arc<str>>, message: &M) -> Self {
        let any = Any {
            type_url: M::type_url(),
            value: message.encode_to_vec(),
        };
        let version =
            crate::xds::canonical::version(&any).unwrap_or_else(|| Version::of_bytes(&any.value));
        Self::from_any(name.into(), version, &any)
    }

    /// Encodes a message read and changed through its descriptor (an EnvoyFilter's patch):
    /// its version from a canonical walk of its content, as its maps may encode in any order.
    pub(crate) fn encode_dynamic(
        name: impl Into<Arc<str>>,
        message: &prost_reflect::DynamicMessage,
    ) -> Self {
        let any = Any {
            type_url: format!(
                "type.googleapis.com/{}",
                prost_reflect::ReflectMessage::descriptor(message).full_name()
            ),
            value: message.encode_to_vec(),
        };
        let version =
            crate::xds::canonical::version(&any).unwrap_or_else(|| Version::of_bytes(&any.value));
        Self::from_any(name.into(), version, &any)
    }

    fn from_any(name: Arc<str>, version: Version, any: &Any) -> Self {
        Self {
            name,
            version,
            encoded: Bytes::from(any.encode_to_vec()),
            delta_head: OnceLock::new(),
        }
    }

    /// The fields of a delta `Resource` message other than the resource itself: its name and
    /// version, encoded once.
    pub fn delta_head(&self) -> &Bytes {
        self.delta_head.get_or_init(|| {
            let head = DeltaResource {
                name: self.name.to_string(),
                version: self.version.to_string(),
                ..Default::default()
            };
            Bytes::from(head.encode_to_vec())
        })
    }

    /// The `Any` holding the message (a copy, for debug pages and tests).
    pub fn any(&self) -> Any {
        // These bytes were encoded from an `Any` by `from_any`, so they decode.
        Any::decode(self.encoded.clone()).unwrap_or_default()
    }

    /// The `Any` holding the message, encoded: what responses carry.
    pub fn encoded(&self) -> &Bytes {
        &self.encoded
    }
}

/// The resources of one type a proxy may receive, by name. A map, so a response can never
/// carry one name twice.
pub type ResourceSet = BTreeMap<Arc<str>, Arc<Resource>>;

/// Adds an encoded resource to a set.
pub(crate) fn insert(set: &mut ResourceSet, resource: Resource) {
    set.insert(resource.name.clone(), Arc::new(resource));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::pb::cluster::Cluster;

    #[test]
    fn versions_read_back_what_they_write_and_nothing_else() {
        let v = Version(0x0123_4567_89ab_cdef);
        assert_eq!(Version::parse(&v.to_string()), Some(v));
        assert_eq!(Version::parse("1"), None);
        assert_eq!(Version::parse("not-a-version-xx"), None);
    }

    #[test]
    fn equal_content_gets_equal_versions() {
        let a = Resource::encode(
            "a",
            &Cluster {
                name: "a".into(),
                ..Default::default()
            },
        );
        let b = Resource::encode(
            "a",
            &Cluster {
                name: "a".into(),
                ..Default::default()
            },
        );
        let c = Resource::encode(
            "c",
            &Cluster {
                name: "c".into(),
                ..Default::default()
            },
        );
        assert_eq!(a.version, b.version);
        assert_ne!(a.version, c.version);
        assert_eq!(a.version.to_string().len(), 16);
        assert_ne!(Version::of_set([&a]), Version::of_set([&a, &c]));
    }
}
