//! The config source's model: the last good version of every object, per file, and the
//! events that tell the consumer what changed.
//!
//! Objects stand on their own ([`crate::keep`]): a `VirtualService` that one edit breaks
//! should not take the file's other routes back to their state of an hour ago, and a valid one
//! should not wait for its neighbour to be fixed. What is refused now, per file, is kept too,
//! and sent as [`ConfigEvent::Refused`] whenever it changes.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::Arc;

use wayfinder_registry::RegistryError;

use super::decode::{self, Item, Judged, Validator};
use crate::documents::Origin;
use crate::keep::{self, ObjectId, Read};
use crate::model::{FileKey, Model};
use crate::security;
use crate::{ConfigEvent, ConfigKey, ConfigObject, Refusal};

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

    /// The entry of the source's refused list.
    fn refusal(&self) -> Refusal {
        Refusal {
            file: Arc::from(self.origin.path.display().to_string()),
            document: Some(self.origin.document),
            line: Some(self.origin.line),
            kind: Some(Arc::from(self.key.kind.name())),
            namespace: Some(self.key.namespace.clone()),
            name: Some(self.key.name.clone()),
            error: format!("invalid: {}", self.message()),
        }
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

/// The config source's model: the last good objects of every file, and what the consumer
/// has been told. Each object is judged on its own (decoded, its skipped fields judged
/// against Istio's CRDs, checked by the validator); a refused one keeps the last good version
/// it had in its file. Its events follow the contract on [`ConfigEvent`], with what is
/// refused sent as [`ConfigEvent::Refused`] whenever that changes.
pub struct ConfigState {
    validator: Validator,
    /// Objects in force, per file in precedence order, each in document order.
    files: BTreeMap<FileKey, Vec<Located>>,
    /// What each file's documents had refused when it was last read.
    refused: BTreeMap<FileKey, Vec<Refusal>>,
    view: View,
    /// The refused list the consumer was last sent.
    told: Vec<Refusal>,
}

impl ConfigState {
    /// An empty model whose objects are checked by `validator` (the real sources:
    /// [`crate::validate::validate`]).
    pub fn new(validator: Validator) -> Self {
        Self {
            validator,
            files: BTreeMap::new(),
            refused: BTreeMap::new(),
            view: View::new(),
            told: Vec::new(),
        }
    }

    /// Everything refused now, by file and document.
    fn refusals(&self, duplicates: &[Duplicate]) -> Vec<Refusal> {
        let files = self.refused.values().flatten().cloned();
        let mut all: Vec<Refusal> = files
            .chain(duplicates.iter().map(Duplicate::refusal))
            .collect();
        all.sort_by(|a, b| (&a.file, a.document, a.line).cmp(&(&b.file, b.document, b.line)));
        all
    }
}

impl Model for ConfigState {
    type Event = ConfigEvent;

    fn apply(&mut self, file: &FileKey, bytes: Option<&[u8]>) -> Vec<RegistryError> {
        let Some(bytes) = bytes else {
            self.files.remove(file);
            self.refused.remove(file);
            return Vec::new();
        };
        let mut read = Vec::new();
        let mut refused = Vec::new();
        let mut errors = Vec::new();
        for item in decode::read(&file.1, bytes, self.validator) {
            match item {
                Item::Object(judged) => {
                    log_warnings(&judged);
                    let id = id_of(&judged.object);
                    match (judged.rejection(), judged.refusal()) {
                        (Some(err), Some(refusal)) => {
                            read.push(Read::Refused(Some(id)));
                            refused.push(refusal);
                            errors.push(err);
                        }
                        _ => read.push(Read::Good(
                            id,
                            Located {
                                origin: judged.origin,
                                object: judged.object,
                            },
                        )),
                    }
                }
                Item::Registry => {}
                Item::Unknown { origin, meta } => {
                    tracing::warn!("{origin}: {}", decode::unknown_kind(&meta));
                }
                Item::Refused(rejected) => {
                    if rejected
                        .head
                        .as_ref()
                        .is_some_and(|h| security::is_policy(&h.meta))
                    {
                        tracing::error!("{}", rejected.error);
                    }
                    read.push(Read::Refused(rejected.id()));
                    refused.push(rejected.refusal());
                    errors.push(rejected.error);
                }
            }
        }
        let previous = self.files.remove(file).unwrap_or_default();
        let previous = previous
            .into_iter()
            .map(|l| (id_of(&l.object), l))
            .collect();
        let kept = keep::keep(previous, read);
        self.files
            .insert(file.clone(), kept.into_iter().map(|(_, l)| l).collect());
        if refused.is_empty() {
            self.refused.remove(file);
        } else {
            self.refused.insert(file.clone(), refused);
        }
        errors
    }

    fn commit(&mut self, first: bool) -> (Vec<ConfigEvent>, Vec<RegistryError>) {
        let (view, duplicates) = compose(self.files.values().flatten());
        let mut events = if first {
            vec![ConfigEvent::Reset(view.values().cloned().collect())]
        } else {
            diff(&self.view, &view)
        };
        // The new objects are kept even when unchanged in content, so that the next event
        // about one carries where it is now.
        self.view = view;
        let refused = self.refusals(&duplicates);
        if refused != self.told {
            events.push(ConfigEvent::Refused(refused.clone()));
            self.told = refused;
        }
        (events, duplicates.into_iter().map(Into::into).collect())
    }

    fn recovered() -> ConfigEvent {
        ConfigEvent::Recovered
    }
}

/// Which object a config object is, in the terms of [`crate::keep`].
fn id_of(object: &ConfigObject) -> ObjectId {
    ObjectId::new(
        object.kind().name(),
        &object.meta.namespace,
        &object.meta.name,
    )
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

/// Equal in everything but where they were read (warnings included: a field Istio defines
/// and wayfinder ignores is in no spec, and adding one should show on debug pages).
pub(crate) fn same_content(a: &ConfigObject, b: &ConfigObject) -> bool {
    a.spec == b.spec
        && a.meta.warnings == b.meta.warnings
        && a.meta.name == b.meta.name
        && a.meta.namespace == b.meta.namespace
        && a.meta.labels == b.meta.labels
        && a.meta.annotations == b.meta.annotations
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
