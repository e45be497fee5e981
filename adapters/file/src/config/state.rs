//! The config source's model: the last good version of every object, per file, and the
//! events that tell the consumer what changed.
//!
//! Unlike the File registry, which takes a file whole or not at all, objects here stand on
//! their own: a `VirtualService` that one edit breaks should not take the file's other routes
//! back to their state of an hour ago, and a valid one should not wait for its neighbour to be
//! fixed. A file that does not parse at all gives no object to judge, so it keeps everything.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::Arc;

use wayfinder_registry::RegistryError;
use wayfinder_registry::config::{ConfigEvent, ConfigKey, ConfigObject};

use super::decode::{self, Item, Judged, Validator};
use crate::documents::Origin;
use crate::runner::{FileKey, Model};
use crate::services::malformed;

/// An object in force, and where it was read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Located {
    pub(crate) origin: Origin,
    pub(crate) object: Arc<ConfigObject>,
}

/// A second object with a key already taken.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Duplicate {
    /// Where the second object is.
    pub(crate) origin: Origin,
    pub(crate) key: ConfigKey,
    /// Where the object that wins is.
    pub(crate) first: Origin,
}

impl Duplicate {
    pub(crate) fn message(&self) -> String {
        format!("duplicate {}, first defined at {}", self.key, self.first)
    }
}

impl From<Duplicate> for RegistryError {
    fn from(dup: Duplicate) -> Self {
        RegistryError::Invalid {
            origin: dup.origin.to_string(),
            detail: dup.message(),
        }
    }
}

/// The objects the consumer has been told of.
pub(crate) type View = BTreeMap<ConfigKey, Arc<ConfigObject>>;

/// The last good objects of every file, and what the consumer has been told.
pub(crate) struct ConfigState {
    validator: Validator,
    /// Objects in force, per file in precedence order, each in document order.
    files: BTreeMap<FileKey, Vec<Located>>,
    view: View,
}

impl ConfigState {
    pub(crate) fn new(validator: Validator) -> Self {
        Self {
            validator,
            files: BTreeMap::new(),
            view: View::new(),
        }
    }
}

impl Model for ConfigState {
    type Event = ConfigEvent;

    fn apply(&mut self, file: &FileKey, bytes: Option<&[u8]>) -> Vec<RegistryError> {
        let Some(bytes) = bytes else {
            self.files.remove(file);
            return Vec::new();
        };
        let items = match decode::read(&file.1, bytes, self.validator) {
            Ok(items) => items,
            // Nothing to judge object by object: everything the file had stays.
            Err(err) => return vec![malformed(err)],
        };
        let mut previous = self.files.remove(file).unwrap_or_default();
        let mut kept = Vec::new();
        let mut errors = Vec::new();
        for item in items {
            match item {
                Item::Object(judged) => errors.extend(keep(judged, &mut previous, &mut kept)),
                Item::Registry => {}
                Item::Unknown { origin, meta } => {
                    tracing::warn!("{origin}: {}", decode::unknown_kind(&meta));
                }
            }
        }
        self.files.insert(file.clone(), kept);
        errors
    }

    fn commit(&mut self, first: bool) -> (Vec<ConfigEvent>, Vec<RegistryError>) {
        let (view, duplicates) = compose(self.files.values().flatten());
        let events = if first {
            vec![ConfigEvent::Reset(view.values().cloned().collect())]
        } else {
            diff(&self.view, &view)
        };
        // The new objects are kept even when unchanged in content, so that the next event
        // about one carries where it is now.
        self.view = view;
        (events, duplicates.into_iter().map(Into::into).collect())
    }

    fn recovered() -> ConfigEvent {
        ConfigEvent::Recovered
    }
}

/// The objects in force, the first of each key winning (in the order given: precedence of
/// files, then document order), and the others as duplicates.
pub(crate) fn compose<'a>(
    objects: impl IntoIterator<Item = &'a Located>,
) -> (View, Vec<Duplicate>) {
    let mut view = View::new();
    let mut first: BTreeMap<ConfigKey, &Origin> = BTreeMap::new();
    let mut duplicates = Vec::new();
    for located in objects {
        let key = located.object.key();
        match first.entry(key) {
            Entry::Vacant(slot) => {
                view.insert(slot.key().clone(), located.object.clone());
                slot.insert(&located.origin);
            }
            Entry::Occupied(slot) => duplicates.push(Duplicate {
                origin: located.origin.clone(),
                key: slot.key().clone(),
                first: (*slot.get()).clone(),
            }),
        }
    }
    (view, duplicates)
}

/// The events that turn `old` into `new`: an `Upsert` per object added or changed in content,
/// a `Remove` per object gone.
///
/// Where in a file an object was read is not content: inserting a document at the top of a
/// file moves every object below it, and announcing each as changed would make the consumer
/// rebuild configuration that is the same in every respect proxies see. An object that moved
/// to another file is announced again, so that debug pages and messages name the file it is
/// in now.
fn diff(old: &View, new: &View) -> Vec<ConfigEvent> {
    let upserts = new
        .iter()
        .filter(|(key, object)| {
            old.get(*key).is_none_or(|old| {
                !same_content(old, object)
                    || file_of(&old.meta.origin) != file_of(&object.meta.origin)
            })
        })
        .map(|(_, object)| ConfigEvent::Upsert(object.clone()));
    let removes = old
        .keys()
        .filter(|key| !new.contains_key(*key))
        .map(|key| ConfigEvent::Remove(key.clone()));
    upserts.chain(removes).collect()
}

/// The file part of an origin (`path: document N (line L)`).
fn file_of(origin: &str) -> &str {
    origin
        .rsplit_once(": document ")
        .map_or(origin, |(path, _)| path)
}

/// Equal in everything but where they were read.
pub(crate) fn same_content(a: &ConfigObject, b: &ConfigObject) -> bool {
    a.spec == b.spec
        && a.meta.name == b.meta.name
        && a.meta.namespace == b.meta.namespace
        && a.meta.labels == b.meta.labels
        && a.meta.annotations == b.meta.annotations
}

/// Decides what stands for one object of a file read again: the object when it is accepted,
/// else its last good version from the file's `previous` objects, if any. Returns why it was
/// rejected.
fn keep(
    judged: Judged,
    previous: &mut Vec<Located>,
    kept: &mut Vec<Located>,
) -> Option<RegistryError> {
    log_warnings(&judged);
    let key = judged.object.key();
    let Some(err) = judged.rejection() else {
        // A later broken copy of this key in the file must not bring back the old version.
        previous.retain(|p| p.object.key() != key);
        kept.push(Located {
            origin: judged.origin,
            object: judged.object,
        });
        return None;
    };
    if let Some(i) = previous.iter().position(|p| p.object.key() == key) {
        tracing::warn!("{err}; keeping the last good version of {key}");
        kept.push(previous.remove(i));
    }
    Some(err)
}

fn log_warnings(judged: &Judged) {
    for problem in judged.warnings() {
        tracing::warn!(
            "{}: {}: {}: {}",
            judged.origin,
            judged.object.key(),
            problem.field,
            problem.message
        );
    }
}
