//! Where a snapshot keeps what it generated, and how the next snapshot reuses it.
//!
//! A [`Memo`] computes each value once per snapshot, on first use. When a new model snapshot
//! is published, its [`super::XdsSnapshot`] starts from the previous one: each memo keeps what
//! its declared [`Scope`] says is still valid (`scope.rs`), and the others are computed again
//! with the previous value at hand, so a [`super::Layer`] can record which of its names differ
//! from the layer it replaces.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};

use super::cache::Layer;
use super::scope::{Carry, Changes, Scope};

/// A map whose values are computed once, on first use, outside the map's lock: concurrent
/// callers for the same key wait for the one computation; other keys proceed.
pub(super) struct Memo<K: 'static, V> {
    /// What its values read, and so what the next snapshot keeps of them.
    scope: &'static Scope<K>,
    map: Mutex<HashMap<K, Arc<OnceLock<Arc<V>>>>>,
    /// The previous snapshot's values, handed to the computation of the same key.
    previous: Mutex<HashMap<K, Arc<V>>>,
    /// True when a previous value is still valid, and taken as it is when its key is asked
    /// for ([`Carry::WhenAsked`]).
    reuse: bool,
}

/// What a memo holds, and whether a value generated again is compared with the one it
/// replaces, which it is then handed.
pub(super) trait Value {
    /// True for layers, which name what differs from the layer they replace
    /// ([`Layer::after`]). Other values are not compared, and a memo generating them again
    /// keeps nothing of the previous snapshot.
    const COMPARED: bool;
}

impl Value for Arc<Layer> {
    const COMPARED: bool = true;
}

impl<const N: usize> Value for [Arc<Layer>; N] {
    const COMPARED: bool = true;
}

impl<K: Eq + Hash + Clone, V> Memo<K, V> {
    /// An empty memo of values that `scope` declares.
    pub(super) fn new(scope: &'static Scope<K>) -> Self {
        Self::with(scope, Vec::new(), Vec::new(), false)
    }

    /// The memo of the same scope in the snapshot after `changes`: what it keeps of these
    /// values follows from what the scope reads ([`Scope::carry`]).
    pub(super) fn next(&self, changes: &Changes) -> Self
    where
        V: Value,
    {
        let values = self.computed();
        let scope = self.scope;
        match scope.carry(changes) {
            Carry::Whole => Self::with(scope, values, Vec::new(), false),
            Carry::Except(service, changed) => {
                let kept = values
                    .into_iter()
                    .filter(|(key, _)| !changed.contains(service(key)))
                    .collect();
                Self::with(scope, kept, Vec::new(), false)
            }
            Carry::WhenAsked => Self::with(scope, Vec::new(), values, true),
            Carry::Regenerate if V::COMPARED => Self::with(scope, Vec::new(), values, false),
            Carry::Regenerate => Self::new(scope),
        }
    }

    /// A memo holding `computed` as already computed, and `previous` for computations.
    fn with(
        scope: &'static Scope<K>,
        computed: Vec<(K, Arc<V>)>,
        previous: Vec<(K, Arc<V>)>,
        reuse: bool,
    ) -> Self {
        let map = computed
            .into_iter()
            .map(|(k, v)| (k, Arc::new(OnceLock::from(v))))
            .collect();
        Self {
            scope,
            map: Mutex::new(map),
            previous: Mutex::new(previous.into_iter().collect()),
            reuse,
        }
    }

    /// The value for `key`, computed by `init` if nobody has yet.
    pub(super) fn get(&self, key: K, init: impl FnOnce() -> V) -> Arc<V> {
        self.get_after(key, |_| init())
    }

    /// As [`Memo::get`]; `init` is handed the previous snapshot's value for the key, if any.
    pub(super) fn get_after(&self, key: K, init: impl FnOnce(Option<Arc<V>>) -> V) -> Arc<V> {
        let cell = {
            // A panic while holding these locks cannot leave the maps inconsistent (they only
            // gain empty cells or lose earlier values), so a poisoned lock is safe to use.
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(key.clone()).or_default().clone()
        };
        cell.get_or_init(|| {
            let previous = self
                .previous
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            match previous {
                Some(valid) if self.reuse => valid,
                previous => Arc::new(init(previous)),
            }
        })
        .clone()
    }

    /// Calls `f` with every value computed so far.
    pub(super) fn for_each_value(&self, mut f: impl FnMut(&V)) {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for value in map.values().filter_map(|cell| cell.get()) {
            f(value);
        }
    }

    /// Every value computed so far, for the next snapshot.
    fn computed(&self) -> Vec<(K, Arc<V>)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.iter()
            .filter_map(|(k, cell)| Some((k.clone(), cell.get()?.clone())))
            .collect()
    }
}

/// How a memo's values came to be, against the memo of the same scope it followed: for tests
/// that check what a change rebuilt.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Reuse {
    /// Values that are the previous snapshot's, not generated again.
    pub(super) carried: usize,
    /// Values generated again for a key the previous snapshot held.
    pub(super) rebuilt: usize,
    /// Values for keys the previous snapshot did not hold.
    pub(super) new: usize,
}

#[cfg(test)]
impl<K: Eq + Hash + Clone, V> Memo<K, V> {
    /// The scope's name.
    pub(super) fn name(&self) -> &'static str {
        self.scope.name
    }

    /// How each value computed so far came to be, against `previous`'s.
    pub(super) fn reuse_since(&self, previous: &Self) -> Reuse {
        let before: HashMap<K, Arc<V>> = previous.computed().into_iter().collect();
        let mut reuse = Reuse::default();
        for (key, value) in self.computed() {
            match before.get(&key) {
                Some(was) if Arc::ptr_eq(was, &value) => reuse.carried += 1,
                Some(_) => reuse.rebuilt += 1,
                None => reuse.new += 1,
            }
        }
        reuse
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::generate::scope::Reads;

    /// Values read from the configuration, and values that are a function of their key.
    static CONFIGURED: Scope<&str> = Scope::reading("configured", Reads::CONFIG);
    static PURE: Scope<&str> = Scope::reading("pure", Reads::NOTHING);

    impl Value for u32 {
        const COMPARED: bool = true;
    }

    fn config_changed() -> Changes {
        Changes {
            config: true,
            ..Changes::default()
        }
    }

    #[test]
    fn a_memo_hands_the_previous_value_to_its_computation_once() {
        let first: Memo<&str, u32> = Memo::new(&CONFIGURED);
        first.get("a", || 1);
        let memo = first.next(&config_changed());
        let got = memo.get_after("a", |prev| prev.map_or(0, |p| *p + 1));
        assert_eq!(*got, 2);
        assert_eq!(*memo.get_after("a", |_| 99), 2, "computed once");
        assert_eq!(*memo.get_after("b", |prev| prev.map_or(7, |p| *p)), 7);
        let carried = memo.next(&Changes::default());
        assert_eq!(
            *carried.get("a", || 99),
            2,
            "carried values are not computed again"
        );
    }

    #[test]
    fn a_pure_scope_keeps_the_values_asked_for_again_and_forgets_the_others() {
        let first: Memo<&str, u32> = Memo::new(&PURE);
        first.get("a", || 1);
        first.get("b", || 2);
        let second = first.next(&config_changed());
        assert_eq!(*second.get("a", || 99), 1, "still valid: not computed");
        let third = second.next(&config_changed());
        assert_eq!(*third.get("a", || 99), 1);
        assert_eq!(*third.get("b", || 99), 99, "not asked for in between");
    }
}
