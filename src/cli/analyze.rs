//! The flags of `wayfinder analyze` and of `wayfinder validate --analyze`: the paths, the
//! registries whose services count as known (named as for `discovery`), and istioctl's
//! thresholds.

use std::path::PathBuf;

use clap::Args;
use wayfinder_config::analyze::Level;

use super::parse_kind;
use crate::registries::Kind;

/// `wayfinder analyze` arguments.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Files or directories to analyse together (every `.yaml`, `.yml` and `.json` in a
    /// directory).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// What the analysis knows besides the files, and how it reports.
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

/// The flags of the analysis (`wayfinder analyze`, `wayfinder validate --analyze`).
#[derive(Clone, Debug, Args)]
pub struct AnalysisArgs {
    /// Registries whose services and workloads count as known, named as for `discovery`:
    /// Mock (the built-in bookinfo demo) and File (`--file-registry`), comma-separated. None
    /// by default: only the ServiceEntries and WorkloadEntries among the files are known, as
    /// for `istioctl analyze --use-kube=false`. Live registries (Kubernetes, Consul, Eureka)
    /// are refused: the analysis is offline.
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    pub registries: Vec<Kind>,
    /// A ServiceEntry/WorkloadEntry file or directory of the File registry (repeatable).
    #[arg(
        long = "file-registry",
        visible_alias = "fileRegistry",
        value_name = "PATH"
    )]
    pub file_registry: Vec<PathBuf>,
    /// Mesh DNS domain short hosts expand with (`reviews` in `default` is
    /// `reviews.default.svc.DOMAIN`).
    #[arg(long, default_value = "cluster.local")]
    pub domain: String,
    /// The root namespace: its PeerAuthentication without a selector applies to the mesh.
    #[arg(
        long = "root-namespace",
        default_value = "istio-system",
        value_name = "NAMESPACE"
    )]
    pub root_namespace: String,
    /// The level of message at which the exit status is 79: Error, Warning or Info.
    #[arg(long = "failure-threshold", default_value = "Error", value_parser = parse_analysis_level, value_name = "LEVEL")]
    pub failure_threshold: Level,
    /// The level of message at which messages are printed: Error, Warning or Info.
    #[arg(long = "output-threshold", default_value = "Info", value_parser = parse_analysis_level, value_name = "LEVEL")]
    pub output_threshold: Level,
}

fn parse_analysis_level(s: &str) -> Result<Level, String> {
    Level::from_name(s).ok_or_else(|| format!("{s:?} is not a level: Error, Warning or Info"))
}
