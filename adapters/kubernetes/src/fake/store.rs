//! Storage of one kind: its objects as serialized JSON keyed by (namespace, name), and the
//! history of changes that watches replay and that consistent list pages are read through.
//!
//! Every object is kept as the bytes of its JSON without `apiVersion` and `kind` (so one copy
//! serves every version of a kind): answers splice those two fields in front instead of
//! serializing objects again. The history keeps, for each change, the object before it, so
//! the state at an older resourceVersion is the current map with the changes since undone.

use std::cmp::Ordering;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use axum::body::Bytes;

/// `(namespace, name)`; the namespace is `""` for cluster-scoped kinds.
pub(super) type Key = (String, String);

/// An object's labels.
pub(super) type Labels = BTreeMap<String, String>;

/// Changes kept per kind before the oldest half is dropped (compacted) on its own.
const HISTORY: usize = 1 << 20;

/// One version of an object.
#[derive(Clone, Debug)]
pub(super) struct Stored {
    /// The object's JSON without `apiVersion` and `kind`: `{"metadata":…}`.
    pub(super) json: Bytes,
    /// Its labels, for selectors.
    pub(super) labels: Arc<Labels>,
    /// Its `metadata.resourceVersion`.
    pub(super) rv: u64,
}

/// What a change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ChangeType {
    /// Created.
    Added,
    /// Replaced.
    Modified,
    /// Removed; the object is its last state with the deletion's resourceVersion.
    Deleted,
}

impl ChangeType {
    /// The watch event type.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One write, as history.
#[derive(Debug)]
pub(super) struct Change {
    /// The resourceVersion of the write.
    pub(super) rv: u64,
    /// The object written.
    pub(super) key: Key,
    /// What it did.
    pub(super) kind: ChangeType,
    /// The object after the write (for a delete: its last state at the deletion's version).
    pub(super) object: Stored,
    /// The object before the write.
    pub(super) prev: Option<Stored>,
}

/// The objects of one kind and their recent history.
#[derive(Debug, Default)]
pub(super) struct Store {
    /// Current objects.
    pub(super) objects: BTreeMap<Key, Stored>,
    /// Changes, oldest first, every one newer than `compacted`.
    log: VecDeque<Arc<Change>>,
    /// History at or below this resourceVersion is gone: older versions get 410.
    pub(super) compacted: u64,
}

impl Store {
    /// Applies a change to the objects and appends it to the history.
    pub(super) fn record(&mut self, change: Change) {
        match change.kind {
            ChangeType::Deleted => {
                self.objects.remove(&change.key);
            }
            ChangeType::Added | ChangeType::Modified => {
                self.objects
                    .insert(change.key.clone(), change.object.clone());
            }
        }
        self.log.push_back(Arc::new(change));
        if self.log.len() > HISTORY {
            let last_dropped = self.log[HISTORY / 2 - 1].rv;
            self.log.drain(..HISTORY / 2);
            self.compacted = self.compacted.max(last_dropped);
        }
    }

    /// Forgets the history up to `rv`.
    pub(super) fn compact(&mut self, rv: u64) {
        self.log.clear();
        self.compacted = self.compacted.max(rv);
    }

    /// Up to `max` changes newer than `after`, oldest first; `Err(compacted)` when history
    /// that old is gone.
    pub(super) fn changes_after(&self, after: u64, max: usize) -> Result<Vec<Arc<Change>>, u64> {
        if after < self.compacted {
            return Err(self.compacted);
        }
        let start = self.log.partition_point(|c| c.rv <= after);
        Ok(self.log.range(start..).take(max).cloned().collect())
    }

    /// The objects as they were at resourceVersion `at` (not newer than the current one);
    /// `Err(compacted)` when history that old is gone.
    pub(super) fn at(&self, at: u64) -> Result<Snapshot<'_>, u64> {
        if at < self.compacted {
            return Err(self.compacted);
        }
        let start = self.log.partition_point(|c| c.rv <= at);
        let mut undo = BTreeMap::new();
        for change in self.log.range(start..) {
            undo.entry(change.key.clone())
                .or_insert_with(|| change.prev.clone());
        }
        Ok(Snapshot {
            objects: &self.objects,
            undo,
        })
    }
}

/// The objects of a kind at some resourceVersion.
pub(super) struct Snapshot<'a> {
    objects: &'a BTreeMap<Key, Stored>,
    /// The state then of every key changed since (`None`: it did not exist).
    undo: BTreeMap<Key, Option<Stored>>,
}

impl Snapshot<'_> {
    /// The objects from `start` on, in key order.
    pub(super) fn range(&self, start: Bound<Key>) -> impl Iterator<Item = (&Key, &Stored)> {
        let mut now = self
            .objects
            .range((start.clone(), Bound::Unbounded))
            .peekable();
        let mut then = self.undo.range((start, Bound::Unbounded)).peekable();
        std::iter::from_fn(move || {
            loop {
                let order = match (now.peek(), then.peek()) {
                    (None, None) => return None,
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (Some((a, _)), Some((b, _))) => a.cmp(b),
                };
                let next = match order {
                    Ordering::Less => now.next().map(|(k, v)| (k, Some(v))),
                    Ordering::Greater => then.next().map(|(k, v)| (k, v.as_ref())),
                    Ordering::Equal => {
                        now.next();
                        then.next().map(|(k, v)| (k, v.as_ref()))
                    }
                };
                if let Some((key, Some(stored))) = next {
                    return Some((key, stored));
                }
            }
        })
    }
}

impl Stored {
    /// Appends the object's JSON with `apiVersion` and `kind` spliced in front, without
    /// parsing or serializing it again.
    pub(super) fn write_typed(&self, api_version: &str, kind: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"apiVersion\":\"");
        out.extend_from_slice(api_version.as_bytes());
        out.extend_from_slice(b"\",\"kind\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.push(b'"');
        let rest = self.json.get(1..).unwrap_or(b"}");
        if rest != b"}" {
            out.push(b',');
        }
        out.extend_from_slice(rest);
    }
}
