//! Kubernetes-style objects in YAML and JSON files: splitting a file into documents and
//! deserializing each into a typed object, with errors that say where.
//!
//! A file holds documents; a document holds one object, or a `kind: List` of objects in its
//! `items` (what `kubectl get -o yaml` writes). YAML files may hold several documents separated
//! by `---` lines; a `.json` file is one document (JSON is read by the YAML parser, of which it
//! is a subset). Each object is dispatched on its `apiVersion` and `kind` through a [`Decode`]
//! implementation, which either deserializes it or declines it (the caller decides whether a
//! declined kind is worth a log line).
//!
//! Every object and every error carries an [`Origin`]: the path, the 1-based number of the
//! document in the file (empty documents are not counted) and the line, counted from the start
//! of the file, not of the document.
//!
//! Start with [`parse`].

mod list;
mod split;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::de::{DeserializeSeed, IgnoredAny};
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

/// The type of an object: its `apiVersion` (`networking.istio.io/v1`) and `kind`
/// (`ServiceEntry`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TypeMeta {
    /// Group and version, `group/version`, or just `version` for the core group (`v1`).
    pub api_version: String,
    /// Kind of the object, e.g. `ServiceEntry`.
    pub kind: String,
}

impl TypeMeta {
    /// The API group: `networking.istio.io` for `networking.istio.io/v1`, empty for `v1`.
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// The API version: `v1` for `networking.istio.io/v1`.
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version.as_str(), |(_, version)| version)
    }

    /// True for a Kubernetes `kind: List` wrapper (`apiVersion: v1`).
    fn is_list(&self) -> bool {
        self.api_version == "v1" && self.kind == "List"
    }
}

impl fmt::Display for TypeMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.kind, self.api_version)
    }
}

/// Where an object or an error is in a file. Displayed as `path: document N (line L)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The file.
    pub path: Arc<Path>,
    /// Number of the document in the file, from 1; empty documents are not counted.
    pub document: usize,
    /// Line in the file, from 1 (the first line of the object, or the line of the error).
    pub line: u64,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: document {} (line {})",
            self.path.display(),
            self.document,
            self.line
        )
    }
}

/// A document that could not be parsed or deserialized: where, and the parser's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct DocumentError {
    /// Where the parser stopped.
    pub origin: Origin,
    /// What the parser said (it names unknown fields and wrong types).
    pub message: String,
}

/// The set of object types a caller reads, and how to deserialize each.
///
/// Implement it on an enum with one variant per kind. [`parse`] reads each object's type
/// first, asks [`Decode::accepts`], and only then deserializes the object through
/// [`Decode::decode`] with the real deserializer, so errors point at the right line.
pub trait Decode: Sized {
    /// Whether objects of this type are read; declined objects are returned without a value.
    fn accepts(meta: &TypeMeta) -> bool;

    /// Deserializes one object of an accepted type. `deserializer` is positioned on the whole
    /// object (including its `apiVersion` and `kind`).
    fn decode<'de, D: Deserializer<'de>>(
        meta: &TypeMeta,
        deserializer: D,
    ) -> Result<Self, D::Error>;
}

/// One object found in a file.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed<T> {
    /// Where the object starts.
    pub origin: Origin,
    /// Its type.
    pub meta: TypeMeta,
    /// The object, or `None` when [`Decode::accepts`] declined its type.
    pub object: Option<T>,
}

/// Reads every object of a file, in file order (list items in list order).
///
/// `path` names the file in origins and chooses the format: `.json` is one JSON document,
/// anything else is YAML with any number of documents. The first document that fails to
/// parse or deserialize fails the whole file.
pub fn parse<T: Decode>(path: &Path, bytes: &[u8]) -> Result<Vec<Parsed<T>>, DocumentError> {
    let path: Arc<Path> = Arc::from(path);
    let json = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => return Err(utf8_error(path, bytes, json, err.valid_up_to())),
    };
    let chunks = if json {
        split::whole(text)
    } else {
        split::yaml(text)
    };
    let mut out = Vec::new();
    for (index, chunk) in chunks.iter().enumerate() {
        let document = Document {
            path: &path,
            number: index + 1,
            chunk,
        };
        document.parse_into(&mut out)?;
    }
    Ok(out)
}

/// One document of a file being parsed.
struct Document<'a> {
    path: &'a Arc<Path>,
    number: usize,
    chunk: &'a split::Chunk<'a>,
}

impl Document<'_> {
    fn parse_into<T: Decode>(&self, out: &mut Vec<Parsed<T>>) -> Result<(), DocumentError> {
        let head = self.run(|de| Option::<Spanned<TypeMeta>>::deserialize(de))?;
        let Some(head) = head else {
            return Ok(()); // a null document, such as `~`
        };
        let origin = self.origin(head.referenced.line());
        let meta = head.value;
        if meta.is_list() {
            return self.parse_list(out);
        }
        let object = if T::accepts(&meta) {
            self.run(|de| One::<T>::new(&meta).deserialize(de))?
        } else {
            None
        };
        out.push(Parsed {
            origin,
            meta,
            object,
        });
        Ok(())
    }

    /// A `kind: List`: first the items' types and lines, then the items themselves.
    fn parse_list<T: Decode>(&self, out: &mut Vec<Parsed<T>>) -> Result<(), DocumentError> {
        let heads = self
            .run(|de| list::ListHead::deserialize(de))?
            .items
            .unwrap_or_default();
        let objects = self.run(|de| list::ListSeed::<T>::new(&heads).deserialize(de))?;
        for (head, object) in heads.into_iter().zip(objects) {
            out.push(Parsed {
                origin: self.origin(head.referenced.line()),
                meta: head.value,
                object,
            });
        }
        Ok(())
    }

    /// Runs a deserialization over this document, mapping errors to file positions.
    fn run<R>(
        &self,
        f: impl FnOnce(serde_saphyr::Deserializer<'_, '_>) -> Result<R, serde_saphyr::Error>,
    ) -> Result<R, DocumentError> {
        serde_saphyr::with_deserializer_from_str(self.chunk.text, f).map_err(|err| {
            let offset = self.chunk.first_line - 1;
            let line = err
                .location()
                .map_or(self.chunk.first_line, |l| l.line() + offset);
            let message = err.render_with_options(serde_saphyr::render_options! {
                snippets: serde_saphyr::SnippetMode::Off,
                line_offset: offset,
            });
            DocumentError {
                origin: self.origin_at_line(line),
                message,
            }
        })
    }

    /// The origin of something at `line` of the document (1 is its first line).
    fn origin(&self, line: u64) -> Origin {
        let line = if line == 0 { 1 } else { line };
        self.origin_at_line(line + self.chunk.first_line - 1)
    }

    fn origin_at_line(&self, line: u64) -> Origin {
        Origin {
            path: self.path.clone(),
            document: self.number,
            line,
        }
    }
}

/// Deserializes one object if its type is accepted, and skips it otherwise.
struct One<'a, T> {
    meta: Option<&'a TypeMeta>,
    decoded: std::marker::PhantomData<T>,
}

impl<'a, T> One<'a, T> {
    fn new(meta: &'a TypeMeta) -> Self {
        Self {
            meta: Some(meta),
            decoded: std::marker::PhantomData,
        }
    }
}

impl<'de, T: Decode> DeserializeSeed<'de> for One<'_, T> {
    type Value = Option<T>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        match self.meta {
            Some(meta) if T::accepts(meta) => T::decode(meta, deserializer).map(Some),
            _ => IgnoredAny::deserialize(deserializer).map(|_| None),
        }
    }
}

fn utf8_error(path: Arc<Path>, bytes: &[u8], json: bool, valid_up_to: usize) -> DocumentError {
    let valid = bytes.get(..valid_up_to).unwrap_or_default();
    let line = 1 + valid.iter().filter(|b| **b == b'\n').count() as u64;
    // The prefix before the bad byte is valid UTF-8, so its documents can be counted.
    let documents = match std::str::from_utf8(valid) {
        Ok(prefix) if !json => split::yaml(prefix).len(),
        _ => 1,
    };
    DocumentError {
        origin: Origin {
            path,
            document: documents.max(1),
            line,
        },
        message: "the file is not valid UTF-8".into(),
    }
}

#[cfg(test)]
mod tests;
