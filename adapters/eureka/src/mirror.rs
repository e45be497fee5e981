//! The adapter's copy of the Eureka registry: built from a full fetch, advanced by deltas, and
//! checked against the server with Eureka's reconcile hashcode.

use std::collections::BTreeMap;

use crate::api::{Applications, Instance};

/// An instance's key: upper-cased application name and [`Instance::id`].
pub(crate) type InstanceKey = (String, String);

/// Every instance the server has, by application and instance id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mirror {
    pub(crate) instances: BTreeMap<InstanceKey, Instance>,
}

impl Mirror {
    /// The registry a full fetch answered.
    pub(crate) fn full(apps: Applications) -> Self {
        let mut mirror = Self::default();
        for (key, _, instance) in entries(apps) {
            mirror.instances.insert(key, instance);
        }
        mirror
    }

    /// Applies a delta: `ADDED` and `MODIFIED` (and a missing action) replace the instance,
    /// `DELETED` removes it. Returns whether anything changed.
    pub(crate) fn apply(&mut self, delta: Applications) -> bool {
        let mut changed = false;
        for (key, action, instance) in entries(delta) {
            if action.as_deref() == Some("DELETED") {
                changed |= self.instances.remove(&key).is_some();
            } else if self.instances.get(&key) != Some(&instance) {
                self.instances.insert(key, instance);
                changed = true;
            }
        }
        changed
    }

    /// The mirror after `delta`, if the result reconciles with the server: its hashcode is
    /// the delta's `apps__hashcode`.
    pub(crate) fn reconcile(&self, delta: Applications) -> Reconciled {
        let server = delta.hashcode.clone();
        let mut changed = None;
        if !delta.application.0.is_empty() {
            let mut next = self.clone();
            if next.apply(delta) {
                changed = Some(next);
            }
        }
        let local = changed.as_ref().unwrap_or(self).hashcode();
        if server.as_deref() == Some(local.as_str()) {
            Reconciled::Yes(changed)
        } else {
            Reconciled::No { server, local }
        }
    }

    /// Eureka's reconcile hashcode (`Applications.getReconcileHashCode`): the number of
    /// instances per status, sorted by status, as `STATUS_count_` (`DOWN_1_UP_3_`); empty for
    /// an empty registry.
    pub(crate) fn hashcode(&self) -> String {
        let mut counts = BTreeMap::<&str, usize>::new();
        for instance in self.instances.values() {
            *counts
                .entry(instance.status.as_deref().unwrap_or("UNKNOWN"))
                .or_default() += 1;
        }
        counts
            .into_iter()
            .map(|(status, n)| format!("{status}_{n}_"))
            .collect()
    }
}

/// What a delta made of the mirror.
#[derive(Debug)]
pub(crate) enum Reconciled {
    /// The result matches the server: the new mirror, `None` when nothing changed.
    Yes(Option<Mirror>),
    /// It does not (the server's hashcode, and ours): a full fetch is needed.
    No {
        server: Option<String>,
        local: String,
    },
}

/// The instances of a document with their keys and action types (taken out of the instance, so
/// that an instance compares equal however it arrived). The application name comes from the
/// application (else the instance's `app`) and is upper-cased, as the server does.
fn entries(apps: Applications) -> impl Iterator<Item = (InstanceKey, Option<String>, Instance)> {
    apps.application.0.into_iter().flat_map(|app| {
        let app_name = app.name;
        app.instance.0.into_iter().map(move |mut instance| {
            let name = app_name
                .as_deref()
                .or(instance.app.as_deref())
                .unwrap_or_default()
                .to_ascii_uppercase();
            let key = (name, instance.id().to_string());
            let action = instance.action_type.take();
            (key, action, instance)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::parse_applications;

    fn doc(instances: &str) -> Applications {
        let body = format!(
            r#"{{"applications":{{"application":[{{"name":"A","instance":[{instances}]}}]}}}}"#
        );
        parse_applications(body.as_bytes()).unwrap()
    }

    #[test]
    fn hashcode_counts_statuses_in_order() {
        assert_eq!(Mirror::default().hashcode(), "");
        let m = Mirror::full(doc(
            r#"{"instanceId":"1","status":"UP"},{"instanceId":"2","status":"DOWN"},
               {"instanceId":"3","status":"UP"},{"instanceId":"4","status":"UP"}"#,
        ));
        assert_eq!(m.hashcode(), "DOWN_1_UP_3_");
    }

    #[test]
    fn deltas_upsert_and_delete() {
        let mut m = Mirror::full(doc(
            r#"{"instanceId":"1","status":"UP"},{"instanceId":"2","status":"UP"}"#,
        ));
        let changed = m.apply(doc(
            r#"{"instanceId":"1","status":"DOWN","actionType":"MODIFIED"},
               {"instanceId":"2","actionType":"DELETED"},
               {"instanceId":"3","status":"UP","actionType":"ADDED"}"#,
        ));
        assert!(changed);
        assert_eq!(m.hashcode(), "DOWN_1_UP_1_");
        let ids: Vec<_> = m
            .instances
            .keys()
            .map(|(a, i)| format!("{a}/{i}"))
            .collect();
        assert_eq!(ids, ["A/1", "A/3"]);
        assert!(m.instances.values().all(|i| i.action_type.is_none()));
        let same = m.clone();
        assert!(!m.apply(doc(
            r#"{"instanceId":"3","status":"UP","actionType":"MODIFIED"}"#
        )));
        assert_eq!(m, same);
    }
}
