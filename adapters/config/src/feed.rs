//! The two models (the File registry's and the config source's, [`crate::model`]) driven by
//! named byte blobs instead of watched files, for other readers of the same Istio objects
//! (the Kubernetes API).
//!
//! A [`Feed`] holds either the File registry's model ([`Feed::entries`]: `ServiceEntry` and
//! `WorkloadEntry` into registrations, selectors across objects, repeated hosts merged) or the
//! config source's ([`Feed::config`]: `VirtualService`, `DestinationRule`, `Gateway` and
//! `Sidecar`, each validated on its own and keeping its last good version). The caller hands it
//! blobs by name with [`Feed::apply`], as the File adapter's stream hands it files, and asks
//! for the stream items with [`Feed::commit`]. Everything the models' docs and the File
//! adapter's say about files holds for blobs: a blob is read as a file is (JSON is YAML, so an
//! API object's JSON is a one-document file), names order blobs as paths order files (earlier
//! names win when entries merge a host), and the stream's health rules are the same (errors
//! are items, `Recovered` when everything works again and nothing changed, the errors still
//! outstanding again after a change).
//!
//! A blob holding one object written on one line (an API object serialized as compact JSON)
//! is named in origins by its name alone, without the `: document 1 (line 1)` a file's
//! object gets.

use std::path::PathBuf;

use wayfinder_registry::{Event, RegistryError};

use crate::health::Health;
use crate::model::{FileKey, Model};
use crate::objects::{ConfigState, VALIDATE};
use crate::services::Services;
use crate::{ConfigEvent, ConfigObject, Refusal};

/// One of the two models fed with named blobs; see the module docs.
///
/// `E` is the stream's event type: [`Event`] for [`Feed::entries`], [`ConfigEvent`] for
/// [`Feed::config`].
pub struct Feed<E> {
    model: Box<dyn Step<E>>,
    /// The model's `Recovered`.
    recovered: fn() -> E,
    /// Rewrites origins in outgoing events (see the module docs).
    tidy_event: fn(E) -> E,
    /// Whether the first `Reset` has been returned.
    started: bool,
    /// Errors of blobs applied since the last commit.
    pending: Vec<RegistryError>,
    health: Health,
}

impl Feed<Event> {
    /// The File registry's model: `ServiceEntry` and `WorkloadEntry` objects into
    /// registrations. A blob is taken whole or not at all.
    pub fn entries() -> Self {
        Self::new(Services::default(), |event| event)
    }
}

impl Feed<ConfigEvent> {
    /// The config source's model: `VirtualService`, `DestinationRule`, `Gateway` and
    /// `Sidecar` objects, validated with [`crate::validate::validate`];
    /// a rejected object keeps its last good version.
    pub fn config() -> Self {
        Self::new(ConfigState::new(VALIDATE), tidy_config_event)
    }
}

impl<E: Send + 'static> Feed<E> {
    fn new<M: Model<Event = E>>(model: M, tidy_event: fn(E) -> E) -> Self {
        Self {
            model: Box::new(model),
            recovered: M::recovered,
            tidy_event,
            started: false,
            pending: Vec::new(),
            health: Health::default(),
        }
    }

    /// Takes the new bytes of the blob `name` (`None`: it is gone) and returns its errors
    /// (parse errors, rejected objects), which the next [`Feed::commit`] also returns as
    /// items. What of the blob's previous contents stays in force is the model's rule.
    pub fn apply(&mut self, name: &str, bytes: Option<&[u8]>) -> Vec<RegistryError> {
        let key: FileKey = (0, PathBuf::from(name));
        let errors: Vec<RegistryError> = self
            .model
            .apply(&key, bytes)
            .into_iter()
            .map(tidy_error)
            .collect();
        self.health.set(name, errors.clone());
        self.pending.extend(errors.iter().cloned());
        errors
    }

    /// Composes the state after some [`Feed::apply`] calls and returns the stream items that
    /// bring the consumer up to date: the first time a `Reset` with everything, then an event
    /// per change; then the errors, or `Recovered` when the source works again and nothing
    /// changed.
    pub fn commit(&mut self) -> Vec<Result<E, RegistryError>> {
        let first = !self.started;
        self.started = true;
        let (events, composed) = self.model.commit(first);
        let composed = composed.into_iter().map(tidy_error).collect();
        let mut errors = std::mem::take(&mut self.pending);
        errors.extend(self.health.compose(composed));
        let events = events.into_iter().map(self.tidy_event).collect();
        self.health.settle(events, errors, self.recovered)
    }

    /// Reports a failure that no blob is to blame for (a watch that failed), under a name of
    /// the caller's choosing, and returns the items to send now. The failure is outstanding
    /// until [`Feed::clear`] is called with the same name.
    pub fn fail(&mut self, source: &str, error: RegistryError) -> Vec<Result<E, RegistryError>> {
        self.health.set(source, vec![error.clone()]);
        self.health.settle(Vec::new(), vec![error], self.recovered)
    }

    /// Ends the failure [`Feed::fail`] reported under `source`; the next [`Feed::commit`]
    /// says `Recovered` if nothing else is outstanding and nothing changed.
    pub fn clear(&mut self, source: &str) {
        self.health.set(source, Vec::new());
    }
}

/// A [`Model`] behind a pointer (without `recovered`, which takes no `self`).
trait Step<E>: Send {
    fn apply(&mut self, file: &FileKey, bytes: Option<&[u8]>) -> Vec<RegistryError>;
    fn commit(&mut self, first: bool) -> (Vec<E>, Vec<RegistryError>);
}

impl<M: Model> Step<M::Event> for M {
    fn apply(&mut self, file: &FileKey, bytes: Option<&[u8]>) -> Vec<RegistryError> {
        Model::apply(self, file, bytes)
    }

    fn commit(&mut self, first: bool) -> (Vec<M::Event>, Vec<RegistryError>) {
        Model::commit(self, first)
    }
}

/// Where the models place the object of a one-line, one-document blob.
const FIRST_LINE: &str = ": document 1 (line 1)";

/// An origin without [`FIRST_LINE`], or as it was.
fn tidy(text: &str) -> String {
    text.strip_suffix(FIRST_LINE).unwrap_or(text).to_string()
}

/// An error whose origin (and any origin its detail quotes, such as a duplicate's `first
/// defined at …`) is tidied.
fn tidy_error(err: RegistryError) -> RegistryError {
    let detail = |d: String| d.replace(FIRST_LINE, "");
    match err {
        RegistryError::Malformed { origin, detail: d } => RegistryError::Malformed {
            origin: tidy(&origin),
            detail: detail(d),
        },
        RegistryError::Invalid { origin, detail: d } => RegistryError::Invalid {
            origin: tidy(&origin),
            detail: detail(d),
        },
        RegistryError::Unavailable { origin, detail: d } => RegistryError::Unavailable {
            origin: tidy(&origin),
            detail: detail(d),
        },
    }
}

fn tidy_config_event(event: ConfigEvent) -> ConfigEvent {
    match event {
        ConfigEvent::Reset(objects) => {
            ConfigEvent::Reset(objects.into_iter().map(tidy_object).collect())
        }
        ConfigEvent::Upsert(object) => ConfigEvent::Upsert(tidy_object(object)),
        ConfigEvent::Batch { removes, upserts } => ConfigEvent::Batch {
            removes,
            upserts: upserts.into_iter().map(tidy_object).collect(),
        },
        ConfigEvent::Refused(list) => {
            ConfigEvent::Refused(list.into_iter().map(tidy_refusal).collect())
        }
        other => other,
    }
}

/// A refusal of a one-line blob names the blob alone, as its errors do.
fn tidy_refusal(refusal: Refusal) -> Refusal {
    if (refusal.document, refusal.line) == (Some(1), Some(1)) {
        Refusal {
            document: None,
            line: None,
            ..refusal
        }
    } else {
        refusal
    }
}

fn tidy_object(object: std::sync::Arc<ConfigObject>) -> std::sync::Arc<ConfigObject> {
    match object.meta.origin.strip_suffix(FIRST_LINE) {
        Some(origin) => {
            let mut tidied = ConfigObject::clone(&object);
            tidied.meta.origin = origin.into();
            tidied.into()
        }
        None => object,
    }
}

#[cfg(test)]
mod tests;
