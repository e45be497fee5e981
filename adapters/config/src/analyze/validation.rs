//! What validation found, as `istioctl analyze` reports it: an object the server would refuse
//! is IST0106 (`SchemaValidationError`), one it accepts with a warning IST0133
//! (`SchemaWarning`), both at the line of the field they are about. What is about no object
//! (a file that does not parse or cannot be read, an object of a kind wayfinder does not read)
//! is no message: it is kept apart, for the exit status and the standard error.

use super::Found;
use super::lines::Field;
use super::message::Code;
use crate::check::{Location, ReportLine, Severity};

/// Validation's lines, sorted into messages, what could not be read or parsed, and objects
/// skipped for their kind.
pub(crate) struct Sorted {
    pub(crate) found: Vec<Found>,
    pub(crate) unparsed: Vec<ReportLine>,
    pub(crate) skipped: Vec<ReportLine>,
}

/// Sorts the lines of the offline check (see [`Sorted`]).
pub(crate) fn sort(lines: Vec<ReportLine>) -> Sorted {
    let mut sorted = Sorted {
        found: Vec::new(),
        unparsed: Vec::new(),
        skipped: Vec::new(),
    };
    for line in lines {
        let (Location::Document(origin), Some(object)) = (&line.origin, &line.object) else {
            match line.severity {
                Severity::Error => sorted.unparsed.push(line),
                Severity::Warning => sorted.skipped.push(line),
            }
            continue;
        };
        let Some(subject) = subject(object) else {
            sorted.unparsed.push(line);
            continue;
        };
        let (code, prefix) = match line.severity {
            Severity::Error => (Code::SchemaValidationError, "Schema validation error"),
            Severity::Warning => (Code::SchemaWarning, "Schema validation warning"),
        };
        let field = line.field.as_deref().map(Field::parse).unwrap_or_default();
        let message = one_line(&line.message);
        let text = match &line.field {
            Some(path) => format!("{prefix}: {path}: {message}"),
            None => format!("{prefix}: {message}"),
        };
        sorted
            .found
            .push(Found::named(subject, origin.clone(), field, code, text));
    }
    sorted
}

/// `VirtualService default/reviews` read back into its kind, namespace and name.
fn subject(object: &str) -> Option<(&str, &str, &str)> {
    let (kind, key) = object.split_once(' ')?;
    let (namespace, name) = key.split_once('/')?;
    Some((kind, namespace, name))
}

/// A parser's message on one line, as the check's report prints it.
fn one_line(message: &str) -> String {
    let parts: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    parts.join(" ")
}
