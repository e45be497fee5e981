//! The registry's whole view: every good file's objects composed into registrations, and the
//! events that turn one view into the next.
//!
//! Composition runs over all files at once because a `workloadSelector` in one file selects
//! `WorkloadEntry` objects in any file. A host defined by several entries of the same
//! namespace is merged into one registration (see [`crate::model::Services`] for the rule).

use std::collections::btree_map::Entry as Slot;
use std::collections::{BTreeMap, HashSet};

use wayfinder_registry::{
    Endpoint, Event, Labels, Port, Registration, Resolution, Service, ServiceKey,
};

use crate::convert::{Entry, ObjectError, Workload};
use crate::documents::Origin;
use crate::keep::ObjectId;
use crate::model::FileKey;
use crate::services::Mapped;

/// The objects in force of one file, in document order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FileContents {
    pub(crate) entries: Vec<Entry>,
    pub(crate) workloads: Vec<Workload>,
}

impl FileContents {
    /// Adds one object.
    pub(crate) fn push(&mut self, object: Mapped) {
        match object {
            Mapped::Entry(entry) => self.entries.push(entry),
            Mapped::Workload(workload) => self.workloads.push(workload),
        }
    }

    /// The contents of `objects`, in their order.
    pub(crate) fn from_objects(objects: Vec<(ObjectId, Mapped)>) -> Self {
        let mut contents = Self::default();
        objects.into_iter().for_each(|(_, o)| contents.push(o));
        contents
    }

    /// Every object, entries first, each kind in document order.
    pub(crate) fn into_objects(self) -> Vec<(ObjectId, Mapped)> {
        let entries = self
            .entries
            .into_iter()
            .map(|e| (e.id.clone(), Mapped::Entry(e)));
        let workloads = self
            .workloads
            .into_iter()
            .map(|w| (w.id.clone(), Mapped::Workload(w)));
        entries.chain(workloads).collect()
    }
}

/// The registry's view: one normalized registration per service.
pub(crate) type View = BTreeMap<ServiceKey, Registration>;

/// Composes the view of all files, taken in precedence order.
///
/// Returns the view and the errors of registrations that failed validation once composed
/// (those services are left out). Every object was validated on its own when its file was
/// read, so this is a safety net rather than an expected outcome.
pub(crate) fn compose(
    files: &BTreeMap<FileKey, FileContents>,
) -> (View, Vec<(ServiceKey, ObjectError)>) {
    let workloads: Vec<&Workload> = files.values().flat_map(|f| &f.workloads).collect();
    let mut merged: BTreeMap<ServiceKey, Merging<'_>> = BTreeMap::new();
    for entry in files.values().flat_map(|f| &f.entries) {
        for registration in &entry.registrations {
            let selected = entry
                .selector
                .as_ref()
                .map(|selector| select(&workloads, &registration.service.namespace, selector));
            let merging = match merged.entry(registration.key()) {
                Slot::Vacant(slot) => {
                    slot.insert(Merging::new(&registration.service, &entry.origin))
                }
                Slot::Occupied(slot) => {
                    let merging = slot.into_mut();
                    merging.merge_service(&registration.service, &entry.origin);
                    merging
                }
            };
            for endpoint in registration.endpoints.iter() {
                merging.add_endpoint(endpoint, &entry.origin);
            }
            for workload in selected.into_iter().flatten() {
                merging.add_endpoint(&workload.endpoint, &workload.origin);
            }
        }
    }
    let mut view = View::new();
    let mut errors = Vec::new();
    for (key, merging) in merged {
        let registration = Registration::new(merging.service, merging.endpoints).normalized();
        match registration.validate() {
            Ok(()) => {
                view.insert(key, registration);
            }
            Err(err) => {
                let error = ObjectError {
                    origin: merging.origin.clone(),
                    object: format!("service {}", err.key),
                    field: err.field,
                    message: err.message,
                };
                errors.push((key, error));
            }
        }
    }
    (view, errors)
}

/// The event that turns `old` into `new`, if any: the changed or added services upserted and
/// the vanished ones removed, nothing for the rest. Several are one [`Event::Batch`], so that
/// a file of many entries is one change (see [`Event`]'s contract).
pub(crate) fn diff(old: &View, new: &View) -> Option<Event> {
    let upserts = new
        .iter()
        .filter(|(key, registration)| old.get(*key) != Some(*registration))
        .map(|(_, registration)| registration.clone())
        .collect();
    let removes = old
        .keys()
        .filter(|key| !new.contains_key(*key))
        .cloned()
        .collect();
    Event::changes(upserts, removes)
}

/// The WorkloadEntries of `namespace` whose labels include all of `selector`.
fn select<'a>(workloads: &[&'a Workload], namespace: &str, selector: &Labels) -> Vec<&'a Workload> {
    workloads
        .iter()
        .filter(|w| &*w.namespace == namespace)
        .filter(|w| {
            selector
                .iter()
                .all(|(k, v)| w.endpoint.labels.get(k) == Some(v))
        })
        .copied()
        .collect()
}

/// A registration being assembled from every entry that names its host.
struct Merging<'a> {
    /// The first entry's service, with the union of all entries' ports.
    service: Service,
    /// Where the first entry was read.
    origin: &'a Origin,
    /// Where each port of `service` came from, for conflicts after the first entry.
    port_origins: Vec<(u16, &'a Origin)>,
    endpoints: Vec<Endpoint>,
    seen: HashSet<Endpoint>,
}

impl<'a> Merging<'a> {
    fn new(service: &Service, origin: &'a Origin) -> Self {
        Self {
            service: service.clone(),
            origin,
            port_origins: service.ports.iter().map(|p| (p.number, origin)).collect(),
            endpoints: Vec::new(),
            seen: HashSet::new(),
        }
    }

    /// Adds the ports of a later entry for the same host; its other attributes lose to the
    /// first entry's.
    fn merge_service(&mut self, service: &Service, origin: &'a Origin) {
        for port in &service.ports {
            match self.conflict(port) {
                None => {
                    self.service.ports.push(port.clone());
                    self.port_origins.push((port.number, origin));
                }
                Some(existing) if existing == port => {}
                Some(existing) => {
                    let first = self
                        .port_origins
                        .iter()
                        .find(|(n, _)| *n == existing.number)
                        .map_or(self.origin, |(_, o)| *o);
                    tracing::warn!(
                        service = %service.key(),
                        "port {} ({}) from {origin} conflicts with port {} ({}) from {first}; keeping the first",
                        port.number, port.name, existing.number, existing.name,
                    );
                }
            }
        }
    }

    /// The port already present with the same number or name, if any.
    fn conflict(&self, port: &Port) -> Option<&Port> {
        self.service
            .ports
            .iter()
            .find(|p| p.number == port.number || p.name == port.name)
    }

    fn add_endpoint(&mut self, endpoint: &Endpoint, origin: &Origin) {
        if self.service.resolution == Resolution::ClientSideLb
            && !endpoint.network_only()
            && endpoint.ip().is_none()
        {
            tracing::warn!(
                service = %self.service.key(),
                "{origin}: endpoint {:?} is not an IP address and the service is resolved \
                 client-side (STATIC); leaving it out",
                endpoint.address,
            );
            return;
        }
        if self.seen.insert(endpoint.clone()) {
            self.endpoints.push(endpoint.clone());
        }
    }
}

#[cfg(test)]
mod tests;
