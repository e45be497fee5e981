//! Where a snapshot keeps what it generated, and how the next snapshot reuses it.
//!
//! A [`Memo`] computes each value once per snapshot, on first use. When a new model snapshot
//! is published, its [`super::XdsSnapshot`] starts from the previous one: values whose inputs
//! did not change are carried over as they are (a service's clusters when neither the service
//! nor the configuration changed), and the others are computed again with the previous value
//! at hand, so a [`super::Layer`] can record which of its names differ from the layer it
//! replaces.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};

/// A map whose values are computed once, on first use, outside the map's lock: concurrent
/// callers for the same key wait for the one computation; other keys proceed.
pub(super) struct Memo<K, V> {
    map: Mutex<HashMap<K, Arc<OnceLock<Arc<V>>>>>,
    /// The previous snapshot's values, handed to the computation of the same key.
    previous: Mutex<HashMap<K, Arc<V>>>,
}

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            previous: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, V> Memo<K, V> {
    /// A memo holding `values` as already computed.
    pub(super) fn carried(values: impl IntoIterator<Item = (K, Arc<V>)>) -> Self {
        let map = values
            .into_iter()
            .map(|(k, v)| (k, Arc::new(OnceLock::from(v))))
            .collect();
        Self {
            map: Mutex::new(map),
            previous: Mutex::new(HashMap::new()),
        }
    }

    /// An empty memo whose computations are handed these earlier values.
    pub(super) fn after(values: impl IntoIterator<Item = (K, Arc<V>)>) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            previous: Mutex::new(values.into_iter().collect()),
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
            Arc::new(init(previous))
        })
        .clone()
    }

    /// Every value computed so far, for the next snapshot.
    pub(super) fn computed(&self) -> Vec<(K, Arc<V>)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.iter()
            .filter_map(|(k, cell)| Some((k.clone(), cell.get()?.clone())))
            .collect()
    }
}

/// The previous snapshot's values as they are, when `valid`; else only as a base to compare
/// with.
pub(super) fn carry_if<K: Eq + Hash + Clone, V>(valid: bool, previous: &Memo<K, V>) -> Memo<K, V> {
    if valid {
        Memo::carried(previous.computed())
    } else {
        Memo::after(previous.computed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_hands_the_previous_value_to_its_computation_once() {
        let memo: Memo<&str, u32> = Memo::after([("a", Arc::new(1))]);
        let got = memo.get_after("a", |prev| prev.map_or(0, |p| *p + 1));
        assert_eq!(*got, 2);
        assert_eq!(*memo.get_after("a", |_| 99), 2, "computed once");
        assert_eq!(*memo.get_after("b", |prev| prev.map_or(7, |p| *p)), 7);
        let carried = Memo::carried(memo.computed());
        assert_eq!(
            *carried.get("a", || 99),
            2,
            "carried values are not computed again"
        );
    }
}
