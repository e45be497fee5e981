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
//! Documents stand on their own. The file is split at `---` lines before anything is parsed
//! (YAML allows such a line nowhere inside a document), so a syntax error, bytes that are not
//! UTF-8 or a field of the wrong type cost only the document they are in; what could be read
//! of it (its [`Head`]) goes with its error, so that a caller can keep the last good version of
//! the object it was. Fields a decoder skips are listed with each object
//! ([`Parsed::skipped`]) for the caller to judge: wayfinder's readers accept, with a warning,
//! the fields Istio's CRDs define and refuse the others
//! ([`crate::istio_defines`]).
//!
//! Start with [`parse`].

mod head;
mod list;
pub(crate) mod split;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::de::{DeserializeSeed, IgnoredAny};
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

use crate::{FieldPath, Step};

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
    pub(crate) fn is_list(&self) -> bool {
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

/// A document that could not be parsed or deserialized: where, the parser's message, and
/// what could be read of the object it holds, so that the object it was keeps its last good
/// version.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct DocumentError {
    /// Where the parser stopped.
    pub origin: Origin,
    /// What the parser said (it names unknown fields and wrong types).
    pub message: String,
    /// The document's type, name and namespace, when they could be read (not after a syntax
    /// error, which stops the parser before anything is read). Boxed: errors travel in
    /// `Result`s, which should stay small.
    pub head: Option<Box<Head>>,
}

/// What a document says it is, read leniently before the object itself: its type and, when
/// they are strings, `metadata.name` and `metadata.namespace`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// Its type.
    pub meta: TypeMeta,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`, as written (`None` when absent).
    pub namespace: Option<String>,
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
    /// object (including its `apiVersion` and `kind`). Fields the implementation skips are
    /// reported in [`Parsed::skipped`]; its types should skip what they do not model rather
    /// than refuse it, so that the caller can tell a field Istio defines from a typo.
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
    /// `metadata.name`, when it is a string (also of a declined object).
    pub name: Option<String>,
    /// `metadata.namespace`, when it is a string.
    pub namespace: Option<String>,
    /// The object, or `None` when [`Decode::accepts`] declined its type.
    pub object: Option<T>,
    /// The fields of the object that [`Decode::decode`] skipped, in document order, e.g.
    /// `spec.http[0].retries.retryBudget`.
    pub skipped: Vec<FieldPath>,
}

/// An object as decoded, with the fields its decoder skipped; `None` when declined.
type Decoded<T> = Option<(T, Vec<FieldPath>)>;

impl<T> Parsed<T> {
    fn new(origin: Origin, head: Head, decoded: Decoded<T>) -> Self {
        let (object, skipped) = decoded.unzip();
        Self {
            origin,
            meta: head.meta,
            name: head.name,
            namespace: head.namespace,
            object,
            skipped: skipped.unwrap_or_default(),
        }
    }

    /// What the object's head said: type, name, namespace.
    pub fn head(&self) -> Head {
        Head {
            meta: self.meta.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

/// What a document gave: one object (a `kind: List` gives one per item), or why it gave none.
pub type Outcome<T> = Result<Parsed<T>, DocumentError>;

/// Reads every object of a file, in file order (list items in list order).
///
/// `path` names the file in origins and chooses the format: `.json` is one JSON document,
/// anything else is YAML with any number of documents. Each document stands on its own: one
/// that fails to parse (a syntax error, bytes that are not UTF-8, a wrong type) is one error
/// in the result, and the documents around it are read as usual. A `kind: List` document is
/// one unit: an error in one of its items is the error of the whole list.
pub fn parse<T: Decode>(path: &Path, bytes: &[u8]) -> Vec<Outcome<T>> {
    let path: Arc<Path> = Arc::from(path);
    let json = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    let chunks = if json {
        split::whole(bytes)
    } else {
        split::yaml(bytes)
    };
    let mut out = Vec::new();
    for (index, chunk) in chunks.iter().enumerate() {
        let document = Document {
            path: &path,
            number: index + 1,
            chunk,
        };
        document.parse_into(&mut out);
    }
    out
}

/// One document of a file being parsed.
struct Document<'a> {
    path: &'a Arc<Path>,
    number: usize,
    chunk: &'a split::Chunk<'a>,
}

impl Document<'_> {
    fn parse_into<T: Decode>(&self, out: &mut Vec<Outcome<T>>) {
        let text = match std::str::from_utf8(self.chunk.bytes) {
            Ok(text) => text,
            Err(err) => return out.push(Err(self.utf8_error(err.valid_up_to()))),
        };
        let head = match self.run(text, |de| Option::<Spanned<head::Raw>>::deserialize(de)) {
            Ok(Some(head)) => head,
            Ok(None) => return, // a null document, such as `~`
            Err(err) => return out.push(Err(err)),
        };
        let origin = self.origin(head.referenced.line());
        let head = match head.value.into_head() {
            Ok(head) => head,
            Err(message) => return out.push(Err(self.error(origin, message, None))),
        };
        if head.meta.is_list() {
            return self.parse_list(text, head, out);
        }
        if !T::accepts(&head.meta) {
            return out.push(Ok(Parsed::new(origin, head, None)));
        }
        let decoded = self.run(text, |de| One::<T>::new(&head.meta).deserialize(de));
        out.push(match decoded {
            Ok(decoded) => Ok(Parsed::new(origin, head, decoded)),
            Err(err) => Err(DocumentError {
                head: Some(Box::new(head)),
                ..err
            }),
        });
    }

    /// A `kind: List`: first the items' types and lines, then the items themselves.
    fn parse_list<T: Decode>(&self, text: &str, list: Head, out: &mut Vec<Outcome<T>>) {
        let heads = match self.run(text, |de| list::ListHead::deserialize(de)) {
            Ok(heads) => heads.items.unwrap_or_default(),
            Err(err) => {
                return out.push(Err(DocumentError {
                    head: Some(Box::new(list)),
                    ..err
                }));
            }
        };
        let mut items = Vec::with_capacity(heads.len());
        for item in heads {
            let line = item.referenced.line();
            match item.value.into_head() {
                Ok(head) => items.push((line, head)),
                Err(message) => {
                    let err = self.error(self.origin(line), message, Some(list));
                    return out.push(Err(err));
                }
            }
        }
        let metas: Vec<&TypeMeta> = items.iter().map(|(_, head)| &head.meta).collect();
        match self.run(text, |de| list::ListSeed::<T>::new(&metas).deserialize(de)) {
            Ok(objects) => {
                for ((line, head), decoded) in items.into_iter().zip(objects) {
                    out.push(Ok(Parsed::new(self.origin(line), head, decoded)));
                }
            }
            Err(err) => out.push(Err(DocumentError {
                head: Some(Box::new(list)),
                ..err
            })),
        }
    }

    /// Runs a deserialization over this document, mapping errors to file positions.
    fn run<R>(
        &self,
        text: &str,
        f: impl FnOnce(serde_saphyr::Deserializer<'_, '_>) -> Result<R, serde_saphyr::Error>,
    ) -> Result<R, DocumentError> {
        serde_saphyr::with_deserializer_from_str(text, f).map_err(|err| {
            let offset = self.chunk.first_line - 1;
            let line = err
                .location()
                .map_or(self.chunk.first_line, |l| l.line() + offset);
            let message = err.render_with_options(serde_saphyr::render_options! {
                snippets: serde_saphyr::SnippetMode::Off,
                line_offset: offset,
            });
            self.error(self.origin_at_line(line), message, None)
        })
    }

    fn error(&self, origin: Origin, message: String, head: Option<Head>) -> DocumentError {
        DocumentError {
            origin,
            message,
            head: head.map(Box::new),
        }
    }

    /// The document holds bytes that are not UTF-8: the error names the line of the first.
    fn utf8_error(&self, valid_up_to: usize) -> DocumentError {
        let valid = self.chunk.bytes.get(..valid_up_to).unwrap_or_default();
        let line = self.chunk.first_line + valid.iter().filter(|b| **b == b'\n').count() as u64;
        let message = "the document is not valid UTF-8".to_string();
        self.error(self.origin_at_line(line), message, None)
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

/// Deserializes one object if its type is accepted, and skips it otherwise; an accepted
/// object comes with the paths of the fields its decoder skipped.
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
    type Value = Decoded<T>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        match self.meta {
            Some(meta) if T::accepts(meta) => {
                let mut skipped = Vec::new();
                let mut skip = |path: serde_ignored::Path<'_>| skipped.push(field_path(&path));
                let tracked = serde_ignored::Deserializer::new(deserializer, &mut skip);
                let object = T::decode(meta, tracked)?;
                Ok(Some((object, skipped)))
            }
            _ => IgnoredAny::deserialize(deserializer).map(|_| None),
        }
    }
}

/// A path as `serde_ignored` gives it, as steps from the object's root.
pub(crate) fn field_path(path: &serde_ignored::Path<'_>) -> FieldPath {
    fn walk(path: &serde_ignored::Path<'_>, steps: &mut Vec<Step>) {
        use serde_ignored::Path as P;
        match path {
            P::Root => {}
            P::Seq { parent, index } => {
                walk(parent, steps);
                steps.push(Step::Index(*index));
            }
            P::Map { parent, key } => {
                walk(parent, steps);
                steps.push(Step::Key(key.clone()));
            }
            P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
                walk(parent, steps);
            }
        }
    }
    let mut steps = Vec::new();
    walk(path, &mut steps);
    FieldPath(steps)
}

#[cfg(test)]
mod tests;
