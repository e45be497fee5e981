//! Where a field of an object is in its file, for the line of a message.
//!
//! The typed objects keep only where each starts (their [`Origin`]); a message about
//! `spec.http[0].route[0].destination.host` should point at that line, as istioctl's do. So the
//! document is parsed once more, into a tree of nodes that know only their lines, and the
//! field's path is followed in it. A step that is not there (a default, a field of another
//! spelling) stops the walk: the line is then the nearest enclosing field's, at worst the
//! object's own, never a wrong one further down.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use crate::documents::{Origin, split};

/// One step of a field's path: a key of a mapping or an index of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// `spec`, `hosts`, a label's key.
    Key(Arc<str>),
    /// `[0]`.
    Index(usize),
}

/// A field's path in an object: `spec.http[0].route[0].destination.host`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Field(Vec<Step>);

impl Field {
    /// The path of `key` at the object's top level.
    pub(crate) fn at(key: &str) -> Self {
        Self::default().key(key)
    }

    /// The path one key further.
    pub(crate) fn key(mut self, key: &str) -> Self {
        self.0.push(Step::Key(key.into()));
        self
    }

    /// The path one list index further.
    pub(crate) fn index(mut self, index: usize) -> Self {
        self.0.push(Step::Index(index));
        self
    }

    /// Reads a path as validation writes it (`spec.http[0].route[0].weight`). A key holding
    /// a dot is read as two keys: the walk then stops at the nearest field that exists.
    pub(crate) fn parse(text: &str) -> Self {
        let mut field = Self::default();
        for part in text.split('.') {
            let (key, mut rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
            if !key.is_empty() {
                field = field.key(key);
            }
            while let Some((index, after)) = rest.split_once(']') {
                if let Ok(index) = index.parse() {
                    field = field.index(index);
                }
                rest = after.strip_prefix('[').unwrap_or(after);
            }
        }
        field
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(key) if i == 0 => write!(f, "{key}")?,
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// The files' texts, and the documents parsed so far (each once, however many messages it
/// has).
#[derive(Default)]
pub(crate) struct Lines {
    files: HashMap<Arc<Path>, Arc<[u8]>>,
    parsed: HashMap<(Arc<Path>, usize), Option<Spanned<Node>>>,
}

impl Lines {
    /// Keeps the bytes of the file at `path`.
    pub(crate) fn add(&mut self, path: &Path, bytes: &[u8]) {
        self.files.insert(Arc::from(path), Arc::from(bytes));
    }

    /// The line of `field` in the object that starts at `origin`: the field's, else the
    /// nearest enclosing one's, else the object's.
    pub(crate) fn line(&mut self, origin: &Origin, field: &Field) -> u64 {
        let key = (origin.path.clone(), origin.document);
        if !self.parsed.contains_key(&key) {
            let tree = self.parse(origin);
            self.parsed.insert(key.clone(), tree);
        }
        let Some(Some(tree)) = self.parsed.get(&key) else {
            return origin.line;
        };
        let Some(first_line) = self.first_line(origin) else {
            return origin.line;
        };
        // Lines in the tree count from the document's first line.
        let offset = first_line - 1;
        let Some(object) = find_map_at(tree, origin.line.saturating_sub(offset)) else {
            return origin.line;
        };
        walk(object, &field.0).referenced.line() + offset
    }

    /// The document of `origin`, parsed into lines, or `None` when it cannot be.
    fn parse(&self, origin: &Origin) -> Option<Spanned<Node>> {
        let bytes = self.files.get(&origin.path)?;
        let chunk = *chunks(&origin.path, bytes).get(origin.document.checked_sub(1)?)?;
        let text = std::str::from_utf8(chunk.bytes).ok()?;
        serde_saphyr::from_str::<Spanned<Node>>(text).ok()
    }

    fn first_line(&self, origin: &Origin) -> Option<u64> {
        let bytes = self.files.get(&origin.path)?;
        let chunks = chunks(&origin.path, bytes);
        Some(chunks.get(origin.document.checked_sub(1)?)?.first_line)
    }
}

/// The documents of a file, as [`crate::documents::parse`] numbers them.
fn chunks<'a>(path: &Path, bytes: &'a [u8]) -> Vec<split::Chunk<'a>> {
    let json = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    if json {
        split::whole(bytes)
    } else {
        split::yaml(bytes)
    }
}

/// The first mapping, in document order, that starts at `line`: the object itself, or an
/// item of a `kind: List`.
fn find_map_at(node: &Spanned<Node>, line: u64) -> Option<&Spanned<Node>> {
    match &node.value {
        Node::Map(_) if node.referenced.line() == line => Some(node),
        Node::Map(entries) => entries.iter().find_map(|(_, v)| find_map_at(v, line)),
        Node::Seq(items) => items.iter().find_map(|v| find_map_at(v, line)),
        Node::Leaf => None,
    }
}

/// Follows `steps` from `node` as far as they go.
fn walk<'a>(mut node: &'a Spanned<Node>, steps: &[Step]) -> &'a Spanned<Node> {
    for step in steps {
        let next = match (&node.value, step) {
            (Node::Map(entries), Step::Key(key)) => {
                entries.iter().find(|(k, _)| **k == **key).map(|(_, v)| v)
            }
            (Node::Seq(items), Step::Index(index)) => items.get(*index),
            _ => None,
        };
        match next {
            Some(next) => node = next,
            None => break,
        }
    }
    node
}

/// A YAML node that knows only its children and their places.
enum Node {
    Map(Vec<(String, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    Leaf,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Map(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }
}

/// A mapping's key as text (`8080` for a number); a key that is itself a collection is
/// read and kept as no key.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(Key(v.to_owned()))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Key, E> {
        Ok(Key(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
        Ok(Key(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
        Ok(Key(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Key, E> {
        Ok(Key(v.to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
        Ok(Key(String::new()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Key(String::new()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Key, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Key(String::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# a comment
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts: [reviews]
  http:
  - route:
    - destination:
        host: ratings
        subset: v9
---
apiVersion: v1
kind: List
items:
- apiVersion: networking.istio.io/v1
  kind: Gateway
  metadata:
    name: gw
  spec:
    selector:
      istio: ingress
";

    fn origin(document: usize, line: u64) -> Origin {
        Origin {
            path: Arc::from(Path::new("f.yaml")),
            document,
            line,
        }
    }

    fn lines() -> Lines {
        let mut lines = Lines::default();
        lines.add(Path::new("f.yaml"), FILE.as_bytes());
        lines
    }

    #[test]
    fn a_field_is_found_at_its_line_and_a_missing_one_at_its_nearest_parent() {
        let mut lines = lines();
        let vs = origin(1, 2);
        let route = Field::parse("spec.http[0].route[0].destination");
        assert_eq!(lines.line(&vs, &route.clone().key("host")), 11);
        assert_eq!(lines.line(&vs, &route.clone().key("subset")), 12);
        assert_eq!(lines.line(&vs, &Field::parse("metadata.name")), 5);
        assert_eq!(lines.line(&vs, &Field::parse("spec.hosts[0]")), 7);
        // No `gateways`: the nearest field that is there, `spec`'s mapping.
        assert_eq!(lines.line(&vs, &Field::parse("spec.gateways[0]")), 7);
        assert_eq!(lines.line(&vs, &Field::default()), 2);
    }

    #[test]
    fn list_items_are_found_by_their_first_line() {
        let mut lines = lines();
        let gw = origin(2, 17);
        let label = Field::at("spec").key("selector").key("istio");
        assert_eq!(lines.line(&gw, &label), 23);
        assert_eq!(lines.line(&gw, &Field::parse("metadata.name")), 20);
    }

    #[test]
    fn paths_read_as_validation_writes_them() {
        let field = Field::parse("spec.http[0].route[12].weight");
        assert_eq!(field.to_string(), "spec.http[0].route[12].weight");
        assert_eq!(Field::parse("").to_string(), "");
    }
}
