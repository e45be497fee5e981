//! `--meshConfig FILE`: Istio's MeshConfig, read at start and watched, its settings overlaid
//! on the flags' and published to the xDS server as [`MeshSettings`] (see
//! `wayfinder_config::mesh_config` for the fields read).
//!
//! `--networksConfig FILE` (Istio's MeshNetworks) is followed the same way, beside it.
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
use wayfinder_config::mesh_networks::MeshNetworks;
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
    /// The MeshNetworks file (`--networksConfig`), if one is read.
    pub networks_path: Option<PathBuf>,
    /// Why its last change is not in force, while it is not.
    pub networks_error: Option<String>,
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
        ..MeshStatus::default()
    };
    log_warnings(path, &status.warnings);
    Ok((settings, status))
}

/// The settings files the server follows: `--meshConfig` and `--networksConfig`.
#[derive(Clone, Debug, Default)]
pub struct Files {
    /// The MeshConfig file.
    pub mesh: Option<PathBuf>,
    /// The MeshNetworks file.
    pub networks: Option<PathBuf>,
}

/// Publishes `first` (the flags' settings, or [`load`]'s) and follows `files` until
/// `shutdown`, publishing each good change over `flags`.
pub fn spawn(
    files: Files,
    flags: MeshSettings,
    first: (MeshSettings, MeshStatus),
    shutdown: CancellationToken,
) -> (
    watch::Receiver<Arc<MeshSettings>>,
    watch::Receiver<Arc<MeshStatus>>,
) {
    let (settings_tx, settings) = watch::channel(Arc::new(first.0));
    let mut status = first.1;
    status.networks_path.clone_from(&files.networks);
    let (status_tx, status) = watch::channel(Arc::new(status));
    if files.mesh.is_some() || files.networks.is_some() {
        tokio::spawn(follow(files, flags, settings_tx, status_tx, shutdown));
    }
    (settings, status)
}

async fn follow(
    files: Files,
    mut flags: MeshSettings,
    settings_tx: watch::Sender<Arc<MeshSettings>>,
    status_tx: watch::Sender<Arc<MeshStatus>>,
    shutdown: CancellationToken,
) {
    let targets: Vec<Target> = [&files.mesh, &files.networks]
        .into_iter()
        .flatten()
        .map(|p| Target::File(p.clone()))
        .collect();
    let mut watch = Watch::new(&targets, shutdown);
    while watch.next().await.is_some() {
        let mut status = (**status_tx.borrow()).clone();
        if let Some(path) = &files.networks {
            match blocking(path, read_networks).await {
                Ok(networks) => {
                    if *flags.networks != networks || status.networks_error.is_some() {
                        log_networks(path, &networks);
                    }
                    flags.networks = Arc::new(networks);
                    status.networks_error = None;
                }
                Err(error) => {
                    if status.networks_error.as_deref() != Some(error.as_str()) {
                        tracing::error!(
                            "MeshNetworks {error}; the last good networks stay in force"
                        );
                    }
                    status.networks_error = Some(error);
                }
            }
        }
        let current = settings_tx.borrow().clone();
        // Without a good MeshConfig, the settings in force with the networks just read.
        let mut settings = MeshSettings {
            networks: flags.networks.clone(),
            ..(*current).clone()
        };
        if let Some(path) = &files.mesh {
            match blocking(path, read).await {
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
                    settings = overlay(&flags, &parsed.config, Some(&current));
                    let warnings = warnings(&parsed.problems);
                    if status.config.as_ref() != Some(&parsed.config) || status.error.is_some() {
                        tracing::info!("MeshConfig {}: read", path.display());
                        log_warnings(path, &warnings);
                    }
                    status.path = Some(path.clone());
                    status.config = Some(parsed.config);
                    status.warnings = warnings;
                    status.error = None;
                }
            }
        }
        if *current != settings {
            settings_tx.send_replace(Arc::new(settings));
        }
        status_tx.send_replace(Arc::new(status));
    }
}

/// `read(path)` off the async threads.
async fn blocking<T: Send + 'static>(
    path: &Path,
    read: impl FnOnce(&Path) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let reading = path.to_path_buf();
    tokio::task::spawn_blocking(move || read(&reading))
        .await
        .unwrap_or_else(|e| Err(format!("reading {}: {e}", path.display())))
}

/// Reads and checks a MeshNetworks file (`--networksConfig`): `Err` names the file and the
/// field.
pub fn load_networks(path: &Path) -> Result<MeshNetworks, String> {
    let networks = read_networks(path)?;
    log_networks(path, &networks);
    Ok(networks)
}

fn read_networks(path: &Path) -> Result<MeshNetworks, String> {
    let at = |e: String| format!("{}: {e}", path.display());
    wayfinder_config::mesh_networks::parse(&read_text(path)?).map_err(at)
}

fn log_networks(path: &Path, networks: &MeshNetworks) {
    tracing::info!(
        "MeshNetworks {}: {} networks, gateways for {}",
        path.display(),
        networks.networks.len(),
        networks.gateways().len()
    );
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
        proxy_defaults: config.default_config.clone(),
        protocol_detection_timeout: config.protocol_detection_timeout.map(|d| d.0),
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
