//! What a client holds of one type, as far as the server knows; both protocols keep it.
//!
//! After a build that brought a client up to date, it holds exactly the resources of the
//! snapshot's layers that its subscription wants. So a stream keeps those layers (shared with
//! every other stream of its scope) instead of a copy of every name and version, and its memory
//! does not grow with the mesh. Exceptions are kept by name until the next such build: names a
//! request added between two pushes (sent from a newer snapshot than the layers), names it
//! subscribed to that do not exist, and the versions a reconnecting delta client reports.

use std::collections::HashMap;
use std::sync::Arc;

use super::subscription::Subscription;
use crate::xds::generate::Layer;
use crate::xds::resource::{Resource, Version};

/// What the client holds under one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holding {
    /// Nothing.
    Nothing,
    /// A version that is not one of ours (from `initial_resource_versions`): never current.
    Foreign,
    /// This version.
    At(Version),
}

/// What a client holds of one type.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// The layers the client was last brought up to date with.
    base: Vec<Arc<Layer>>,
    /// Exceptions to `base`, by name.
    exceptions: HashMap<Arc<str>, Holding>,
}

impl Clone for Held {
    fn clone(&self) -> Self {
        Self {
            base: self.base.clone(),
            exceptions: self.exceptions.clone(),
        }
    }

    /// Copies into the buffers already held, and leaves equal layers alone: the debug copy of
    /// a stream's state is refreshed after every message.
    fn clone_from(&mut self, from: &Self) {
        let same = self.base.len() == from.base.len()
            && self
                .base
                .iter()
                .zip(&from.base)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            self.base.clone_from(&from.base);
        }
        if !(self.exceptions.is_empty() && from.exceptions.is_empty()) {
            self.exceptions.clone_from(&from.exceptions);
        }
    }
}

impl Held {
    /// What the client holds under `name`.
    pub(super) fn get(&self, name: &str, subscription: &Subscription) -> Holding {
        if let Some(holding) = self.exceptions.get(name) {
            return *holding;
        }
        // Without layers (a first request) there is nothing to look up, not even the name in
        // the subscription: that search was a fifth of a full-mesh sidecar's push in `perf`.
        if self.base.is_empty() || !subscription.wants(name) {
            return Holding::Nothing;
        }
        self.base
            .iter()
            .find_map(|layer| layer.set().get(name))
            .map_or(Holding::Nothing, |r| Holding::At(r.version))
    }

    /// True when the client holds nothing of this type (a first request's build).
    pub(super) fn holds_nothing(&self) -> bool {
        self.base.is_empty() && self.exceptions.is_empty()
    }

    /// True when the client holds this resource as it is.
    pub(super) fn holds(&self, r: &Resource, subscription: &Subscription) -> bool {
        self.get(&r.name, subscription) == Holding::At(r.version)
    }

    /// Records an exception: what the client holds under `name` until the next rebase.
    pub(super) fn set(&mut self, name: Arc<str>, holding: Holding) {
        self.exceptions.insert(name, holding);
    }

    /// The client holds nothing yet under the names `after` wants and `before` did not,
    /// whatever the base layers have under them. Without layers there is nothing to record
    /// (and the names had no exceptions: those of names not wanted are dropped).
    pub(super) fn asked_for(&mut self, before: &Subscription, after: &Subscription) {
        if self.base.is_empty() {
            return;
        }
        for name in after.names.iter() {
            if !before.wants(name) {
                self.set(name.clone(), Holding::Nothing);
            }
        }
    }

    /// The client now holds exactly what `layers` offer its subscription.
    pub(super) fn rebase(&mut self, layers: &[Arc<Layer>]) {
        self.base = layers.to_vec();
        if !self.exceptions.is_empty() {
            self.exceptions = HashMap::new();
        }
    }

    /// The layers of the last rebase.
    pub(super) fn base(&self) -> &[Arc<Layer>] {
        &self.base
    }

    /// True when the client holds exactly what the base layers offer.
    pub(super) fn is_exact(&self) -> bool {
        self.exceptions.is_empty()
    }

    /// The names with exceptions.
    pub(super) fn exceptions(&self) -> impl Iterator<Item = &Arc<str>> {
        self.exceptions.keys()
    }

    /// Every name the client holds something under.
    pub(super) fn names(&self, subscription: &Subscription) -> Vec<Arc<str>> {
        let from_base = self
            .base
            .iter()
            .flat_map(|layer| layer.set().keys())
            .filter(|n| subscription.wants(n) && !self.exceptions.contains_key(*n));
        let from_exceptions = self
            .exceptions
            .iter()
            .filter(|(_, h)| **h != Holding::Nothing)
            .map(|(n, _)| n);
        from_base.chain(from_exceptions).cloned().collect()
    }

    /// Forgets exceptions for names the subscription no longer wants (the client dropped them).
    pub(super) fn drop_unwanted(&mut self, subscription: &Subscription) {
        self.exceptions.retain(|name, _| subscription.wants(name));
    }

    /// About how many resources the client holds, for debug pages: those of the base layers
    /// (for a wildcard subscription) or the names subscribed to, and the exceptions.
    pub(super) fn count(&self, subscription: &Subscription) -> usize {
        let base = if subscription.wildcard {
            self.base.iter().map(|l| l.set().len()).sum()
        } else {
            subscription.names.len()
        };
        base.max(self.exceptions.len())
    }

    /// A version of what the client holds, given its subscription's: the same holdings from
    /// the same layers give the same version.
    pub(super) fn version(&self, subscription: Version) -> Version {
        let mut bytes = subscription.0.to_le_bytes().to_vec();
        for layer in &self.base {
            bytes.extend_from_slice(&layer.version().0.to_le_bytes());
        }
        let mut exceptions: Vec<_> = self.exceptions.iter().collect();
        exceptions.sort_by(|a, b| a.0.cmp(b.0));
        for (name, holding) in exceptions {
            bytes.extend_from_slice(name.as_bytes());
            bytes.push(0);
            let v = match holding {
                Holding::Nothing => 0,
                Holding::Foreign => 1,
                Holding::At(v) => v.0,
            };
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        Version::of_bytes(&bytes)
    }
}
