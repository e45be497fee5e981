//! A configuration source read from files: Istio `VirtualService`, `DestinationRule`,
//! `Gateway`, `Sidecar`, `WorkloadGroup`, `PeerAuthentication` and `AuthorizationPolicy`
//! objects in watched YAML and JSON files, like Istio's `pilot-discovery --configDir`.
//!
//! Start with [`ConfigDir::new`] and hand the [`ConfigDir`] to the server as any other
//! [`ConfigSource`]. Files are found, parsed and watched as the File registry does (see the
//! crate docs): the same directories and files, multi-document YAML, `kind: List`, origins of
//! the form `path: document N (line L)`. `ServiceEntry` and `WorkloadEntry` objects are left
//! quietly to the File registry, which the server runs over the same paths; other kinds are
//! skipped with a warning that names the file, the document and the kind.
//!
//! # Objects, problems and the last good version
//!
//! Each object is checked with [`validate::validate`] (and must have a name), and the spec
//! fields its types skip are judged against Istio's CRDs: a field Istio defines and wayfinder
//! does not act on is a warning, a field no CRD defines (a typo) a fatal problem. Warnings are
//! logged at WARN with the object's origin, the object and the field, and travel with the
//! object (`meta.warnings`, shown by `/debug/configz`). An object with a fatal problem is
//! rejected: the stream carries a [`RegistryError::Invalid`] at its origin, naming the object
//! (`VirtualService default/reviews`) and listing every fatal problem as `field: message`.
//! Istio's `RequestAuthentication` (of `security.istio.io`) is rejected the same way, with an
//! ERROR line, until wayfinder enforces it: skipping it would fail open.
//! (`PeerAuthentication` and `AuthorizationPolicy` of that group are read like the other
//! kinds.)
//!
//! The last good state is kept per object, not per file: every document is parsed and judged
//! on its own. When a file changes, its valid objects replace their previous versions, a
//! rejected object keeps the last good version it had in that file (if any) until it is fixed
//! or deleted, and objects gone from the file are removed. A document that does not parse
//! (YAML syntax, bytes that are not UTF-8, a wrong type) is a [`RegistryError::Malformed`]
//! with the parser's position; the object it holds, when its name can still be read, keeps its
//! last good version, and when not, none of the file's previous objects is removed while it is
//! there. Deleting a file removes its objects.
//!
//! What the source refuses now (each document and object, with its file, document, line,
//! kind, namespace, name and error; duplicates too) is sent as [`ConfigEvent::Refused`] after
//! the events of every change that alters it: an entry leaves when it is fixed or deleted.
//!
//! When two objects have the same kind, namespace and name, the first (by the order of the
//! configured paths, then file name, then document) is used and the other is reported as
//! [`RegistryError::Invalid`]: `duplicate VirtualService default/reviews, first defined at …`.
//!
//! # The stream
//!
//! It follows the contract on [`ConfigEvent`]: first a `Reset` with every object in force
//! (the refused list and the errors of files broken at the start come after it), then an `Upsert` or `Remove` for each
//! object whose content a change alters, and nothing for the others. Content is the spec, the
//! name, the namespace, the labels, the annotations and the warnings, not `meta.origin`: an object that only
//! moved within its file is not announced, though the next event about it carries where it is
//! now. Health follows the last item, as for the File registry: `Recovered` when everything
//! works again and nothing changed, and the outstanding errors again after a change while a
//! file stays broken. The stream ends promptly when the shutdown token is cancelled.

use std::path::PathBuf;
use std::sync::Arc;

use wayfinder_config::model::ConfigState;
use wayfinder_config::{ConfigObject, ConfigStream, validate};
use wayfinder_registry::{CancellationToken, RegistryId, Source};

#[cfg(doc)]
use wayfinder_config::{ConfigEvent, ConfigSource};
#[cfg(doc)]
use wayfinder_registry::RegistryError;

use crate::BuildError;
use crate::reader::on_reader;
use crate::runner::Runner;
use crate::watch::Target;

/// The source's name.
const NAME: &str = "config-dir";

/// A configuration source over files and directories; see the module docs.
#[derive(Debug)]
pub struct ConfigDir {
    id: RegistryId,
    targets: Vec<Target>,
    max_file_bytes: u64,
}

impl ConfigDir {
    /// Checks that every path is a readable file or a listable directory, as
    /// [`crate::Config::build`] does. Directories contribute their `.yaml`, `.yml` and
    /// `.json` files; earlier paths take precedence when objects have the same key. Nothing
    /// is watched until [`Source::watch`]. Files are read as the File registry reads
    /// them ([`crate::read`]), up to [`crate::DEFAULT_MAX_FILE_BYTES`] unless
    /// [`ConfigDir::max_file_bytes`] says otherwise.
    pub fn new(paths: Vec<PathBuf>) -> Result<Self, BuildError> {
        Ok(Self {
            id: RegistryId::new(NAME),
            targets: crate::targets(paths)?,
            max_file_bytes: crate::DEFAULT_MAX_FILE_BYTES,
        })
    }

    /// Sets the largest file read, in bytes, as [`crate::Config::max_file_bytes`] does for
    /// the File registry: a larger file is refused before it is read and its objects keep
    /// their last good versions.
    pub fn max_file_bytes(mut self, limit: u64) -> Self {
        self.max_file_bytes = limit;
        self
    }
}

impl Source<Arc<ConfigObject>> for ConfigDir {
    fn id(&self) -> &RegistryId {
        &self.id
    }

    /// Reads and keeps the objects on the `file-reader` thread that every file source
    /// shares (see `reader`: a large file neither holds a runtime worker nor spreads its
    /// memory over the allocator's per-thread arenas).
    fn watch(self: Box<Self>, shutdown: CancellationToken) -> ConfigStream {
        let model = ConfigState::new(validate::validate);
        let runner = Runner::new(self.targets, self.max_file_bytes, shutdown.clone(), model);
        on_reader(NAME, runner.into_stream(), shutdown)
    }
}
