//! How each source is doing, as readers of the snapshot see it: `/debug/registryz`,
//! `/debug/configz`, `/ready` and the per-registry metrics.
//!
//! The aggregate fills these in from what it tracks of every source's stream and publishes
//! them with [`super::Publisher::set_statuses`].

use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};
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

/// How one source is doing, a registry or a configuration source: `/debug/registryz` shows
/// the registries', `/debug/configz` the configuration sources'.
///
/// It serializes with the names those pages have always shown: a registry's id under
/// `registry`, with its `services` and `endpoints`; a configuration source's under `source`,
/// with its `objects`; then `synced`, `health`, `events` and `last_error`.
#[derive(Clone, Debug)]
pub struct SourceStatus {
    /// The source.
    pub id: RegistryId,
    /// True once its first state arrived.
    pub synced: bool,
    /// Whether its last item was good.
    pub health: Health,
    /// What it holds now.
    pub holds: Holds,
    /// Items received from it.
    pub events: u64,
    /// The most recent error (an error item, a refused registration or object, the end of
    /// its stream), kept after recovery for reference.
    pub last_error: Option<ErrorRecord>,
    /// Every document and object it refuses now, each with its own error; an entry leaves
    /// when it is fixed or deleted. Not serialized: `/debug/configz` shows them in a list of
    /// their own.
    pub refused: Arc<[Refusal]>,
}

/// What a source holds, by what it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// A registry's services, and their endpoints.
    Services {
        /// Services it reports.
        services: usize,
        /// Endpoints it reports.
        endpoints: usize,
    },
    /// A configuration source's objects.
    Objects(usize),
}

impl Serialize for SourceStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let holds = match self.holds {
            Holds::Services { .. } => 3,
            Holds::Objects(_) => 2,
        };
        let mut status = serializer.serialize_struct("SourceStatus", holds + 4)?;
        match self.holds {
            Holds::Services {
                services,
                endpoints,
            } => {
                status.serialize_field("registry", &self.id)?;
                status.serialize_field("services", &services)?;
                status.serialize_field("endpoints", &endpoints)?;
            }
            Holds::Objects(objects) => {
                status.serialize_field("source", &self.id)?;
                status.serialize_field("objects", &objects)?;
            }
        }
        status.serialize_field("synced", &self.synced)?;
        status.serialize_field("health", &self.health)?;
        status.serialize_field("events", &self.events)?;
        status.serialize_field("last_error", &self.last_error)?;
        status.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status(holds: Holds) -> SourceStatus {
        SourceStatus {
            id: RegistryId::new("A"),
            synced: true,
            health: Health::Degraded,
            holds,
            events: 7,
            last_error: None,
            refused: Arc::from([]),
        }
    }

    #[test]
    fn statuses_serialize_with_the_names_the_debug_pages_show() {
        let services = Holds::Services {
            services: 2,
            endpoints: 5,
        };
        assert_eq!(
            serde_json::to_value(status(services)).unwrap(),
            json!({"registry": "A", "synced": true, "health": "degraded", "services": 2,
                   "endpoints": 5, "events": 7, "last_error": null})
        );
        assert_eq!(
            serde_json::to_value(status(Holds::Objects(3))).unwrap(),
            json!({"source": "A", "synced": true, "health": "degraded", "objects": 3,
                   "events": 7, "last_error": null})
        );
    }
}
