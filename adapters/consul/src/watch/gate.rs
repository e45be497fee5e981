//! The consumer's view of the registry's health, and the rule against error floods: while
//! errors keep their wording, one is sent every [`ERROR_REPEAT`] rather than one per watch.

use std::time::Duration;

use tokio::time::Instant;
use wayfinder_registry::RegistryError;

/// While errors keep their wording, one is sent this often rather than one per watch.
const ERROR_REPEAT: Duration = Duration::from_secs(10);

#[derive(Default)]
pub(super) struct ErrorGate {
    /// Whether the last item sent was an error.
    pub(super) degraded: bool,
    /// The wording of the last error sent, and when.
    pub(super) last: Option<(String, Instant)>,
}

impl ErrorGate {
    /// Whether `err` may go out now: always while the consumer thinks the registry healthy;
    /// else when its wording differs from the last error's, or that one is old.
    pub(super) fn admits(&self, err: &RegistryError) -> bool {
        let detail = detail(err);
        match &self.last {
            Some((d, at)) if self.degraded => d != detail || at.elapsed() >= ERROR_REPEAT,
            _ => true,
        }
    }
}

/// What went wrong, without where: the part of an error that many watches share.
pub(super) fn detail(err: &RegistryError) -> &str {
    match err {
        RegistryError::Malformed { detail, .. }
        | RegistryError::Invalid { detail, .. }
        | RegistryError::Unavailable { detail, .. } => detail,
    }
}
