//! The registries wayfinder can run, chosen by name on the command line.
//!
//! The set of adapters is this one enum; adding an adapter means a variant, its name, and an
//! arm in [`build`]. Names are matched case-insensitively, as pilot-discovery's `--registries`.
//!
//! The heavy adapters are cargo features of this crate (`kubernetes`, `consul`, `eureka`, all
//! on by default). A build without one still knows its registry's name, so that the command
//! line reads the same in every build, and [`build`] refuses it with
//! [`BuildError::NotCompiled`], which names the feature to rebuild with.

#[cfg(feature = "kubernetes")]
mod kubernetes;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use wayfinder_config::ConfigSource;
#[cfg(feature = "kubernetes")]
use wayfinder_kubernetes::KubernetesRegistry;
#[cfg(feature = "kubernetes")]
use wayfinder_kubernetes::config_source::IstioConfig;
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
    /// One or several Kubernetes clusters (`--kubeconfig`, `--cluster-id`, …): one registry
    /// per cluster.
    Kubernetes,
}

impl Kind {
    /// Every kind, for messages.
    pub const ALL: [Kind; 5] = [
        Kind::Mock,
        Kind::File,
        Kind::Consul,
        Kind::Eureka,
        Kind::Kubernetes,
    ];

    /// The name users write.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mock => "Mock",
            Kind::File => "File",
            Kind::Consul => "Consul",
            Kind::Eureka => "Eureka",
            Kind::Kubernetes => "Kubernetes",
        }
    }

    /// The cargo feature that compiles this registry in, if it has one.
    pub fn feature(self) -> Option<Feature> {
        match self {
            Kind::Mock | Kind::File => None,
            Kind::Consul => Some(Feature::Consul),
            Kind::Eureka => Some(Feature::Eureka),
            Kind::Kubernetes => Some(Feature::Kubernetes),
        }
    }

    /// Whether this build can run this registry.
    pub fn compiled(self) -> bool {
        self.feature().is_none_or(Feature::enabled)
    }
}

/// A cargo feature of this crate that compiles a registry adapter in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// `kubernetes`: the Kubernetes registry and config source (kube, k8s-openapi).
    Kubernetes,
    /// `consul`: the Consul registry.
    Consul,
    /// `eureka`: the Eureka registry.
    Eureka,
}

impl Feature {
    /// The feature's name in `Cargo.toml`.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Kubernetes => "kubernetes",
            Feature::Consul => "consul",
            Feature::Eureka => "eureka",
        }
    }

    /// Whether this build has it.
    pub fn enabled(self) -> bool {
        match self {
            Feature::Kubernetes => cfg!(feature = "kubernetes"),
            Feature::Consul => cfg!(feature = "consul"),
            Feature::Eureka => cfg!(feature = "eureka"),
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
        Err(format!(
            "unknown registry {s:?}; known registries: {}",
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
    /// Largest file the File registry and the `--config-dir` readers read (`--max-file-bytes`).
    pub max_file_bytes: u64,
    /// Mesh domain, for the demo's hostnames.
    pub domain: String,
    /// The Consul registry's settings (used when `kinds` has Consul).
    #[cfg(feature = "consul")]
    pub consul: wayfinder_consul::Config,
    /// The Eureka registry's settings (used when `kinds` has Eureka).
    #[cfg(feature = "eureka")]
    pub eureka: wayfinder_eureka::Config,
    /// The Kubernetes clusters and their settings (used when `kinds` has Kubernetes or the
    /// Kubernetes config source is on).
    pub kubernetes: Kubernetes,
}

/// What the Kubernetes registries and config source need. Without the `kubernetes` feature,
/// only whether the config source is asked for, so that it can be refused.
#[derive(Clone, Debug, Default)]
pub struct Kubernetes {
    /// The clusters, the primary (the config source's) first.
    #[cfg(feature = "kubernetes")]
    pub clusters: Vec<wayfinder_kubernetes::Cluster>,
    /// Settings shared by every cluster.
    #[cfg(feature = "kubernetes")]
    pub settings: wayfinder_kubernetes::Config,
    /// Read Istio's networking objects from the primary cluster (`--config-source k8s`).
    pub config_source: bool,
    /// The audiences a service-account token must have for the certificate API
    /// (`--token-audiences`), checked by the primary cluster's TokenReview.
    #[cfg(feature = "kubernetes")]
    pub token_audiences: Vec<String>,
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
    /// A registry or source this build leaves out was asked for.
    #[error("{what} is not compiled into this build; rebuild with the cargo feature `{feature}`")]
    NotCompiled {
        /// What was asked for: `registry Consul`, `--config-source k8s`, a flag.
        what: String,
        /// The feature that compiles it in.
        feature: Feature,
    },
    /// The Consul flags are not usable.
    #[cfg(feature = "consul")]
    #[error("{0}")]
    Consul(#[from] wayfinder_consul::BuildError),
    /// The Eureka flags are not usable.
    #[cfg(feature = "eureka")]
    #[error("eureka: {0}")]
    Eureka(#[from] wayfinder_eureka::BuildError),
    /// A cluster's configuration is not usable.
    #[cfg(feature = "kubernetes")]
    #[error("cluster {cluster}: {error}")]
    Kubernetes {
        /// The cluster id.
        cluster: String,
        /// What is wrong.
        error: wayfinder_kubernetes::BuildError,
    },
    /// Two clusters with one id.
    #[error("two Kubernetes clusters are named {0}: name each --kubeconfig NAME=PATH")]
    DuplicateCluster(String),
}

impl BuildError {
    /// Registry `kind` is not compiled into this build.
    fn not_compiled(kind: Kind, feature: Feature) -> Self {
        BuildError::NotCompiled {
            what: format!("registry {kind}"),
            feature,
        }
    }
}

/// Builds the registries and the configuration sources, in the order given.
pub async fn build(config: &Config) -> Result<Built, BuildError> {
    let mut seen = Vec::new();
    for kind in &config.kinds {
        if seen.contains(kind) {
            return Err(BuildError::Duplicate(*kind));
        }
        // Before anything starts.
        if let Some(feature) = kind.feature().filter(|f| !f.enabled()) {
            return Err(BuildError::not_compiled(*kind, feature));
        }
        seen.push(*kind);
    }
    if !config.file_paths.is_empty() && !seen.contains(&Kind::File) {
        return Err(BuildError::UnusedFilePaths);
    }
    let kube = &config.kubernetes;
    #[cfg(not(feature = "kubernetes"))]
    if kube.config_source {
        return Err(BuildError::NotCompiled {
            what: "the Kubernetes config source (--config-source k8s)".into(),
            feature: Feature::Kubernetes,
        });
    }
    #[cfg(feature = "kubernetes")]
    let kube_clients = if seen.contains(&Kind::Kubernetes) || kube.config_source {
        clients(kube).await?
    } else {
        Vec::new()
    };
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
                    max_file_bytes: config.max_file_bytes,
                };
                registries.push(Box::new(file.build(RegistryId::new(Kind::File.name()))?));
            }
            #[cfg(feature = "consul")]
            Kind::Consul => {
                let consul = config.consul.clone();
                registries.push(Box::new(
                    consul.build(RegistryId::new(Kind::Consul.name()))?,
                ));
            }
            #[cfg(feature = "eureka")]
            Kind::Eureka => {
                let eureka = config.eureka.clone();
                registries.push(Box::new(
                    eureka.build(RegistryId::new(Kind::Eureka.name()))?,
                ));
            }
            #[cfg(feature = "kubernetes")]
            Kind::Kubernetes => {
                let several = kube.clusters.len() > 1;
                for (cluster, client) in kube.clusters.iter().zip(kube_clients.iter().cloned()) {
                    let id = match several {
                        true => format!("{}/{}", Kind::Kubernetes.name(), cluster.id),
                        false => Kind::Kubernetes.name().to_owned(),
                    };
                    registries.push(Box::new(KubernetesRegistry::new(
                        RegistryId::new(id),
                        client,
                        &cluster.id,
                        &kube.settings,
                    )));
                }
            }
            // Refused above already.
            #[cfg(not(feature = "consul"))]
            Kind::Consul => return Err(BuildError::not_compiled(*kind, Feature::Consul)),
            #[cfg(not(feature = "eureka"))]
            Kind::Eureka => return Err(BuildError::not_compiled(*kind, Feature::Eureka)),
            #[cfg(not(feature = "kubernetes"))]
            Kind::Kubernetes => return Err(BuildError::not_compiled(*kind, Feature::Kubernetes)),
        }
    }
    #[cfg_attr(not(feature = "kubernetes"), allow(unused_mut))]
    let mut config_sources = config_dir_source(config)?;
    #[cfg_attr(not(feature = "kubernetes"), allow(unused_mut))]
    let mut kube_auto_registration = None;
    #[cfg_attr(not(feature = "kubernetes"), allow(unused_mut))]
    let mut election = None;
    // The primary cluster's Istio objects (`--config-source k8s`).
    #[cfg(feature = "kubernetes")]
    if let (true, Some(cluster), Some(client)) = (
        kube.config_source,
        kube.clusters.first(),
        kube_clients.first(),
    ) {
        // The replicas elect the one that writes what the deployment writes once.
        let identity = crate::leader::identity();
        let elected = crate::leader::Election::kubernetes(client.clone(), &identity);
        let namespace = kube.settings.namespace.clone();
        let istio = IstioConfig::new(client.clone(), namespace, &cluster.id)
            .with_leadership(elected.leader.leadership());
        config_sources.push(Box::new(istio.config_source()));
        let id = RegistryId::new(KUBERNETES_CONFIG_REGISTRY);
        registries.push(Box::new(istio.entries(id)));
        let writer =
            wayfinder_kubernetes::workload_entries::WorkloadEntries::new(client.clone(), &identity)
                .cleaning_in(kube.settings.namespace.clone());
        kube_auto_registration = Some(crate::autoregistration::kubernetes(writer));
        election = Some(elected);
    }
    // The AutoRegistration registry (see `crate::autoregistration`): the ServiceEntries of
    // every file, selecting the workload entries of connected VMs. With the Kubernetes config
    // source, the entries go to the cluster instead (below).
    let mut auto_registration = None;
    let files: Vec<PathBuf> = config
        .file_paths
        .iter()
        .chain(&config.config_dirs)
        .cloned()
        .collect();
    if !files.is_empty() && !kube.config_source {
        let entries = wayfinder_file::Config {
            paths: files,
            max_file_bytes: config.max_file_bytes,
        };
        let files = entries
            .build(RegistryId::new(crate::autoregistration::REGISTRY))
            .map_err(BuildError::ConfigDir)?
            .beside_config_source();
        auto_registration = Some(crate::autoregistration::registry(files));
    }
    if !config.config_dirs.is_empty() {
        let entries = wayfinder_file::Config {
            paths: config.config_dirs.clone(),
            max_file_bytes: config.max_file_bytes,
        };
        let registry = entries
            .build(RegistryId::new(CONFIG_REGISTRY))
            .map_err(BuildError::ConfigDir)?
            .beside_config_source();
        registries.push(Box::new(registry));
    }
    let auto_registration = auto_registration
        .map(|(registry, handle)| {
            registries.push(Box::new(registry));
            handle
        })
        .or(kube_auto_registration);
    #[cfg(feature = "kubernetes")]
    let token_reviewer = kube_clients
        .first()
        .map(|client| kubernetes::token_reviewer(client, &kube.token_audiences));
    #[cfg(not(feature = "kubernetes"))]
    let token_reviewer = None;
    // Every cluster's Secrets, read only once a credential is needed (`crate::credentials`).
    #[cfg(feature = "kubernetes")]
    let secret_stores = kube
        .clusters
        .iter()
        .zip(&kube_clients)
        .map(|(cluster, client)| {
            let store = kubernetes::secret_store(client, &cluster.id, &kube.settings.namespace);
            (cluster.id.clone(), store)
        })
        .collect();
    #[cfg(not(feature = "kubernetes"))]
    let secret_stores = Vec::new();
    Ok(Built {
        registries,
        config_sources,
        auto_registration,
        token_reviewer,
        secret_stores,
        election,
    })
}

/// The registries and configuration sources to run.
pub struct Built {
    /// Registries, in precedence order.
    pub registries: Vec<Box<dyn Registry>>,
    /// Configuration sources.
    pub config_sources: Vec<Box<dyn ConfigSource>>,
    /// Where auto-registered workload entries go (the `AutoRegistration` registry, the last
    /// of `registries`), when there are files whose ServiceEntries could select them.
    pub auto_registration: Option<crate::autoregistration::Handle>,
    /// The primary cluster's TokenReview, when a cluster is configured: the certificate API
    /// accepts its service-account tokens.
    pub token_reviewer: Option<Arc<dyn crate::ca::TokenReviewer>>,
    /// Every cluster's Secrets, the primary first, for gateways' credentials.
    pub secret_stores: Vec<(String, Arc<dyn crate::credentials::SecretStore>)>,
    /// The replicas' leader election, with `--config-source k8s` (see [`crate::leader`]).
    pub election: Option<crate::leader::Election>,
}

/// A client per cluster; refuses two clusters with one id.
#[cfg(feature = "kubernetes")]
async fn clients(kube: &Kubernetes) -> Result<Vec<wayfinder_kubernetes::Client>, BuildError> {
    let mut clients = Vec::new();
    for (i, cluster) in kube.clusters.iter().enumerate() {
        if kube.clusters[..i].iter().any(|c| c.id == cluster.id) {
            return Err(BuildError::DuplicateCluster(cluster.id.clone()));
        }
        let client = cluster
            .client()
            .await
            .map_err(|error| BuildError::Kubernetes {
                cluster: cluster.id.clone(),
                error,
            })?;
        clients.push(client);
    }
    Ok(clients)
}

/// The registry of the ServiceEntries and WorkloadEntries found under `--config-dir`.
pub const CONFIG_REGISTRY: &str = "Config";

/// The registry of the ServiceEntries and WorkloadEntries read from Kubernetes
/// (`--config-source k8s`).
pub const KUBERNETES_CONFIG_REGISTRY: &str = "Config/k8s";

/// The `--config-dir` source, if any.
fn config_dir_source(config: &Config) -> Result<Vec<Box<dyn ConfigSource>>, BuildError> {
    if config.config_dirs.is_empty() {
        return Ok(Vec::new());
    }
    let dir = wayfinder_file::ConfigDir::new(config.config_dirs.clone())
        .map_err(BuildError::ConfigDir)?
        .max_file_bytes(config.max_file_bytes);
    Ok(vec![Box::new(dir)])
}

#[cfg(test)]
mod tests;
