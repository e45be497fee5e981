//! A `kind: List` document (`kubectl get -o yaml`): its items are read in two passes.
//!
//! The first pass reads only each item's type and line. The second deserializes the items
//! straight from the parser, each through the [`Decode`] impl for its type, so that an error
//! inside an item points at its real line; buffering items into a generic value first would
//! lose positions.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::{Decode, Decoded, One, TypeMeta, head};

/// The first pass: the type and position of every item.
#[derive(Deserialize)]
pub(super) struct ListHead {
    /// `None` for a list without items or with `items: null`.
    pub(super) items: Option<Vec<Spanned<head::Raw>>>,
}

/// The second pass over the whole list document: decodes `items`, ignores the rest
/// (`apiVersion`, `kind`, `metadata`).
pub(super) struct ListSeed<'a, T> {
    items: &'a [&'a TypeMeta],
    decoded: PhantomData<T>,
}

impl<'a, T> ListSeed<'a, T> {
    pub(super) fn new(items: &'a [&'a TypeMeta]) -> Self {
        Self {
            items,
            decoded: PhantomData,
        }
    }
}

impl<'de, T: Decode> DeserializeSeed<'de> for ListSeed<'_, T> {
    type Value = Vec<Decoded<T>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, T: Decode> Visitor<'de> for ListSeed<'_, T> {
    type Value = Vec<Decoded<T>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes List object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut objects = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                objects = map.next_value_seed(Items::<T> {
                    items: self.items,
                    decoded: PhantomData,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(objects)
    }
}

/// The `items` sequence, each element decoded according to the type found in the first pass.
struct Items<'a, T> {
    items: &'a [&'a TypeMeta],
    decoded: PhantomData<T>,
}

impl<'de, T: Decode> DeserializeSeed<'de> for Items<'_, T> {
    type Value = Vec<Decoded<T>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, T: Decode> Visitor<'de> for Items<'_, T> {
    type Value = Vec<Decoded<T>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence of Kubernetes objects")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new()) // `items: null`
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut objects = Vec::with_capacity(self.items.len());
        loop {
            let meta = self.items.get(objects.len()).copied();
            let seed = One::<T> {
                meta,
                decoded: PhantomData,
            };
            match seq.next_element_seed(seed)? {
                Some(object) => objects.push(object),
                None => return Ok(objects),
            }
        }
    }
}
