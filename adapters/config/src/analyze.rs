//! Cross-object analysis, for `wayfinder analyze` (and `validate --analyze`): what
//! `istioctl analyze` checks, with Istio's message codes, over the objects the offline check
//! ([`crate::check`]) accepted.
//!
//! Validation judges each object on its own; a configuration can pass it and still not work:
//! a route to a host nothing defines (the proxy answers 503), a subset no DestinationRule
//! defines, two VirtualServices for one host (one is ignored), a Gateway or Sidecar whose
//! selector matches no workload, a DestinationRule whose TLS the workloads' PeerAuthentication
//! refuses. Each analyzer (one file each under `analyze/`) reads the `Context` (the
//! accepted objects and what is known besides them) and reports findings on objects, with the
//! field they are about; `run` turns them into [`Message`]s with their files and lines
//! and sorts them as istioctl does.
//!
//! What counts as existing: a host is known when a ServiceEntry among the analysed files
//! defines it or a registry given to the analysis does ([`Known`]: the registries `discovery`
//! would run, such as the built-in demo or a File registry). Workloads are those registries'
//! endpoints and the analysed files' WorkloadEntries, with their namespaces and labels.
//! Credentials are the `v1` `Secret`s among the analysed files, as for `istioctl analyze
//! --use-kube=false`.
//!
//! The codes: IST0101 (`references`, `gateways`, `selectors`), IST0109 (`conflicts`), IST0113
//! (`mtls`), IST0132 (`gateways`), IST0174 (`destination_rules`), and IST0106/IST0133 for what
//! validation refused or warned about (`validation`).

mod conflicts;
mod context;
mod destination_rules;
mod gateways;
mod lines;
mod message;
mod mtls;
mod references;
mod selectors;
pub(crate) mod validation;

#[cfg(test)]
mod tests;

use wayfinder_registry::Registration;

use crate::check::ReportLine;

pub(crate) use self::context::{Context, Found, Workload};
pub(crate) use self::lines::Lines;
pub use self::message::{Code, Level, Message, Subject};

/// The exit status when analysis finds a message at or above the failure threshold:
/// istioctl's `ExitAnalyzerFoundIssues`.
pub const EXIT_ISSUES: u8 = 79;

/// The exit status when a file could not be read or parsed and nothing reached the failure
/// threshold: istioctl's `ExitDataError`, for its `FileParseError`.
pub const EXIT_UNPARSED: u8 = 65;

/// What the analysis knows besides the analysed files.
#[derive(Clone, Debug)]
pub struct Known {
    /// The services of the registries named (their hosts and ports, their endpoints'
    /// labels).
    pub registrations: Vec<Registration>,
    /// The mesh DNS domain short names expand with (`cluster.local`), as `discovery`'s
    /// `--domain`.
    pub domain: String,
    /// The mesh's root namespace, whose PeerAuthentication without a selector applies to
    /// every workload (`istio-system`), as `discovery`'s `--root-namespace`.
    pub root_namespace: String,
}

impl Default for Known {
    fn default() -> Self {
        Self {
            registrations: Vec::new(),
            domain: "cluster.local".into(),
            root_namespace: "istio-system".into(),
        }
    }
}

/// What `wayfinder analyze` found.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    /// The messages, in istioctl's order: by level, code, then object.
    pub messages: Vec<Message>,
    /// What could not be read or parsed (a path that does not exist, a YAML syntax error):
    /// not messages about an object, but the analysis is incomplete without them.
    pub unparsed: Vec<ReportLine>,
    /// Objects of kinds wayfinder does not read, skipped (told apart from a typo in a kind
    /// wayfinder does read, which validation refuses).
    pub skipped: Vec<ReportLine>,
    /// How many files were read.
    pub files_checked: usize,
}

impl Analysis {
    /// istioctl's exit status: [`EXIT_ISSUES`] when a message is at `threshold` or worse,
    /// else [`EXIT_UNPARSED`] when something could not be read or parsed, else 0.
    pub fn exit_status(&self, threshold: Level) -> u8 {
        if self.messages.iter().any(|m| m.level().reaches(threshold)) {
            EXIT_ISSUES
        } else if !self.unparsed.is_empty() {
            EXIT_UNPARSED
        } else {
            0
        }
    }
}

/// Runs every analyzer over `cx` and resolves the findings' lines with `lines`: the messages,
/// sorted and without duplicates.
pub(crate) fn run(cx: &Context<'_>, lines: &mut Lines) -> Vec<Message> {
    let mut found = Vec::new();
    references::hosts(cx, &mut found);
    references::subsets(cx, &mut found);
    gateways::references(cx, &mut found);
    gateways::selectors(cx, &mut found);
    selectors::sidecars(cx, &mut found);
    conflicts::mesh_hosts(cx, &mut found);
    destination_rules::hosts(cx, &mut found);
    mtls::conflicts(cx, &mut found);
    let mut messages: Vec<Message> = found.into_iter().map(|f| f.resolve(lines)).collect();
    sort(&mut messages);
    messages
}

/// Sorts messages as istioctl does and drops repeated ones (two analyzers finding the same
/// thing, as Istio's gateway analyzers both report a selector that matches nothing).
pub(crate) fn sort(messages: &mut Vec<Message>) {
    messages.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    messages.dedup_by(|a, b| a.to_string() == b.to_string());
}
