//! Checking configuration offline, for `wayfinder validate PATH...`: every file's bytes read
//! as the server would read them, and every problem listed with where it is.
//!
//! Each file is read twice, as the server's two readers of a directory do: by the File
//! registry's model ([`crate::model::Services`]: `ServiceEntry`, `WorkloadEntry`, mapped and
//! validated as it maps them, then composed across files) and by the config source's
//! ([`crate::model::ConfigState`]: `VirtualService`, `DestinationRule`, `Gateway`, `Sidecar`,
//! `WorkloadGroup`, `PeerAuthentication`, `AuthorizationPolicy`, checked by
//! [`crate::validate`]; the security policy it does not enforce, which it refuses). A problem both
//! readers hit (a YAML syntax error) is listed once. As the server does, the check judges
//! every document on its own, so one report lists every problem.
//!
//! Finding and reading the files is the File adapter's (`wayfinder_file::check`, under its
//! reading rules); it hands each file's bytes to a [`Checker`], and reports what it could not
//! read through it too. Print the [`Report`].

mod report;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use wayfinder_registry::RegistryError;

use crate::analyze::{self, Analysis, Context, Known, Lines};
use crate::convert::ObjectError;
use crate::documents::{self, DocumentError, Origin, TypeMeta};
use crate::istio::IstioObject;
use crate::model::FileKey;
use crate::objects::{self, Item, Located};
use crate::services;
use crate::view::{self, FileContents};

pub use self::report::{Location, Report, ReportLine, Severity};

/// Judges files' bytes as the server would, one file at a time, and collects every problem;
/// [`Checker::report`] adds the problems found across files and sorts them.
#[derive(Default)]
pub struct Checker {
    lines: Vec<ReportLine>,
    objects: usize,
    /// Every file read, with its good registry objects, in precedence order.
    registry: BTreeMap<FileKey, FileContents>,
    /// The accepted config objects, in precedence order.
    config: Vec<Located>,
    /// For [`Checker::analyze`]: the files' bytes (for the lines of fields), and the `Secret`s
    /// they hold, as (namespace, name). `None` when only checking.
    analysis: Option<(Lines, BTreeSet<(String, String)>)>,
}

impl Checker {
    /// A checker whose files are analysed afterwards ([`Checker::analyze`]): it keeps their
    /// bytes, and reads their `Secret`s (as credentials) rather than listing them as objects of
    /// a kind wayfinder does not read.
    pub fn analysing() -> Self {
        Self {
            analysis: Some(Default::default()),
            ..Self::default()
        }
    }

    /// Reads the bytes of the file at `path` (which names it in the report and chooses the
    /// format, as for the server: `.json` is one JSON document, anything else YAML). Files
    /// take precedence in the order they are given, as the server ranks them.
    pub fn file(&mut self, path: &Path, bytes: &[u8]) {
        let mut contents = FileContents::default();
        for document in documents::parse::<IstioObject>(path, bytes) {
            let parsed = match document {
                Ok(parsed) => parsed,
                Err(err) => {
                    self.parse_error(err);
                    continue;
                }
            };
            let Some(object) = &parsed.object else {
                if let Some((_, secrets)) = &mut self.analysis
                    && is_secret(&parsed.meta)
                    && let Some(name) = &parsed.name
                {
                    let namespace = parsed.namespace.as_deref().unwrap_or("default");
                    secrets.insert((namespace.to_owned(), name.clone()));
                }
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
        for item in objects::read(path, bytes, objects::VALIDATE) {
            self.config_item(item);
        }
        if let Some((lines, _)) = &mut self.analysis {
            lines.add(path, bytes);
        }
    }

    /// An error line for what could not be read at `location` (a path that does not exist, a
    /// file the server would refuse to read), saying why.
    pub fn unreadable(&mut self, location: Location, message: String) {
        self.push(location, None, None, message, true);
    }

    /// Every problem found, the problems across files included (services composed of
    /// several entries, duplicate keys), sorted by path, then document and line.
    pub fn report(mut self) -> Report {
        self.compose();
        let mut problems = self.lines;
        report::sort(&mut problems);
        Report {
            problems,
            objects_checked: self.objects,
            files_checked: self.registry.len(),
        }
    }

    /// The services the files read so far define, composed as the File registry composes
    /// them (objects it would refuse left out).
    pub fn registrations(&self) -> Vec<wayfinder_registry::Registration> {
        view::compose(&self.registry).0.into_values().collect()
    }

    /// The cross-object analysis of everything read ([`crate::analyze`]), with what validation
    /// found as messages too (IST0106, IST0133). `known` is what the analysis knows besides
    /// the files: the registries' services, the domain and root namespace. Call it on a
    /// checker made by [`Checker::analysing`]; another has no lines and credentials to give.
    ///
    /// Of objects with one key, only the one in force (the first, as the server ranks files) is
    /// analysed: the others are reported as duplicates, and the server never applies them.
    pub fn analyze(mut self, known: &Known) -> Analysis {
        self.compose();
        let (_, duplicates) = objects::compose(&self.config);
        // A document's line tells a List's items apart.
        let place = |o: &Origin| (o.path.clone(), o.document, o.line);
        let ignored: HashSet<_> = duplicates.iter().map(|d| place(&d.origin)).collect();
        let in_force: Vec<Located> = self
            .config
            .iter()
            .filter(|l| !ignored.contains(&place(&l.origin)))
            .cloned()
            .collect();
        let (view, _) = view::compose(&self.registry);
        let (mut lines, secrets) = self.analysis.take().unwrap_or_default();
        let services = view.values().chain(&known.registrations);
        let endpoints = services.clone().flat_map(|r| {
            let namespace = &*r.service.namespace;
            r.endpoints.iter().map(move |e| (namespace, &e.labels))
        });
        let entries = self.registry.values().flat_map(|f| &f.workloads);
        let entries = entries.map(|w| (&*w.namespace, &w.endpoint.labels));
        let workloads = endpoints
            .chain(entries)
            .map(|(namespace, labels)| analyze::Workload { namespace, labels })
            .collect();
        let cx = Context::new(known, &in_force, services, workloads, &secrets);
        let mut messages = analyze::run(&cx, &mut lines);
        report::sort(&mut self.lines);
        let sorted = analyze::validation::sort(self.lines);
        messages.extend(sorted.found.into_iter().map(|f| f.resolve(&mut lines)));
        analyze::sort(&mut messages);
        Analysis {
            messages,
            unparsed: sorted.unparsed,
            skipped: sorted.skipped,
            files_checked: self.registry.len(),
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
            Item::Unknown { .. } if self.analysis.is_some() && is_secret_item(&item) => {}
            Item::Unknown { origin, meta } => {
                let message = objects::unknown_kind(&meta);
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
        let (_, duplicates) = objects::compose(&self.config);
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

/// A Kubernetes `Secret` (`v1`): a gateway's credential.
fn is_secret(meta: &TypeMeta) -> bool {
    meta.kind == "Secret" && meta.api_version == "v1"
}

fn is_secret_item(item: &Item) -> bool {
    matches!(item, Item::Unknown { meta, .. } if is_secret(meta))
}
