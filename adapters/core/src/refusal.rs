//! What a source refuses, object by object.

use std::sync::Arc;

use serde::Serialize;

#[cfg(doc)]
use crate::Event;

/// A document or object a source refuses, and why: an entry of [`Event::Refused`]. The
/// configuration sources send them (`/debug/configz` shows them); what the source could not
/// tell (the kind of a document that does not parse) is `None`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The file (or the name of the API object) it is in.
    pub file: Arc<str>,
    /// Number of the document in the file, from 1.
    pub document: Option<usize>,
    /// Line in the file where the document or the error is, from 1.
    pub line: Option<u64>,
    /// Its `kind` (`VirtualService`, `AuthorizationPolicy`).
    pub kind: Option<Arc<str>>,
    /// Its namespace.
    pub namespace: Option<Arc<str>>,
    /// Its name.
    pub name: Option<Arc<str>>,
    /// Why it is refused.
    pub error: String,
}
