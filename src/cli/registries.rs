//! The registries' flags of `wayfinder discovery`: Consul, Eureka and Kubernetes (clusters,
//! the config source, and what a build without the feature refuses).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::{Discovery, parse_duration, parse_kubeconfig};

/// Flags of the Consul registry (`--registries Consul`). The `CONSUL_*` environment variables
/// are the Consul CLI's own.
#[derive(Debug, Args)]
pub struct ConsulArgs {
    /// Consul agent or server address (`host:port`, `http://…`, `https://…`).
    #[arg(
        long = "consul-addr",
        visible_alias = "consulserverURL",
        env = "CONSUL_HTTP_ADDR",
        default_value = "http://127.0.0.1:8500"
    )]
    pub consul_addr: String,
    /// 0 watches with blocking queries; a duration (`2s`) polls every service at that period.
    #[arg(long = "consul-interval", visible_alias = "consulserverInterval", default_value = "0", value_parser = parse_duration)]
    pub consul_interval: Duration,
    /// Longest a blocking query waits on the server (Consul's `wait`, 1s to 10m).
    #[arg(long = "consul-wait", default_value = "5m", value_parser = parse_duration)]
    pub consul_wait: Duration,
    /// Datacenters to read: empty for the agent's own, `*` for all, or `dc1,dc2`.
    #[arg(long = "consul-datacenters", default_value = "", value_parser = parse_datacenters)]
    pub consul_datacenters: Datacenters,
    /// ACL token (needs `service:read` and `node:read`).
    #[arg(
        long = "consul-token",
        env = "CONSUL_HTTP_TOKEN",
        hide_env_values = true
    )]
    pub consul_token: Option<String>,
    /// PEM bundle of CA certificates for an `https://` address.
    #[arg(long = "consul-ca-file", env = "CONSUL_CACERT", value_name = "PATH")]
    pub consul_ca_file: Option<PathBuf>,
    /// PEM client certificate (when Consul verifies incoming connections).
    #[arg(
        long = "consul-cert-file",
        env = "CONSUL_CLIENT_CERT",
        value_name = "PATH"
    )]
    pub consul_cert_file: Option<PathBuf>,
    /// PEM key of the client certificate.
    #[arg(
        long = "consul-key-file",
        env = "CONSUL_CLIENT_KEY",
        value_name = "PATH"
    )]
    pub consul_key_file: Option<PathBuf>,
    /// Hostname of a Consul service without a `wayfinder.io/hostname` meta; placeholders
    /// `{service}`, `{datacenter}`, `{namespace}`.
    #[arg(long = "consul-hostname-template", default_value = CONSUL_TEMPLATE)]
    pub consul_hostname_template: String,
    /// Send no traffic to instances whose worst check is `warning`.
    #[arg(long = "consul-warning-unhealthy")]
    pub consul_warning_unhealthy: bool,
    /// Period of the liveness probe (`GET /v1/status/leader` per datacenter), which shows an
    /// outage while blocking queries are parked; 0 turns it off.
    #[arg(long = "consul-liveness-interval", default_value = "5s", value_parser = parse_duration)]
    pub consul_liveness_interval: Duration,
}

/// Flags of the Eureka registry (`--registries Eureka`).
#[derive(Debug, Args)]
pub struct EurekaArgs {
    /// Eureka's REST base URL: `…/eureka` (Spring Cloud) or `…/eureka/v2` (Netflix).
    #[arg(long = "eureka-url", default_value = "http://127.0.0.1:8761/eureka")]
    pub eureka_url: String,
    /// Period of the delta fetches.
    #[arg(long = "eureka-interval", default_value = "5s", value_parser = parse_duration)]
    pub eureka_interval: Duration,
    /// Suffix of the hostnames made from VIP addresses and app names.
    #[arg(long = "eureka-suffix", default_value = ".eureka")]
    pub eureka_suffix: String,
}

/// Flags of the Kubernetes registry (`--registries Kubernetes`) and config source
/// (`--config-source k8s`).
#[derive(Debug, Args)]
pub struct KubernetesArgs {
    /// A cluster's kubeconfig: `PATH` for one cluster (its id is `--cluster-id`), or
    /// `NAME=PATH` (repeatable) for several, each with NAME as its cluster id; the first is
    /// the primary. Without it: in-cluster, else `KUBECONFIG` or `~/.kube/config`.
    #[arg(long = "kubeconfig", value_name = "[NAME=]PATH", value_parser = parse_kubeconfig)]
    pub kubeconfig: Vec<(Option<String>, PathBuf)>,
    /// The cluster id of an unnamed cluster.
    #[arg(
        long = "cluster-id",
        visible_alias = "clusterID",
        env = "CLUSTER_ID",
        default_value = CLUSTER_ID
    )]
    pub cluster_id: String,
    /// Watch only this namespace (Services, EndpointSlices, Pods, Istio objects).
    #[arg(short = 'a', long = "app-namespace", visible_alias = "appNamespace")]
    pub app_namespace: Option<String>,
    /// How long an unreachable cluster's endpoints are still served.
    #[arg(long = "cluster-grace-period", default_value = "5m", value_parser = parse_duration)]
    pub cluster_grace_period: Duration,
    /// Extra configuration sources besides `--config-dir`: `k8s` reads Istio's
    /// networking objects from the primary cluster.
    #[arg(long = "config-source", value_enum, value_delimiter = ',')]
    pub config_source: Vec<ConfigSourceKind>,
}

/// A configuration source named by `--config-source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ConfigSourceKind {
    /// The Kubernetes API server of the primary cluster.
    #[value(alias = "kubernetes")]
    K8s,
}

impl Discovery {
    /// The ADS server's limits from the flags.
    pub fn limits(&self) -> crate::xds::ads::Limits {
        let l = &self.client_limits;
        crate::xds::ads::Limits {
            push_throttle: self.push_throttle,
            new_streams_per_second: self.max_new_streams_per_second,
            max_connection_age: (!self.max_connection_age.is_zero())
                .then_some(self.max_connection_age),
            max_connection_age_grace: self.max_connection_age_grace,
            max_request_bytes: l.max_request_bytes,
            request_budget_bytes: l.max_request_budget,
            push_budget_bytes: l.max_push_budget,
            push_send_timeout: l.push_send_timeout,
            max_names_per_request: l.max_names_per_request,
            max_node_id_bytes: l.max_node_id_bytes,
            max_node_metadata_bytes: l.max_node_metadata_bytes,
            max_streams_per_connection: l.max_streams_per_connection,
            max_connections_per_peer: l.max_connections_per_peer,
            max_connections: l.max_connections,
            idle_timeout: l.connection_idle_timeout,
            keepalive_interval: l.keepalive_interval,
            keepalive_timeout: l.keepalive_timeout,
        }
    }
}

#[cfg(not(feature = "kubernetes"))]
impl KubernetesArgs {
    /// The first flag given that would need the Kubernetes adapter, which this build lacks:
    /// one with neither a default nor an environment variable.
    pub fn needing_the_adapter(&self) -> Option<&'static str> {
        if !self.kubeconfig.is_empty() {
            Some("--kubeconfig")
        } else if self.app_namespace.is_some() {
            Some("--app-namespace")
        } else {
            None
        }
    }
}

/// `--consul-datacenters` as the Consul registry reads it; text in a build without it.
#[cfg(feature = "consul")]
pub type Datacenters = wayfinder_consul::Datacenters;
/// `--consul-datacenters` as the Consul registry reads it; text in a build without it.
#[cfg(not(feature = "consul"))]
pub type Datacenters = String;

/// `--consul-hostname-template`'s default, the Consul crate's `DEFAULT_TEMPLATE`: spelled here
/// so that a build without Consul has the same flag (a test checks that the two agree).
const CONSUL_TEMPLATE: &str = "{service}.service.consul";

/// `--cluster-id`'s default, the Kubernetes crate's `DEFAULT_CLUSTER_ID`, spelled here for the
/// same reason as [`CONSUL_TEMPLATE`].
const CLUSTER_ID: &str = "Kubernetes";

#[cfg(feature = "kubernetes")]
impl KubernetesArgs {
    /// The clusters the flags name, the primary first.
    pub fn clusters(&self) -> Vec<wayfinder_kubernetes::Cluster> {
        use wayfinder_kubernetes::{Cluster, Source};
        if self.kubeconfig.is_empty() {
            return vec![Cluster {
                id: self.cluster_id.clone(),
                source: Source::Infer,
            }];
        }
        let clusters = self.kubeconfig.iter().map(|(name, path)| Cluster {
            id: name.clone().unwrap_or_else(|| self.cluster_id.clone()),
            source: Source::Kubeconfig(path.clone()),
        });
        clusters.collect()
    }
}

fn parse_datacenters(s: &str) -> Result<Datacenters, String> {
    s.parse::<Datacenters>().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn defaults_spelled_here_are_the_adapters() {
        #[cfg(feature = "consul")]
        assert_eq!(super::CONSUL_TEMPLATE, wayfinder_consul::DEFAULT_TEMPLATE);
        #[cfg(feature = "kubernetes")]
        assert_eq!(super::CLUSTER_ID, wayfinder_kubernetes::DEFAULT_CLUSTER_ID);
    }
}
