//! Each configuration source's current objects, and what it refuses now.

use std::collections::BTreeMap;
use std::sync::Arc;

use wayfinder_config::{ConfigKey, ConfigObject, Refusal, validate};
use wayfinder_registry::{RegistryError, RegistryId};

use super::source::{Applied, Contents};
use super::store::ChangeKind;
use crate::snapshot::Holds;

/// What one event did to one configuration object of one source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigChange {
    /// The object.
    pub key: ConfigKey,
    /// `Added`, `Updated` or `Removed` (never `EndpointsOnly`, which is for services).
    pub kind: ChangeKind,
}

impl ConfigChange {
    fn new(key: ConfigKey, kind: ChangeKind) -> Self {
        Self { key, kind }
    }
}

/// One configuration source's objects as the aggregate holds them: only objects that passed
/// validation. Sources validate too (and can say where an object came from); checking again
/// here keeps the invariant whatever a source does. The configuration objects' [`Contents`]
/// of a [`Store`](super::source::Store).
#[derive(Default)]
pub(crate) struct ConfigObjects {
    pub(crate) objects: BTreeMap<ConfigKey, Arc<ConfigObject>>,
    /// Objects the source sent that fail validation here, by key, until replaced or removed.
    own_refused: BTreeMap<ConfigKey, Refusal>,
}

impl ConfigObjects {
    /// Records the outcome of checking `object`: its refusal, or none.
    fn judged(&mut self, key: &ConfigKey, object: &ConfigObject, err: Option<&RegistryError>) {
        match err {
            Some(err) => {
                self.own_refused.insert(key.clone(), refusal(object, err));
            }
            None => {
                self.own_refused.remove(key);
            }
        }
    }
}

impl Contents for ConfigObjects {
    type Item = Arc<ConfigObject>;
    type Change = ConfigChange;

    fn reset(&mut self, _: &RegistryId, objects: Vec<Arc<ConfigObject>>, out: &mut Applied<Self>) {
        self.own_refused.clear();
        let mut next = BTreeMap::new();
        for object in objects {
            let key = object.key();
            let checked = check(&object);
            self.judged(&key, &object, checked.as_ref().err());
            match checked {
                Ok(()) => {
                    next.insert(key, object);
                }
                Err(err) => {
                    out.refused.push(err);
                    if let Some(old) = self.objects.get(&key) {
                        next.insert(key, old.clone());
                    }
                }
            }
        }
        out.changes.extend(
            self.objects
                .keys()
                .filter(|k| !next.contains_key(*k))
                .map(|k| ConfigChange::new(k.clone(), ChangeKind::Removed)),
        );
        out.changes.extend(next.iter().filter_map(|(k, o)| {
            let kind = match self.objects.get(k) {
                None => ChangeKind::Added,
                Some(old) if old != o => ChangeKind::Updated,
                Some(_) => return None,
            };
            Some(ConfigChange::new(k.clone(), kind))
        }));
        self.objects = next;
    }

    fn upsert(&mut self, _: &RegistryId, object: Arc<ConfigObject>, out: &mut Applied<Self>) {
        match check(&object) {
            Ok(()) => {
                let key = object.key();
                self.judged(&key, &object, None);
                let kind = match self.objects.get(&key) {
                    None => ChangeKind::Added,
                    Some(old) if *old != object => ChangeKind::Updated,
                    Some(_) => return,
                };
                out.changes.push(ConfigChange::new(key.clone(), kind));
                self.objects.insert(key, object);
            }
            Err(err) => {
                self.judged(&object.key(), &object, Some(&err));
                out.refused.push(err);
            }
        }
    }

    fn remove(&mut self, key: ConfigKey, out: &mut Applied<Self>) {
        self.own_refused.remove(&key);
        if self.objects.remove(&key).is_some() {
            out.changes
                .push(ConfigChange::new(key, ChangeKind::Removed));
        }
    }

    fn refused(&self) -> Vec<Refusal> {
        self.own_refused.values().cloned().collect()
    }

    fn holds(&self) -> Holds {
        Holds::Objects(self.objects.len())
    }
}

/// The refused-list entry of an object the aggregate refused: its origin is all it knows of
/// where it is.
fn refusal(object: &ConfigObject, err: &RegistryError) -> Refusal {
    let error = match err {
        RegistryError::Malformed { detail, .. }
        | RegistryError::Invalid { detail, .. }
        | RegistryError::Unavailable { detail, .. } => detail.clone(),
    };
    Refusal {
        file: object.meta.origin.clone(),
        document: None,
        line: None,
        kind: Some(Arc::from(object.kind().name())),
        namespace: Some(object.meta.namespace.clone()),
        name: Some(object.meta.name.clone()),
        error,
    }
}

fn check(object: &ConfigObject) -> Result<(), RegistryError> {
    let problems = validate::validate(object);
    let fatal: Vec<String> = problems
        .iter()
        .filter(|p| p.fatal)
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect();
    if fatal.is_empty() {
        return Ok(());
    }
    Err(RegistryError::Invalid {
        origin: object.meta.origin.to_string(),
        detail: format!(
            "{} {}: {}",
            object.kind(),
            object.key().name,
            fatal.join("; ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use wayfinder_config::{ConfigEvent, ConfigMeta, ConfigSpec, DestinationRule};

    use super::*;
    use crate::aggregate::source::Store;

    fn rule(name: &str, host: &str) -> Arc<ConfigObject> {
        Arc::new(ConfigObject {
            meta: ConfigMeta {
                name: name.into(),
                namespace: "default".into(),
                origin: format!("rules.yaml: {name}").into(),
                ..ConfigMeta::default()
            },
            spec: ConfigSpec::DestinationRule(Box::new(DestinationRule {
                host: host.into(),
                ..DestinationRule::default()
            })),
        })
    }

    fn listed(list: &[Refusal]) -> Vec<&str> {
        list.iter()
            .map(|r| r.name.as_deref().unwrap_or("?"))
            .collect()
    }

    fn refusal(name: &str) -> Refusal {
        Refusal {
            file: "rules.yaml".into(),
            document: Some(2),
            line: Some(9),
            kind: Some("VirtualService".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            error: "invalid: weight".into(),
        }
    }

    #[test]
    fn the_refused_list_is_the_sources_and_what_the_store_refused_until_fixed() {
        let mut store = Store::new(RegistryId::new("config-dir"), ConfigObjects::default());
        store.apply(ConfigEvent::Reset(vec![rule("good", "reviews")]));
        assert!(store.refused().is_empty());

        store.apply(ConfigEvent::Refused(vec![refusal("reviews")]));
        assert_eq!(listed(&store.refused()), ["reviews"]);

        // The source sent an object that fails validation here: listed until replaced.
        let (_, refused) = store.apply(ConfigEvent::Upsert(rule("bad", "")));
        assert_eq!(refused.len(), 1);
        assert_eq!(listed(&store.refused()), ["reviews", "bad"]);
        store.apply(ConfigEvent::Upsert(rule("bad", "ratings")));
        assert_eq!(listed(&store.refused()), ["reviews"]);

        // A later list replaces the source's; a Reset empties it.
        store.apply(ConfigEvent::Refused(Vec::new()));
        assert!(store.refused().is_empty());
        store.apply(ConfigEvent::Refused(vec![refusal("reviews")]));
        store.apply(ConfigEvent::Reset(Vec::new()));
        assert!(store.refused().is_empty());
    }

    #[test]
    fn changes_say_whether_an_object_was_added_updated_or_removed() {
        let mut store = Store::new(RegistryId::new("config"), ConfigObjects::default());
        let kinds = |(changes, _): (Vec<ConfigChange>, _)| -> Vec<(String, ChangeKind)> {
            changes
                .into_iter()
                .map(|c| (c.key.name.to_string(), c.kind))
                .collect()
        };
        let reset = ConfigEvent::Reset(vec![rule("a", "a"), rule("b", "b")]);
        assert_eq!(
            kinds(store.apply(reset)),
            [
                ("a".into(), ChangeKind::Added),
                ("b".into(), ChangeKind::Added)
            ]
        );
        let upsert = ConfigEvent::Upsert(rule("a", "a2"));
        assert_eq!(
            kinds(store.apply(upsert)),
            [("a".into(), ChangeKind::Updated)]
        );
        let same = ConfigEvent::Upsert(rule("a", "a2"));
        assert_eq!(kinds(store.apply(same)), []);
        let reset = ConfigEvent::Reset(vec![rule("a", "a3"), rule("c", "c")]);
        assert_eq!(
            kinds(store.apply(reset)),
            [
                ("b".into(), ChangeKind::Removed),
                ("a".into(), ChangeKind::Updated),
                ("c".into(), ChangeKind::Added),
            ]
        );
        let remove = ConfigEvent::Remove(rule("c", "c").key());
        assert_eq!(
            kinds(store.apply(remove)),
            [("c".into(), ChangeKind::Removed)]
        );
    }
}
