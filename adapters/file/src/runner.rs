//! The loop behind every stream this crate produces: reads the files a [`Watch`] reports,
//! hands their bytes to a [`Model`] that keeps the last good state, and queues the model's
//! events and errors so that the consumer's idea of the source's health stays true.
//!
//! The File registry ([`Services`]) and the config source ([`crate::config`], [`ConfigState`])
//! differ only in their model, which `wayfinder-config` holds: what a file holds, what of it
//! survives an error, and what the events are. Watching, reading, precedence of files and the
//! health rules (errors as items, `Recovered`, errors repeated after a change) are written
//! once, here.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::mpsc;
use wayfinder_config::model::{FileKey, Health, Model};
use wayfinder_registry::{CancellationToken, RegistryError};

use crate::read;
use crate::watch::{Target, Watch, WatchEvent};

#[cfg(doc)]
use wayfinder_config::model::{ConfigState, Services};

/// The state behind a stream over watched files.
pub(crate) struct Runner<M: Model> {
    targets: Vec<Target>,
    /// Largest file read ([`crate::read`]).
    max_file_bytes: u64,
    shutdown: CancellationToken,
    /// Started on the first poll, so that a stream never polled watches nothing.
    watch: Option<Watch>,
    model: M,
    /// Whether the first `Reset` has been queued.
    started: bool,
    /// Files that failed (to read, parse or validate), directories that are gone, failures
    /// of the composed state, and whether the consumer sees the source as degraded.
    health: Health,
    out: VecDeque<Result<M::Event, RegistryError>>,
    /// Named blobs the owner hands in besides the files ([`crate::Blobs`]). With them, the
    /// files are watched from the first blob on.
    blobs: Option<mpsc::UnboundedReceiver<Blob>>,
}

/// A named blob and its new bytes (`None`: gone).
pub(crate) type Blob = (String, Option<Vec<u8>>);

impl<M: Model> Runner<M> {
    pub(crate) fn new(
        targets: Vec<Target>,
        max_file_bytes: u64,
        shutdown: CancellationToken,
        model: M,
    ) -> Self {
        Self {
            targets,
            max_file_bytes,
            shutdown,
            watch: None,
            model,
            started: false,
            health: Health::default(),
            out: VecDeque::new(),
            blobs: None,
        }
    }

    /// Also takes the blobs `rx` receives, as files after every target.
    pub(crate) fn with_blobs(mut self, rx: mpsc::UnboundedReceiver<Blob>) -> Self {
        self.blobs = Some(rx);
        self
    }

    /// The stream of items, ending promptly once the shutdown token is cancelled.
    pub(crate) fn into_stream(self) -> BoxStream<'static, Result<M::Event, RegistryError>> {
        let shutdown = self.shutdown.clone();
        futures::stream::unfold(self, |mut runner| async move {
            let item = runner.next().await?;
            Some((item, runner))
        })
        .take_until(shutdown.cancelled_owned())
        .boxed()
    }

    /// The next item of the stream; `None` after shutdown.
    async fn next(&mut self) -> Option<Result<M::Event, RegistryError>> {
        loop {
            if let Some(item) = self.out.pop_front() {
                if self.out.is_empty() {
                    // A file of 75,000 objects left 4 MB of room here for good.
                    self.out.shrink_to_fit();
                }
                return Some(item);
            }
            // With blobs, the files are read only once the first blob comes: until then the
            // state is empty, and a server whose owner never hands a blob in reads nothing.
            if self.watch.is_none()
                && let Some(blobs) = &mut self.blobs
            {
                if !self.started {
                    self.started = true;
                    let (events, _) = self.model.commit(true);
                    self.settle(events, Vec::new());
                    continue;
                }
                let (name, bytes) = blobs.recv().await?;
                self.take_blob(&name, bytes.as_deref());
                self.watch = Some(Watch::new(&self.targets, self.shutdown.clone()));
                continue;
            }
            let watch = self
                .watch
                .get_or_insert_with(|| Watch::new(&self.targets, self.shutdown.clone()));
            let event = match &mut self.blobs {
                Some(blobs) => tokio::select! {
                    event = watch.next() => event?,
                    blob = blobs.recv() => {
                        match blob {
                            Some((name, bytes)) => self.take_blob(&name, bytes.as_deref()),
                            None => self.blobs = None,
                        }
                        continue;
                    }
                },
                None => watch.next().await?,
            };
            match event {
                WatchEvent::Changed(paths) => self.reload(&paths).await,
                WatchEvent::Restored { path, changed } => {
                    self.health.set(&path.display().to_string(), Vec::new());
                    self.reload(&changed).await;
                }
                WatchEvent::Unavailable { path, reason } => {
                    let err = RegistryError::Unavailable {
                        origin: path.display().to_string(),
                        detail: format!("{reason}; its files keep their last good contents"),
                    };
                    self.health
                        .set(&path.display().to_string(), vec![err.clone()]);
                    self.settle(Vec::new(), vec![err]);
                }
            }
        }
    }

    /// Reads `paths` again and queues the events (the first time, the `Reset`) and errors.
    async fn reload(&mut self, paths: &[PathBuf]) {
        let mut errors = Vec::new();
        for path in paths {
            let Some(key) = key_of(&self.targets, path) else {
                continue;
            };
            let file_errors = match read(path, self.max_file_bytes) {
                Ok(bytes) => self.model.apply(&key, bytes.as_deref()),
                // The model is not told: the file's previous contents stay in force.
                Err(err) => vec![err],
            };
            errors.extend(file_errors.iter().cloned());
            self.health.set(&path.display().to_string(), file_errors);
        }
        let first = !self.started;
        self.started = true;
        let (events, composed) = self.model.commit(first);
        // The composed state is judged afresh each time; report only new failures.
        errors.extend(self.health.compose(composed));
        self.settle(events, errors);
    }

    /// Applies one blob, as the file `name` after every target, and queues what changed.
    fn take_blob(&mut self, name: &str, bytes: Option<&[u8]>) {
        let key: FileKey = (self.targets.len(), PathBuf::from(name));
        let errors = self.model.apply(&key, bytes);
        self.health.set(name, errors.clone());
        let (events, composed) = self.model.commit(false);
        let mut errors = errors;
        errors.extend(self.health.compose(composed));
        self.settle(events, errors);
    }

    /// Queues `events`, then `errors`, keeping the consumer's idea of the source's health
    /// true (see [`Health::settle`]).
    fn settle(&mut self, events: Vec<M::Event>, errors: Vec<RegistryError>) {
        let items = self.health.settle(events, errors, M::recovered);
        self.out.extend(items);
    }
}

/// The precedence of a file: the first configured path that holds it.
fn key_of(targets: &[Target], path: &Path) -> Option<FileKey> {
    let index = targets.iter().position(|target| match target {
        Target::File(file) => file == path,
        Target::Dir(dir) => path.parent() == Some(dir.as_path()),
    })?;
    Some((index, path.to_path_buf()))
}

/// The bytes of a file, or `None` when it is gone (or is now a directory): see
/// [`crate::read`] for what is refused.
///
/// Read in place, blocking: the server's file sources run on the `file-reader` thread
/// (`reader`), which is there to block, and parsing needs the whole file anyway. (`read`
/// never blocks on a FIFO or device: it refuses them before reading, and opens without
/// blocking.) On Tokio's blocking pool, two sources' reads of one file were two copies alive
/// at once, on another thread whose allocator arena kept them (47 MB for a 24 MB file).
fn read(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, RegistryError> {
    read::read(path, limit).map_err(|err| err.at(path))
}
