//! One watched directory: which of its entries count, and listing them.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::{Path, PathBuf};

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use super::{Raw, Target, is_config_file, relevant};

/// A directory watched for one or more targets.
#[derive(Debug)]
pub(super) struct Dir {
    pub(super) path: PathBuf,
    /// Every configuration file counts (a [`Target::Dir`]).
    all: bool,
    /// Files that count whatever their names ([`Target::File`]s in this directory).
    names: BTreeSet<OsString>,
    /// The counted files last seen to exist, so that those deleted while the directory was
    /// away can be reported when it is back.
    pub(super) known: BTreeSet<PathBuf>,
    /// Watched and listed; false while it is missing.
    pub(super) available: bool,
}

impl Dir {
    /// Whether an entry of this directory counts.
    pub(super) fn wants(&self, name: &OsStr) -> bool {
        self.names.contains(name) || (self.all && is_config_file(name))
    }

    /// The counted files in the directory now (see [`is_file`]).
    pub(super) fn list(&self) -> Result<BTreeSet<PathBuf>, String> {
        let entries =
            fs::read_dir(&self.path).map_err(|err| format!("cannot list the directory: {err}"))?;
        let mut files = BTreeSet::new();
        // An entry that vanishes or cannot be read while listing is skipped: if it is back,
        // its own event reports it.
        for entry in entries.flatten() {
            let path = entry.path();
            if self.wants(&entry.file_name()) && is_file(&path) {
                files.insert(path);
            }
        }
        Ok(files)
    }
}

/// Whether `path` counts as a file to report: anything but a directory, after symlinks. A
/// FIFO, a socket or a device named like a configuration file is reported too, so that the
/// reader can refuse it as an error (`crate::read`) rather than have it ignored; the watch
/// itself never opens anything. A dangling symlink is no file.
pub(super) fn is_file(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|metadata| !metadata.is_dir())
}

/// The directories to watch for `targets`, each once, in the order first named.
pub(super) fn from_targets(targets: &[Target]) -> Vec<Dir> {
    let mut dirs: Vec<Dir> = Vec::new();
    for target in targets {
        let (path, name) = match target {
            Target::Dir(path) => (path.clone(), None),
            Target::File(path) => {
                let parent = match path.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                (parent, path.file_name().map(OsStr::to_os_string))
            }
        };
        let index = match dirs.iter().position(|d| d.path == path) {
            Some(index) => index,
            None => {
                dirs.push(Dir {
                    path,
                    all: false,
                    names: BTreeSet::new(),
                    known: BTreeSet::new(),
                    available: true,
                });
                dirs.len() - 1
            }
        };
        let dir = &mut dirs[index];
        match name {
            Some(name) => {
                dir.names.insert(name);
            }
            None => dir.all = true,
        }
    }
    dirs
}

/// Watches `path` (non-recursively), starting the watcher first if there is none. A previous
/// watch on the path is dropped first: after a directory is moved away, its old watch follows
/// it and must not be reused.
pub(super) fn watch(
    watcher: &mut Option<RecommendedWatcher>,
    raw_tx: &mpsc::UnboundedSender<Raw>,
    path: &Path,
) -> Result<(), String> {
    if !path.is_dir() {
        return Err(missing_reason(path));
    }
    let watcher = match watcher {
        Some(watcher) => watcher,
        None => {
            let tx = raw_tx.clone();
            let handler = move |raw: Raw| {
                if relevant(&raw) {
                    // The receiver is gone only when the watch is being dropped.
                    let _ = tx.send(raw);
                }
            };
            let new = notify::recommended_watcher(handler)
                .map_err(|err| format!("cannot start a file watcher: {err}"))?;
            watcher.insert(new)
        }
    };
    // Not watched yet, or the watch went away with the directory: both are fine.
    let _ = watcher.unwatch(path);
    watcher
        .watch(path, RecursiveMode::NonRecursive)
        .map_err(|err| format!("cannot watch the directory: {err}"))
}

/// Why a directory that should exist cannot be used.
pub(super) fn missing_reason(path: &Path) -> String {
    match fs::metadata(path) {
        Err(err) => format!("the directory is gone: {err}"),
        Ok(_) => "not a directory".into(),
    }
}
