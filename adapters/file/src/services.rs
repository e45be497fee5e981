//! The File registry's model: each file read whole into `ServiceEntry` and `WorkloadEntry`
//! objects ([`load`]), kept per file as its last good contents, and composed into services.

use std::collections::BTreeMap;
use std::path::Path;

use wayfinder_registry::{Event, RegistryError};

use crate::convert::{self, ObjectError};
use crate::documents::{self, Origin, Parsed};
use crate::istio::{self, IstioObject};
use crate::runner::{FileKey, Model};
use crate::view::{self, FileContents, View};

/// The last good contents of every file, and the services the consumer has been told of.
#[derive(Default)]
pub(crate) struct Services {
    /// In precedence order.
    files: BTreeMap<FileKey, FileContents>,
    view: View,
}

impl Model for Services {
    type Event = Event;

    /// A file is taken whole or not at all: on any error its previous contents stay.
    fn apply(&mut self, file: &FileKey, bytes: Option<&[u8]>) -> Vec<RegistryError> {
        let Some(bytes) = bytes else {
            self.files.remove(file);
            return Vec::new();
        };
        match load(&file.1, bytes) {
            Ok(contents) => {
                self.files.insert(file.clone(), contents);
                Vec::new()
            }
            Err(err) => vec![err],
        }
    }

    fn commit(&mut self, first: bool) -> (Vec<Event>, Vec<RegistryError>) {
        let (view, invalid) = view::compose(&self.files);
        let events = if first {
            vec![Event::Reset(view.values().cloned().collect())]
        } else {
            view::diff(&self.view, &view).into_iter().collect()
        };
        self.view = view;
        let errors = invalid.into_iter().map(|(_, err)| err.into()).collect();
        (events, errors)
    }

    fn recovered() -> Event {
        Event::Recovered
    }
}

/// Parses, maps and validates one file; any failure rejects the whole file.
pub(crate) fn load(path: &Path, bytes: &[u8]) -> Result<FileContents, RegistryError> {
    let parsed = documents::parse::<IstioObject>(path, bytes).map_err(malformed)?;
    let mut contents = FileContents::default();
    for item in &parsed {
        match &item.object {
            Some(object) => add(&mut contents, &item.origin, object)?,
            None => skip(item),
        }
    }
    Ok(contents)
}

/// A parse error as a stream item.
pub(crate) fn malformed(err: documents::DocumentError) -> RegistryError {
    RegistryError::Malformed {
        origin: err.origin.to_string(),
        detail: err.message,
    }
}

/// Maps one object into `contents`, or says why it is refused.
pub(crate) fn add(
    contents: &mut FileContents,
    origin: &Origin,
    object: &IstioObject,
) -> Result<(), ObjectError> {
    match object {
        IstioObject::ServiceEntry(object) => {
            contents
                .entries
                .push(convert::service_entry(origin, object)?);
        }
        IstioObject::WorkloadEntry(object) => {
            contents
                .workloads
                .push(convert::workload_entry(origin, object)?);
        }
    }
    Ok(())
}

/// Logs an object of a kind this registry does not read: quietly for the Istio kinds the
/// config source reads, with a warning for anything else.
fn skip(item: &Parsed<IstioObject>) {
    if istio::is_networking(&item.meta) {
        tracing::debug!(
            "{}: skipping {}: read by the config source",
            item.origin,
            item.meta
        );
    } else {
        tracing::warn!(
            "{}: skipping {}: the file registry reads only ServiceEntry and WorkloadEntry of \
             {}/{{{}}}",
            item.origin,
            item.meta,
            istio::GROUP,
            istio::VERSIONS.join(","),
        );
    }
}
