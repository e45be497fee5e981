//! The command line: `wayfinder discovery`, `wayfinder agent`, `wayfinder version`,
//! `wayfinder request`, `wayfinder proxy-status`, `wayfinder validate`, `wayfinder analyze`. The agent's flags are in [`crate::agent::args`].
//!
//! Flags are kebab-case; pilot-discovery's camelCase spellings are accepted as aliases
//! (`--grpcAddr`, `--httpAddr`, `--monitoringAddr`, `--meshConfig`, `--log_output_level`,
//! `--log_as_json`), and the debounce settings also read Istio's `PILOT_DEBOUNCE_AFTER` /
//! `PILOT_DEBOUNCE_MAX` environment variables. pilot-discovery's flags that wayfinder does not
//! take are refused by name, with what to use instead ([`refuse_unsupported`]).
//!
//! Every build has every flag, with the same defaults and help, so that scripts and
//! environment variables (`CONSUL_HTTP_ADDR`, `CLUSTER_ID`) work with any build. A build
//! without a registry's cargo feature refuses the registry itself (`--registries Consul`,
//! `--config-source k8s`) with the feature's name (see [`crate::registries`]), and so the
//! Kubernetes flags that have neither a default nor an environment variable (`--kubeconfig`,
//! `--app-namespace`): they can only have been given on purpose. The others are read and
//! unused, as a registry's flags are in any build when it is not in `--registries`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::logging::{LevelError, LogLevel};
use crate::registries::Kind;

mod analyze;
mod debug_client;
mod limits;
mod pilot;
pub mod proxy_status;
mod registries;
mod secure;

pub use crate::agent::args::{AgentArgs, AgentCommand};

pub use analyze::{AnalysisArgs, AnalyzeArgs};
pub use debug_client::{DebugClient, FetchError, RequestArgs};
pub use limits::{LimitArgs, parse_bytes};
pub use pilot::refuse_unsupported;
pub use proxy_status::ProxyStatusArgs;
pub use registries::{ConfigSourceKind, ConsulArgs, Datacenters, EurekaArgs, KubernetesArgs};
pub use secure::SecureArgs;

/// Command-line interface.
#[derive(Debug, Parser)]
#[command(
    name = "wayfinder",
    version,
    about = "Service-discovery aggregator and Envoy control plane"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
// Parsed once at start: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the discovery server.
    Discovery(Discovery),
    /// Print the version.
    Version,
    /// GET a path from a running server's debug port and print the answer.
    Request(RequestArgs),
    /// The proxies connected to one or more servers and the state of their configuration,
    /// as `istioctl proxy-status`; with a proxy id, how what it holds differs from what it
    /// should have now.
    #[command(name = "proxy-status", visible_alias = "ps")]
    ProxyStatus(ProxyStatusArgs),
    /// Check Istio configuration and ServiceEntry files offline; exit 1 when any is invalid.
    Validate(ValidateArgs),
    /// Check Istio configuration files offline and across objects, as `istioctl analyze`:
    /// messages with Istio's codes; exit 79 when any reaches `--failure-threshold`.
    Analyze(AnalyzeArgs),
    /// Run beside a proxy, as pilot-agent does (`proxy sidecar|router`, `capture`).
    Agent(AgentArgs),
}

/// `wayfinder validate` arguments.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Files or directories to check (every `.yaml`, `.yml` and `.json` in a directory).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Analyse the files across objects as `wayfinder analyze` does (its output and exit
    /// status), with the analysis flags below.
    #[arg(long)]
    pub analyze: bool,
    /// The analysis's flags; read only with `--analyze`.
    #[command(flatten, next_help_heading = "Analysis (with --analyze)")]
    pub analysis: AnalysisArgs,
}

/// `wayfinder discovery` flags.
#[derive(Debug, Args)]
pub struct Discovery {
    /// Registries to run, comma-separated, in precedence order (case-insensitive): Mock (the
    /// built-in bookinfo demo), File, Consul, Eureka, Kubernetes.
    #[arg(long, value_delimiter = ',', default_value = "Mock", value_parser = parse_kind)]
    pub registries: Vec<Kind>,
    /// A ServiceEntry/WorkloadEntry file or directory for the File registry (repeatable).
    #[arg(
        long = "file-registry",
        visible_alias = "fileRegistry",
        value_name = "PATH"
    )]
    pub file_registry: Vec<PathBuf>,
    /// A file or directory of Istio configuration (VirtualService, DestinationRule, Gateway,
    /// Sidecar; its ServiceEntries and WorkloadEntries feed the `Config` registry); repeatable.
    #[arg(long = "config-dir", visible_alias = "configDir", value_name = "PATH")]
    pub config_dir: Vec<PathBuf>,
    /// Largest watched file (`--file-registry`, `--config-dir`) read, in bytes; a larger one
    /// is refused before it is read, reported as an error with its path, and its last good
    /// contents stay.
    #[arg(
        long = "max-file-bytes",
        value_name = "BYTES",
        default_value_t = wayfinder_file::DEFAULT_MAX_FILE_BYTES,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub max_file_bytes: u64,
    /// Mesh DNS domain.
    #[arg(long, default_value = "cluster.local")]
    pub domain: String,
    /// Plaintext ADS (gRPC) listen address; `:PORT` listens on every interface, `''` turns
    /// the plaintext port off (the secure port, `--secure-grpc-addr`, stays).
    #[arg(long = "grpc-addr", visible_alias = "grpcAddr", default_value = ":15010", value_parser = parse_listen_addr, value_name = "ADDR")]
    pub grpc_addr: ::std::option::Option<SocketAddr>,
    /// Debug HTTP listen address (`/ready`, `/debug/*`).
    #[arg(long = "http-addr", visible_alias = "httpAddr", default_value = ":8080", value_parser = parse_addr)]
    pub http_addr: SocketAddr,
    /// A file holding the bearer token that lets peers other than loopback read `/debug/*`
    /// (`Authorization: Bearer TOKEN`); read at start, and the server refuses to start when
    /// it is unreadable or empty. Without it only loopback peers may read them.
    #[arg(long = "debug-token-file", value_name = "PATH")]
    pub debug_token_file: Option<PathBuf>,
    /// Monitoring listen address (`/metrics`, `/version`).
    #[arg(long = "monitoring-addr", visible_alias = "monitoringAddr", default_value = ":9093", value_parser = parse_addr)]
    pub monitoring_addr: SocketAddr,
    /// Quiet period that ends a batch of registry changes.
    #[arg(long = "debounce-after", visible_alias = "debounceAfter", env = "PILOT_DEBOUNCE_AFTER", default_value = "100ms", value_parser = parse_duration)]
    pub debounce_after: Duration,
    /// Longest a batch of registry changes waits.
    #[arg(long = "debounce-max", visible_alias = "debounceMax", env = "PILOT_DEBOUNCE_MAX", default_value = "10s", value_parser = parse_duration)]
    pub debounce_max: Duration,
    /// Publish a change that arrives after a quiet period (`--debounce-after` without changes)
    /// as soon as its source has nothing more ready, and batch only the bursts that follow.
    /// `false`: every change waits for the quiet period, as Istio's debounce does.
    #[arg(long = "debounce-leading", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub debounce_leading: bool,
    /// Streams that may be building or sending a push at once; a stream holds its place until
    /// its connection has taken the push (at most 5 s). 0: `min(15 + 5 × cores, 100)`.
    #[arg(
        long = "push-throttle",
        env = "PILOT_PUSH_THROTTLE",
        default_value_t = 0
    )]
    pub push_throttle: usize,
    /// New xDS streams admitted per second, with a burst of one second's worth; a stream that
    /// would wait more than a second is refused with `RESOURCE_EXHAUSTED` and its client
    /// retries. 0: no limit.
    #[arg(
        long = "max-new-streams-per-second",
        env = "PILOT_MAX_REQUESTS_PER_SECOND",
        default_value_t = 1000
    )]
    pub max_new_streams_per_second: u32,
    /// Age at which a client connection is closed (GOAWAY, then its streams end with
    /// `UNAVAILABLE` and clients reconnect, perhaps to another replica); each connection's age
    /// is drawn within ±10% of it. 0: never.
    #[arg(long = "max-connection-age", visible_alias = "keepaliveMaxServerConnectionAge", default_value = "30m", value_parser = parse_duration)]
    pub max_connection_age: Duration,
    /// How long a closing connection may take to finish before it is dropped.
    #[arg(long = "max-connection-age-grace", default_value = "10s", value_parser = parse_duration)]
    pub max_connection_age_grace: Duration,
    /// How long to wait for every registry's first state before serving anyway.
    #[arg(long = "sync-timeout", visible_alias = "syncTimeout", default_value = "30s", value_parser = parse_duration)]
    pub sync_timeout: Duration,
    /// How long the workload entry of an auto-registered VM stays after its proxy's last
    /// stream closed (a reconnect within it keeps the entry).
    #[arg(long = "workload-entry-grace-period", env = "PILOT_WORKLOAD_ENTRY_GRACE_PERIOD", default_value = "10s", value_parser = parse_duration)]
    pub workload_entry_grace_period: Duration,
    /// Make `/ready` answer 503 while any registry is degraded (unreachable or answering
    /// garbage), instead of serving its last good state as ready.
    #[arg(long = "ready-requires-healthy")]
    pub ready_requires_healthy: bool,
    /// The system's CA bundle on the proxies' machines (an absolute path). Upstream TLS of a
    /// DestinationRule (`SIMPLE`, `MUTUAL`) without `caCertificates` verifies servers against
    /// it. Envoy reads the file: it must exist where the proxy runs.
    #[arg(
        long = "system-ca-file",
        value_name = "PATH",
        default_value = crate::xds::DEFAULT_SYSTEM_CA_FILE,
        value_parser = parse_absolute
    )]
    pub system_ca_file: String,
    /// Istio's MeshConfig file (the `mesh` key of the `istio` ConfigMap), watched: its
    /// `rootNamespace`, `trustDomain`, `outboundTrafficPolicy`, `localityLbSetting`,
    /// `enableAutoMtls`, `connectTimeout` and `default*ExportTo` are acted on, and win over
    /// the flags for them.
    #[arg(
        long = "mesh-config",
        visible_alias = "meshConfig",
        value_name = "PATH"
    )]
    pub mesh_config: Option<PathBuf>,
    /// Istio's MeshNetworks file (the `meshNetworks` key of the `istio` ConfigMap), read at
    /// start: which network endpoints are on and each network's gateways; a proxy reaches
    /// endpoints of another network that has gateways through them.
    #[arg(
        long = "networks-config",
        visible_aliases = ["networksConfig", "meshNetworks"],
        value_name = "PATH"
    )]
    pub networks_config: Option<PathBuf>,
    /// The root namespace: its policies without a workload selector (PeerAuthentication)
    /// apply to the whole mesh, as Istio's MeshConfig `rootNamespace`.
    #[arg(
        long = "root-namespace",
        default_value = "istio-system",
        value_name = "NAMESPACE"
    )]
    pub root_namespace: String,
    /// How often the keys of RequestAuthentication's JWT issuers (`jwksUri`, or the issuer's
    /// OpenID discovery) are fetched again; after a failed round, sooner (1 minute, doubling
    /// to an hour).
    #[arg(
        long = "jwks-refresh-interval",
        env = "PILOT_JWT_PUB_KEY_REFRESH_INTERVAL",
        default_value = "20m",
        value_parser = parse_duration
    )]
    pub jwks_refresh_interval: Duration,
    /// Largest JWKS (or OpenID discovery document) read from an issuer, in bytes; a larger
    /// one is a failed fetch, and the last good keys stay.
    #[arg(
        long = "max-jwks-bytes",
        value_name = "BYTES",
        default_value_t = 256 * 1024,
        value_parser = clap::value_parser!(u64).range(1..=64 * 1024 * 1024)
    )]
    pub max_jwks_bytes: u64,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub consul: ConsulArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub eureka: EurekaArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub kubernetes: KubernetesArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub log: LogArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client_limits: LimitArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub secure: SecureArgs,
}

/// Logging flags.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// istiod's `scope:level,…` (`default:info`, `ads:debug`; levels debug, info, warn,
    /// error, fatal, none) or a tracing filter such as `info,wayfinder::xds=debug`; a value
    /// in neither form is refused. `RUST_LOG` overrides it. See `wayfinder::logging::level`.
    #[arg(
        long = "log-level",
        visible_alias = "log_output_level",
        default_value = "info",
        value_name = "LEVEL",
        value_parser = parse_log_level
    )]
    pub level: LogLevel,
    /// Log format.
    #[arg(long = "log-format", value_enum, default_value_t = LogFormat::Text)]
    pub format: LogFormat,
    /// istiod's spelling of `--log-format json`.
    #[arg(
        long = "log_as_json",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value_t = false,
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub as_json: bool,
}

impl LogArgs {
    /// The format: JSON with `--log-format json` or `--log_as_json`.
    pub fn format(&self) -> LogFormat {
        if self.as_json {
            LogFormat::Json
        } else {
            self.format
        }
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines with `key=value` fields.
    Text,
    /// One JSON object per line.
    Json,
}

fn parse_log_level(s: &str) -> Result<LogLevel, String> {
    s.parse().map_err(|e: LevelError| {
        format!("{e}; expected istiod's SCOPE:LEVEL,… (default:info) or a tracing filter (info,wayfinder::xds=debug)")
    })
}

pub(crate) fn parse_kind(s: &str) -> Result<Kind, String> {
    s.parse()
}

/// Parses `NAME=PATH` or `PATH`.
fn parse_kubeconfig(s: &str) -> Result<(Option<String>, PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) if !name.is_empty() && !name.contains('/') => {
            Ok((Some(name.to_owned()), PathBuf::from(path)))
        }
        _ if s.is_empty() => Err("expected PATH or NAME=PATH".into()),
        _ => Ok((None, PathBuf::from(s))),
    }
}

/// An absolute path: a proxy resolves a relative one against its own working directory.
fn parse_absolute(s: &str) -> Result<String, String> {
    if s.starts_with('/') {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not an absolute path"))
    }
}

/// Parses `HOST:PORT` with an IP host, or `:PORT` for every interface.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_string()
    };
    full.parse()
        .map_err(|_| format!("{s:?} is not an address: expected IP:PORT, [IPv6]:PORT or :PORT"))
}

/// Parses a listen address as [`parse_addr`] does; `''` is no listener.
pub fn parse_listen_addr(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.is_empty() {
        Ok(None)
    } else {
        parse_addr(s).map(Some)
    }
}

/// Parses a Go-style duration (`100ms`, `10s`, `1m30s`), as pilot-discovery's flags take them.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    wayfinder_registry::duration::parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_addresses() {
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("fast").is_err());
        assert_eq!(parse_addr(":15010"), Ok("0.0.0.0:15010".parse().unwrap()));
        assert_eq!(parse_addr("[::1]:0"), Ok("[::1]:0".parse().unwrap()));
        assert!(
            parse_addr("localhost:80")
                .unwrap_err()
                .contains("not an address")
        );
    }

    #[test]
    fn flags_are_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn pilot_spellings_are_accepted() {
        let cli = Cli::try_parse_from([
            "wayfinder",
            "discovery",
            "--registries",
            "mock,FILE",
            "--fileRegistry",
            "/tmp/x",
            "--grpcAddr",
            "127.0.0.1:0",
            "--httpAddr",
            ":0",
            "--monitoringAddr",
            ":0",
            "--log_output_level",
            "debug",
            "--secureGrpcAddr",
            "",
        ])
        .unwrap();
        let Command::Discovery(d) = cli.command else {
            panic!("expected discovery")
        };
        assert_eq!(d.registries, [Kind::Mock, Kind::File]);
        assert_eq!(d.grpc_addr.map(|a| a.port()), Some(0));
        assert_eq!(
            d.secure.secure_grpc_addr, None,
            "'' turns the secure port off"
        );
        assert_eq!(d.log.level.filter, "debug");
        assert!(d.debounce_leading, "the leading edge is the default");
        assert_eq!(d.system_ca_file, "/etc/ssl/certs/ca-certificates.crt");
        let limits = d.limits();
        assert_eq!(limits, crate::xds::ads::Limits::default());
        let cli = Cli::try_parse_from(["wayfinder", "discovery"]).unwrap();
        let Command::Discovery(d) = cli.command else {
            panic!("expected discovery")
        };
        assert_eq!(d.grpc_addr.map(|a| a.port()), Some(15010));
        assert_eq!(d.secure.secure_grpc_addr.map(|a| a.port()), Some(15012));
        let err = Cli::try_parse_from(["wayfinder", "discovery", "--registries", "Zookeeper"])
            .unwrap_err();
        assert!(err.to_string().contains("unknown registry"), "{err}");
        let err = Cli::try_parse_from(["wayfinder", "discovery", "--system-ca-file", "ca.pem"])
            .unwrap_err();
        assert!(err.to_string().contains("not an absolute path"), "{err}");
    }

    #[test]
    fn istiod_log_flags() {
        let log = |args: &[&str]| {
            let cli = Cli::try_parse_from(["wayfinder", "discovery"].iter().chain(args)).unwrap();
            let Command::Discovery(d) = cli.command else {
                panic!("expected discovery")
            };
            d.log
        };
        let l = log(&[
            "--log_output_level",
            "default:info,ads:debug",
            "--log_as_json",
        ]);
        assert!(l.level.filter.starts_with("info,wayfinder::xds::ads=debug"));
        assert_eq!(l.format(), LogFormat::Json);
        assert_eq!(log(&["--log_as_json=false"]).format(), LogFormat::Text);
        assert_eq!(log(&["--log-format", "json"]).format(), LogFormat::Json);
        assert_eq!(log(&[]).format(), LogFormat::Text);
        let err = Cli::try_parse_from(["wayfinder", "discovery", "--log_output_level", "loud"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--log-level") && err.contains("\"loud\" is neither a level"),
            "{err}"
        );
    }

    #[test]
    fn the_leading_edge_can_be_turned_off() {
        let cli =
            Cli::try_parse_from(["wayfinder", "discovery", "--debounce-leading", "false"]).unwrap();
        let Command::Discovery(d) = cli.command else {
            panic!("expected discovery")
        };
        assert!(!d.debounce_leading);
    }
}
