//! Building a snapshot from the registries' stores.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use wayfinder_registry::{Event, Registration, RegistryId, ServiceKey};

use super::merge;
use super::store::Store;
use crate::snapshot::{Conflict, InvariantError, Snapshot, Source};

/// Every registry's store, and what merging them found so far.
pub(super) struct Model {
    pub(super) stores: Vec<Store>,
    conflicts: BTreeMap<ServiceKey, Vec<Conflict>>,
    sources: Vec<Arc<BTreeMap<ServiceKey, Registration>>>,
}

impl Model {
    pub(super) fn new(stores: Vec<Store>) -> Self {
        Self {
            stores,
            conflicts: BTreeMap::new(),
            sources: Vec::new(),
        }
    }

    /// The next snapshot after `current`: the `dirty` services merged afresh, every other one
    /// shared with `current`. Not yet validated.
    pub(super) fn build(&mut self, current: &Snapshot, dirty: &BTreeSet<ServiceKey>) -> Snapshot {
        let mut services = current.services.clone();
        for key in dirty {
            let contributions: Vec<(&RegistryId, &Registration)> = self
                .stores
                .iter()
                .filter_map(|s| s.services.get(key).map(|r| (&s.id, r)))
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
                registry: s.id.clone(),
                services: services.clone(),
            })
            .collect();
        let conflicts = self.conflicts.values().flatten().cloned().collect();
        Snapshot::new(current.version + 1, services, conflicts, sources)
    }

    /// Copies the services of registries that changed since the last snapshot.
    fn refresh_sources(&mut self) {
        self.sources
            .resize_with(self.stores.len(), Default::default);
        for (store, source) in self.stores.iter_mut().zip(self.sources.iter_mut()) {
            if store.changed {
                *source = Arc::new(store.services.clone());
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
    let mut stores = Vec::new();
    let mut dirty = BTreeSet::new();
    for (index, (id, registrations)) in sources.into_iter().enumerate() {
        let mut store = Store::new(id);
        let (changes, _refused) = store.apply(index, Event::Reset(registrations));
        dirty.extend(changes.into_iter().map(|c| c.key));
        stores.push(store);
    }
    let snapshot = Model::new(stores).build(&Snapshot::empty(), &dirty);
    snapshot.validate()?;
    Ok(snapshot)
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
