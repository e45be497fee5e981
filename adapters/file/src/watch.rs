//! Watching files and directories for changes, the way editors, scripts and Kubernetes change
//! them, and reporting batches of changed file paths.
//!
//! [`Watch`] watches a set of [`Target`]s: directories (their direct entries, not
//! subdirectories) and single files. It reports [`WatchEvent::Changed`] with the paths that
//! may have changed (created, modified, replaced by a rename, deleted) and leaves it to the
//! caller to read them again; a path that no longer exists was deleted. The first event lists
//! every file present at the start.
//!
//! - Each directory is watched itself (for a single file, its parent directory, filtered to
//!   that name), so a file replaced by renaming a temporary file over it, as editors save, is
//!   seen like any other change.
//! - A path is reported once it has been quiet for [`QUIET`], so a file being written is not
//!   read half-written, and a burst of events becomes one batch.
//! - In directories only `.yaml`, `.yml` and `.json` files count (see [`is_config_file`]);
//!   hidden files and editor backups are ignored. A single file target counts whatever its name.
//!   Whatever is not a directory counts, FIFOs and devices included: the watch never opens a
//!   file, and the reader refuses those with an error (see [`crate::read`]).
//! - When a watched directory disappears, [`WatchEvent::Unavailable`] is reported once and
//!   its files are not reported as deleted: the caller keeps what it had. The directory is
//!   looked for every [`RETRY`]; when it is back, [`WatchEvent::Restored`] lists every file it
//!   held before or holds now.
//! - A Kubernetes ConfigMap volume swaps its contents through a `..data` symlink, under files
//!   that do not change themselves; that swap makes every file of the directory reported.

mod dir;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, Watcher as _};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use wayfinder_registry::CancellationToken;

use self::dir::Dir;

/// How long a path must be free of events before it is reported.
pub const QUIET: Duration = Duration::from_millis(50);

/// How often a missing directory is looked for.
pub const RETRY: Duration = Duration::from_secs(1);

/// Something to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A directory: its direct entries that are configuration files ([`is_config_file`]).
    Dir(PathBuf),
    /// One file, whatever its name; it may be deleted and created again.
    File(PathBuf),
}

impl Target {
    /// The watched path.
    pub fn path(&self) -> &Path {
        match self {
            Self::Dir(path) | Self::File(path) => path,
        }
    }
}

/// What a [`Watch`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// These files may have changed since they were last reported; read them again. A path
    /// that does not exist any more was deleted.
    Changed(Vec<PathBuf>),
    /// A watched directory cannot be watched (it was deleted or moved away, or cannot be
    /// listed). Its files are not reported until it is back.
    Unavailable {
        /// The directory.
        path: PathBuf,
        /// Why it cannot be watched.
        reason: String,
    },
    /// A directory reported [`WatchEvent::Unavailable`] is watched again.
    Restored {
        /// The directory.
        path: PathBuf,
        /// Every file it held before it went away or holds now; read them again (those that
        /// do not exist any more were deleted meanwhile).
        changed: Vec<PathBuf>,
    },
}

/// True for a directory entry name that holds configuration: a `.yaml`, `.yml` or `.json`
/// file that is not hidden (leading `.`) and not an editor backup or swap file (`~`, `.swp`).
pub fn is_config_file(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    if name.starts_with('.') || name.ends_with('~') || name.ends_with(".swp") {
        return false;
    }
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    !stem.is_empty()
        && ["yaml", "yml", "json"]
            .iter()
            .any(|e| ext.eq_ignore_ascii_case(e))
}

/// A running watch over a set of targets. Dropping it stops the watch.
pub struct Watch {
    dirs: Vec<Dir>,
    watcher: Option<RecommendedWatcher>,
    raw_tx: mpsc::UnboundedSender<Raw>,
    raw_rx: mpsc::UnboundedReceiver<Raw>,
    /// Files with events not reported yet, and the time of their last event.
    pending_files: HashMap<PathBuf, Instant>,
    /// Directories (by index) to list again, the time of their last event, and whether the
    /// directory itself changed (so its watch must be set up again).
    pending_dirs: HashMap<usize, (Instant, bool)>,
    ready: VecDeque<WatchEvent>,
    next_retry: Option<Instant>,
    shutdown: CancellationToken,
}

type Raw = notify::Result<notify::Event>;

impl Watch {
    /// Starts watching. Never fails: a directory that cannot be watched is reported as
    /// [`WatchEvent::Unavailable`] after the first [`WatchEvent::Changed`], and retried.
    pub fn new(targets: &[Target], shutdown: CancellationToken) -> Self {
        let (raw_tx, raw_rx) = mpsc::unbounded_channel();
        let mut watch = Self {
            dirs: dir::from_targets(targets),
            watcher: None,
            raw_tx,
            raw_rx,
            pending_files: HashMap::new(),
            pending_dirs: HashMap::new(),
            ready: VecDeque::new(),
            next_retry: None,
            shutdown,
        };
        let mut files = BTreeSet::new();
        for i in 0..watch.dirs.len() {
            watch.activate(i, true, &mut files);
        }
        watch
            .ready
            .push_front(WatchEvent::Changed(files.into_iter().collect()));
        watch
    }

    /// The next event; `None` once the shutdown token is cancelled.
    ///
    /// Cancel-safe: dropping the future loses nothing.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            if self.shutdown.is_cancelled() {
                return None;
            }
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            let flush_at = self.next_flush();
            let retry_at = self.next_retry;
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return None,
                Some(raw) = self.raw_rx.recv() => self.on_raw(raw),
                () = sleep_until_some(flush_at) => self.flush(),
                () = sleep_until_some(retry_at) => self.retry(),
            }
        }
    }

    fn on_raw(&mut self, raw: Raw) {
        let now = Instant::now();
        match raw {
            Err(err) => {
                tracing::warn!("file watcher error, listing the watched directories again: {err}");
                self.rescan_all(now);
            }
            Ok(event) => {
                if event.need_rescan() {
                    self.rescan_all(now);
                }
                for path in &event.paths {
                    self.route(path, now);
                }
            }
        }
    }

    /// Records an event on `path` against the directories it concerns.
    fn route(&mut self, path: &Path, now: Instant) {
        for (i, dir) in self.dirs.iter().enumerate() {
            if dir.path == path {
                schedule(&mut self.pending_dirs, i, now, true);
            } else if path.parent() == Some(dir.path.as_path()) {
                let Some(name) = path.file_name() else {
                    continue;
                };
                if name == "..data" {
                    // A ConfigMap volume swapped its contents under the files' symlinks.
                    schedule(&mut self.pending_dirs, i, now, false);
                } else if dir.wants(name) {
                    self.pending_files.insert(path.to_path_buf(), now);
                }
            }
        }
    }

    fn rescan_all(&mut self, now: Instant) {
        for i in 0..self.dirs.len() {
            schedule(&mut self.pending_dirs, i, now, false);
        }
    }

    fn next_flush(&self) -> Option<Instant> {
        let files = self.pending_files.values();
        let dirs = self.pending_dirs.values().map(|(at, _)| at);
        files.chain(dirs).min().map(|at| *at + QUIET)
    }

    /// Reports every path that has been quiet long enough.
    fn flush(&mut self) {
        let now = Instant::now();
        let mut dirs: Vec<(usize, bool)> = Vec::new();
        self.pending_dirs.retain(|i, (at, rewatch)| {
            let due = *at + QUIET <= now;
            if due {
                dirs.push((*i, *rewatch));
            }
            !due
        });
        let mut files: Vec<PathBuf> = Vec::new();
        self.pending_files.retain(|path, at| {
            let due = *at + QUIET <= now;
            if due {
                files.push(path.clone());
            }
            !due
        });
        let mut changed = BTreeSet::new();
        dirs.sort_unstable();
        for (i, rewatch) in dirs {
            let rewatch = rewatch || !self.dirs[i].available;
            self.activate(i, rewatch, &mut changed);
        }
        for path in files {
            self.check_file(path, &mut changed);
        }
        self.push_changed(changed);
    }

    /// Looks for missing directories again.
    fn retry(&mut self) {
        self.next_retry = None;
        let mut changed = BTreeSet::new();
        for i in 0..self.dirs.len() {
            if !self.dirs[i].available && self.dirs[i].path.is_dir() {
                self.activate(i, true, &mut changed);
            }
        }
        if self.dirs.iter().any(|d| !d.available) {
            self.next_retry.get_or_insert(Instant::now() + RETRY);
        }
        self.push_changed(changed);
    }

    fn push_changed(&mut self, changed: BTreeSet<PathBuf>) {
        if !changed.is_empty() {
            self.ready
                .push_back(WatchEvent::Changed(changed.into_iter().collect()));
        }
    }

    /// A file had events: note whether it still exists and report it, unless its directory is
    /// gone (then the directory is reported instead, and the file's last state kept).
    fn check_file(&mut self, path: PathBuf, changed: &mut BTreeSet<PathBuf>) {
        let Some(i) = self
            .dirs
            .iter()
            .position(|d| path.parent() == Some(d.path.as_path()))
        else {
            return;
        };
        if !self.dirs[i].available {
            return;
        }
        if !self.dirs[i].path.is_dir() {
            let reason = dir::missing_reason(&self.dirs[i].path);
            self.lose(i, reason);
            return;
        }
        let dir = &mut self.dirs[i];
        if dir::is_file(&path) {
            dir.known.insert(path.clone());
        } else {
            dir.known.remove(&path);
        }
        changed.insert(path);
    }

    /// (Re)starts watching directory `i` when `rewatch`, lists it, and reports every file it
    /// held or holds now. On failure the directory becomes unavailable.
    fn activate(&mut self, i: usize, rewatch: bool, changed: &mut BTreeSet<PathBuf>) {
        let path = self.dirs[i].path.clone();
        let watched = if rewatch {
            dir::watch(&mut self.watcher, &self.raw_tx, &path)
        } else {
            Ok(())
        };
        match watched.and_then(|()| self.dirs[i].list()) {
            Ok(listed) => {
                let dir = &mut self.dirs[i];
                let mut files = std::mem::replace(&mut dir.known, listed.clone());
                files.extend(listed);
                if dir.available {
                    changed.extend(files);
                } else {
                    dir.available = true;
                    tracing::info!(path = %dir.path.display(), "watched directory is back");
                    self.ready.push_back(WatchEvent::Restored {
                        path: dir.path.clone(),
                        changed: files.into_iter().collect(),
                    });
                }
            }
            Err(reason) => self.lose(i, reason),
        }
    }

    /// Directory `i` cannot be watched: report it once and look for it every [`RETRY`].
    fn lose(&mut self, i: usize, reason: String) {
        let dir = &mut self.dirs[i];
        if let Some(watcher) = &mut self.watcher {
            // The watch may already be gone with the directory; nothing to do then.
            let _ = watcher.unwatch(&dir.path);
        }
        self.pending_files
            .retain(|p, _| p.parent() != Some(dir.path.as_path()));
        self.pending_dirs.remove(&i);
        if dir.available {
            dir.available = false;
            tracing::warn!(path = %dir.path.display(), "watched directory unavailable: {reason}");
            self.ready.push_back(WatchEvent::Unavailable {
                path: dir.path.clone(),
                reason,
            });
        }
        self.next_retry.get_or_insert(Instant::now() + RETRY);
    }
}

fn schedule(pending: &mut HashMap<usize, (Instant, bool)>, i: usize, now: Instant, rewatch: bool) {
    let entry = pending.entry(i).or_insert((now, false));
    entry.0 = now;
    entry.1 |= rewatch;
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Whether a raw event can mean a change. Opening and reading files (our own reads among
/// them) is not one; closing a file written is.
fn relevant(raw: &Raw) -> bool {
    match raw {
        Ok(event) => match event.kind {
            EventKind::Access(kind) => kind == AccessKind::Close(AccessMode::Write),
            _ => true,
        },
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests;
