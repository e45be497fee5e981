//! What the aggregate tracks about every source, registry or configuration source: whether it
//! synced, whether its last item was good, and its last error.

use std::sync::Arc;

use wayfinder_config::Refusal;
use wayfinder_registry::{RegistryError, RegistryId};

use crate::snapshot::{ConfigSourceStatus, ErrorRecord, Health, RegistryStatus};

/// A source's stream state.
pub(crate) struct SourceState {
    pub(crate) id: RegistryId,
    pub(crate) synced: bool,
    pub(crate) health: Health,
    pub(crate) last_error: Option<ErrorRecord>,
    pub(crate) events: u64,
}

impl SourceState {
    pub(crate) fn new(id: RegistryId) -> Self {
        Self {
            id,
            synced: false,
            health: Health::Healthy,
            last_error: None,
            events: 0,
        }
    }

    /// Records an error item (or a refused object): degraded until the next good item.
    pub(crate) fn fail(&mut self, error: RegistryError) {
        self.health = Health::Degraded;
        self.last_error = Some(ErrorRecord::now(error));
    }

    /// Records the end of the stream.
    pub(crate) fn stop(&mut self, error: RegistryError) {
        self.fail(error);
        self.health = Health::Stopped;
    }

    /// Records a good item, unless it carried refused objects.
    pub(crate) fn settle(&mut self, refused: &[RegistryError]) {
        self.events += 1;
        match refused.last() {
            Some(err) => self.fail(err.clone()),
            None => self.health = Health::Healthy,
        }
    }

    /// The status readers see of a registry in this state.
    pub(crate) fn registry_status(&self, services: usize, endpoints: usize) -> RegistryStatus {
        RegistryStatus {
            registry: self.id.clone(),
            synced: self.synced,
            health: self.health,
            services,
            endpoints,
            events: self.events,
            last_error: self.last_error.clone(),
        }
    }

    /// The status readers see of a configuration source in this state.
    pub(crate) fn config_status(
        &self,
        objects: usize,
        refused: Arc<[Refusal]>,
    ) -> ConfigSourceStatus {
        ConfigSourceStatus {
            source: self.id.clone(),
            synced: self.synced,
            health: self.health,
            objects,
            events: self.events,
            last_error: self.last_error.clone(),
            refused,
        }
    }
}
