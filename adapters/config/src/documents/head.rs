//! The head of a document, read before the object: its type and, if they can be read, its
//! name and namespace. Everything else is skipped, and a name that is not a string is as good
//! as no name, so that the head of a broken object still says which object it is.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Head, TypeMeta};

/// A document's head as written.
#[derive(Deserialize)]
pub(super) struct Raw {
    #[serde(rename = "apiVersion", default)]
    api_version: Option<Text>,
    #[serde(default)]
    kind: Option<Text>,
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    name: Option<Text>,
    #[serde(default)]
    namespace: Option<Text>,
}

impl Raw {
    /// The head, or why the document has no type.
    pub(super) fn into_head(self) -> Result<Head, String> {
        let text = |t: Option<Text>| t.and_then(|t| t.0);
        let (name, namespace) = self
            .metadata
            .map_or((None, None), |m| (text(m.name), text(m.namespace)));
        let missing = |field| format!("missing field `{field}`: every object needs a type");
        let api_version = text(self.api_version).ok_or_else(|| missing("apiVersion"))?;
        let kind = text(self.kind).ok_or_else(|| missing("kind"))?;
        Ok(Head {
            meta: TypeMeta { api_version, kind },
            name,
            namespace,
        })
    }
}

/// A string, or `None` for any other value (which is skipped).
struct Text(Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E>(self, v: &str) -> Result<Text, E> {
        Ok(Text(Some(v.to_string())))
    }

    fn visit_string<E>(self, v: String) -> Result<Text, E> {
        Ok(Text(Some(v)))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_unit<E>(self) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_none<E>(self) -> Result<Text, E> {
        Ok(Text(None))
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Text, D::Error> {
        de.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Text(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Text(None))
    }
}
