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

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;

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
        if always_wildcard || names.is_empty() {
            self.wildcard = always_wildcard || !self.explicit;
            if !self.names.is_empty() {
                self.names = Arc::default();
            }
            return;
        }
        self.explicit = true;
        self.wildcard = names.iter().any(|n| n == "*");
        let set: BTreeSet<Arc<str>> = names
            .iter()
            .filter(|n| *n != "*")
            .map(|n| Arc::from(n.as_str()))
            .collect();
        if *self.names != set {
            self.names = Arc::new(set);
        }
    }

    /// True when the subscription covers `name`.
    pub fn wants(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name)
    }
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
    fn envoy_listeners_and_clusters_stay_wildcard() {
        let mut s = Subscription::default();
        s.update(&names(&["outbound|80||a"]), true);
        assert!(s.wildcard && s.wants("anything"));
    }
}
