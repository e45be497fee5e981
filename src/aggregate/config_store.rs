//! Each configuration source's current objects, and what it refuses now.

use std::collections::BTreeMap;
use std::sync::Arc;

use wayfinder_config::{ConfigEvent, ConfigKey, ConfigObject, Refusal, validate};
use wayfinder_registry::{RegistryError, RegistryId};

use super::source::SourceState;

/// One configuration source's objects as the aggregate holds them: only objects that passed
/// validation. Sources validate too (and can say where an object came from); checking again
/// here keeps the invariant whatever a source does.
pub(crate) struct ConfigStore {
    pub(crate) state: SourceState,
    pub(crate) objects: BTreeMap<ConfigKey, Arc<ConfigObject>>,
    /// What the source says it refuses now ([`ConfigEvent::Refused`]).
    source_refused: Arc<[Refusal]>,
    /// Objects the source sent that fail validation here, by key, until replaced or removed.
    own_refused: BTreeMap<ConfigKey, Refusal>,
}

impl ConfigStore {
    pub(crate) fn new(id: RegistryId) -> Self {
        Self {
            state: SourceState::new(id),
            objects: BTreeMap::new(),
            source_refused: Arc::from([]),
            own_refused: BTreeMap::new(),
        }
    }

    /// Everything refused now: what the source refuses, then what the aggregate refused of
    /// what it sent.
    pub(crate) fn refused(&self) -> Arc<[Refusal]> {
        if self.own_refused.is_empty() {
            return self.source_refused.clone();
        }
        let own = self.own_refused.values();
        self.source_refused.iter().chain(own).cloned().collect()
    }

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

    /// Applies one event; returns the keys whose object changed and the objects refused.
    pub(crate) fn apply(&mut self, event: ConfigEvent) -> (Vec<ConfigKey>, Vec<RegistryError>) {
        let mut changed = Vec::new();
        let mut refused = Vec::new();
        match event {
            ConfigEvent::Reset(objects) => {
                self.state.synced = true;
                self.source_refused = Arc::from([]);
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
                            refused.push(err);
                            if let Some(old) = self.objects.get(&key) {
                                next.insert(key, old.clone());
                            }
                        }
                    }
                }
                changed.extend(
                    self.objects
                        .keys()
                        .filter(|k| !next.contains_key(*k))
                        .cloned(),
                );
                changed.extend(
                    next.iter()
                        .filter(|(k, o)| self.objects.get(*k) != Some(*o))
                        .map(|(k, _)| k.clone()),
                );
                self.objects = next;
            }
            ConfigEvent::Upsert(object) => self.upsert(object, &mut changed, &mut refused),
            ConfigEvent::Remove(key) => self.remove(key, &mut changed),
            ConfigEvent::Batch { removes, upserts } => {
                for key in removes {
                    self.remove(key, &mut changed);
                }
                for object in upserts {
                    self.upsert(object, &mut changed, &mut refused);
                }
            }
            ConfigEvent::Refused(list) => self.source_refused = list.into(),
            ConfigEvent::Recovered => {}
        }
        self.state.settle(&refused);
        (changed, refused)
    }
}

impl ConfigStore {
    fn upsert(
        &mut self,
        object: Arc<ConfigObject>,
        changed: &mut Vec<ConfigKey>,
        refused: &mut Vec<RegistryError>,
    ) {
        match check(&object) {
            Ok(()) => {
                let key = object.key();
                self.judged(&key, &object, None);
                if self.objects.get(&key) != Some(&object) {
                    changed.push(key.clone());
                    self.objects.insert(key, object);
                }
            }
            Err(err) => {
                self.judged(&object.key(), &object, Some(&err));
                refused.push(err);
            }
        }
    }

    fn remove(&mut self, key: ConfigKey, changed: &mut Vec<ConfigKey>) {
        self.own_refused.remove(&key);
        if self.objects.remove(&key).is_some() {
            changed.push(key);
        }
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
    use wayfinder_config::{ConfigMeta, ConfigSpec, DestinationRule};

    use super::*;

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
        let mut store = ConfigStore::new(RegistryId::new("config-dir"));
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
}
