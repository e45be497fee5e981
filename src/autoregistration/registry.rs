//! The `AutoRegistration` registry: the File model over every file with the entries handed
//! in as blobs, reporting only the entries' endpoints (see the parent module's docs).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use wayfinder_file::FileRegistry;
use wayfinder_registry::{
    CancellationToken, Endpoint, Event, EventStream, Registration, RegistryId, ServiceKey, Source,
};

use super::Handle;

/// The endpoints the registry reports: each entry's address and ports, by blob name.
pub type Marks = Arc<Mutex<HashMap<String, (String, BTreeMap<String, u16>)>>>;

/// The `AutoRegistration` registry: see the module docs.
pub struct AutoRegistry {
    files: FileRegistry,
    marks: Marks,
}

/// The `AutoRegistration` registry over `files` (a File registry with the id
/// [`REGISTRY`](super::REGISTRY) over every file), and the handle entries go through.
pub fn registry(files: FileRegistry) -> (AutoRegistry, Handle) {
    let (files, blobs) = files.with_blobs();
    let marks = Marks::default();
    (
        AutoRegistry {
            files,
            marks: marks.clone(),
        },
        Handle::Files { blobs, marks },
    )
}

impl Source<Registration> for AutoRegistry {
    fn id(&self) -> &RegistryId {
        self.files.id()
    }

    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream {
        let marks = self.marks;
        let mut reported = HashSet::new();
        Box::new(self.files)
            .watch(shutdown)
            .filter_map(move |item| {
                let event = item
                    .ok()
                    .and_then(|e| only_entries(e, &marks, &mut reported));
                std::future::ready(event.map(Ok))
            })
            .boxed()
    }
}

/// `event` with only the entries' endpoints, and services without any left out (removed
/// when they were reported before); `None` when nothing is left. Refusals and recoveries are
/// the files' own registries' to report.
fn only_entries(event: Event, marks: &Marks, reported: &mut HashSet<ServiceKey>) -> Option<Event> {
    let marks = marks.lock().unwrap_or_else(PoisonError::into_inner);
    let keep = |r: Registration| -> Option<Registration> {
        let endpoints: Vec<Endpoint> = r
            .endpoints
            .iter()
            .filter(|e| {
                marks.values().any(|(address, ports)| {
                    *e.address == **address
                        && e.ports.len() == ports.len()
                        && e.ports.iter().all(|(n, p)| ports.get(&**n) == Some(p))
                })
            })
            .cloned()
            .collect();
        (!endpoints.is_empty()).then(|| Registration {
            service: r.service.clone(),
            endpoints: endpoints.into(),
        })
    };
    let mut upserts = Vec::new();
    let mut removes = Vec::new();
    let (mut changed, mut gone) = (Vec::new(), Vec::new());
    match event {
        Event::Reset(all) => {
            reported.clear();
            for r in all {
                if let Some(r) = keep(r) {
                    reported.insert(r.key());
                    upserts.push(r);
                }
            }
            return Some(Event::Reset(upserts));
        }
        Event::Upsert(r) => changed.push(r),
        Event::Remove(key) => gone.push(key),
        Event::Batch {
            removes: keys,
            upserts: registrations,
        } => {
            gone = keys;
            changed = registrations;
        }
        Event::Refused(_) | Event::Recovered => return None,
    }
    for key in gone {
        if reported.remove(&key) {
            removes.push(key);
        }
    }
    for r in changed {
        let key = r.key();
        match keep(r) {
            Some(r) => {
                reported.insert(key);
                upserts.push(r);
            }
            None if reported.remove(&key) => removes.push(key),
            None => {}
        }
    }
    Event::changes(upserts, removes)
}

#[cfg(test)]
mod tests {
    use wayfinder_registry::Service;

    use super::*;

    fn reg(host: &str, endpoints: &[(&str, u16)]) -> Registration {
        Registration::new(
            Service::new(host, "default"),
            endpoints
                .iter()
                .map(|(a, p)| Endpoint::new(*a).with_port("http", *p))
                .collect(),
        )
    }

    fn marks(entries: &[(&str, u16)]) -> Marks {
        let marks = Marks::default();
        for (i, (a, p)) in entries.iter().enumerate() {
            marks.lock().unwrap().insert(
                format!("blob-{i}"),
                (a.to_string(), [("http".to_string(), *p)].into()),
            );
        }
        marks
    }

    fn hosts(event: &Event) -> Vec<String> {
        match event {
            Event::Reset(all) => all
                .iter()
                .map(|r| format!("{}={}", r.service.hostname, r.endpoints.len()))
                .collect(),
            Event::Upsert(r) => vec![format!("+{}={}", r.service.hostname, r.endpoints.len())],
            Event::Remove(k) => vec![format!("-{}", k.hostname)],
            Event::Batch { removes, upserts } => removes
                .iter()
                .map(|k| format!("-{}", k.hostname))
                .chain(
                    upserts
                        .iter()
                        .map(|r| format!("+{}={}", r.service.hostname, r.endpoints.len())),
                )
                .collect(),
            other => vec![format!("{other:?}")],
        }
    }

    #[test]
    fn only_the_entries_endpoints_are_reported_and_emptied_services_removed() {
        let m = marks(&[("10.0.0.7", 9080)]);
        let mut reported = HashSet::new();
        // The files' own endpoint (same address, another port) is left out, and so is a
        // service without an entry.
        let reset = Event::Reset(vec![
            reg("vm.example", &[("10.0.0.7", 9080), ("10.0.0.7", 7000)]),
            reg("other.example", &[("10.0.0.9", 9080)]),
        ]);
        let out = only_entries(reset, &m, &mut reported).unwrap();
        assert_eq!(hosts(&out), ["vm.example=1"]);
        // A change that leaves a reported service without entries removes it; one of a
        // service never reported says nothing.
        let out = only_entries(
            Event::Upsert(reg("vm.example", &[("10.0.0.7", 7000)])),
            &m,
            &mut reported,
        );
        assert_eq!(hosts(&out.unwrap()), ["-vm.example"]);
        assert!(
            only_entries(Event::Upsert(reg("other.example", &[])), &m, &mut reported).is_none()
        );
        assert!(
            only_entries(
                Event::Remove(reg("other.example", &[]).key()),
                &m,
                &mut reported
            )
            .is_none()
        );
        // Health events of the files are not this registry's.
        assert!(only_entries(Event::Recovered, &m, &mut reported).is_none());
        let batch = Event::Batch {
            removes: vec![reg("gone.example", &[]).key()],
            upserts: vec![reg("vm.example", &[("10.0.0.7", 9080)])],
        };
        assert_eq!(
            hosts(&only_entries(batch, &m, &mut reported).unwrap()),
            ["+vm.example=1"]
        );
    }
}
