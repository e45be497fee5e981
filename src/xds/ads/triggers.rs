//! Why a stream pushes: the reasons of `pilot_push_triggers`, found by comparing the snapshot
//! a stream pushes with the one it pushed last.
//!
//! istiod counts, for each proxy a push request reaches, the reasons merged into the request.
//! Here a push is a stream's wake-up for a new xDS snapshot, which is new for one or more
//! reasons: a new model (its changes are counted by the aggregate, [`Triggers`]), new JWT
//! keys, new gateway credentials, or another input of generation (the mesh settings). A
//! stream that slept through several snapshots counts the model's changes of the last one
//! only.

use std::sync::{Arc, Weak};

use crate::metrics::TypeLabel;
use crate::snapshot::Triggers;
use crate::xds::XdsSnapshot;
use crate::xds::metrics::XdsMetrics;

/// What a stream last pushed, as far as its reasons need: the model's version and which JWT
/// keys and credentials. Weak references keep the tables' places taken, so a later table
/// cannot take one and look unchanged, without keeping their contents.
pub(super) struct Pushed {
    model: u64,
    jwks: Weak<crate::jwks::JwksTable>,
    credentials: Weak<crate::credentials::Credentials>,
}

impl Pushed {
    /// What a stream served from `snap` holds.
    pub(super) fn new(snap: &XdsSnapshot) -> Self {
        Self {
            model: snap.model().version,
            jwks: Arc::downgrade(snap.keys()),
            credentials: Arc::downgrade(snap.credentials()),
        }
    }

    /// Counts the reasons of a push of `snap`, and remembers it as pushed.
    pub(super) fn record(&mut self, snap: &XdsSnapshot, metrics: &XdsMetrics) {
        let count = |r#type: &'static str, n: u64| {
            if n > 0 {
                metrics
                    .push_triggers
                    .get_or_create(&TypeLabel { r#type })
                    .inc_by(n);
            }
        };
        let mut known = false;
        let model = snap.model();
        if model.version != self.model {
            known = true;
            let triggers: &Triggers = &model.triggers;
            let mut any = false;
            for (reason, n) in triggers.by_reason() {
                any |= n > 0;
                count(reason, n);
            }
            if !any {
                count("unknown", 1);
            }
        }
        if !std::ptr::eq(self.jwks.as_ptr(), Arc::as_ptr(snap.keys())) {
            known = true;
            count("unknown", 1);
        }
        if !std::ptr::eq(self.credentials.as_ptr(), Arc::as_ptr(snap.credentials())) {
            known = true;
            count("secret", 1);
        }
        if !known {
            count("global", 1);
        }
        *self = Self::new(snap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Snapshot;
    use prometheus_client::registry::Registry;

    fn triggers(m: &XdsMetrics, r#type: &'static str) -> u64 {
        m.push_triggers.get_or_create(&TypeLabel { r#type }).get()
    }

    #[test]
    fn each_push_counts_what_made_its_snapshot_new() {
        let m = XdsMetrics::new(&mut Registry::default());
        let first = XdsSnapshot::new(Arc::new(Snapshot::empty()), "cluster.local");
        let mut pushed = Pushed::new(&first);

        let mut model = Snapshot::empty();
        model.version = 1;
        model.triggers = Triggers {
            endpoint: 3,
            service: 1,
            config: 0,
        };
        let second = XdsSnapshot::next(Arc::new(model), "cluster.local", &first);
        pushed.record(&second, &m);
        assert_eq!((triggers(&m, "endpoint"), triggers(&m, "service")), (3, 1));

        let keys = Arc::new(crate::jwks::JwksTable::new());
        let third =
            XdsSnapshot::next_with_keys(second.model().clone(), "cluster.local", &second, keys);
        pushed.record(&third, &m);
        assert_eq!(triggers(&m, "unknown"), 1, "new JWT keys");

        let fourth = XdsSnapshot::next(third.model().clone(), "cluster.local", &third);
        pushed.record(&fourth, &m);
        assert_eq!(triggers(&m, "global"), 1, "nothing it knows of changed");
        assert_eq!(triggers(&m, "endpoint"), 3, "the model was pushed already");
    }
}
