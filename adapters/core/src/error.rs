//! Errors a registry reports as stream items.

use serde::Serialize;

/// A failure a registry reports. Each variant says *where* (`origin`: a file with its document
/// and line, an HTTP request, a watch) and *what*. Errors are cloneable because the aggregate
/// keeps the last one per registry for `/debug/registryz`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RegistryError {
    /// The source answered, but what it said could not be parsed (bad YAML, truncated JSON,
    /// a wrong type). The last good state stays in force.
    #[error("{origin}: malformed: {detail}")]
    Malformed {
        /// Where: `path/to/file.yaml: document 2, line 14`, `GET http://…/v1/health/service/x`.
        origin: String,
        /// What was wrong.
        detail: String,
    },
    /// The source parsed, but an object in it is not valid (a port number of 0, an endpoint
    /// address that is not an IP for a statically resolved service).
    #[error("{origin}: invalid: {detail}")]
    Invalid {
        /// Where the object came from.
        origin: String,
        /// What rule it breaks.
        detail: String,
    },
    /// The source could not be reached or read (connection refused, HTTP 500, a directory that
    /// disappeared). The adapter retries on its own.
    #[error("{origin}: unavailable: {detail}")]
    Unavailable {
        /// What was being read.
        origin: String,
        /// Why it failed.
        detail: String,
    },
}

impl RegistryError {
    /// Where the error happened.
    pub fn origin(&self) -> &str {
        match self {
            Self::Malformed { origin, .. }
            | Self::Invalid { origin, .. }
            | Self::Unavailable { origin, .. } => origin,
        }
    }
}
