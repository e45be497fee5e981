//! Each configuration source's current objects.

use std::collections::BTreeMap;
use std::sync::Arc;

use wayfinder_registry::config::{ConfigEvent, ConfigKey, ConfigObject, validate};
use wayfinder_registry::{RegistryError, RegistryId};

use super::source::SourceState;

/// One configuration source's objects as the aggregate holds them: only objects that passed
/// validation. Sources validate too (and can say where an object came from); checking again
/// here keeps the invariant whatever a source does.
pub(crate) struct ConfigStore {
    pub(crate) state: SourceState,
    pub(crate) objects: BTreeMap<ConfigKey, Arc<ConfigObject>>,
}

impl ConfigStore {
    pub(crate) fn new(id: RegistryId) -> Self {
        Self {
            state: SourceState::new(id),
            objects: BTreeMap::new(),
        }
    }

    /// Applies one event; returns the keys whose object changed and the objects refused.
    pub(crate) fn apply(&mut self, event: ConfigEvent) -> (Vec<ConfigKey>, Vec<RegistryError>) {
        let mut changed = Vec::new();
        let mut refused = Vec::new();
        match event {
            ConfigEvent::Reset(objects) => {
                self.state.synced = true;
                let mut next = BTreeMap::new();
                for object in objects {
                    let key = object.key();
                    match check(&object) {
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
            ConfigEvent::Upsert(object) => match check(&object) {
                Ok(()) => {
                    let key = object.key();
                    if self.objects.get(&key) != Some(&object) {
                        changed.push(key.clone());
                        self.objects.insert(key, object);
                    }
                }
                Err(err) => refused.push(err),
            },
            ConfigEvent::Remove(key) => {
                if self.objects.remove(&key).is_some() {
                    changed.push(key);
                }
            }
            ConfigEvent::Recovered => {}
        }
        self.state.settle(&refused);
        (changed, refused)
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
