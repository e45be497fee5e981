//! `wayfinder analyze` (and `wayfinder validate --analyze`): the files read and analysed by
//! `wayfinder-file` and `wayfinder-config` ([`wayfinder_config::analyze`] says what is
//! checked), with what the registries named on the command line know, printed as `istioctl
//! analyze` prints it and with its exit status.
//!
//! The registries are those `discovery` would run from the same flags, read offline: `Mock`
//! (the built-in demo) and `File` (`--file-registry`). A live registry cannot be read
//! without a server, so naming one is an error rather than an analysis that silently knows
//! less than the user asked for.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use wayfinder_config::analyze::{Analysis, EXIT_ISSUES, EXIT_UNPARSED, Known};
use wayfinder_config::check::{Location, ReportLine};

use crate::cli::AnalysisArgs;
use crate::registries::{BuildError, Kind};

/// Where Istio documents its analysis messages, which istioctl's failure points to.
const ANALYSIS_DOCS: &str = "https://istio.io/latest/docs/reference/config/analysis";

/// What the registries of `args` know: their services and workloads, with the domain and
/// root namespace; or why they cannot be read offline (the reasons `discovery` would refuse
/// the same flags, a live registry, a File registry path that cannot be read).
pub fn known(args: &AnalysisArgs) -> Result<Known, String> {
    let mut known = Known {
        registrations: Vec::new(),
        domain: args.domain.clone(),
        root_namespace: args.root_namespace.clone(),
    };
    let mut seen = BTreeSet::new();
    for kind in &args.registries {
        if !seen.insert(kind.name()) {
            return Err(BuildError::Duplicate(*kind).to_string());
        }
        match kind {
            Kind::Mock => known
                .registrations
                .extend(wayfinder_memory::demo::bookinfo_services(&args.domain)),
            Kind::File if args.file_registry.is_empty() => {
                return Err(BuildError::NoFilePaths.to_string());
            }
            Kind::File => known
                .registrations
                .extend(wayfinder_file::registrations(&args.file_registry)?),
            Kind::Consul | Kind::Eureka | Kind::Kubernetes => {
                return Err(format!(
                    "--registries {}: analysis is offline and reads only the Mock and File \
                     registries; a live registry cannot be read without a server",
                    kind.name()
                ));
            }
        }
    }
    if !args.file_registry.is_empty() && !args.registries.contains(&Kind::File) {
        return Err(BuildError::UnusedFilePaths.to_string());
    }
    Ok(known)
}

/// Analyses `paths` with what `args` names, prints the messages at or above
/// `--output-threshold` on standard output (one line each, as istioctl's), and what could not
/// be read, what was skipped and the outcome on standard error; returns the exit status
/// ([`Analysis::exit_status`], 1 when the registries cannot be read).
pub fn run(paths: &[PathBuf], args: &AnalysisArgs) -> u8 {
    let known = match known(args) {
        Ok(known) => known,
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    let analysis = wayfinder_file::analyze(paths, &known);
    let shown: Vec<_> = analysis
        .messages
        .iter()
        .filter(|m| m.level().reaches(args.output_threshold))
        .collect();
    for message in &shown {
        println!("{message}");
    }
    for line in analysis.unparsed.iter().chain(&analysis.skipped) {
        eprintln!("{line}");
    }
    let status = analysis.exit_status(args.failure_threshold);
    let target = target(paths);
    if status == EXIT_ISSUES {
        eprintln!(
            "Error: Analyzers found issues when analyzing {target}.\nSee {ANALYSIS_DOCS} for \
             more information about causes and resolutions."
        );
    } else if shown.is_empty() && analysis.unparsed.is_empty() {
        eprintln!("\u{2714} No validation issues found when analyzing {target}.");
    } else if shown.is_empty() {
        let files = unparsed_files(&analysis);
        let noun = if files == 1 { "file" } else { "files" };
        eprintln!(
            "No validation issues found when analyzing {target} (but {files} {noun} could not \
             be parsed)."
        );
    }
    if status == EXIT_UNPARSED {
        eprintln!("Error: Some files couldn't be parsed.");
    }
    status
}

/// The paths analysed, as the outcome names them.
fn target(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// How many files hold something that could not be read or parsed.
fn unparsed_files(analysis: &Analysis) -> usize {
    let path = |line: &ReportLine| -> PathBuf {
        match &line.origin {
            Location::Path(path) => path.clone(),
            Location::Document(origin) => Path::to_path_buf(&origin.path),
        }
    };
    let files: BTreeSet<PathBuf> = analysis.unparsed.iter().map(path).collect();
    files.len()
}
