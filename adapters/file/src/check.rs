//! Checking configuration files offline, for `wayfinder validate PATH...` and `wayfinder
//! analyze PATH...`: the files the server would read, read as it reads them, and judged by
//! `wayfinder-config`'s [`Checker`] (which says what is checked and how), then analysed
//! across objects ([`wayfinder_config::analyze`]) for `analyze`.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use wayfinder_config::analyze::{Analysis, Known};
use wayfinder_config::check::{Checker, Location, Report};
use wayfinder_registry::Registration;

use crate::read::{self, DEFAULT_MAX_FILE_BYTES};
use crate::watch::is_config_file;

/// Reads every file of `paths` (directories contribute their `.yaml`, `.yml` and `.json`
/// files, as for the server) and reports every problem: files that do not parse, objects the
/// server would reject, duplicates, warnings and objects of unknown kinds. A path that does
/// not exist or cannot be read is an error line, and so is a file the server would refuse to
/// read ([`crate::read`]: not a regular file, or over [`DEFAULT_MAX_FILE_BYTES`]).
pub fn check(paths: &[PathBuf]) -> Report {
    let mut checker = Checker::default();
    read_all(&mut checker, paths);
    checker.report()
}

/// Reads every file of `paths` as [`check`] does and analyses them together, with what
/// `known` says exists besides them: every problem [`check`] reports and the cross-object
/// messages, with Istio's codes.
pub fn analyze(paths: &[PathBuf], known: &Known) -> Analysis {
    let mut checker = Checker::analysing();
    read_all(&mut checker, paths);
    checker.analyze(known)
}

/// The services of a File registry of `paths` (`--file-registry`), as the server's File
/// registry would hold them: the objects it would refuse are left out, as it leaves them
/// out. A path it could not read is an error, as the server refuses to start without it.
pub fn registrations(paths: &[PathBuf]) -> Result<Vec<Registration>, String> {
    let mut checker = Checker::default();
    read_all(&mut checker, paths);
    let registrations = checker.registrations();
    let report = checker.report();
    let unreadable = report
        .problems
        .iter()
        .find(|p| matches!(p.origin, Location::Path(_)));
    match unreadable {
        Some(line) => Err(line.to_string()),
        None => Ok(registrations),
    }
}

/// Reads every file of `paths` into `checker`, in the server's precedence order.
fn read_all(checker: &mut Checker, paths: &[PathBuf]) {
    for file in files(checker, paths) {
        match read::read(&file, DEFAULT_MAX_FILE_BYTES) {
            Ok(Some(bytes)) => checker.file(&file, &bytes),
            Ok(None) => {
                let message = "cannot read the file: it is gone".to_string();
                checker.unreadable(Location::Path(file), message);
            }
            Err(err) => checker.unreadable(Location::Path(file), err.to_string()),
        }
    }
}

/// The files to read, in the precedence order of the server, each once; a path that cannot
/// be listed or looked at is reported to `checker`.
fn files(checker: &mut Checker, paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for path in paths {
        let found = match fs::metadata(path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err("does not exist".into()),
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
            Err(message) => checker.unreadable(Location::Path(path.clone()), message),
        }
    }
    files
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
