//! Building a snapshot from the registries' stores.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use wayfinder_config::{ConfigEvent, ConfigObject};
use wayfinder_registry::{Event, Registration, RegistryError, RegistryId, ServiceKey};

use super::config_store::ConfigObjects;
use super::source::{SourceState, Store};
use super::store::{Change, ChangeKind, Services};
use super::{Origin, merge};
use crate::snapshot::{Conflict, InvariantError, Snapshot, Source, TrafficConfig, Triggers};

/// Every source's store, and what merging them found so far.
pub(super) struct Model {
    pub(super) stores: Vec<Store<Services>>,
    pub(super) config_stores: Vec<Store<ConfigObjects>>,
    conflicts: BTreeMap<ServiceKey, Vec<Conflict>>,
    sources: Vec<Arc<BTreeMap<ServiceKey, Registration>>>,
}

/// What changed since the last snapshot.
#[derive(Debug, Default)]
pub(super) struct Dirty {
    /// Services to merge again.
    pub(super) services: BTreeSet<ServiceKey>,
    /// True when any configuration object changed.
    pub(super) config: bool,
    /// The changes, by Istio's push reasons, that the next snapshot carries.
    pub(super) triggers: Triggers,
}

impl Dirty {
    pub(super) fn clear(&mut self) {
        self.services.clear();
        self.config = false;
        self.triggers = Triggers::default();
    }

    /// Marks the services `changes` name for merging, and counts them.
    pub(super) fn note(&mut self, changes: &[Change]) {
        for change in changes {
            match change.kind {
                ChangeKind::EndpointsOnly => self.triggers.endpoint += 1,
                ChangeKind::Added | ChangeKind::Updated | ChangeKind::Removed => {
                    self.triggers.service += 1;
                }
            }
            self.services.insert(change.key.clone());
        }
    }

    /// Marks the configuration changed by `changes`, and counts them.
    pub(super) fn note_config(&mut self, changes: usize) {
        self.config |= changes > 0;
        self.triggers.config += changes as u64;
    }
}

impl Model {
    pub(super) fn new(
        stores: Vec<Store<Services>>,
        config_stores: Vec<Store<ConfigObjects>>,
    ) -> Self {
        Self {
            stores,
            config_stores,
            conflicts: BTreeMap::new(),
            sources: Vec::new(),
        }
    }

    /// The stream state of the source at `origin`.
    pub(super) fn state_mut(&mut self, origin: Origin) -> &mut SourceState {
        match origin {
            Origin::Registry(i) => &mut self.stores[i].state,
            Origin::Config(i) => &mut self.config_stores[i].state,
        }
    }

    /// True when every registry and configuration source delivered its first state.
    pub(super) fn synced(&self) -> bool {
        self.stores.iter().all(|s| s.state.synced)
            && self.config_stores.iter().all(|s| s.state.synced)
    }

    /// The sources that have not synced yet.
    pub(super) fn waiting(&self) -> Vec<&str> {
        let registries = self.stores.iter().map(|s| &s.state);
        let configs = self.config_stores.iter().map(|s| &s.state);
        registries
            .chain(configs)
            .filter(|s| !s.synced)
            .map(|s| s.id.as_str())
            .collect()
    }

    /// The next snapshot after `current`: the dirty services merged afresh, every other one
    /// shared with `current`, and the configuration rebuilt if it changed. Not yet validated.
    pub(super) fn build(&mut self, current: &Snapshot, dirty: &Dirty) -> Snapshot {
        let dirty_config = dirty.config;
        let dirty = &dirty.services;
        let mut services = current.services.clone();
        for key in dirty {
            let contributions: Vec<(&RegistryId, &Registration)> = self
                .stores
                .iter()
                .filter_map(|s| s.contents.services.get(key).map(|r| (&s.state.id, r)))
                .collect();
            if contributions.is_empty() {
                services.remove(key);
                self.conflicts.remove(key);
                continue;
            }
            let (merged, conflicts) = merge::merge(key, &contributions);
            if let Err(err) = Snapshot::validate_service(key, &merged) {
                tracing::error!(%err, "merged service breaks an invariant; keeping its previous state");
                continue;
            }
            log_new_conflicts(self.conflicts.get(key), &conflicts);
            if conflicts.is_empty() {
                self.conflicts.remove(key);
            } else {
                self.conflicts.insert(key.clone(), conflicts);
            }
            services.insert(key.clone(), Arc::new(merged));
        }
        self.refresh_sources();
        let sources = self
            .stores
            .iter()
            .zip(&self.sources)
            .map(|(s, services)| Source {
                registry: s.state.id.clone(),
                services: services.clone(),
            })
            .collect();
        let conflicts = self.conflicts.values().flatten().cloned().collect();
        let config = if dirty_config {
            Arc::new(TrafficConfig::merge(
                self.config_stores.iter().map(|s| &s.contents.objects),
            ))
        } else {
            current.config.clone()
        };
        Snapshot::new(current.version + 1, services, conflicts, sources, config)
    }

    /// The snapshot to publish after `current` (a snapshot this published, or the empty one):
    /// [`Model::build`]. The aggregate's task, [`Replay`] and [`snapshot_from`] all publish
    /// through it.
    ///
    /// It passes [`Snapshot::validate`] without being checked whole again: each service
    /// merged again was checked with [`Snapshot::validate_service`] (one that fails keeps its
    /// previous state), and every other is `current`'s, shared, which passed when it was
    /// merged. The whole check made a change of one service cost a pass over every endpoint
    /// of the mesh; debug builds still run it, to catch a build that breaks this rule.
    pub(super) fn next(&mut self, current: &Snapshot, dirty: &Dirty) -> Snapshot {
        let mut snapshot = self.build(current, dirty);
        debug_assert_eq!(snapshot.validate(), Ok(()));
        snapshot.triggers = dirty.triggers;
        snapshot
    }

    /// Copies the services of registries that changed since the last snapshot.
    fn refresh_sources(&mut self) {
        self.sources
            .resize_with(self.stores.len(), Default::default);
        for (store, source) in self.stores.iter_mut().zip(self.sources.iter_mut()) {
            if store.changed {
                *source = Arc::new(store.contents.services.clone());
                store.changed = false;
            }
        }
    }
}

/// Builds a snapshot in one step from each registry's registrations, in precedence order,
/// with the same validation, merge and checks as the running aggregate. For tools,
/// benchmarks and tests; a refused registration is left out, as the aggregate would.
pub fn snapshot_from(
    sources: Vec<(RegistryId, Vec<Registration>)>,
) -> Result<Snapshot, InvariantError> {
    snapshot_with_config(sources, Vec::new())
}

/// As [`snapshot_from`], with traffic configuration objects too (validated the same way).
pub fn snapshot_with_config(
    sources: Vec<(RegistryId, Vec<Registration>)>,
    config: Vec<ConfigObject>,
) -> Result<Snapshot, InvariantError> {
    let mut stores = Vec::new();
    let mut dirty = Dirty {
        config: true,
        ..Dirty::default()
    };
    for (index, (id, registrations)) in sources.into_iter().enumerate() {
        let mut store = Store::new(id, Services::new(index));
        let (changes, _refused) = store.apply(Event::Reset(registrations));
        dirty.note(&changes);
        stores.push(store);
    }
    let mut config_store = Store::new(RegistryId::new("config"), ConfigObjects::default());
    config_store.apply(ConfigEvent::Reset(
        config.into_iter().map(Arc::new).collect(),
    ));
    let snapshot = Model::new(stores, vec![config_store]).next(&Snapshot::empty(), &dirty);
    snapshot.validate()?;
    Ok(snapshot)
}

/// The aggregate's model without its task, handlers or debounce: each event is applied to its
/// registry's store and each publication merges only the services changed since the last one,
/// by the code the running aggregate uses. For benchmarks and tools that measure or drive the
/// incremental path, which [`snapshot_from`] (everything merged at once) does not take.
pub struct Replay {
    model: Model,
    dirty: Dirty,
    current: Arc<Snapshot>,
}

impl Replay {
    /// Registries in precedence order, none synced yet; the current snapshot is the empty one.
    pub fn new(registries: Vec<RegistryId>) -> Self {
        let stores = registries
            .into_iter()
            .enumerate()
            .map(|(index, id)| Store::new(id, Services::new(index)))
            .collect();
        Self {
            model: Model::new(stores, Vec::new()),
            dirty: Dirty::default(),
            current: Arc::new(Snapshot::empty()),
        }
    }

    /// Applies one event of the registry at position `registry`, as the aggregate does when
    /// the event arrives; returns the registrations validation refused.
    ///
    /// # Panics
    ///
    /// If `registry` is not the position of one of the registries given to [`Replay::new`].
    pub fn apply(&mut self, registry: usize, event: Event) -> Vec<RegistryError> {
        let (changes, refused) = self.model.stores[registry].apply(event);
        self.dirty.note(&changes);
        refused
    }

    /// Merges and validates what changed since the last publication and makes the result the
    /// current snapshot, as the aggregate does when its debounce fires. A service whose merge
    /// fails validation keeps its previous state.
    pub fn publish(&mut self) -> Arc<Snapshot> {
        let snapshot = Arc::new(self.model.next(&self.current, &self.dirty));
        self.dirty.clear();
        self.current = snapshot.clone();
        snapshot
    }

    /// The last snapshot published.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.current
    }
}

fn log_new_conflicts(before: Option<&Vec<Conflict>>, now: &[Conflict]) {
    for c in now
        .iter()
        .filter(|c| !before.is_some_and(|b| b.contains(c)))
    {
        tracing::warn!(
            service = %c.key, field = %c.field,
            winner = %c.winner, winner_value = %c.winner_value,
            loser = %c.loser, loser_value = %c.loser_value,
            "registries disagree; the registry listed first in --registries wins"
        );
    }
}
