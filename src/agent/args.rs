//! `wayfinder agent proxy` flags: pilot-agent's, each in kebab-case with pilot-agent's
//! camelCase spelling as an alias.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use crate::cli::{LogArgs, parse_duration};

/// `wayfinder agent` subcommands.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: AgentCommand,
}

/// What the agent does.
#[derive(Debug, Subcommand)]
// Parsed once at start: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum AgentCommand {
    /// Run Envoy: bootstrap it, start it, hot-restart it on certificate or configuration
    /// changes, restart it when it crashes, drain it on SIGTERM.
    Proxy(ProxyArgs),
    /// Redirect this network namespace's TCP traffic to the sidecar, as istio-iptables does.
    Capture(crate::agent::capture::CaptureArgs),
}

/// The proxy's role, the first word of its node id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Beside a workload: captures its traffic (`sidecar~…` node ids).
    Sidecar,
    /// A gateway (`router~…` node ids), Istio's name for it.
    Router,
}

impl Role {
    /// The node id's type field.
    pub fn node_type(self) -> &'static str {
        match self {
            Self::Sidecar => "sidecar",
            Self::Router => "router",
        }
    }
}

/// Where the workload is registered, which sets the identity's defaults (pilot-agent's
/// `--serviceregistry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistryKind {
    /// A pod: id `POD_NAME.POD_NAMESPACE`, domain `POD_NAMESPACE.svc.cluster.local`.
    Kubernetes,
    /// A Consul service instance: id `IP.service.consul`, domain `service.consul`.
    Consul,
    /// Anything else (`Mock`, a VM in a file): id `IP.DOMAIN`, domain `--domain` or none.
    Other,
}

fn parse_registry(s: &str) -> Result<RegistryKind, String> {
    match s.to_ascii_lowercase().as_str() {
        "kubernetes" => Ok(RegistryKind::Kubernetes),
        "consul" => Ok(RegistryKind::Consul),
        "mock" | "file" | "other" => Ok(RegistryKind::Other),
        _ => Err(format!(
            "unknown service registry {s:?} (expected Kubernetes, Consul or Mock)"
        )),
    }
}

/// A duration Envoy takes in whole seconds (`--drain-time-s`, `--parent-shutdown-time-s`).
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.subsec_nanos() != 0 || d.is_zero() {
        return Err(format!(
            "{s:?}: Envoy takes this in whole seconds; give at least 1s, in whole seconds"
        ));
    }
    Ok(d)
}

/// `wayfinder agent proxy` flags.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// `sidecar` beside a workload, or `router` for a gateway.
    #[arg(value_enum)]
    pub role: Role,
    /// The Envoy binary.
    #[arg(
        long = "binary-path",
        visible_alias = "binaryPath",
        default_value = "/usr/local/bin/envoy"
    )]
    pub binary_path: PathBuf,
    /// Where the agent writes Envoy's bootstrap files (`envoy-rev<EPOCH>.json`).
    #[arg(
        long = "config-path",
        visible_alias = "configPath",
        default_value = "/etc/istio/proxy"
    )]
    pub config_path: PathBuf,
    /// The control plane's ADS address, `HOST:PORT` (an IP address or a DNS name).
    #[arg(
        long = "discovery-address",
        visible_alias = "discoveryAddress",
        default_value = "istiod.istio-system.svc:15010"
    )]
    pub discovery_address: String,
    /// The node's cluster (Envoy's `--service-cluster`).
    #[arg(
        long = "service-cluster",
        visible_alias = "serviceCluster",
        default_value = "istio-proxy"
    )]
    pub service_cluster: String,
    /// How long Envoy drains listeners on a hot restart (`--drain-time-s`) and on shutdown,
    /// in whole seconds.
    #[arg(long = "drain-duration", visible_alias = "drainDuration", default_value = "45s", value_parser = parse_seconds)]
    pub drain_duration: Duration,
    /// How long an old epoch lives after a hot restart (`--parent-shutdown-time-s`), in whole
    /// seconds.
    #[arg(long = "parent-shutdown-duration", visible_alias = "parentShutdownDuration", default_value = "60s", value_parser = parse_seconds)]
    pub parent_shutdown_duration: Duration,
    /// Envoy's admin port, on 127.0.0.1 only; 0 lets the system pick one.
    #[arg(
        long = "proxy-admin-port",
        visible_alias = "proxyAdminPort",
        default_value_t = 15000
    )]
    pub proxy_admin_port: u16,
    /// The agent's status port (`/healthz/ready`, `/app-health/…`, `/stats/prometheus`), on
    /// every interface, for the kubelet; 0 lets the system pick one.
    #[arg(
        long = "status-port",
        visible_alias = "statusPort",
        default_value_t = 15020
    )]
    pub status_port: u16,
    /// Envoy's worker threads (`--concurrency`); when absent, the control plane's ProxyConfig
    /// says, else Envoy's default (one per core).
    #[arg(long)]
    pub concurrency: Option<u32>,
    /// How long to wait for the workload's ProxyConfig from the control plane (PCDS) before
    /// starting Envoy with the agent's own settings; `0s` does not ask (see
    /// [`crate::agent::proxy_config`]).
    #[arg(long = "proxy-config-wait", env = "PROXY_CONFIG_WAIT", default_value = "5s", value_parser = parse_duration)]
    pub proxy_config_wait: Duration,
    /// Envoy configuration to run as it is, instead of the generated bootstrap; watched.
    #[arg(long = "custom-config-file", visible_alias = "customConfigFile")]
    pub custom_config_file: Option<PathBuf>,
    /// A bootstrap template (see [`crate::agent::bootstrap::render_template`]) rendered
    /// instead of the generated bootstrap; watched.
    #[arg(long = "template-file", visible_alias = "templateFile")]
    pub template_file: Option<PathBuf>,
    /// Envoy's log level (`trace`, `debug`, `info`, `warning`, `error`, `critical`, `off`).
    #[arg(
        long = "proxy-log-level",
        visible_alias = "proxyLogLevel",
        default_value = "warning"
    )]
    pub proxy_log_level: String,
    /// The node id's domain; by default from `--service-registry` (see [`RegistryKind`]).
    #[arg(long)]
    pub domain: Option<String>,
    /// Where the workload's certificates are (`cert-chain.pem`, `key.pem`, `root-cert.pem`);
    /// a change to them hot-restarts Envoy.
    #[arg(long = "certs-dir", default_value = "/etc/certs")]
    pub certs_dir: PathBuf,
    /// Where the workload is registered: `Kubernetes`, `Consul` or `Mock`; sets the node
    /// id's defaults.
    #[arg(long = "service-registry", visible_alias = "serviceregistry", default_value = "Kubernetes", value_parser = parse_registry)]
    pub service_registry: RegistryKind,
    /// Use delta xDS (`DELTA_GRPC`) instead of state of the world.
    #[arg(long = "xds-delta")]
    pub xds_delta: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub log: LogArgs,
}

/// How the proxy talks to the control plane: pilot-agent 1.0's `controlPlaneAuthPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ControlPlaneAuthPolicy {
    /// Plaintext xDS (the server's `--grpc-addr`, 15010), no workload certificates.
    None,
    /// The agent obtains the workload's certificate from the CA, serves it to Envoy over SDS,
    /// and Envoy speaks xDS over mutual TLS (the server's `--secure-grpc-addr`, 15012).
    MutualTls,
}

/// The flags of the workload's identity: where its certificate comes from and how the agent
/// proves who it is (see [`crate::agent::certificates`]).
#[derive(Debug, Args)]
pub struct IdentityArgs {
    /// `NONE` (plaintext xDS, no certificates) or `MUTUAL_TLS` (certificates from the CA,
    /// SDS, xDS over mutual TLS to the secure port).
    #[arg(
        long = "control-plane-auth-policy",
        visible_alias = "controlPlaneAuthPolicy",
        value_enum,
        default_value = "NONE"
    )]
    pub control_plane_auth_policy: ControlPlaneAuthPolicy,
    /// The CA's address, `HOST:PORT` (Istio's `CA_ADDR`); by default `--discovery-address`.
    #[arg(long = "ca-address", env = "CA_ADDR")]
    pub ca_address: Option<String>,
    /// The root certificate the agent trusts for the CA and the secure port, where Istio
    /// mounts it.
    #[arg(
        long = "ca-root-cert",
        default_value = "/var/run/secrets/istio/root-cert.pem"
    )]
    pub ca_root_cert: PathBuf,
    /// A Kubernetes service-account token for the CA (a projected token, re-read for every
    /// request).
    #[arg(
        long = "token-file",
        default_value = "/var/run/secrets/tokens/istio-token"
    )]
    pub token_file: PathBuf,
    /// A VM's bootstrap token (one of the server's `--bootstrap-tokens`), sent instead of
    /// `--token-file`.
    #[arg(long = "bootstrap-token-file")]
    pub bootstrap_token_file: Option<PathBuf>,
    /// The lifetime asked for the workload's certificate (Istio's `SECRET_TTL`).
    #[arg(long = "secret-ttl", env = "SECRET_TTL", default_value = "24h", value_parser = parse_duration)]
    pub secret_ttl: Duration,
}
