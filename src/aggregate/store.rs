//! Each registry's current contribution, and what an event changes in it.

use std::collections::BTreeMap;

use serde::Serialize;
use wayfinder_registry::{Registration, RegistryError, RegistryId, ServiceKey};

use super::source::{Applied, Contents};
use crate::snapshot::Holds;

/// What one event did to one service of one registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Position of the registry in `--registries` order.
    pub registry: usize,
    /// The service.
    pub key: ServiceKey,
    /// What kind of change.
    pub kind: ChangeKind,
}

/// How a service (or a configuration object) changed. The distinction lets later stages do
/// less work for the commonest change, an endpoint coming or going.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// The registry did not have the service before.
    Added,
    /// The service definition changed (and perhaps its endpoints).
    Updated,
    /// Only the endpoints changed; the definition is identical (services only).
    EndpointsOnly,
    /// The registry no longer has the service.
    Removed,
}

/// One registry's services as the aggregate holds them: only registrations that passed
/// validation. A registration that fails leaves the service's previous good state in place.
/// The registrations' [`Contents`] of a [`Store`](super::source::Store).
pub(crate) struct Services {
    /// Position of the registry in `--registries` order, for [`Change::registry`].
    index: usize,
    pub(crate) services: BTreeMap<ServiceKey, Registration>,
    /// The endpoints of `services`, counted as they change: the status is published after
    /// every item, and summing them each time made an ingest of N services cost O(N²).
    pub(crate) endpoints: usize,
}

impl Services {
    pub(crate) fn new(index: usize) -> Self {
        Self {
            index,
            services: BTreeMap::new(),
            endpoints: 0,
        }
    }

    fn change(&self, key: ServiceKey, kind: ChangeKind) -> Change {
        Change {
            registry: self.index,
            key,
            kind,
        }
    }
}

impl Contents for Services {
    type Item = Registration;
    type Change = Change;

    fn reset(
        &mut self,
        id: &RegistryId,
        registrations: Vec<Registration>,
        applied: &mut Applied<Self>,
    ) {
        let mut next = BTreeMap::new();
        for reg in registrations {
            let key = reg.key();
            match check(id, reg) {
                Ok(reg) => {
                    next.insert(key, reg);
                }
                Err(err) => {
                    applied.refused.push(err);
                    if let Some(old) = self.services.get(&key) {
                        next.insert(key, old.clone());
                    }
                }
            }
        }
        for key in self.services.keys().filter(|k| !next.contains_key(*k)) {
            applied
                .changes
                .push(self.change(key.clone(), ChangeKind::Removed));
        }
        for (key, reg) in &next {
            if let Some(kind) = classify(self.services.get(key), reg) {
                applied.changes.push(self.change(key.clone(), kind));
            }
        }
        self.services = next;
        self.endpoints = self.services.values().map(|r| r.endpoints.len()).sum();
    }

    fn upsert(&mut self, id: &RegistryId, reg: Registration, applied: &mut Applied<Self>) {
        let reg = match check(id, reg) {
            Ok(reg) => reg,
            Err(err) => return applied.refused.push(err),
        };
        let key = reg.key();
        if let Some(kind) = classify(self.services.get(&key), &reg) {
            self.endpoints += reg.endpoints.len();
            if let Some(old) = self.services.insert(key.clone(), reg) {
                self.endpoints -= old.endpoints.len();
            }
            applied.changes.push(self.change(key, kind));
        }
    }

    fn remove(&mut self, key: ServiceKey, applied: &mut Applied<Self>) {
        if let Some(old) = self.services.remove(&key) {
            self.endpoints -= old.endpoints.len();
            applied.changes.push(self.change(key, ChangeKind::Removed));
        }
    }

    fn holds(&self) -> Holds {
        Holds::Services {
            services: self.services.len(),
            endpoints: self.endpoints,
        }
    }
}

fn check(id: &RegistryId, reg: Registration) -> Result<Registration, RegistryError> {
    match reg.validate() {
        Ok(()) => Ok(reg.normalized()),
        Err(err) => Err(RegistryError::Invalid {
            origin: format!("registry {id}"),
            detail: err.to_string(),
        }),
    }
}

fn classify(old: Option<&Registration>, new: &Registration) -> Option<ChangeKind> {
    match old {
        None => Some(ChangeKind::Added),
        Some(old) if old == new => None,
        Some(old) if old.service == new.service => Some(ChangeKind::EndpointsOnly),
        Some(_) => Some(ChangeKind::Updated),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::source::Store;
    use crate::snapshot::Health;
    use wayfinder_registry::Event;
    use wayfinder_registry::{Endpoint, Protocol, Service};

    fn reg(host: &str, port: u16, ips: &[&str]) -> Registration {
        let svc = Service::new(host, "default").with_port("http", port, Protocol::Http);
        Registration::new(svc, ips.iter().map(|ip| Endpoint::new(*ip)).collect())
    }

    fn kinds(changes: &[Change]) -> Vec<(&str, ChangeKind)> {
        changes.iter().map(|c| (&*c.key.hostname, c.kind)).collect()
    }

    #[test]
    fn classifies_changes_and_ignores_repeats() {
        let mut store = Store::new(RegistryId::new("Mock"), Services::new(0));
        let (c, _) = store.apply(Event::Reset(vec![
            reg("a", 80, &["10.0.0.1"]),
            reg("b", 80, &[]),
        ]));
        assert_eq!(
            kinds(&c),
            [("a", ChangeKind::Added), ("b", ChangeKind::Added)]
        );
        assert!(store.state.synced);

        let (c, _) = store.apply(Event::Upsert(reg("a", 80, &["10.0.0.1"])));
        assert!(c.is_empty(), "an identical upsert changes nothing");
        let (c, _) = store.apply(Event::Upsert(reg("a", 80, &["10.0.0.2", "10.0.0.1"])));
        assert_eq!(kinds(&c), [("a", ChangeKind::EndpointsOnly)]);
        let (c, _) = store.apply(Event::Upsert(reg("a", 81, &["10.0.0.2", "10.0.0.1"])));
        assert_eq!(kinds(&c), [("a", ChangeKind::Updated)]);

        let (c, _) = store.apply(Event::Reset(vec![reg("a", 81, &["10.0.0.1", "10.0.0.2"])]));
        assert_eq!(
            kinds(&c),
            [("b", ChangeKind::Removed)],
            "a Reset diffs against the old state"
        );
        let (c, _) = store.apply(Event::Remove(ServiceKey::new("default", "zzz")));
        assert!(c.is_empty());
    }

    #[test]
    fn a_batch_is_removes_then_upserts_and_endpoints_are_counted() {
        let mut store = Store::new(RegistryId::new("File"), Services::new(0));
        store.apply(Event::Reset(vec![
            reg("a", 80, &["10.0.0.1"]),
            reg("b", 80, &["10.0.0.2"]),
        ]));
        assert_eq!(store.contents.endpoints, 2);
        let (c, refused) = store.apply(Event::Batch {
            removes: vec![
                ServiceKey::new("default", "b"),
                ServiceKey::new("default", "zzz"),
            ],
            upserts: vec![
                reg("a", 80, &["10.0.0.1", "10.0.0.3"]),
                reg("c", 80, &["10.0.0.4", "10.0.0.5", "10.0.0.6"]),
                reg("d", 0, &[]),
            ],
        });
        assert_eq!(
            kinds(&c),
            [
                ("b", ChangeKind::Removed),
                ("a", ChangeKind::EndpointsOnly),
                ("c", ChangeKind::Added)
            ]
        );
        assert_eq!(
            refused.len(),
            1,
            "the invalid registration of d: {refused:?}"
        );
        assert_eq!(store.contents.endpoints, 5);
        let summed: usize = store
            .contents
            .services
            .values()
            .map(|r| r.endpoints.len())
            .sum();
        assert_eq!(store.contents.endpoints, summed);
        store.apply(Event::Remove(ServiceKey::new("default", "c")));
        assert_eq!(store.contents.endpoints, 2);
    }

    #[test]
    fn invalid_registrations_keep_the_last_good_state() {
        let mut store = Store::new(RegistryId::new("File"), Services::new(0));
        store.apply(Event::Reset(vec![reg("a", 80, &["10.0.0.1"])]));
        let (c, refused) = store.apply(Event::Upsert(reg("a", 80, &["not-an-ip"])));
        assert!(c.is_empty());
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0].to_string().contains("endpoints[0].address"),
            "{}",
            refused[0]
        );
        assert_eq!(store.state.health, Health::Degraded);
        assert_eq!(
            &*store.contents.services[&ServiceKey::new("default", "a")].endpoints[0].address,
            "10.0.0.1"
        );

        let (_, refused) = store.apply(Event::Reset(vec![reg("a", 0, &[])]));
        assert_eq!(refused.len(), 1);
        assert!(
            store
                .contents
                .services
                .contains_key(&ServiceKey::new("default", "a")),
            "kept through a Reset"
        );

        store.apply(Event::Recovered);
        assert_eq!(store.state.health, Health::Healthy);
    }
}
