//! How each source is doing, as readers of the snapshot see it: `/debug/registryz`,
//! `/debug/configz`, `/ready` and the per-registry metrics.
//!
//! The aggregate fills these in from what it tracks of every source's stream and publishes
//! them with [`super::Publisher::set_statuses`].

use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use wayfinder_config::Refusal;
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
    /// `error`, seen now.
    pub fn now(error: RegistryError) -> Self {
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        Self { at, error }
    }
}

/// How one registry is doing.
#[derive(Clone, Debug, Serialize)]
pub struct RegistryStatus {
    /// The registry.
    pub registry: RegistryId,
    /// True once its first state arrived.
    pub synced: bool,
    /// Whether its last item was good.
    pub health: Health,
    /// Services it reports.
    pub services: usize,
    /// Endpoints it reports.
    pub endpoints: usize,
    /// Items received from it.
    pub events: u64,
    /// The most recent error, kept after recovery for reference.
    pub last_error: Option<ErrorRecord>,
}

/// How one configuration source is doing.
#[derive(Clone, Debug, Serialize)]
pub struct ConfigSourceStatus {
    /// The source.
    pub source: RegistryId,
    /// True once its first state arrived.
    pub synced: bool,
    /// Whether its last item was good.
    pub health: Health,
    /// Objects it holds.
    pub objects: usize,
    /// Items received from it.
    pub events: u64,
    /// The most recent error (a rejected object, a malformed file), kept for reference.
    pub last_error: Option<ErrorRecord>,
    /// Every document and object it refuses now, each with its own error; an entry leaves
    /// when it is fixed or deleted. `/debug/configz` shows them in a list of their own.
    #[serde(skip)]
    pub refused: Arc<[Refusal]>,
}
