//! Istio configuration read from YAML and JSON files, watched for changes: a service
//! registry, a source of traffic configuration, and an offline check of both.
//!
//! - **The File registry.** Start with [`Config`]: name files and directories,
//!   [`Config::build`] a [`FileRegistry`], and hand it to the server as any other
//!   [`Registry`]. It reads `ServiceEntry` and `WorkloadEntry` objects. Its stream follows the
//!   contract on [`Event`]: a `Reset` with every good file's services, then for each file
//!   change one event with the services it alters (an `Upsert` or a `Remove` for one, a
//!   `Batch` for several), and nothing for services it leaves alone.
//!   The rest of these docs are about it.
//! - **The config source** ([`config`], [`ConfigDir`]): `VirtualService`, `DestinationRule`,
//!   `Gateway`, `Sidecar`, `WorkloadGroup`, `PeerAuthentication` and `AuthorizationPolicy`
//!   objects from the same kind of paths, like Istio's
//!   `pilot-discovery --configDir`, as a [`wayfinder_config::ConfigSource`]. Each
//!   object is validated on its own and keeps its last good version when an edit breaks it.
//!   The server runs it and the File registry over the same directory; each skips the other's
//!   kinds quietly.
//! - **The offline check** ([`check()`], for `wayfinder validate PATH...`): every file read as
//!   both of the above read it, and every problem (parse errors, rejected objects, duplicates,
//!   warnings, unknown kinds) listed in a [`wayfinder_config::check::Report`] with its path,
//!   document and line; [`analyze()`] (for `wayfinder analyze PATH...`) reads the same files
//!   and analyses them across objects, and [`registrations()`] reads a File registry's files
//!   for it.
//!
//! This crate is about files: finding them, reading them safely ([`read`]) and watching them
//! ([`watch`], batches of changed files, robust to editors' save patterns, public for reuse).
//! What a file's bytes mean is `wayfinder-config`'s: the registry and the config source share
//! one loop (`runner`: watch, read, keep the health of the stream true) and differ only in the
//! model they drive ([`wayfinder_config::model`]: `Services` and `ConfigState`), the very
//! models the Kubernetes adapter drives with objects from the API server; the check reads the
//! files and hands their bytes to [`wayfinder_config::check::Checker`]. It depends on
//! `wayfinder-registry` and `wayfinder-config`, never on another adapter.
//!
//! # Files
//!
//! A configured directory contributes its `.yaml`, `.yml` and `.json` files (not
//! subdirectories, hidden files or editor backups); a configured file contributes itself.
//! YAML files may hold several documents separated by `---`; a JSON file holds one object. A
//! document may also be a `kind: List` whose `items` are objects (`kubectl get -o yaml`).
//! Objects of `networking.istio.io/v1`, `v1beta1` and `v1alpha3` are read; other Istio kinds
//! (VirtualService, DestinationRule, …: the config source's) are skipped quietly, anything
//! else with a warning.
//!
//! Only regular files (or symlinks to them) are read, and only up to
//! [`Config::max_file_bytes`] (64 MiB by default): a FIFO, socket or device named like a
//! configuration file, or a larger file, is refused unread as [`RegistryError::Invalid`], and
//! a file that cannot be read (permission denied) is [`RegistryError::Unavailable`]. Both name
//! the file, and its last good contents stay, as below. See [`read`] for how.
//!
//! # Mapping
//!
//! Objects are mapped to services as Istio maps them, by the model this registry shares with
//! the Kubernetes adapter's entries ([`wayfinder_config::model::Services`], whose docs give the
//! mapping): each host of a `ServiceEntry` is a service, with its inline endpoints or the
//! `WorkloadEntry` objects, in any watched file, that its `workloadSelector` selects.
//!
//! # Errors and the last good state
//!
//! The last good state is kept per object, as the config source keeps it: each document of a
//! file is judged on its own. A document that fails to parse ([`RegistryError::Malformed`]: a
//! syntax error, bytes that are not UTF-8, a wrong type) or whose object fails to validate
//! ([`RegistryError::Invalid`]) is an item of the stream with an origin of the form
//! `path: document N (line L)`; the object it holds keeps the last good version it had in that
//! file, if any, and the file's other documents take effect. A document that does not even say
//! which object it holds (a syntax error before its name) could be any of the file's objects,
//! so while it is there none of the file's previous objects is removed. Other files are not
//! affected. A `kind: List` document is one unit: an error in an item refuses the list.
//!
//! Spec fields that Istio's CRDs define and this registry does not read are accepted with a
//! warning naming the object and the field; a field no CRD defines (a typo) refuses its object.
//! A watched directory that disappears is reported as [`RegistryError::Unavailable`]; its files
//! keep their last good contents until it is back. With [`FileRegistry::beside_config_source`]
//! (`--config-dir`), a document of unknown kind that does not parse is left to the config
//! source to report.
//!
//! A consumer reads the registry's health from its last item. So when everything works again
//! and no service changed, the stream sends [`Event::Recovered`]; and while some file stays
//! broken, its error is sent again after any change, so the change does not read as a
//! recovery.
//!
//! # One host in several entries
//!
//! When entries of this registry (in the same namespace) name the same host, they are merged
//! into one registration, ranked by the order of the configured paths, then by file name
//! within a directory, then by document order in a file ([`wayfinder_config::model::Services`]
//! gives the rule).

pub mod config;
pub mod read;
pub mod watch;

mod check;
mod reader;
mod runner;

use std::fs;
use std::io;
use std::path::PathBuf;

use serde::Deserialize;
use wayfinder_config::model::Services;
use wayfinder_registry::{CancellationToken, EventStream, Registration, RegistryId, Source};

#[cfg(doc)]
use wayfinder_registry::{Event, Registry, RegistryError};

pub use crate::check::{analyze, check, registrations};
pub use crate::config::ConfigDir;
pub use crate::read::DEFAULT_MAX_FILE_BYTES;

use crate::reader::on_reader;
use crate::runner::Runner;
use crate::watch::Target;

/// Configuration of a file registry.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Files and directories to read and watch. A directory contributes its `.yaml`, `.yml`
    /// and `.json` files, not those of its subdirectories. Earlier paths take precedence when
    /// entries define the same host. Relative paths are resolved against the working
    /// directory when the registry is built.
    pub paths: Vec<PathBuf>,
    /// Largest file read, in bytes (default [`DEFAULT_MAX_FILE_BYTES`], 64 MiB). A larger
    /// file is refused before it is read, as an error of the stream; its last good contents
    /// stay. See [`read`].
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            paths: Vec::new(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

fn default_max_file_bytes() -> u64 {
    DEFAULT_MAX_FILE_BYTES
}

impl Config {
    /// Checks that every path is a readable file or a listable directory, and builds the
    /// registry. Nothing is watched until [`Source::watch`].
    pub fn build(self, id: RegistryId) -> Result<FileRegistry, BuildError> {
        let targets = targets(self.paths)?;
        Ok(FileRegistry {
            id,
            targets,
            beside_config: false,
            max_file_bytes: self.max_file_bytes,
            blobs: None,
        })
    }
}

/// A registry of the services defined in a set of files; see the crate docs.
#[derive(Debug)]
pub struct FileRegistry {
    id: RegistryId,
    targets: Vec<Target>,
    beside_config: bool,
    max_file_bytes: u64,
    blobs: Option<tokio::sync::mpsc::UnboundedReceiver<runner::Blob>>,
}

/// Objects a [`FileRegistry`]'s owner hands it besides its files (see
/// [`FileRegistry::with_blobs`]). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Blobs {
    tx: tokio::sync::mpsc::UnboundedSender<runner::Blob>,
}

impl Blobs {
    /// Sets the blob `name` to `bytes` (a YAML or JSON document, read as a file is).
    pub fn set(&self, name: &str, bytes: Vec<u8>) {
        let _ = self.tx.send((name.to_string(), Some(bytes)));
    }

    /// Removes the blob `name`, as a deleted file.
    pub fn remove(&self, name: &str) {
        let _ = self.tx.send((name.to_string(), None));
    }
}

impl FileRegistry {
    /// Declares that a [`ConfigDir`] reads the same paths (as for `--config-dir`): a document
    /// that does not parse is then reported by the config source alone, unless it is a
    /// `ServiceEntry` or `WorkloadEntry`, so that one broken document is one error and one
    /// rejection, not two. Its objects are kept all the same.
    pub fn beside_config_source(mut self) -> Self {
        self.beside_config = true;
        self
    }

    /// Also reads objects its owner hands in: each named blob is read as a file after every
    /// configured path (so with the least precedence). The files themselves are read and
    /// watched only from the first blob on (the stream starts with an empty `Reset`), so that
    /// an owner that never hands one in costs nothing. The server's auto-registration writes
    /// its WorkloadEntries this way, to be selected by the ServiceEntries of the files.
    pub fn with_blobs(mut self) -> (Self, Blobs) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.blobs = Some(rx);
        (self, Blobs { tx })
    }
}

impl Source<Registration> for FileRegistry {
    fn id(&self) -> &RegistryId {
        &self.id
    }

    /// Reads the files on the `file-reader` thread that every file source shares (see
    /// `reader`): the server runs a File registry over `--config-dir` too, where it reads
    /// every file the config source reads.
    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream {
        let services = Services::new(self.beside_config);
        let mut runner = Runner::new(
            self.targets,
            self.max_file_bytes,
            shutdown.clone(),
            services,
        );
        if let Some(blobs) = self.blobs {
            runner = runner.with_blobs(blobs);
        }
        on_reader(self.id.as_str(), runner.into_stream(), shutdown)
    }
}

/// Why a [`Config`] cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `paths` is empty.
    #[error("no paths: at least one file or directory is needed")]
    NoPaths,
    /// A path does not exist or cannot be inspected.
    #[error("{}: {source}", path.display())]
    Inaccessible {
        /// The path as configured.
        path: PathBuf,
        /// Why it cannot be used.
        source: io::Error,
    },
    /// A path exists but is neither a regular file nor a directory.
    #[error("{}: neither a file nor a directory", path.display())]
    NotFileOrDirectory {
        /// The path as configured.
        path: PathBuf,
    },
    /// A directory cannot be listed.
    #[error("{}: cannot list the directory: {source}", path.display())]
    Unlistable {
        /// The path as configured.
        path: PathBuf,
        /// Why it cannot be listed.
        source: io::Error,
    },
    /// A file cannot be opened for reading.
    #[error("{}: cannot read the file: {source}", path.display())]
    Unreadable {
        /// The path as configured.
        path: PathBuf,
        /// Why it cannot be read.
        source: io::Error,
    },
}

/// The watch targets for configured paths, checked as [`Config::build`] says.
fn targets(paths: Vec<PathBuf>) -> Result<Vec<Target>, BuildError> {
    if paths.is_empty() {
        return Err(BuildError::NoPaths);
    }
    paths.into_iter().map(target).collect()
}

fn target(path: PathBuf) -> Result<Target, BuildError> {
    let absolute = match std::path::absolute(&path) {
        Ok(absolute) => absolute,
        Err(source) => return Err(BuildError::Inaccessible { path, source }),
    };
    let metadata = match fs::metadata(&absolute) {
        Ok(metadata) => metadata,
        Err(source) => return Err(BuildError::Inaccessible { path, source }),
    };
    if metadata.is_dir() {
        match fs::read_dir(&absolute) {
            Ok(_) => Ok(Target::Dir(absolute)),
            Err(source) => Err(BuildError::Unlistable { path, source }),
        }
    } else if metadata.is_file() {
        match read::open(&absolute) {
            Ok(_) => Ok(Target::File(absolute)),
            Err(read::ReadError::Io(source)) => Err(BuildError::Unreadable { path, source }),
            // Replaced by a FIFO or a device since it was looked at.
            Err(_) => Err(BuildError::NotFileOrDirectory { path }),
        }
    } else {
        Err(BuildError::NotFileOrDirectory { path })
    }
}
