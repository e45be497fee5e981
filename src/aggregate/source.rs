//! What the aggregate tracks about every source, registry or configuration source: whether it
//! synced, whether its last item was good, and its last error.

use std::time::SystemTime;

use serde::Serialize;
use wayfinder_registry::{RegistryError, RegistryId};

/// The state of a source's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// The last item was good.
    Healthy,
    /// The last item was an error (or a refused object); the last good state is still served.
    Degraded,
    /// The stream ended (or its adapter panicked); the last good state is still served.
    Stopped,
}

/// An error with the time it was seen.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorRecord {
    /// Seconds since the Unix epoch.
    pub at: f64,
    /// The error.
    pub error: RegistryError,
}

impl ErrorRecord {
    fn now(error: RegistryError) -> Self {
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        Self { at, error }
    }
}

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
}
