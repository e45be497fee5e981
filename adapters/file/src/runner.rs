//! The running registry: reads the files a [`Watch`] reports, keeps each file's last good
//! contents, and turns every change of the composed view into events.

use std::collections::{BTreeMap, VecDeque};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use wayfinder_registry::{CancellationToken, Event, RegistryError, ServiceKey};

use crate::convert;
use crate::documents;
use crate::istio::{self, IstioObject};
use crate::view::{self, FileContents, FileKey, View};
use crate::watch::{Target, Watch, WatchEvent};

/// The state behind a [`crate::FileRegistry`]'s stream.
pub(crate) struct Runner {
    targets: Vec<Target>,
    shutdown: CancellationToken,
    /// Started on the first poll, so that a registry never watched starts nothing.
    watch: Option<Watch>,
    /// The last good contents of every file, in precedence order.
    files: BTreeMap<FileKey, FileContents>,
    /// What the consumer has been told.
    view: View,
    /// Whether the first `Reset` has been queued.
    started: bool,
    /// What is broken now: files that failed, directories that are gone, services whose
    /// composed registration is invalid.
    failing: BTreeMap<Source, RegistryError>,
    /// Whether the last item sent (or queued) was an error: the consumer sees the registry
    /// as degraded until the next `Ok` item.
    degraded: bool,
    out: VecDeque<Result<Event, RegistryError>>,
}

/// Something that can fail on its own.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    /// A file or a watched directory.
    Path(PathBuf),
    /// A service whose registration, composed from several objects, is invalid.
    Service(ServiceKey),
}

impl Runner {
    pub(crate) fn new(targets: Vec<Target>, shutdown: CancellationToken) -> Self {
        Self {
            targets,
            shutdown,
            watch: None,
            files: BTreeMap::new(),
            view: View::new(),
            started: false,
            failing: BTreeMap::new(),
            degraded: false,
            out: VecDeque::new(),
        }
    }

    /// The next item of the stream; `None` after shutdown.
    pub(crate) async fn next(&mut self) -> Option<Result<Event, RegistryError>> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Some(item);
            }
            let watch = self
                .watch
                .get_or_insert_with(|| Watch::new(&self.targets, self.shutdown.clone()));
            match watch.next().await? {
                WatchEvent::Changed(paths) => self.reload(&paths).await,
                WatchEvent::Restored { path, changed } => {
                    self.failing.remove(&Source::Path(path));
                    self.reload(&changed).await;
                }
                WatchEvent::Unavailable { path, reason } => {
                    let err = RegistryError::Unavailable {
                        origin: path.display().to_string(),
                        detail: format!("{reason}; its files keep their last good contents"),
                    };
                    self.failing.insert(Source::Path(path), err.clone());
                    self.settle(Vec::new(), vec![err]);
                }
            }
        }
    }

    /// Reads `paths` again and queues the events (the first time, the `Reset`) and errors.
    async fn reload(&mut self, paths: &[PathBuf]) {
        let mut errors = Vec::new();
        for path in paths {
            let Some(key) = self.key_of(path) else {
                continue;
            };
            let source = Source::Path(path.clone());
            let loaded = match read(path).await {
                Ok(Some(bytes)) => load(path, &bytes).map(Some),
                Ok(None) => Ok(None),
                Err(err) => Err(err),
            };
            match loaded {
                Ok(Some(contents)) => {
                    self.files.insert(key, contents);
                    self.failing.remove(&source);
                }
                Ok(None) => {
                    self.files.remove(&key);
                    self.failing.remove(&source);
                }
                // The file's previous contents stay in force.
                Err(err) => {
                    self.failing.insert(source, err.clone());
                    errors.push(err);
                }
            }
        }
        let (view, invalid) = view::compose(&self.files);
        // Composed services are judged afresh each time; report only new failures.
        let mut reported = BTreeMap::new();
        self.failing.retain(|source, err| match source {
            Source::Service(key) => {
                reported.insert(key.clone(), err.clone());
                false
            }
            Source::Path(_) => true,
        });
        for (key, err) in invalid {
            if reported.get(&key) != Some(&err) {
                errors.push(err.clone());
            }
            self.failing.insert(Source::Service(key), err);
        }
        let events = if self.started {
            view::diff(&self.view, &view)
        } else {
            self.started = true;
            vec![Event::Reset(view.values().cloned().collect())]
        };
        self.view = view;
        self.settle(events, errors);
    }

    /// Queues `events`, then `errors`, keeping the consumer's idea of the registry's health
    /// (which follows the last item) true: an `Event::Recovered` when everything works again
    /// and nothing else would say so, and the errors still outstanding when a change would
    /// otherwise read as a recovery.
    fn settle(&mut self, events: Vec<Event>, errors: Vec<RegistryError>) {
        let changed = !events.is_empty();
        self.out.extend(events.into_iter().map(Ok));
        if !errors.is_empty() {
            self.degraded = true;
            self.out.extend(errors.into_iter().map(Err));
        } else if self.degraded {
            if self.failing.is_empty() {
                self.degraded = false;
                if !changed {
                    self.out.push_back(Ok(Event::Recovered));
                }
            } else if changed {
                self.out.extend(self.failing.values().cloned().map(Err));
            }
        }
    }

    /// The precedence of a file: the first configured path that holds it.
    fn key_of(&self, path: &Path) -> Option<FileKey> {
        let index = self.targets.iter().position(|target| match target {
            Target::File(file) => file == path,
            Target::Dir(dir) => path.parent() == Some(dir.as_path()),
        })?;
        Some((index, path.to_path_buf()))
    }
}

/// The bytes of a file, or `None` when it is gone (or is now a directory).
async fn read(path: &Path) -> Result<Option<Vec<u8>>, RegistryError> {
    match tokio::fs::read(path).await {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::NotFound | ErrorKind::IsADirectory | ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(err) => Err(RegistryError::Unavailable {
            origin: path.display().to_string(),
            detail: format!("cannot read the file: {err}; its last good contents stay"),
        }),
    }
}

/// Parses, maps and validates one file; any failure rejects the whole file.
pub(crate) fn load(path: &Path, bytes: &[u8]) -> Result<FileContents, RegistryError> {
    let parsed =
        documents::parse::<IstioObject>(path, bytes).map_err(|err| RegistryError::Malformed {
            origin: err.origin.to_string(),
            detail: err.message,
        })?;
    let mut contents = FileContents::default();
    for item in parsed {
        match &item.object {
            Some(IstioObject::ServiceEntry(object)) => {
                contents
                    .entries
                    .push(convert::service_entry(&item.origin, object)?);
            }
            Some(IstioObject::WorkloadEntry(object)) => {
                contents
                    .workloads
                    .push(convert::workload_entry(&item.origin, object)?);
            }
            None if istio::is_networking(&item.meta) => {
                tracing::debug!(
                    "{}: skipping {}: read by the config store",
                    item.origin,
                    item.meta
                );
            }
            None => {
                tracing::warn!(
                    "{}: skipping {}: the file registry reads only ServiceEntry and \
                     WorkloadEntry of {}/{{{}}}",
                    item.origin,
                    item.meta,
                    istio::GROUP,
                    istio::VERSIONS.join(","),
                );
            }
        }
    }
    Ok(contents)
}
