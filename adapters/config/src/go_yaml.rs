//! Where YAML 1.2, which wayfinder's parser follows, reads Istio's files differently from
//! go-yaml, which `kubectl` and istiod use: a plain scalar in a flow collection that ends in
//! `:` before `,`, `]` or `}` (an IPv6 address such as `addresses: [1.2.3.4, 2001:db8::]`).
//! YAML 1.2 reads its last `:` as a key's indicator, so the entry is a one-pair mapping
//! (`{"2001:db8:": null}`); go-yaml ends a plain scalar at `:` only before a space, so the entry
//! is the string `2001:db8::`. Istio's own test data holds such an entry, and users' files do.
//!
//! [`strings`] reads a list of strings as go-yaml does: an entry that is a one-pair mapping
//! with no value is its key and the `:`. go-yaml would refuse any other mapping where a string
//! goes, and so does this. It is used on the string lists of Istio's types that hold addresses.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, MapAccess, SeqAccess, Visitor};

/// Reads a list of strings, each a string or the one-pair mapping YAML 1.2 makes of a flow
/// scalar ending in `:` (see the module docs).
pub(crate) fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(Strings)
}

struct Strings;

impl<'de> Visitor<'de> for Strings {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(GoString(s)) = seq.next_element()? {
            out.push(s);
        }
        Ok(out)
    }
}

/// One entry of [`strings`].
struct GoString(String);

impl<'de> de::Deserialize<'de> for GoString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(GoStringVisitor).map(GoString)
    }
}

struct GoStringVisitor;

impl<'de> Visitor<'de> for GoStringVisitor {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        let unexpected = || de::Error::invalid_type(de::Unexpected::Map, &"a string");
        let Some(key) = map.next_key::<String>()? else {
            return Err(unexpected());
        };
        let value: Option<de::IgnoredAny> = map.next_value::<Option<de::IgnoredAny>>()?;
        if value.is_some() || map.next_key::<de::IgnoredAny>()?.is_some() {
            return Err(unexpected());
        }
        Ok(format!("{key}:"))
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize)]
    struct Entry {
        #[serde(deserialize_with = "super::strings")]
        addresses: Vec<String>,
    }

    #[test]
    fn a_flow_scalar_ending_in_a_colon_is_the_string_go_yaml_reads() {
        let e: Entry =
            serde_saphyr::from_str("addresses: [1.2.3.4, 001:db8::, '2001:db8::', x:]").unwrap();
        assert_eq!(e.addresses, ["1.2.3.4", "001:db8::", "2001:db8::", "x:"]);
        let block: Entry =
            serde_saphyr::from_str("addresses:\n- 10.0.0.1\n- \"fe80::\"\n").unwrap();
        assert_eq!(block.addresses, ["10.0.0.1", "fe80::"]);
    }

    #[test]
    fn other_mappings_are_refused_as_go_yaml_refuses_them() {
        for yaml in [
            "addresses: [a: b]",
            "addresses: [{a: , b: }]",
            "addresses: x",
        ] {
            assert!(serde_saphyr::from_str::<Entry>(yaml).is_err(), "{yaml}");
        }
    }
}
