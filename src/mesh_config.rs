//! `--meshConfig FILE`: Istio's MeshConfig, read at start and watched, its settings overlaid
//! on the flags' and published to the xDS server as [`MeshSettings`] (see
//! `wayfinder_config::mesh_config` for the fields read).
//!
//! - **At start** the file must read and validate, or the server does not start (as istiod
//!   does not): the error names the file and the field.
//! - **A change** applies within a second of the file settling (it is watched through its
//!   directory, so a ConfigMap volume's `..data` swap counts): the new settings are published,
//!   and the next xDS snapshot is generated from them. A file that no longer reads or
//!   validates, or is removed, keeps the last good settings; the error is logged and shown on
//!   `/debug/configz` (`mesh_config`) until the file is fixed.
//! - **Precedence:** a field the file sets wins over the flag for it (`--root-namespace`,
//!   `--trust-domain`); the flags are the defaults. `trustDomain` is read at start only: the
//!   mesh CA signs for it, so a change is logged and takes effect at the next start.
//! - Fields the file sets that wayfinder does not act on are logged once per change, with a
//!   WARN line each, and listed on `/debug/configz`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use wayfinder_config::mesh_config::{self, MeshConfig, Parsed};
use wayfinder_config::validate::Problem;
use wayfinder_file::watch::{Target, Watch};

use crate::xds::MeshSettings;

/// The largest MeshConfig file read (Istio's ConfigMaps are at most 1 MiB).
pub const MAX_BYTES: u64 = 1024 * 1024;

/// What `/debug/configz` shows of the MeshConfig.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct MeshStatus {
    /// The file, if one is read.
    pub path: Option<PathBuf>,
    /// Its last good settings, as read.
    pub config: Option<MeshConfig>,
    /// Its fields not acted on, and other warnings, as `field: message`.
    pub warnings: Vec<String>,
    /// Why its last change is not in force, while it is not.
    pub error: Option<String>,
}

/// The file's settings at start, over `flags`: `Err` says why the server must not start.
pub fn load(path: &Path, flags: &MeshSettings) -> Result<(MeshSettings, MeshStatus), String> {
    let parsed = read(path)?;
    let settings = overlay(flags, &parsed.config, None);
    let status = MeshStatus {
        path: Some(path.to_path_buf()),
        warnings: warnings(&parsed.problems),
        config: Some(parsed.config),
        error: None,
    };
    log_warnings(path, &status.warnings);
    Ok((settings, status))
}

/// Publishes `first` (the flags' settings, or [`load`]'s) and, with a `path`, follows the file
/// until `shutdown`, publishing each good change over `flags`.
pub fn spawn(
    path: Option<PathBuf>,
    flags: MeshSettings,
    first: (MeshSettings, MeshStatus),
    shutdown: CancellationToken,
) -> (
    watch::Receiver<Arc<MeshSettings>>,
    watch::Receiver<Arc<MeshStatus>>,
) {
    let (settings_tx, settings) = watch::channel(Arc::new(first.0));
    let (status_tx, status) = watch::channel(Arc::new(first.1));
    if let Some(path) = path {
        tokio::spawn(follow(path, flags, settings_tx, status_tx, shutdown));
    }
    (settings, status)
}

async fn follow(
    path: PathBuf,
    flags: MeshSettings,
    settings_tx: watch::Sender<Arc<MeshSettings>>,
    status_tx: watch::Sender<Arc<MeshStatus>>,
    shutdown: CancellationToken,
) {
    let mut watch = Watch::new(&[Target::File(path.clone())], shutdown);
    while watch.next().await.is_some() {
        let reading = path.clone();
        let parsed = tokio::task::spawn_blocking(move || read(&reading))
            .await
            .unwrap_or_else(|e| Err(format!("reading {}: {e}", path.display())));
        let mut status = (**status_tx.borrow()).clone();
        match parsed {
            Err(error) => {
                if status.error.as_deref() != Some(error.as_str()) {
                    tracing::error!(
                        "MeshConfig {}: {error}; the last good settings stay in force",
                        path.display()
                    );
                }
                status.error = Some(error);
            }
            Ok(parsed) => {
                let current = settings_tx.borrow().clone();
                let settings = overlay(&flags, &parsed.config, Some(&current));
                let warnings = warnings(&parsed.problems);
                if status.config.as_ref() != Some(&parsed.config) || status.error.is_some() {
                    tracing::info!("MeshConfig {}: read", path.display());
                    log_warnings(&path, &warnings);
                }
                if *current != settings {
                    settings_tx.send_replace(Arc::new(settings));
                }
                status = MeshStatus {
                    path: Some(path.clone()),
                    config: Some(parsed.config),
                    warnings,
                    error: None,
                };
            }
        }
        status_tx.send_replace(Arc::new(status));
    }
}

/// Reads and checks a MeshNetworks file (`--networksConfig`), at start only: `Err` names the
/// file and the field.
pub fn load_networks(path: &Path) -> Result<wayfinder_config::mesh_networks::MeshNetworks, String> {
    let at = |e: String| format!("{}: {e}", path.display());
    let networks = wayfinder_config::mesh_networks::parse(&read_text(path)?).map_err(at)?;
    tracing::info!(
        "MeshNetworks {}: {} networks, gateways for {}",
        path.display(),
        networks.networks.len(),
        networks.gateways().len()
    );
    Ok(networks)
}

/// Reads and checks the file: `Err` when it cannot be read, does not parse, or is refused.
fn read(path: &Path) -> Result<Parsed, String> {
    let at = |e: String| format!("{}: {e}", path.display());
    let parsed = mesh_config::parse(&read_text(path)?).map_err(at)?;
    if parsed.refused() {
        let errors: Vec<String> = parsed
            .problems
            .iter()
            .filter(|p| p.fatal)
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect();
        return Err(at(errors.join("; ")));
    }
    Ok(parsed)
}

/// A settings file's text, at most [`MAX_BYTES`], under the watched files' reading rules; the
/// error names the file.
fn read_text(path: &Path) -> Result<String, String> {
    let at = |e: String| format!("{}: {e}", path.display());
    let bytes = wayfinder_file::read::read(path, MAX_BYTES)
        .map_err(|e| at(e.to_string()))?
        .ok_or_else(|| at("no such file".into()))?;
    String::from_utf8(bytes).map_err(|_| at("not UTF-8".into()))
}

/// `flags` with what `config` sets. `current` (the settings in force, after start) keeps its
/// trust domain: the CA signs for the one read at start.
fn overlay(
    flags: &MeshSettings,
    config: &MeshConfig,
    current: Option<&MeshSettings>,
) -> MeshSettings {
    let mut trust_domain = config
        .trust_domain
        .as_deref()
        .map_or_else(|| flags.trust_domain.clone(), Into::into);
    if let Some(current) = current
        && current.trust_domain != trust_domain
    {
        tracing::warn!(
            in_force = %current.trust_domain,
            read = %trust_domain,
            "MeshConfig's trustDomain changed: the mesh CA signs for the one read at start, \
             so the change takes effect at the next start"
        );
        trust_domain = current.trust_domain.clone();
    }
    MeshSettings {
        system_ca: flags.system_ca.clone(),
        trust_domain,
        root_namespace: config
            .root_namespace
            .as_deref()
            .map_or_else(|| flags.root_namespace.clone(), Into::into),
        registry_only: config.registry_only(),
        locality_lb: config.locality_lb_setting.clone(),
        auto_mtls: config.enable_auto_mtls.unwrap_or(true),
        connect_timeout: config
            .connect_timeout
            .map_or(flags.connect_timeout, |d| d.0),
        // `--networksConfig`'s, which MeshConfig does not hold.
        networks: flags.networks.clone(),
        exports: crate::snapshot::rules::ExportDefaults {
            services: config.default_service_export_to.clone(),
            virtual_services: config.default_virtual_service_export_to.clone(),
            destination_rules: config.default_destination_rule_export_to.clone(),
        },
    }
}

fn warnings(problems: &[Problem]) -> Vec<String> {
    problems
        .iter()
        .filter(|p| !p.fatal)
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect()
}

fn log_warnings(path: &Path, warnings: &[String]) {
    for w in warnings {
        tracing::warn!("MeshConfig {}: {w}", path.display());
    }
}

#[cfg(test)]
mod tests;
