//! What the watches last said, and what it means for the model: which services exist in which
//! datacenter, their mapped instances, which model keys they feed, and what the consumer was
//! sent. Pure bookkeeping: it says which watches to start and stop and which keys changed;
//! the supervisor runs the tasks and sends the events.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use wayfinder_registry::{Event, Registration, RegistryError, ServiceKey};

use super::{Dc, TaskKey, WatchKey};
use crate::api::{CatalogServices, HealthEntry};
use crate::convert::{Instance, Mapping, registration};

/// Consul's own service (its servers' RPC port) is not a service of the mesh.
const CONSUL_SERVICE: &str = "consul";

/// What an answer changes: watches to start and stop, model keys to recompute.
#[derive(Default)]
pub(super) struct Effects {
    pub(super) start: Vec<TaskKey>,
    pub(super) stop: Vec<TaskKey>,
    pub(super) changed: BTreeSet<ServiceKey>,
}

pub(super) struct State {
    mapping: Mapping,
    /// Whether the datacenter list is known.
    dcs_known: bool,
    /// Each datacenter's service names; `None` until its catalog answered.
    catalogs: BTreeMap<Dc, Option<BTreeSet<Arc<str>>>>,
    /// Each watched service's mapped instances; `None` until it answered.
    services: BTreeMap<WatchKey, Option<Vec<Instance>>>,
    /// Which watched services have instances under each model key.
    contributors: BTreeMap<ServiceKey, BTreeSet<WatchKey>>,
    /// What the consumer holds (or will, at the first `Reset`).
    sent: BTreeMap<ServiceKey, Registration>,
}

impl State {
    pub(super) fn new(mapping: Mapping) -> Self {
        Self {
            mapping,
            dcs_known: false,
            catalogs: BTreeMap::new(),
            services: BTreeMap::new(),
            contributors: BTreeMap::new(),
            sent: BTreeMap::new(),
        }
    }

    /// Whether every datacenter's catalog and every service in it answered once.
    pub(super) fn synced(&self) -> bool {
        self.dcs_known
            && self.catalogs.values().all(Option::is_some)
            && self.services.values().all(Option::is_some)
    }

    /// Everything the consumer should hold, for the first `Reset`.
    pub(super) fn all(&self) -> Vec<Registration> {
        self.sent.values().cloned().collect()
    }

    /// A new datacenter list: catalog watches for new ones; the services of gone ones go.
    pub(super) fn set_datacenters(&mut self, dcs: Vec<Dc>) -> Effects {
        self.dcs_known = true;
        let wanted: BTreeSet<Dc> = dcs.into_iter().collect();
        let mut fx = Effects::default();
        for dc in &wanted {
            if !self.catalogs.contains_key(dc) {
                self.catalogs.insert(dc.clone(), None);
                fx.start.push(TaskKey::Catalog(dc.clone()));
            }
        }
        let gone: Vec<Dc> = self
            .catalogs
            .keys()
            .filter(|dc| !wanted.contains(*dc))
            .cloned()
            .collect();
        for dc in gone {
            self.catalogs.remove(&dc);
            fx.stop.push(TaskKey::Catalog(dc.clone()));
            self.set_names(&dc, BTreeSet::new(), &mut fx);
        }
        fx
    }

    /// A datacenter's catalog answered: a watch per new service, none for gone ones.
    pub(super) fn set_catalog(&mut self, dc: Dc, names: CatalogServices) -> Effects {
        let names = names
            .into_keys()
            .filter(|n| n != CONSUL_SERVICE)
            .map(Arc::from)
            .collect();
        let mut fx = Effects::default();
        self.set_names(&dc, names, &mut fx);
        fx
    }

    fn set_names(&mut self, dc: &Dc, names: BTreeSet<Arc<str>>, fx: &mut Effects) {
        for service in &names {
            let key = WatchKey {
                dc: dc.clone(),
                service: service.clone(),
            };
            if !self.services.contains_key(&key) {
                self.services.insert(key.clone(), None);
                fx.start.push(TaskKey::Health(key));
            }
        }
        let gone: Vec<WatchKey> = self
            .services
            .keys()
            .filter(|k| &k.dc == dc && !names.contains(&k.service))
            .cloned()
            .collect();
        for key in gone {
            fx.stop.push(TaskKey::Health(key.clone()));
            if let Some(Some(old)) = self.services.remove(&key) {
                fx.changed.extend(self.unlink(&key, &old));
            }
        }
        if self.catalogs.contains_key(dc) {
            self.catalogs.insert(dc.clone(), Some(names));
        }
    }

    /// A service's health answered. Instances that cannot be mapped are described in
    /// `invalid` (with `origin`) and left out.
    pub(super) fn set_service(
        &mut self,
        key: WatchKey,
        entries: &[HealthEntry],
        origin: &str,
        invalid: &mut Vec<RegistryError>,
    ) -> Effects {
        let mut fx = Effects::default();
        let (instances, errors) = self.mapping.instances(entries, key.dc.as_deref());
        invalid.extend(errors.into_iter().map(|detail| RegistryError::Invalid {
            origin: origin.to_string(),
            detail,
        }));
        let Some(slot) = self.services.get_mut(&key) else {
            return fx;
        };
        if slot.as_ref() == Some(&instances) {
            return fx;
        }
        let old = slot.replace(instances.clone()).unwrap_or_default();
        fx.changed = self.unlink(&key, &old);
        for i in &instances {
            self.contributors
                .entry(i.key.clone())
                .or_default()
                .insert(key.clone());
            fx.changed.insert(i.key.clone());
        }
        fx
    }

    /// Forgets that `key` contributed `old` and returns the model keys that touches.
    fn unlink(&mut self, key: &WatchKey, old: &[Instance]) -> BTreeSet<ServiceKey> {
        let mut changed = BTreeSet::new();
        for i in old {
            if let Some(set) = self.contributors.get_mut(&i.key) {
                set.remove(key);
                if set.is_empty() {
                    self.contributors.remove(&i.key);
                }
            }
            changed.insert(i.key.clone());
        }
        changed
    }

    /// The new registration of each changed key, as the events that bring the consumer there.
    /// A registration that fails validation is described in `invalid` and not sent: the
    /// consumer keeps what it had.
    pub(super) fn recompute(
        &mut self,
        changed: BTreeSet<ServiceKey>,
        invalid: &mut Vec<RegistryError>,
    ) -> Vec<Event> {
        let mut events = Vec::new();
        for key in changed {
            let watches = self.contributors.get(&key);
            let instances = watches
                .into_iter()
                .flatten()
                .filter_map(|w| self.services.get(w).and_then(Option::as_ref))
                .flatten()
                .filter(|i| i.key == key);
            match registration(&key, instances) {
                None => {
                    if self.sent.remove(&key).is_some() {
                        events.push(Event::Remove(key));
                    }
                }
                Some(reg) => {
                    if let Err(e) = reg.validate() {
                        invalid.push(RegistryError::Invalid {
                            origin: format!("consul service {key}"),
                            detail: e.to_string(),
                        });
                    } else if self.sent.get(&key) != Some(&reg) {
                        self.sent.insert(key, reg.clone());
                        events.push(Event::Upsert(reg));
                    }
                }
            }
        }
        events
    }
}
