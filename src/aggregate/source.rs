//! What the aggregate keeps of every source, whatever it carries: a [`Store`] of its items
//! with its stream state (whether it synced, whether its last item was good, its last error)
//! and what it refuses now.
//!
//! The store applies the source's events as the contract on [`Event`] says, in one place for
//! every kind of source: a `Reset` replaces everything and marks the source synced, a `Batch`
//! is its removes then its upserts, `Refused` replaces the refused list (which a `Reset`
//! empties), and health follows the last item. What differs by item (how an item is checked,
//! what counts as a change, what the status says the source holds) is its [`Contents`]:
//! registrations in `store.rs`, configuration objects in `config_store.rs`.

use std::sync::Arc;

use wayfinder_config::Refusal;
use wayfinder_registry::{Event, Item, RegistryError, RegistryId};

use crate::snapshot::{ErrorRecord, Health, Holds, SourceStatus};

/// The part of a [`Store`] that differs by what its source carries: the items it holds, how
/// it checks each (one that fails keeps its last good version) and what it reports changed.
pub(crate) trait Contents {
    /// What the source carries.
    type Item: Item;
    /// What applying an item reports: a registration's `Change`, a configuration object's key.
    type Change;

    /// Replaces every item with `items` (a `Reset`), but keeps the last good version of one
    /// that fails its check.
    fn reset(&mut self, source: &RegistryId, items: Vec<Self::Item>, out: &mut Applied<Self>);

    /// Adds or replaces one item, unless it fails its check.
    fn upsert(&mut self, source: &RegistryId, item: Self::Item, out: &mut Applied<Self>);

    /// Removes the item of `key`, if there is one.
    fn remove(&mut self, key: <Self::Item as Item>::Key, out: &mut Applied<Self>);

    /// What the source sent that the store itself refuses now, after the source's own list.
    fn refused(&self) -> Vec<Refusal> {
        Vec::new()
    }

    /// What the store holds, for the status.
    fn holds(&self) -> Holds;
}

/// What one event did so far: the changes, and the items refused by the store's check.
pub(crate) struct Applied<C: Contents + ?Sized> {
    pub(crate) changes: Vec<C::Change>,
    pub(crate) refused: Vec<RegistryError>,
}

/// One source's items as the aggregate holds them (only items that passed their check), with
/// its stream state and what it refuses now.
pub(crate) struct Store<C> {
    pub(crate) state: SourceState,
    pub(crate) contents: C,
    /// What the source says it refuses now (`Event::Refused`).
    refused: Arc<[Refusal]>,
    /// Set whenever the items change; cleared when a snapshot copies them.
    pub(crate) changed: bool,
}

impl<C: Contents> Store<C> {
    pub(crate) fn new(id: RegistryId, contents: C) -> Self {
        Self {
            state: SourceState::new(id),
            contents,
            refused: Arc::from([]),
            changed: false,
        }
    }

    /// Applies one event; returns the changes and the items refused by their check.
    pub(crate) fn apply(&mut self, event: Event<C::Item>) -> (Vec<C::Change>, Vec<RegistryError>) {
        let mut out = Applied {
            changes: Vec::new(),
            refused: Vec::new(),
        };
        let (id, contents) = (&self.state.id, &mut self.contents);
        match event {
            Event::Reset(items) => {
                self.state.synced = true;
                self.refused = Arc::from([]);
                contents.reset(id, items, &mut out);
            }
            Event::Upsert(item) => contents.upsert(id, item, &mut out),
            Event::Remove(key) => contents.remove(key, &mut out),
            Event::Batch { removes, upserts } => {
                out.changes.reserve(removes.len() + upserts.len());
                for key in removes {
                    contents.remove(key, &mut out);
                }
                for item in upserts {
                    contents.upsert(id, item, &mut out);
                }
            }
            Event::Refused(list) => self.refused = list.into(),
            Event::Recovered => {}
        }
        self.changed |= !out.changes.is_empty();
        self.state.settle(&out.refused);
        (out.changes, out.refused)
    }

    /// Everything refused now: what the source refuses, then what the store refused of what
    /// it sent.
    pub(crate) fn refused(&self) -> Arc<[Refusal]> {
        let own = self.contents.refused();
        if own.is_empty() {
            return self.refused.clone();
        }
        self.refused.iter().cloned().chain(own).collect()
    }

    /// The status readers see of this source.
    pub(crate) fn status(&self) -> SourceStatus {
        let state = &self.state;
        SourceStatus {
            id: state.id.clone(),
            synced: state.synced,
            health: state.health,
            holds: self.contents.holds(),
            events: state.events,
            last_error: state.last_error.clone(),
            refused: self.refused(),
        }
    }
}

/// A source's stream state.
pub(crate) struct SourceState {
    pub(crate) id: RegistryId,
    pub(crate) synced: bool,
    pub(crate) health: Health,
    pub(crate) last_error: Option<ErrorRecord>,
    pub(crate) events: u64,
}

impl SourceState {
    pub(crate) fn new(id: RegistryId) -> Self {
        Self {
            id,
            synced: false,
            health: Health::Healthy,
            last_error: None,
            events: 0,
        }
    }

    /// Records an error item (or a refused item): degraded until the next good item.
    pub(crate) fn fail(&mut self, error: RegistryError) {
        self.health = Health::Degraded;
        self.last_error = Some(ErrorRecord::now(error));
    }

    /// Records the end of the stream.
    pub(crate) fn stop(&mut self, error: RegistryError) {
        self.fail(error);
        self.health = Health::Stopped;
    }

    /// Records a good item, unless it carried refused items.
    pub(crate) fn settle(&mut self, refused: &[RegistryError]) {
        self.events += 1;
        match refused.last() {
            Some(err) => self.fail(err.clone()),
            None => self.health = Health::Healthy,
        }
    }
}
