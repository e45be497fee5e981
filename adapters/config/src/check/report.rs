//! What [`super::check`] found, and how it is printed.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::documents::Origin;

/// Everything the check found, one line per problem, sorted by path, then document and line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The problems, sorted by path, then document, then line.
    pub problems: Vec<ReportLine>,
    /// How many objects of the kinds wayfinder reads were checked.
    pub objects_checked: usize,
    /// How many files were read.
    pub files_checked: usize,
}

impl Report {
    /// True when any problem is an error: the server would reject something.
    pub fn has_errors(&self) -> bool {
        self.errors() > 0
    }

    /// The number of errors.
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    /// The number of warnings.
    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    fn count(&self, severity: Severity) -> usize {
        self.problems
            .iter()
            .filter(|p| p.severity == severity)
            .count()
    }
}

/// One line per problem, then `checked N objects in M files: E errors, W warnings`.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.problems {
            writeln!(f, "{line}")?;
        }
        write!(
            f,
            "checked {} in {}: {}, {}",
            plural(self.objects_checked, "object"),
            plural(self.files_checked, "file"),
            plural(self.errors(), "error"),
            plural(self.warnings(), "warning"),
        )
    }
}

/// One problem and where it is.
///
/// Displayed as `error: path: document N (line L): VirtualService default/reviews:
/// spec.http[0].route[0].weight: message`, leaving out what the problem does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportLine {
    /// Where.
    pub origin: Location,
    /// The object it is about: `VirtualService default/reviews`, `ServiceEntry shop/payments`;
    /// none for a file that does not parse or an object of an unknown kind.
    pub object: Option<String>,
    /// The field it is about: `spec.http[0].route[0].weight`.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
    /// Whether the server would reject something, or only warn.
    pub severity: Severity,
}

impl ReportLine {
    /// (path, document, line): documents of a file in order, a whole-path problem first.
    fn sort_key(&self) -> (&Path, usize, u64) {
        match &self.origin {
            Location::Path(path) => (path, 0, 0),
            Location::Document(origin) => (&origin.path, origin.document, origin.line),
        }
    }
}

impl fmt::Display for ReportLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: ", self.severity, self.origin)?;
        if let Some(object) = &self.object {
            write!(f, "{object}: ")?;
        }
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        // One problem per line, whatever the parser's message holds.
        let mut parts = self
            .message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty());
        if let Some(first) = parts.next() {
            f.write_str(first)?;
        }
        for part in parts {
            write!(f, " {part}")?;
        }
        Ok(())
    }
}

/// Where a problem is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A whole path: it does not exist, or cannot be read or listed.
    Path(PathBuf),
    /// A place in a file: `path: document N (line L)`.
    Document(Origin),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Path(path) => write!(f, "{}", path.display()),
            Self::Document(origin) => write!(f, "{origin}"),
        }
    }
}

/// How bad a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The server would reject the file or the object (or cannot read the path).
    Error,
    /// The server would accept it, but something is probably not what was meant.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Error => "error",
            Self::Warning => "warning",
        })
    }
}

/// Sorts lines by path, document and line, keeping the order found among equals.
pub(super) fn sort(lines: &mut [ReportLine]) {
    lines.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}
