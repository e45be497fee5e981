//! The state a source of Istio objects keeps: what a [`Model`] is, and the two this crate
//! has.
//!
//! A model takes the bytes of a file (or of a named blob) at a time, keeps the last good
//! version of each object, and says what changed. [`Services`] is the File registry's
//! (`ServiceEntry` and `WorkloadEntry` into registrations), [`ConfigState`] the config
//! source's (`VirtualService`, `DestinationRule`, `Gateway`, `Sidecar`, `WorkloadGroup`,
//! `PeerAuthentication` and `AuthorizationPolicy`, each validated on its own). The File adapter
//! drives them with watched files, [`crate::Feed`] with blobs such as objects read from the
//! Kubernetes API; both keep the stream's health with [`Health`].

use std::path::PathBuf;

use wayfinder_registry::RegistryError;

pub use crate::health::Health;
pub use crate::objects::{ConfigState, Validator};
pub use crate::services::Services;

/// Where a file stands in the precedence order: the index of the configured path that holds
/// it, then its path (so files of one directory go in sorted order).
pub type FileKey = (usize, PathBuf);

/// The state a stream keeps over the files (or blobs) it reads.
pub trait Model: Send + 'static {
    /// What the stream reports.
    type Event: Send + 'static;

    /// Takes a file's new bytes (`None`: the file is gone) and returns its errors. The model
    /// decides what of the file's previous contents stays in force when there are errors.
    fn apply(&mut self, file: &FileKey, bytes: Option<&[u8]>) -> Vec<RegistryError>;

    /// Composes the state after a batch of [`Model::apply`] calls. Returns the events that
    /// bring the consumer up to date (a `Reset` with everything when `first`), and every
    /// failure of the composed state that no single file is to blame for, found afresh.
    fn commit(&mut self, first: bool) -> (Vec<Self::Event>, Vec<RegistryError>);

    /// The event that says the source works again and nothing changed.
    fn recovered() -> Self::Event;
}
