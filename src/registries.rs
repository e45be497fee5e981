//! The registries wayfinder can run, chosen by name on the command line.
//!
//! The set of adapters is this one enum; adding an adapter means a variant, its name, and an
//! arm in [`build`]. Names are matched case-insensitively, as pilot-discovery's `--registries`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use wayfinder_registry::config::ConfigSource;
use wayfinder_registry::{Registry, RegistryId};

/// A registry kind, as named in `--registries`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The built-in demo mesh (an in-memory registry holding bookinfo).
    Mock,
    /// ServiceEntry and WorkloadEntry files (`--file-registry`).
    File,
    /// A Consul catalog (`--consul-*`).
    Consul,
    /// A Eureka server (`--eureka-*`).
    Eureka,
}

impl Kind {
    /// Every kind, for messages.
    pub const ALL: [Kind; 4] = [Kind::Mock, Kind::File, Kind::Consul, Kind::Eureka];

    /// The name users write.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mock => "Mock",
            Kind::File => "File",
            Kind::Consul => "Consul",
            Kind::Eureka => "Eureka",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(kind) = Self::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
        {
            return Ok(kind);
        }
        let known: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
        let later = s.eq_ignore_ascii_case("kubernetes");
        let note = if later {
            " (that registry is not available in this version)"
        } else {
            ""
        };
        Err(format!(
            "unknown registry {s:?}{note}; known registries: {}",
            known.join(", ")
        ))
    }
}

/// What the registries need from the command line.
#[derive(Clone, Debug)]
pub struct Config {
    /// Kinds to run, in precedence order.
    pub kinds: Vec<Kind>,
    /// Paths for the File registry.
    pub file_paths: Vec<PathBuf>,
    /// `--config-dir` paths: their ServiceEntries and WorkloadEntries feed a registry named
    /// `Config`, after the registries of `kinds`.
    pub config_dirs: Vec<PathBuf>,
    /// Mesh domain, for the demo's hostnames.
    pub domain: String,
    /// The Consul registry's settings (used when `kinds` has Consul).
    pub consul: wayfinder_consul::Config,
    /// The Eureka registry's settings (used when `kinds` has Eureka).
    pub eureka: wayfinder_eureka::Config,
}

/// A configuration the registries cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A kind appears twice in `--registries`.
    #[error("--registries names {0} twice")]
    Duplicate(Kind),
    /// `File` without paths.
    #[error("--registries File needs at least one --file-registry PATH")]
    NoFilePaths,
    /// Paths without `File`.
    #[error("--file-registry is set but File is not in --registries")]
    UnusedFilePaths,
    /// The file registry refused its paths.
    #[error("file registry: {0}")]
    File(#[from] wayfinder_file::BuildError),
    /// `--config-dir` refused its paths.
    #[error("--config-dir: {0}")]
    ConfigDir(wayfinder_file::BuildError),
    /// The Consul flags are not usable.
    #[error("{0}")]
    Consul(#[from] wayfinder_consul::BuildError),
    /// The Eureka flags are not usable.
    #[error("eureka: {0}")]
    Eureka(#[from] wayfinder_eureka::BuildError),
}

/// Builds the registries, in the order given.
pub async fn build(config: &Config) -> Result<Vec<Box<dyn Registry>>, BuildError> {
    let mut seen = Vec::new();
    for kind in &config.kinds {
        if seen.contains(kind) {
            return Err(BuildError::Duplicate(*kind));
        }
        seen.push(*kind);
    }
    if !config.file_paths.is_empty() && !seen.contains(&Kind::File) {
        return Err(BuildError::UnusedFilePaths);
    }
    let mut registries: Vec<Box<dyn Registry>> = Vec::new();
    for kind in &config.kinds {
        match kind {
            Kind::Mock => {
                let (registry, _handle) = wayfinder_memory::demo::bookinfo(&config.domain).await;
                registries.push(Box::new(registry));
            }
            Kind::File => {
                if config.file_paths.is_empty() {
                    return Err(BuildError::NoFilePaths);
                }
                let file = wayfinder_file::Config {
                    paths: config.file_paths.clone(),
                };
                registries.push(Box::new(file.build(RegistryId::new(Kind::File.name()))?));
            }
            Kind::Consul => {
                let consul = config.consul.clone();
                registries.push(Box::new(
                    consul.build(RegistryId::new(Kind::Consul.name()))?,
                ));
            }
            Kind::Eureka => {
                let eureka = config.eureka.clone();
                registries.push(Box::new(
                    eureka.build(RegistryId::new(Kind::Eureka.name()))?,
                ));
            }
        }
    }
    if !config.config_dirs.is_empty() {
        let entries = wayfinder_file::Config {
            paths: config.config_dirs.clone(),
        };
        let registry = entries
            .build(RegistryId::new(CONFIG_REGISTRY))
            .map_err(BuildError::ConfigDir)?;
        registries.push(Box::new(registry));
    }
    Ok(registries)
}

/// The registry of the ServiceEntries and WorkloadEntries found under `--config-dir`.
pub const CONFIG_REGISTRY: &str = "Config";

/// The configuration sources: the `--config-dir` paths, if any.
pub fn config_sources(config: &Config) -> Result<Vec<Box<dyn ConfigSource>>, BuildError> {
    if config.config_dirs.is_empty() {
        return Ok(Vec::new());
    }
    let dir = wayfinder_file::ConfigDir::new(config.config_dirs.clone())
        .map_err(BuildError::ConfigDir)?;
    Ok(vec![Box::new(dir)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_case_insensitive_and_unknown_ones_are_explained() {
        assert_eq!("mock".parse::<Kind>(), Ok(Kind::Mock));
        assert_eq!(" FILE".parse::<Kind>(), Ok(Kind::File));
        let err = "Zookeeper".parse::<Kind>().unwrap_err();
        assert!(
            err.contains("unknown registry \"Zookeeper\"")
                && err.contains("Mock, File, Consul, Eureka"),
            "{err}"
        );
        assert_eq!("consul".parse::<Kind>(), Ok(Kind::Consul));
        let err = "Kubernetes".parse::<Kind>().unwrap_err();
        assert!(err.contains("not available in this version"), "{err}");
    }
}
