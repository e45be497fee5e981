//! The File registry's model: each file read document by document into `ServiceEntry` and
//! `WorkloadEntry` objects ([`load`]), each object keeping its last good version
//! ([`crate::keep`]), and composed into services.

use std::collections::BTreeMap;
use std::path::Path;

use wayfinder_registry::{Event, RegistryError};

use crate::FieldPath;
use crate::convert::{self, Entry, ObjectError, Workload};
use crate::documents::{self, Decode, Origin, Parsed, TypeMeta};
use crate::fields;
use crate::istio::{self, IstioObject};
use crate::keep::{self, ObjectId, Read};
use crate::model::{FileKey, Model};
use crate::security;
use crate::validate::Problem;
use crate::view::{self, FileContents, View};

/// The File registry's model: the last good contents of every file, and the services the
/// consumer has been told of. Its events follow the contract on [`Event`]: a `Reset` with
/// every good file's services, then for each change one event with the services it alters.
///
/// # Mapping
///
/// Each host of a `ServiceEntry` is one service in the entry's namespace (`default` when
/// unset) with the entry's addresses, ports, resolution (`STATIC` is client-side load
/// balancing, `NONE` passthrough), location, `exportTo`, `subjectAltNames` and metadata labels.
/// Its endpoints are its inline `endpoints`, or the `WorkloadEntry` objects of the same
/// namespace, in any file, whose `spec.labels` include its `workloadSelector.labels`,
/// or, for `DNS` and `DNS_ROUND_ROBIN` entries with neither, the host itself. A port without a
/// `protocol` takes it from its name's prefix (`http-web` is HTTP), else TCP.
///
/// # One host in several entries
///
/// When entries (in the same namespace) name the same host, they are merged into one
/// registration. Entries are ranked by their files' [`FileKey`]s (for the File registry: the
/// order of the configured paths, then file name within a directory), then by document order
/// in a file. The first entry gives the service's attributes (resolution, addresses, location,
/// labels, …); ports are the union by number, and when two entries disagree about a port
/// number or name the first wins and the conflict is logged with both origins; endpoints are
/// the union of all entries' endpoints.
#[derive(Default)]
pub struct Services {
    /// Whether a config source reads the same files and reports the documents of unknown
    /// kind that do not parse (the File adapter's `FileRegistry::beside_config_source`).
    beside_config: bool,
    /// In precedence order.
    files: BTreeMap<FileKey, FileContents>,
    view: View,
}

impl Services {
    /// An empty model. `beside_config`: a config source reads the same files, so a document
    /// that does not parse is left to it to report, unless it is a `ServiceEntry` or
    /// `WorkloadEntry` (its objects are kept all the same).
    pub fn new(beside_config: bool) -> Self {
        Self {
            beside_config,
            ..Self::default()
        }
    }
}

impl Model for Services {
    type Event = Event;

    /// Each document on its own: an object refused keeps the last good version it had in
    /// the file (see `keep`), the others take effect.
    fn apply(&mut self, file: &FileKey, bytes: Option<&[u8]>) -> Vec<RegistryError> {
        let Some(bytes) = bytes else {
            self.files.remove(file);
            return Vec::new();
        };
        let (read, mut errors) = load(&file.1, bytes);
        if self.beside_config {
            errors.retain(|(meta, _)| meta.as_ref().is_some_and(<IstioObject as Decode>::accepts));
        }
        let errors = errors.into_iter().map(|(_, err)| err).collect();
        let previous = self.files.remove(file).unwrap_or_default();
        let kept = keep::keep(previous.into_objects(), read);
        self.files
            .insert(file.clone(), FileContents::from_objects(kept));
        errors
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

/// The errors of a file's documents, each with the type of the document when it was read.
type Errors = Vec<(Option<TypeMeta>, RegistryError)>;

/// Parses, maps and validates every document of a file: what each gave, and the errors of
/// those refused. Warnings (fields Istio defines that wayfinder ignores) are logged.
pub(crate) fn load(path: &Path, bytes: &[u8]) -> (Vec<Read<Mapped>>, Errors) {
    let mut read = Vec::new();
    let mut errors = Vec::new();
    for document in documents::parse::<IstioObject>(path, bytes) {
        let parsed = match document {
            Ok(parsed) => parsed,
            Err(err) => {
                let id = err.head.as_deref().and_then(ObjectId::of);
                read.push(Read::Refused(id));
                let meta = err.head.as_ref().map(|h| h.meta.clone());
                errors.push((meta, malformed(err)));
                continue;
            }
        };
        let Some(object) = &parsed.object else {
            skip(&parsed);
            continue;
        };
        match map(&parsed.origin, object, &parsed.skipped) {
            Ok((mapped, warnings)) => {
                for warning in warnings {
                    tracing::warn!("{}: {}: {warning}", parsed.origin, mapped.id());
                }
                read.push(Read::Good(mapped.id().clone(), mapped));
            }
            Err(err) => {
                read.push(Read::Refused(Some(id_of(object))));
                errors.push((Some(parsed.meta.clone()), err.into()));
            }
        }
    }
    (read, errors)
}

/// The objects of a file every document of which is good, or its first error: for tests of
/// mapping and composition.
#[cfg(test)]
pub(crate) fn load_whole(path: &Path, bytes: &[u8]) -> Result<FileContents, RegistryError> {
    let (read, errors) = load(path, bytes);
    if let Some((_, err)) = errors.into_iter().next() {
        return Err(err);
    }
    let objects = read.into_iter().filter_map(|r| match r {
        Read::Good(id, object) => Some((id, object)),
        Read::Refused(_) => None,
    });
    Ok(FileContents::from_objects(objects.collect()))
}

/// A parse error as a stream item.
pub(crate) fn malformed(err: documents::DocumentError) -> RegistryError {
    RegistryError::Malformed {
        origin: err.origin.to_string(),
        detail: err.message,
    }
}

/// A `ServiceEntry` or `WorkloadEntry` mapped into the registry's terms.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Mapped {
    Entry(Entry),
    Workload(Workload),
}

impl Mapped {
    pub(crate) fn id(&self) -> &ObjectId {
        match self {
            Mapped::Entry(entry) => &entry.id,
            Mapped::Workload(workload) => &workload.id,
        }
    }
}

/// Maps one object, after judging the fields its types skipped; returns it with its warnings
/// (`field: message`), or says why it is refused.
pub(crate) fn map(
    origin: &Origin,
    object: &IstioObject,
    skipped: &[FieldPath],
) -> Result<(Mapped, Vec<Problem>), ObjectError> {
    let id = id_of(object);
    let problems = fields::judge(&id.kind, skipped, &[]);
    if let Some(problem) = problems.iter().find(|p| p.fatal) {
        return Err(ObjectError {
            origin: origin.clone(),
            object: id.to_string(),
            field: problem.field.clone(),
            message: problem.message.clone(),
        });
    }
    let mapped = match object {
        IstioObject::ServiceEntry(object) => Mapped::Entry(convert::service_entry(origin, object)?),
        IstioObject::WorkloadEntry(object) => {
            Mapped::Workload(convert::workload_entry(origin, object)?)
        }
    };
    Ok((mapped, problems))
}

/// Which object it is.
fn id_of(object: &IstioObject) -> ObjectId {
    let (kind, metadata) = match object {
        IstioObject::ServiceEntry(object) => ("ServiceEntry", &object.metadata),
        IstioObject::WorkloadEntry(object) => ("WorkloadEntry", &object.metadata),
    };
    ObjectId::new(kind, metadata.namespace(), &metadata.name)
}

/// Logs an object of a kind this registry does not read: quietly for the Istio kinds the
/// config source reads (or refuses: the security policies), with a warning for anything else.
fn skip(item: &Parsed<IstioObject>) {
    if istio::is_networking(&item.meta) || item.meta.group() == security::GROUP {
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    const SE: &str = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: api}\nspec:\n  hosts: [api.example.com]\n  ports: [{number: 80, name: http}]\n  resolution: DNS\n";

    #[test]
    fn beside_a_config_source_documents_of_unknown_kind_are_left_to_it() {
        let file: FileKey = (0, PathBuf::from("/cfg/mixed.yaml"));
        let text = format!(
            "kind: [unclosed\n---\n{SE}---\n{}",
            SE.replace("name: api", "name: bad")
                .replace("number: 80", "number: eighty")
        );
        let mut alone = Services::new(false);
        let errors = alone.apply(&file, Some(text.as_bytes()));
        assert_eq!(errors.len(), 2, "{errors:?}");
        let mut beside = Services::new(true);
        let errors = beside.apply(&file, Some(text.as_bytes()));
        // The ServiceEntry that does not parse is still this registry's to report.
        let [RegistryError::Malformed { origin, .. }] = &errors[..] else {
            panic!("{errors:?}")
        };
        assert!(origin.contains("document 3"), "{origin}");
        let (events, _) = beside.commit(true);
        let [Event::Reset(registrations)] = &events[..] else {
            panic!("{events:?}")
        };
        assert_eq!(registrations.len(), 1, "the good entry is served");
    }
}
