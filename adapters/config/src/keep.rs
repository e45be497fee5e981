//! The last good rule both models apply to a file read again, object by object.
//!
//! A file's documents are judged one by one. An object accepted replaces its previous version;
//! an object refused keeps the last good version it had in that file, if any, until it is
//! fixed or deleted; objects gone from the file are removed. A document that does not even
//! say which object it holds (a syntax error stops the parser before its name) could be any of
//! the file's previous objects, so while a file holds one, none of its previous objects is
//! removed: the documents around it still take effect.

use std::fmt;

use crate::documents::Head;

/// Which object a document holds: kind, namespace (`default` when unset) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjectId {
    pub(crate) kind: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl ObjectId {
    pub(crate) fn new(kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The object a document's head names, when it has a name.
    pub(crate) fn of(head: &Head) -> Option<Self> {
        let name = head.name.as_deref()?;
        let namespace = match head.namespace.as_deref() {
            None | Some("") => "default",
            Some(namespace) => namespace,
        };
        Some(Self::new(&head.meta.kind, namespace, name))
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What one document of a file read again gave.
pub(crate) enum Read<T> {
    /// An object accepted.
    Good(ObjectId, T),
    /// A document refused, and the object it holds when that could be read.
    Refused(Option<ObjectId>),
}

/// The objects of a file that stand once it is read again, in document order (previous
/// objects kept for a document that names none come last); see the module docs.
pub(crate) fn keep<T>(mut previous: Vec<(ObjectId, T)>, read: Vec<Read<T>>) -> Vec<(ObjectId, T)> {
    let mut kept: Vec<(ObjectId, T)> = Vec::new();
    let mut unnamed = false;
    for document in read {
        match document {
            Read::Good(id, object) => {
                // A later broken copy of this object must not bring the old version back.
                previous.retain(|(p, _)| *p != id);
                kept.push((id, object));
            }
            Read::Refused(Some(id)) => {
                if let Some(i) = previous.iter().position(|(p, _)| *p == id) {
                    tracing::warn!("keeping the last good version of {id}");
                    kept.push(previous.remove(i));
                }
            }
            Read::Refused(None) => unnamed = true,
        }
    }
    if unnamed {
        for (id, object) in previous {
            if !kept.iter().any(|(k, _)| *k == id) {
                tracing::warn!(
                    "keeping the last good version of {id}: a document of its file cannot be read"
                );
                kept.push((id, object));
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> ObjectId {
        ObjectId::new("VirtualService", "default", name)
    }

    fn names(kept: &[(ObjectId, u32)]) -> Vec<(&str, u32)> {
        kept.iter().map(|(id, v)| (id.name.as_str(), *v)).collect()
    }

    #[test]
    fn a_refused_object_keeps_its_last_good_version_and_the_others_change() {
        let previous = vec![(id("a"), 1), (id("b"), 1), (id("c"), 1)];
        let read = vec![
            Read::Good(id("a"), 2),
            Read::Refused(Some(id("b"))),
            Read::Refused(Some(id("new"))),
        ];
        // c is gone from the file, new has no last good version.
        assert_eq!(names(&keep(previous, read)), [("a", 2), ("b", 1)]);
    }

    #[test]
    fn a_document_without_a_name_keeps_every_previous_object_not_read_again() {
        let previous = vec![(id("a"), 1), (id("b"), 1), (id("c"), 1)];
        let read = vec![Read::Good(id("a"), 2), Read::Refused(None)];
        assert_eq!(names(&keep(previous, read)), [("a", 2), ("b", 1), ("c", 1)]);
    }

    #[test]
    fn a_broken_second_copy_does_not_bring_the_old_version_back() {
        let previous = vec![(id("a"), 1)];
        let read = vec![Read::Good(id("a"), 2), Read::Refused(Some(id("a")))];
        assert_eq!(names(&keep(previous, read)), [("a", 2)]);
    }
}
