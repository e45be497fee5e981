//! What a stream subscribed to for one type, with the protocol's wildcard rules.
//!
//! State of the world sends the full name list on every request. For listeners and clusters
//! the special name `*` means "everything". **Legacy wildcard:** a stream that has never named
//! anything for a type and sends an empty list is a wildcard subscriber; once it named
//! something (`*` included), an empty list means "nothing". For example:
//!
//! | request names | subscription           |
//! |---------------|------------------------|
//! | `[]`          | wildcard (legacy)      |
//! | `["*", "A"]`  | wildcard and A         |
//! | `["A"]`       | A only                 |
//! | `[]`          | nothing                |

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use serde::Serialize;

use crate::xds::resource::Version;

/// One type's subscription on one stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Subscription {
    /// Everything the server has for this proxy.
    pub wildcard: bool,
    /// Names asked for explicitly. Shared, so that debug pages can copy a subscription cheaply;
    /// every request replaces the whole set anyway.
    pub names: Arc<BTreeSet<Arc<str>>>,
    /// True once the stream named anything for this type, which ends legacy wildcard.
    explicit: bool,
}

impl Subscription {
    /// Applies a state-of-the-world request's names. `always_wildcard` forces a wildcard
    /// subscription (Envoy's listeners and clusters, whose reconnect requests list names they
    /// still want by wildcard).
    pub fn update(&mut self, names: &[String], always_wildcard: bool) {
        self.update_interned(names, always_wildcard, |_| None);
    }

    /// As [`Subscription::update`]; `intern` offers a shared copy of a name (the resource's
    /// own), so that a thousand streams asking for the same thousand names do not each keep a
    /// copy. An ACK repeating the same names changes nothing and allocates nothing.
    pub fn update_interned(
        &mut self,
        names: &[String],
        always_wildcard: bool,
        intern: impl Fn(&str) -> Option<Arc<str>>,
    ) {
        if always_wildcard || names.is_empty() {
            self.wildcard = always_wildcard || !self.explicit;
            if !self.names.is_empty() {
                self.names = Arc::default();
            }
            return;
        }
        self.explicit = true;
        self.wildcard = names.iter().any(|n| n == "*");
        let named = names.iter().map(String::as_str).filter(|n| *n != "*");
        self.replace_names(named.collect(), intern);
    }

    /// Makes `names` (any order, repeats allowed) the explicit names, sharing the set of
    /// another stream that asks for the same; allocates only for a set no stream has.
    fn replace_names(&mut self, mut names: Vec<&str>, intern: impl Fn(&str) -> Option<Arc<str>>) {
        names.sort_unstable();
        names.dedup();
        if self.names.iter().map(|n| &**n).eq(names.iter().copied()) {
            return;
        }
        let current = self.names.clone();
        self.names = shared(&names, |n| {
            current
                .get(n)
                .cloned()
                .or_else(|| intern(n))
                .unwrap_or_else(|| Arc::from(n))
        });
    }

    /// Applies a delta request's `subscribe` and `unsubscribe` diffs. On the type's `first`
    /// request, subscribing nothing is a legacy wildcard (so is a stream that never named
    /// anything and subscribes nothing again); `*` in either list turns the wildcard on or
    /// off. `always_wildcard` as for [`Subscription::update`].
    pub fn update_delta(
        &mut self,
        subscribe: &[String],
        unsubscribe: &[String],
        first: bool,
        always_wildcard: bool,
        intern: impl Fn(&str) -> Option<Arc<str>>,
    ) {
        if subscribe.is_empty() && unsubscribe.is_empty() {
            // An ACK or NACK; the first request subscribing nothing is a legacy wildcard.
            self.wildcard |= first || always_wildcard;
            return;
        }
        self.explicit = true;
        if subscribe.iter().any(|n| n == "*") {
            self.wildcard = true;
        }
        if unsubscribe.iter().any(|n| n == "*") {
            self.wildcard = false;
        }
        if always_wildcard {
            self.wildcard = true;
        }
        let mut dropped: Vec<&str> = unsubscribe.iter().map(String::as_str).collect();
        dropped.sort_unstable();
        let kept = self.names.clone();
        let names = kept
            .iter()
            .map(|n| &**n)
            .chain(subscribe.iter().map(String::as_str))
            .filter(|n| *n != "*" && dropped.binary_search(n).is_err());
        self.replace_names(names.collect(), intern);
    }

    /// True when the subscription covers `name`.
    pub fn wants(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name)
    }

    /// A hash of the wildcard flag and the names.
    pub fn version(&self) -> Version {
        let mut bytes = vec![u8::from(self.wildcard)];
        for name in self.names.iter() {
            bytes.extend_from_slice(name.as_bytes());
            bytes.push(0);
        }
        Version::of_bytes(&bytes)
    }
}

/// The set of `sorted` names (sorted, without repeats), shared by every stream that asks for
/// the same names: a thousand sidecars of one namespace asking for the same thousand
/// clusters' endpoints keep one set, not a thousand (18 KiB each, measured with heaptrack at
/// 2,000 sidecars), and only the first builds it (`make` gives each name's shared copy).
/// Held weakly: a set goes with its last stream, and entries whose set went are swept as the
/// table doubles.
fn shared(sorted: &[&str], make: impl Fn(&str) -> Arc<str>) -> Arc<BTreeSet<Arc<str>>> {
    #[derive(Default)]
    struct Sets {
        by_hash: HashMap<u64, Weak<BTreeSet<Arc<str>>>>,
        sweep_at: usize,
    }
    static SETS: OnceLock<Mutex<Sets>> = OnceLock::new();
    if sorted.is_empty() {
        return Arc::default();
    }
    let hash = sorted.iter().fold(0u64, |h, name| {
        xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), h.rotate_left(17) ^ name.len() as u64)
    });
    let sets = SETS.get_or_init(Mutex::default);
    let mut sets = sets.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(existing) = sets.by_hash.get(&hash).and_then(Weak::upgrade)
        && existing.iter().map(|n| &**n).eq(sorted.iter().copied())
    {
        return existing;
    }
    let set: Arc<BTreeSet<Arc<str>>> = Arc::new(sorted.iter().map(|n| make(n)).collect());
    sets.by_hash.insert(hash, Arc::downgrade(&set));
    if sets.by_hash.len() > sets.sweep_at {
        sets.by_hash.retain(|_, w| w.strong_count() > 0);
        sets.sweep_at = (sets.by_hash.len() * 2).max(64);
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn legacy_wildcard_state_machine() {
        let mut s = Subscription::default();
        s.update(&[], false);
        assert!(
            s.wildcard && s.names.is_empty(),
            "empty first request is a legacy wildcard"
        );
        s.update(&names(&["*", "A"]), false);
        assert!(s.wildcard && s.wants("A") && s.wants("B"));
        s.update(&names(&["A"]), false);
        assert!(!s.wildcard && s.wants("A") && !s.wants("B"));
        s.update(&[], false);
        assert!(
            !s.wildcard && !s.wants("A"),
            "after explicit names, empty means nothing"
        );
    }

    #[test]
    fn delta_wildcard_state_machine() {
        let mut s = Subscription::default();
        s.update_delta(&[], &[], true, false, |_| None);
        assert!(s.wildcard, "an empty first request is a legacy wildcard");
        s.update_delta(&names(&["A"]), &[], false, false, |_| None);
        assert!(s.wildcard && s.names.contains("A"));
        s.update_delta(&[], &names(&["*"]), false, false, |_| None);
        assert!(!s.wildcard && s.wants("A") && !s.wants("B"));
        s.update_delta(&[], &names(&["A"]), false, false, |_| None);
        assert!(!s.wildcard && !s.wants("A"));
        let mut explicit = Subscription::default();
        explicit.update_delta(&names(&["B"]), &[], true, false, |_| None);
        assert!(!explicit.wildcard && explicit.wants("B"));
    }

    #[test]
    fn streams_asking_for_the_same_names_share_one_set() {
        let (mut a, mut b, mut c) = Default::default();
        let ask = names(&["x", "y", "z"]);
        Subscription::update(&mut a, &ask, false);
        Subscription::update(&mut b, &ask, false);
        Subscription::update(&mut c, &names(&["x", "y"]), false);
        let (a, b, c): (Subscription, Subscription, Subscription) = (a, b, c);
        assert!(Arc::ptr_eq(&a.names, &b.names));
        assert!(!Arc::ptr_eq(&a.names, &c.names));
        let mut d = Subscription::default();
        d.update_delta(&names(&["z", "y", "x"]), &[], true, false, |_| None);
        assert!(Arc::ptr_eq(&a.names, &d.names), "delta streams share too");
        assert_eq!(c.names.len(), 2);
    }

    #[test]
    fn envoy_listeners_and_clusters_stay_wildcard() {
        let mut s = Subscription::default();
        s.update(&names(&["outbound|80||a"]), true);
        assert!(s.wildcard && s.wants("anything"));
    }
}
