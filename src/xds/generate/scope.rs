//! What each cached scope of an [`XdsSnapshot`](super::XdsSnapshot) reads, and so what the
//! next snapshot keeps of it.
//!
//! Every memo of a snapshot is declared once as a [`Scope`]: the parts of the model its
//! generator reads besides its key ([`Reads`], and the one service its key may name). Between
//! two model snapshots, [`Changes`] says which of those parts differ, and [`Scope::carry`] what
//! follows for the scope: when nothing it reads changed, every value is carried; when it reads
//! only its key's service and some services changed, the values of the other services are;
//! otherwise its values are generated again as proxies ask, each beside the one it replaces.
//! A scope that reads nothing but its key keeps the values asked for again. So a new memo gets
//! its policy by declaring what it reads, and nobody picks one. `generate/tests/invalidation.rs`
//! changes each input in turn and checks that exactly the scopes declaring it were rebuilt,
//! and that every proxy then receives what a fresh snapshot generates.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

use wayfinder_registry::ServiceKey;

use crate::snapshot::{MergedService, Snapshot};

/// The parts of the model a scope's generator reads besides its key. The server's settings
/// fixed at start (the mesh domain, the system CA file) are the same in every snapshot of one
/// server, and so are none of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reads {
    /// Which services there are and what each is but its endpoints: hostname, namespace,
    /// ports, addresses, resolution, `exportTo`, the registries reporting it. Visibility, and
    /// so every scope that walks the services a proxy sees, reads them.
    pub(super) definitions: bool,
    /// Every service's endpoints.
    pub(super) endpoints: bool,
    /// The traffic configuration: every VirtualService, DestinationRule, Gateway and Sidecar.
    pub(super) config: bool,
    /// The JWT keys the control plane fetched (`crate::jwks`), which are not the model's but
    /// come with it.
    pub(super) keys: bool,
    /// The gateways' credentials the control plane reads (`crate::credentials`): Secrets and
    /// who may read them, which come with the model too.
    pub(super) credentials: bool,
}

impl Reads {
    /// Nothing of the model: a value is a function of its key alone.
    pub(super) const NOTHING: Self = Self {
        definitions: false,
        endpoints: false,
        config: false,
        keys: false,
        credentials: false,
    };
    /// The services' definitions.
    pub(super) const DEFINITIONS: Self = Self {
        definitions: true,
        ..Self::NOTHING
    };
    /// The services' endpoints.
    pub(super) const ENDPOINTS: Self = Self {
        endpoints: true,
        ..Self::NOTHING
    };
    /// The traffic configuration.
    pub(super) const CONFIG: Self = Self {
        config: true,
        ..Self::NOTHING
    };
    /// The fetched JWT keys.
    pub(super) const KEYS: Self = Self {
        keys: true,
        ..Self::NOTHING
    };
    /// The gateways' credentials.
    pub(super) const CREDENTIALS: Self = Self {
        credentials: true,
        ..Self::NOTHING
    };

    /// What this and `other` read.
    pub(super) const fn and(self, other: Self) -> Self {
        Self {
            definitions: self.definitions || other.definitions,
            endpoints: self.endpoints || other.endpoints,
            config: self.config || other.config,
            keys: self.keys || other.keys,
            credentials: self.credentials || other.credentials,
        }
    }
}

/// One memo's declaration: what its generator reads besides its key.
pub(super) struct Scope<K> {
    /// The memo's name, for what tests report.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "only tests report scopes by name")
    )]
    pub(super) name: &'static str,
    /// For a scope whose values each read one service, all of it (definition and endpoints):
    /// the service a key names. Such a value stays valid while that service is the same object
    /// and nothing else it reads changed.
    service: Option<fn(&K) -> &ServiceKey>,
    /// What else it reads, of every service or of the configuration.
    reads: Reads,
}

/// What the next snapshot keeps of a scope's values.
pub(super) enum Carry<'a, K> {
    /// Every value as it is: nothing the scope reads changed.
    Whole,
    /// Every value whose key names none of these services (changed, added or removed): each
    /// value reads only its own service, and nothing else it reads changed.
    Except(fn(&K) -> &ServiceKey, &'a BTreeSet<ServiceKey>),
    /// The values asked for again, as they are. The scope reads nothing but its key, so a value
    /// is never out of date, but it is carried over any change: carrying every value would
    /// keep those of keys nobody asks for any more (a sidecar's inbound layers are keyed by
    /// the ports of its instances, which come and go with proxies).
    WhenAsked,
    /// None: each value is generated again when asked, beside the previous one of its key.
    Regenerate,
}

impl<K> Scope<K> {
    /// A scope whose values read `reads` besides their key.
    pub(super) const fn reading(name: &'static str, reads: Reads) -> Self {
        Self {
            name,
            service: None,
            reads,
        }
    }

    /// A scope whose values each read the service their key names (`service`) and `reads`.
    pub(super) const fn per_service(
        name: &'static str,
        service: fn(&K) -> &ServiceKey,
        reads: Reads,
    ) -> Self {
        Self {
            name,
            service: Some(service),
            reads,
        }
    }

    /// What the snapshot after `changes` keeps of this scope's values.
    pub(super) fn carry<'a>(&self, changes: &'a Changes) -> Carry<'a, K> {
        if self.service.is_none() && self.reads == Reads::NOTHING {
            return Carry::WhenAsked;
        }
        if changes.touch(self.reads) {
            return Carry::Regenerate;
        }
        match self.service {
            Some(service) if !changes.services.is_empty() => {
                Carry::Except(service, &changes.services)
            }
            _ => Carry::Whole,
        }
    }
}

/// What differs between two model snapshots, in the terms of [`Reads`].
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// Services added, removed, or replaced by another object.
    pub(super) services: BTreeSet<ServiceKey>,
    /// True when a service was added or removed, or its definition differs.
    pub(super) definitions: bool,
    /// True when the traffic configuration is another object.
    pub(super) config: bool,
    /// True when the fetched JWT keys are another table (set by the caller, which has them).
    pub(super) keys: bool,
    /// True when the credentials are another table (set by the caller, which has them).
    pub(super) credentials: bool,
}

impl Changes {
    /// What changed from `before` to `after`. Objects are compared by identity (the aggregate
    /// shares what did not change between the snapshots it builds), and a replaced service's
    /// definition by value: a service replaced with the same definition changed its endpoints.
    pub(super) fn between(before: &Snapshot, after: &Snapshot) -> Self {
        let mut changes = Self {
            config: !Arc::ptr_eq(&before.config, &after.config),
            ..Self::default()
        };
        // Both maps are in key order, so one walk beside both finds every difference.
        let mut old = before.services.iter().peekable();
        let mut new = after.services.iter().peekable();
        loop {
            let order = match (old.peek(), new.peek()) {
                (None, None) => return changes,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((a, _)), Some((b, _))) => a.cmp(b),
            };
            let (was, now) = match order {
                Ordering::Less => (old.next(), None),
                Ordering::Greater => (None, new.next()),
                Ordering::Equal => (old.next(), new.next()),
            };
            changes.note(was, now);
        }
    }

    /// True when something `reads` names changed. A service added, removed or replaced
    /// changed the endpoints: a replaced service's are not compared, since the aggregate
    /// replaces a service only when something of it changed.
    pub(super) fn touch(&self, reads: Reads) -> bool {
        (reads.definitions && self.definitions)
            || (reads.endpoints && !self.services.is_empty())
            || (reads.config && self.config)
            || (reads.keys && self.keys)
            || (reads.credentials && self.credentials)
    }

    /// One key of the walk: its service before and after, where there is one.
    fn note(
        &mut self,
        was: Option<(&ServiceKey, &Arc<MergedService>)>,
        now: Option<(&ServiceKey, &Arc<MergedService>)>,
    ) {
        let (key, redefined) = match (was, now) {
            (Some((key, a)), Some((_, b))) if !Arc::ptr_eq(a, b) => {
                (key, a.service != b.service || a.registries != b.registries)
            }
            (Some(_), Some(_)) | (None, None) => return,
            (Some((key, _)), None) | (None, Some((key, _))) => (key, true),
        };
        self.services.insert(key.clone());
        self.definitions |= redefined;
    }
}
