//! The fake's registry: instances by application, the recently-changed queue that deltas
//! are made of, and the version counter.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{Counts, Instance, Quirks};

/// How long changes stay in the recently-changed queue by default (Eureka's
/// `retentionTimeInMSInDeltaQueue`: three minutes).
const DEFAULT_RETENTION: Duration = Duration::from_secs(180);

/// An instance with what the server adds to it.
#[derive(Clone, Debug)]
pub(super) struct Record {
    pub(super) instance: Instance,
    pub(super) overridden_status: String,
    pub(super) registered_ms: u64,
    pub(super) updated_ms: u64,
}

/// An entry of the recently-changed queue.
#[derive(Clone, Debug)]
pub(super) struct Change {
    pub(super) at: Instant,
    pub(super) action: &'static str,
    pub(super) record: Record,
}

/// The registry.
#[derive(Debug)]
pub(super) struct State {
    pub(super) apps: BTreeMap<String, BTreeMap<String, Record>>,
    pub(super) recent: VecDeque<Change>,
    pub(super) version: u64,
    pub(super) quirks: Quirks,
    pub(super) retention: Duration,
    pub(super) counts: Counts,
}

impl Default for State {
    fn default() -> Self {
        Self {
            apps: BTreeMap::new(),
            recent: VecDeque::new(),
            version: 0,
            quirks: Quirks::default(),
            retention: DEFAULT_RETENTION,
            counts: Counts::default(),
        }
    }
}

impl State {
    pub(super) fn register(&mut self, mut instance: Instance) {
        instance.app = instance.app.to_ascii_uppercase();
        let now = now_ms();
        let app = self.apps.entry(instance.app.clone()).or_default();
        let old = app.get(&instance.instance_id);
        let record = Record {
            overridden_status: old
                .map_or_else(|| "UNKNOWN".into(), |o| o.overridden_status.clone()),
            registered_ms: old.map_or(now, |o| o.registered_ms),
            updated_ms: now,
            instance,
        };
        let action = if old.is_some() { "MODIFIED" } else { "ADDED" };
        app.insert(record.instance.instance_id.clone(), record.clone());
        self.changed(action, record);
    }

    pub(super) fn deregister(&mut self, app: &str, id: &str) -> bool {
        let app = app.to_ascii_uppercase();
        let Some(instances) = self.apps.get_mut(&app) else {
            return false;
        };
        let Some(record) = instances.remove(id) else {
            return false;
        };
        if instances.is_empty() {
            self.apps.remove(&app);
        }
        self.changed("DELETED", record);
        true
    }

    /// Changes an instance in place (`MODIFIED`); false for an unknown instance.
    pub(super) fn modify(&mut self, app: &str, id: &str, change: impl FnOnce(&mut Record)) -> bool {
        let record = self
            .apps
            .get_mut(&app.to_ascii_uppercase())
            .and_then(|instances| instances.get_mut(id));
        let Some(record) = record else {
            return false;
        };
        change(record);
        record.updated_ms = now_ms();
        let record = record.clone();
        self.changed("MODIFIED", record);
        true
    }

    fn changed(&mut self, action: &'static str, record: Record) {
        self.version += 1;
        self.recent.push_back(Change {
            at: Instant::now(),
            action,
            record,
        });
        self.expire();
    }

    /// Drops changes older than the retention.
    pub(super) fn expire(&mut self) {
        let retention = self.retention;
        while self
            .recent
            .front()
            .is_some_and(|c| c.at.elapsed() > retention)
        {
            self.recent.pop_front();
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
