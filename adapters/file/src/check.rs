//! Checking configuration files offline, for `wayfinder validate PATH...`: every file read as
//! the server would read it, and every problem listed with where it is.
//!
//! Each file is read twice, as the server's two readers of a directory do: by the File
//! registry (`ServiceEntry`, `WorkloadEntry`, mapped and validated as it maps them, then
//! composed across files) and by the config source ([`crate::config`]: `VirtualService`,
//! `DestinationRule`, `Gateway`, `Sidecar`, checked by `validate`; security policies, which it
//! refuses). A problem both readers hit (a YAML syntax error) is listed once. As the server
//! does, the check judges every document on its own, so one report lists every problem.
//!
//! Start with [`check`]; print the [`Report`].

mod report;

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use wayfinder_registry::RegistryError;

use crate::config::{self, Item, Located};
use crate::convert::ObjectError;
use crate::documents::{self, DocumentError};
use crate::istio::IstioObject;
use crate::read::{self, DEFAULT_MAX_FILE_BYTES};
use crate::runner::FileKey;
use crate::services;
use crate::view::{self, FileContents};
use crate::watch::is_config_file;

pub use self::report::{Location, Report, ReportLine, Severity};

/// Reads every file of `paths` (directories contribute their `.yaml`, `.yml` and `.json`
/// files, as for the server) and reports every problem: files that do not parse, objects the
/// server would reject, duplicates, warnings and objects of unknown kinds. A path that does
/// not exist or cannot be read is an error line, and so is a file the server would refuse to
/// read ([`crate::read`]: not a regular file, or over [`DEFAULT_MAX_FILE_BYTES`]).
pub fn check(paths: &[PathBuf]) -> Report {
    let mut checker = Checker::default();
    for file in checker.files(paths) {
        checker.file(&file);
    }
    checker.compose();
    let mut problems = checker.lines;
    report::sort(&mut problems);
    Report {
        problems,
        objects_checked: checker.objects,
        files_checked: checker.registry.len(),
    }
}

#[derive(Default)]
struct Checker {
    lines: Vec<ReportLine>,
    objects: usize,
    /// Every file read, with its good registry objects, in precedence order.
    registry: BTreeMap<FileKey, FileContents>,
    /// The accepted config objects, in precedence order.
    config: Vec<Located>,
}

impl Checker {
    /// The files to read, in the precedence order of the server, each once.
    fn files(&mut self, paths: &[PathBuf]) -> Vec<PathBuf> {
        let mut seen = HashSet::new();
        let mut files = Vec::new();
        for path in paths {
            let found = match fs::metadata(path) {
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    Err("does not exist".into())
                }
                Err(err) => Err(format!("cannot be read: {err}")),
                Ok(meta) if meta.is_dir() => list(path),
                // A FIFO or a device is refused by `read`, with what it is.
                Ok(_) => Ok(vec![path.clone()]),
            };
            match found {
                Ok(found) => files.extend(
                    found
                        .into_iter()
                        .filter(|f| seen.insert(std::path::absolute(f).unwrap_or(f.clone()))),
                ),
                Err(message) => self.push(Location::Path(path.clone()), None, None, message, true),
            }
        }
        files
    }

    fn file(&mut self, path: &Path) {
        let bytes = match read::read(path, DEFAULT_MAX_FILE_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                let message = "cannot read the file: it is gone".to_string();
                return self.push(Location::Path(path.into()), None, None, message, true);
            }
            Err(err) => {
                let message = err.to_string();
                return self.push(Location::Path(path.into()), None, None, message, true);
            }
        };
        let mut contents = FileContents::default();
        for document in documents::parse::<IstioObject>(path, &bytes) {
            let parsed = match document {
                Ok(parsed) => parsed,
                Err(err) => {
                    self.parse_error(err);
                    continue;
                }
            };
            let Some(object) = &parsed.object else {
                continue;
            };
            self.objects += 1;
            match services::map(&parsed.origin, object, &parsed.skipped) {
                Ok((mapped, warnings)) => {
                    let name = mapped.id().to_string();
                    for warning in warnings {
                        let location = Location::Document(parsed.origin.clone());
                        let (field, message) = (Some(warning.field), warning.message);
                        self.push(location, Some(name.clone()), field, message, false);
                    }
                    contents.push(mapped);
                }
                Err(err) => self.object_error(err),
            }
        }
        // Every file read counts, and holds its place in the precedence order.
        let key = (self.registry.len(), path.to_path_buf());
        self.registry.insert(key, contents);
        for item in config::read(path, &bytes, config::VALIDATE) {
            self.config_item(item);
        }
    }

    fn config_item(&mut self, item: Item) {
        match item {
            Item::Object(judged) => {
                self.objects += 1;
                let object = judged.object.key().to_string();
                for problem in &judged.problems {
                    let location = Location::Document(judged.origin.clone());
                    let field = Some(problem.field.clone());
                    let message = problem.message.clone();
                    self.push(
                        location,
                        Some(object.clone()),
                        field,
                        message,
                        problem.fatal,
                    );
                }
                if judged.rejection().is_none() {
                    self.config.push(Located {
                        origin: judged.origin,
                        object: judged.object,
                    });
                }
            }
            Item::Registry => {}
            Item::Unknown { origin, meta } => {
                let message = config::unknown_kind(&meta);
                self.push(Location::Document(origin), None, None, message, false);
            }
            Item::Refused(rejected) => {
                let object = rejected.id().map(|id| id.to_string());
                let message = match &rejected.error {
                    RegistryError::Malformed { detail, .. }
                    | RegistryError::Invalid { detail, .. }
                    | RegistryError::Unavailable { detail, .. } => detail.clone(),
                };
                let location = Location::Document(rejected.origin);
                self.push(location, object, None, message, true);
            }
        }
    }

    /// Problems found across files: services composed of several entries, duplicate keys.
    fn compose(&mut self) {
        let (_, invalid) = view::compose(&self.registry);
        for (_, err) in invalid {
            self.object_error(err);
        }
        let (_, duplicates) = config::compose(&self.config);
        for dup in duplicates {
            let message = format!("duplicate, first defined at {}", dup.first);
            let object = Some(dup.key.to_string());
            self.push(Location::Document(dup.origin), object, None, message, true);
        }
    }

    fn parse_error(&mut self, err: DocumentError) {
        self.push(
            Location::Document(err.origin),
            None,
            None,
            err.message,
            true,
        );
    }

    fn object_error(&mut self, err: ObjectError) {
        let location = Location::Document(err.origin);
        self.push(
            location,
            Some(err.object),
            Some(err.field),
            err.message,
            true,
        );
    }

    /// Adds a line unless the same one is there already (both readers hit a syntax error).
    fn push(
        &mut self,
        origin: Location,
        object: Option<String>,
        field: Option<String>,
        message: String,
        error: bool,
    ) {
        let line = ReportLine {
            origin,
            object,
            field,
            message,
            severity: if error {
                Severity::Error
            } else {
                Severity::Warning
            },
        };
        if !self.lines.contains(&line) {
            self.lines.push(line);
        }
    }
}

/// The configuration files of a directory, sorted (as the server ranks them). Entries that
/// are not regular files (a FIFO named `x.yaml`) are listed, for [`read`] to refuse as the
/// server does; directories are not.
fn list(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = fs::read_dir(dir).map_err(|err| format!("cannot list the directory: {err}"))?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| is_config_file(&entry.file_name()))
        .map(|entry| entry.path())
        .filter(|path| fs::metadata(path).is_ok_and(|m| !m.is_dir()))
        .collect();
    files.sort();
    Ok(files)
}
