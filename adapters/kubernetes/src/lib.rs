//! The Kubernetes registry: Services, EndpointSlices, Pods, Nodes and Namespaces of one
//! cluster, watched
//! through the API server and mapped to the model as Istio's Kubernetes registry maps them;
//! and (in [`config_source`]) Istio's networking objects read from the same API server. For
//! gateways' TLS credentials, [`secrets`] watches Secrets and [`access_review`] asks whether a
//! gateway's service account may read them. With replicas, [`leader`] elects (with a
//! `coordination.k8s.io/v1` Lease) the one that writes what a deployment writes once.
//!
//! Start with a [`Cluster`] (where its credentials come from and its cluster id), make its
//! client with [`Cluster::client`], and build a [`KubernetesRegistry`] from it and a
//! [`Config`]. Several clusters are several registries, one per cluster, each with its own
//! cluster id: the aggregate merges a hostname they share, and every endpoint keeps its
//! cluster. With the `fake` feature, the `fake` module holds an in-process API server for
//! tests.
//!
//! Besides kube, it depends on `wayfinder-registry` (the contract) and, for the config
//! source, on `wayfinder-config` (Istio's kinds and the models that read and keep them),
//! never on another adapter.
//!
//! # How it watches
//!
//! Five kube watchers (list, then watch from the list's `resourceVersion`, with bookmarks and
//! kube's default backoff): Services, EndpointSlices (`discovery.k8s.io/v1`) and Pods of all
//! namespaces (or of [`Config::namespace`]), and Nodes and Namespaces. Each object is cut down
//! to the fields the model needs as it arrives (no managed fields, container specs or statuses
//! are cached). Nothing is sent until all five have listed once; the first event is then a `Reset`. After
//! that, each change re-converts only the Services it touches (its own Service; the Service an
//! EndpointSlice names; the Services with endpoints on a pod or node whose relevant labels
//! changed) and sends those whose registration differs from what was sent: scaling a
//! deployment is one `Upsert` with the new endpoints, which the aggregate recognises as an
//! endpoints-only change.
//!
//! A watch whose `resourceVersion` expired (`410 Gone`) relists; so does a watch after the API
//! server came back. A relist replaces the kind's objects atomically when it completes, and
//! only the Services that differ are sent: endpoints are never dropped to be added again.
//!
//! # Mapping (Istio's `pilot/pkg/serviceregistry/kube`)
//!
//! - **Hostname** `name.namespace.svc.<domain>`; namespace the Service's. Service labels are
//!   the service's labels; `networking.istio.io/exportTo` (comma-separated) its `exportTo`.
//! - **Addresses**: `spec.clusterIPs` (both families of a dual-stack Service).
//! - **Resolution**: client-side load balancing; a headless Service (`clusterIP: None`) is
//!   `Passthrough` with its endpoints listed; an `ExternalName` Service resolves by DNS to one
//!   endpoint at the external name, is mesh-external and has no address.
//! - **Ports**: each Service port, named as written (the single unnamed port Kubernetes
//!   allows is named `port-<number>`). Protocol: `UDP` if the port is UDP, else `appProtocol`
//!   (Kubernetes' `kubernetes.io/h2c` is HTTP2, `kubernetes.io/ws` HTTP, `kubernetes.io/wss`
//!   HTTPS), else the port name's prefix (`http-web` is HTTP, `grpc-web` gRPC-Web); unknown
//!   names are unsupported, served as TCP. A numeric `targetPort` is the port's target port;
//!   a named one is resolved per pod by the EndpointSlices, whose port numbers each endpoint
//!   carries. A UDP port whose number a TCP port also has (kube-dns) is left out: the model
//!   has one port per number, and proxies do not carry UDP.
//! - **Endpoints**: every endpoint of the Service's EndpointSlices (label
//!   `kubernetes.io/service-name`), at its first address (Kubernetes: the addresses of one
//!   endpoint are fungible). Slices of type `FQDN` are ignored. A dual-stack Service has a
//!   slice per family listing the same pods; each pod is one endpoint, on the family of the
//!   Service's first cluster IP.
//! - **Health**: ready (or no condition, or `publishNotReadyAddresses`) is healthy; not ready
//!   and terminating is draining; not ready otherwise is unhealthy.
//! - **Labels, service account, network**: the pod's (from `targetRef`; the network from its
//!   `topology.istio.io/network` label, else its namespace's, which a namespace that cannot
//!   be read (HTTP 403) leaves out, logged once), plus Istio's added
//!   labels `topology.istio.io/cluster`, `topology.istio.io/network` and the locality's
//!   `topology.kubernetes.io/region`/`zone` and `topology.istio.io/subzone`. An endpoint whose
//!   pod is not known (yet) has only the added labels; it is converted again when the pod
//!   arrives.
//! - **Locality**: the pod's `istio-locality` label (`region.zone.subzone`), else the node's
//!   `topology.kubernetes.io/region`, `topology.kubernetes.io/zone` and
//!   `topology.istio.io/subzone` labels, else the zone the EndpointSlice gives. If Nodes
//!   cannot be read (HTTP 403), that is logged once and localities come from the slices.
//! - **Service accounts** of the Service: the `alpha.istio.io/canonical-serviceaccounts`
//!   annotation as written, the `alpha.istio.io/kubernetes-serviceaccounts` names and every
//!   endpoint pod's account as `spiffe://cluster.local/ns/<namespace>/sa/<name>`.
//! - **Cluster**: every endpoint carries the registry's cluster id.
//!
//! # When the API server fails
//!
//! Every failure is an error item naming the cluster and the request
//! (`cluster east: list/watch v1 services`) and what went wrong (`HTTP 503 …`, connection
//! refused, a parse error). The last good state stays in force; kube's watcher retries with
//! jittered backoff (0.5 s to 10 s, shorter than kube's default 30 s cap so that a cluster back
//! from an outage is followed within seconds) and resumes from the last `resourceVersion` it
//! saw; a `410 Gone` is not an error but the cue to relist. While failing, the registry
//! probes the failing kinds with a one-item list (backoff 0.5 s to 10 s); when they answer, it
//! sends `Recovered`. A cluster that stays unreachable for longer than
//! [`Config::grace_period`] (default 5 minutes) has its endpoints withdrawn (a `Reset` with
//! its services and no endpoints), so traffic stops going to a cluster that may be gone; when
//! it answers again, everything it holds is sent again.

#[cfg(feature = "fake")]
pub mod fake;
#[cfg(feature = "fake")]
pub mod fixtures;

pub mod access_review;
pub mod config_source;

mod cache;
mod convert;
mod errors;
pub mod leader;
mod objects;
pub mod secrets;
pub mod token_review;
mod watch;
pub mod workload_entries;

use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use wayfinder_registry::{CancellationToken, EventStream, Registration, RegistryId};

/// The API client a [`Cluster`] makes.
pub use kube::Client;

pub use crate::convert::{CLUSTER_LABEL, LOCALITY_LABEL, NETWORK_LABEL, TRUST_DOMAIN};

/// Istio's default cluster id.
pub const DEFAULT_CLUSTER_ID: &str = "Kubernetes";

/// Settings shared by every cluster.
#[derive(Clone, Debug)]
pub struct Config {
    /// Mesh domain: hostnames are `name.namespace.svc.<domain>`.
    pub domain: String,
    /// Watch only this namespace (Istio's `--appNamespace`); `None` watches all.
    pub namespace: Option<String>,
    /// How long an unreachable cluster's endpoints stay in force.
    pub grace_period: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            domain: "cluster.local".into(),
            namespace: None,
            grace_period: Duration::from_secs(300),
        }
    }
}

/// Where a cluster's API server and credentials come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// In-cluster (a pod's service account) when `KUBERNETES_SERVICE_HOST` is set, else
    /// `KUBECONFIG` or `~/.kube/config`, as `kubectl` does.
    Infer,
    /// This kubeconfig file, its current context.
    Kubeconfig(PathBuf),
}

/// One cluster to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Its id: every endpoint carries it.
    pub id: String,
    /// Where its API server is.
    pub source: Source,
}

/// A cluster that cannot be reached for lack of a usable configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The kubeconfig file cannot be read or used.
    #[error("kubeconfig {path}: {detail}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// Neither in-cluster configuration nor a kubeconfig was found.
    #[error("no Kubernetes configuration: {0} (pass --kubeconfig PATH)")]
    Infer(String),
}

impl Cluster {
    /// A client for the cluster's API server. Reads the configuration only; nothing is
    /// requested from the server until the registry watches.
    pub async fn client(&self) -> Result<kube::Client, BuildError> {
        let config = match &self.source {
            Source::Kubeconfig(path) => {
                let fail = |detail: String| BuildError::Kubeconfig {
                    path: path.clone(),
                    detail,
                };
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| fail(e.to_string()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| fail(e.to_string()))?
            }
            Source::Infer if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
                kube::Config::incluster().map_err(|e| BuildError::Infer(e.to_string()))?
            }
            Source::Infer => kube::Config::infer()
                .await
                .map_err(|e| BuildError::Infer(e.to_string()))?,
        };
        kube::Client::try_from(config).map_err(|e| BuildError::Infer(e.to_string()))
    }
}

/// One cluster's registry; see the crate docs.
pub struct KubernetesRegistry {
    id: RegistryId,
    client: kube::Client,
    settings: watch::Settings,
}

impl KubernetesRegistry {
    /// A registry over `client`'s cluster, whose endpoints carry `cluster_id`.
    pub fn new(id: RegistryId, client: kube::Client, cluster_id: &str, config: &Config) -> Self {
        Self {
            id,
            client,
            settings: watch::Settings {
                scope: convert::Scope {
                    domain: config.domain.as_str().into(),
                    cluster_id: cluster_id.into(),
                },
                namespace: config.namespace.clone(),
                grace_period: config.grace_period,
            },
        }
    }
}

impl wayfinder_registry::Source<Registration> for KubernetesRegistry {
    fn id(&self) -> &RegistryId {
        &self.id
    }

    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream {
        watch::stream(self.client, self.settings, shutdown)
    }
}
