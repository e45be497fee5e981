//! One cluster's objects, the indexes that say which Services an object touches, and the
//! registrations last sent.
//!
//! The cache is pure bookkeeping: the watch loop feeds it [`Change`]s and asks [`Cache::flush`]
//! for the events that bring the consumer up to date. Each change marks the Services it can
//! alter as dirty (a Service, the Service an EndpointSlice belongs to, every Service with a
//! slice naming a pod or a node, every Service of a namespace); a flush converts only those and sends only the ones whose
//! registration differs from what was sent.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use wayfinder_registry::{Event, Registration, RegistryError, ServiceKey};

mod objects;

use crate::convert::{self, Lookup, Scope};
use crate::objects::{Name, NamespaceObj, NodeObj, PodObj, SliceObj, SvcObj};

pub(crate) use self::objects::{AnyChange, Change};
use self::objects::{Applied, Objects};

/// One cluster's state.
pub(crate) struct Cache {
    scope: Scope,
    services: Objects<Name, SvcObj>,
    slices: Objects<Name, SliceObj>,
    pods: Objects<Name, PodObj>,
    nodes: Objects<Arc<str>, NodeObj>,
    namespaces: Objects<Arc<str>, NamespaceObj>,
    /// Service (namespace, name) → its slices' names.
    slices_of: HashMap<Name, BTreeSet<Arc<str>>>,
    /// Pod → the slices naming it.
    pod_slices: HashMap<Name, HashSet<Name>>,
    /// Node → the slices naming it.
    node_slices: HashMap<Arc<str>, HashSet<Name>>,
    dirty: HashSet<Name>,
    /// Everything must be recomputed (a list completed).
    all_dirty: bool,
    /// What the consumer has, by Service.
    sent: BTreeMap<Name, Registration>,
    started: bool,
}

impl Cache {
    pub(crate) fn new(scope: Scope) -> Self {
        Self {
            scope,
            services: Objects::default(),
            slices: Objects::default(),
            pods: Objects::default(),
            nodes: Objects::default(),
            namespaces: Objects::default(),
            slices_of: HashMap::new(),
            pod_slices: HashMap::new(),
            node_slices: HashMap::new(),
            dirty: HashSet::new(),
            all_dirty: false,
            sent: BTreeMap::new(),
            started: false,
        }
    }

    /// True once every kind has completed its first list.
    pub(crate) fn synced(&self) -> bool {
        self.services.synced
            && self.slices.synced
            && self.pods.synced
            && self.nodes.synced
            && self.namespaces.synced
    }

    /// Marks Nodes as listed and empty: the cluster does not let us read them (locality then
    /// comes from the EndpointSlices' zones only).
    pub(crate) fn give_up_nodes(&mut self) {
        if !self.nodes.synced {
            self.nodes.synced = true;
            self.all_dirty = true;
        }
    }

    /// Marks Namespaces as listed and empty: the cluster does not let us read them (networks
    /// then come from pods' labels only).
    pub(crate) fn give_up_namespaces(&mut self) {
        if !self.namespaces.synced {
            self.namespaces.synced = true;
            self.all_dirty = true;
        }
    }

    /// Applies one change.
    pub(crate) fn apply(&mut self, change: AnyChange) {
        match change {
            AnyChange::Service(c) => match self.services.apply(c) {
                Applied::Nothing => {}
                Applied::Replaced => self.all_dirty = true,
                Applied::One(key, _, _) => {
                    self.dirty.insert(key);
                }
            },
            AnyChange::Slice(c) => match self.slices.apply(c) {
                Applied::Nothing => {}
                Applied::Replaced => {
                    self.reindex();
                    self.all_dirty = true;
                }
                Applied::One(key, old, _) => {
                    if let Some(old) = old {
                        self.unindex(&key, &old);
                    }
                    if let Some(new) = self.slices.live.get(&key).cloned() {
                        self.index(&key, &new);
                    }
                }
            },
            AnyChange::Pod(c) => match self.pods.apply(c) {
                Applied::Nothing => {}
                Applied::Replaced => self.all_dirty = true,
                Applied::One(key, _, _) => {
                    let slices = self.pod_slices.get(&key).into_iter().flatten();
                    self.dirty
                        .extend(slices.filter_map(|s| service_of(&self.slices, s)));
                }
            },
            AnyChange::Namespace(c) => match self.namespaces.apply(c) {
                Applied::Nothing => {}
                Applied::Replaced => self.all_dirty = true,
                Applied::One(key, _, _) => {
                    let services = self.services.live.keys().filter(|(ns, _)| *ns == key);
                    self.dirty.extend(services.cloned());
                }
            },
            AnyChange::Node(c) => match self.nodes.apply(c) {
                Applied::Nothing => {}
                Applied::Replaced => self.all_dirty = true,
                Applied::One(key, _, _) => {
                    let slices = self.node_slices.get(&key).into_iter().flatten();
                    self.dirty
                        .extend(slices.filter_map(|s| service_of(&self.slices, s)));
                }
            },
        }
    }

    fn index(&mut self, key: &Name, slice: &SliceObj) {
        let Some(service) = &slice.service else {
            return;
        };
        let svc = (key.0.clone(), service.clone());
        self.slices_of
            .entry(svc.clone())
            .or_default()
            .insert(key.1.clone());
        for ep in &slice.endpoints {
            if let Some(pod) = &ep.pod {
                let pod = (key.0.clone(), pod.clone());
                self.pod_slices.entry(pod).or_default().insert(key.clone());
            }
            if let Some(node) = &ep.node {
                let slices = self.node_slices.entry(node.clone()).or_default();
                slices.insert(key.clone());
            }
        }
        self.dirty.insert(svc);
    }

    fn unindex(&mut self, key: &Name, slice: &SliceObj) {
        let Some(service) = &slice.service else {
            return;
        };
        let svc = (key.0.clone(), service.clone());
        if let Some(names) = self.slices_of.get_mut(&svc) {
            names.remove(&key.1);
            if names.is_empty() {
                self.slices_of.remove(&svc);
            }
        }
        for ep in &slice.endpoints {
            if let Some(pod) = &ep.pod {
                remove_from(&mut self.pod_slices, &(key.0.clone(), pod.clone()), key);
            }
            if let Some(node) = &ep.node {
                remove_from(&mut self.node_slices, node, key);
            }
        }
        self.dirty.insert(svc);
    }

    fn reindex(&mut self) {
        self.slices_of.clear();
        self.pod_slices.clear();
        self.node_slices.clear();
        let slices: Vec<(Name, SliceObj)> = self
            .slices
            .live
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, slice) in slices {
            self.index(&key, &slice);
        }
    }

    /// The events that bring the consumer up to date: nothing before every kind has listed
    /// once, then one `Reset`, then an `Upsert` or `Remove` per Service whose registration
    /// changed. Registrations that fail validation are reported and not sent.
    pub(crate) fn flush(&mut self) -> (Vec<Event>, Vec<RegistryError>) {
        if !self.synced() {
            return (Vec::new(), Vec::new());
        }
        let names: Vec<Name> = if self.all_dirty || !self.started {
            let mut all: BTreeSet<Name> = self.services.live.keys().cloned().collect();
            all.extend(self.sent.keys().cloned());
            all.into_iter().collect()
        } else {
            let mut dirty: Vec<Name> = self.dirty.iter().cloned().collect();
            dirty.sort();
            dirty
        };
        self.dirty.clear();
        self.all_dirty = false;
        let mut events = Vec::new();
        let mut errors = Vec::new();
        for name in names {
            match self.build(&name) {
                Some(Ok(reg)) => {
                    if self.sent.get(&name) != Some(&reg) {
                        self.sent.insert(name, reg.clone());
                        events.push(Event::Upsert(reg));
                    }
                }
                Some(Err(err)) => errors.push(err),
                None => {
                    if let Some(old) = self.sent.remove(&name) {
                        events.push(Event::Remove(old.key()));
                    }
                }
            }
        }
        if !self.started {
            self.started = true;
            return (
                vec![Event::Reset(self.sent.values().cloned().collect())],
                errors,
            );
        }
        (events, errors)
    }

    /// Every registration sent, as a `Reset` with or without endpoints.
    pub(crate) fn reset(&self, endpoints: bool) -> Event {
        let regs = self.sent.values().map(|r| {
            if endpoints {
                r.clone()
            } else {
                Registration {
                    service: r.service.clone(),
                    endpoints: Arc::from([]),
                }
            }
        });
        Event::Reset(regs.collect())
    }

    /// The key under which the consumer knows a Service.
    pub(crate) fn key(&self, svc: &SvcObj) -> ServiceKey {
        ServiceKey::new(
            svc.namespace.clone(),
            convert::hostname(svc, &self.scope.domain),
        )
    }

    fn build(&self, name: &Name) -> Option<Result<Registration, RegistryError>> {
        let svc = self.services.live.get(name)?;
        let slices = self
            .slices_of
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(|s| self.slices.live.get(&(name.0.clone(), s.clone())));
        let reg = convert::registration(svc, slices, self, &self.scope);
        Some(match reg.validate() {
            Ok(()) => Ok(reg),
            Err(err) => Err(RegistryError::Invalid {
                origin: format!(
                    "{}: Service {}/{}",
                    self.scope.cluster_id, svc.namespace, svc.name
                ),
                detail: format!("{}: {err}", self.key(svc)),
            }),
        })
    }
}

impl Lookup for Cache {
    fn pod(&self, namespace: &str, name: &str) -> Option<&PodObj> {
        self.pods.live.get(&(namespace.into(), name.into()))
    }

    fn node(&self, name: &str) -> Option<&NodeObj> {
        self.nodes.live.get(name)
    }

    fn namespace(&self, name: &str) -> Option<&NamespaceObj> {
        self.namespaces.live.get(name)
    }
}

fn service_of(slices: &Objects<Name, SliceObj>, key: &Name) -> Option<Name> {
    let slice = slices.live.get(key)?;
    Some((key.0.clone(), slice.service.clone()?))
}

fn remove_from<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, HashSet<Name>>,
    key: &K,
    slice: &Name,
) {
    if let Some(set) = map.get_mut(key) {
        set.remove(slice);
        if set.is_empty() {
            map.remove(key);
        }
    }
}
