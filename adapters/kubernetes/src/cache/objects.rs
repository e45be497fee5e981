//! The objects of one kind as a watch reports them: changes, and the atomic replacement of
//! everything when a (re)list completes.

use std::collections::HashMap;
use std::sync::Arc;

use crate::objects::{Name, NamespaceObj, NodeObj, PodObj, SliceObj, SvcObj};

/// What a watch said, its objects already slimmed. Mirrors kube's `watcher::Event`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Change<K, T> {
    /// A (re)list starts.
    Init,
    /// An object of the list.
    InitApply(K, T),
    /// The list is complete: objects not in it are gone.
    InitDone,
    /// An object was added or changed.
    Apply(K, T),
    /// An object was deleted.
    Delete(K),
}

/// A change of any of the five kinds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AnyChange {
    /// Services.
    Service(Change<Name, SvcObj>),
    /// EndpointSlices.
    Slice(Change<Name, SliceObj>),
    /// Pods.
    Pod(Change<Name, PodObj>),
    /// Nodes.
    Node(Change<Arc<str>, NodeObj>),
    /// Namespaces.
    Namespace(Change<Arc<str>, NamespaceObj>),
}

/// Objects of one kind, with the buffer of a list in progress.
pub(crate) struct Objects<K, T> {
    /// The objects in force.
    pub(crate) live: HashMap<K, T>,
    /// The list in progress.
    listing: Option<HashMap<K, T>>,
    /// Whether a list completed once.
    pub(crate) synced: bool,
}

impl<K, T> Default for Objects<K, T> {
    fn default() -> Self {
        Self {
            live: HashMap::new(),
            listing: None,
            synced: false,
        }
    }
}

/// What one change did to a kind's objects.
pub(crate) enum Applied<K, T> {
    /// Nothing visible yet (a list in progress) or nothing changed.
    Nothing,
    /// One object: before and after.
    One(K, Option<T>, Option<T>),
    /// A list completed and replaced everything.
    Replaced,
}

impl<K: std::hash::Hash + Eq + Clone, T: PartialEq> Objects<K, T> {
    /// Applies one change; a list's objects replace the kind's when it completes.
    pub(crate) fn apply(&mut self, change: Change<K, T>) -> Applied<K, T> {
        match change {
            Change::Init => {
                self.listing = Some(HashMap::new());
                Applied::Nothing
            }
            Change::InitApply(key, obj) => {
                self.listing.get_or_insert_default().insert(key, obj);
                Applied::Nothing
            }
            Change::InitDone => {
                self.live = self.listing.take().unwrap_or_default();
                self.synced = true;
                Applied::Replaced
            }
            Change::Apply(key, obj) => {
                if self.live.get(&key) == Some(&obj) {
                    return Applied::Nothing;
                }
                let old = self.live.insert(key.clone(), obj);
                Applied::One(key, old, None)
            }
            Change::Delete(key) => match self.live.remove(&key) {
                Some(old) => Applied::One(key, Some(old), None),
                None => Applied::Nothing,
            },
        }
    }
}
