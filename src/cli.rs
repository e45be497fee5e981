//! The command line: `wayfinder discovery`, `wayfinder version`, `wayfinder request`.
//!
//! Flags are kebab-case; pilot-discovery's camelCase spellings are accepted as aliases
//! (`--grpcAddr`, `--httpAddr`, `--monitoringAddr`, `--log_output_level`), and the debounce
//! settings also read Istio's `PILOT_DEBOUNCE_AFTER` / `PILOT_DEBOUNCE_MAX` environment variables.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::registries::Kind;

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
pub enum Command {
    /// Run the discovery server.
    Discovery(Discovery),
    /// Print the version.
    Version,
    /// GET a path from a running server's debug port and print the answer.
    Request(RequestArgs),
}

/// `wayfinder discovery` flags.
#[derive(Debug, Args)]
pub struct Discovery {
    /// Registries to run, comma-separated, in precedence order (case-insensitive): Mock (the
    /// built-in bookinfo demo), File.
    #[arg(long, value_delimiter = ',', default_value = "Mock", value_parser = parse_kind)]
    pub registries: Vec<Kind>,
    /// A ServiceEntry/WorkloadEntry file or directory for the File registry (repeatable).
    #[arg(
        long = "file-registry",
        visible_alias = "fileRegistry",
        value_name = "PATH"
    )]
    pub file_registry: Vec<PathBuf>,
    /// Mesh DNS domain.
    #[arg(long, default_value = "cluster.local")]
    pub domain: String,
    /// ADS (gRPC) listen address; `:PORT` listens on every interface.
    #[arg(long = "grpc-addr", visible_alias = "grpcAddr", default_value = ":15010", value_parser = parse_addr)]
    pub grpc_addr: SocketAddr,
    /// Debug HTTP listen address (`/ready`, `/debug/*`).
    #[arg(long = "http-addr", visible_alias = "httpAddr", default_value = ":8080", value_parser = parse_addr)]
    pub http_addr: SocketAddr,
    /// Monitoring listen address (`/metrics`, `/version`).
    #[arg(long = "monitoring-addr", visible_alias = "monitoringAddr", default_value = ":9093", value_parser = parse_addr)]
    pub monitoring_addr: SocketAddr,
    /// Quiet period that ends a batch of registry changes.
    #[arg(long = "debounce-after", visible_alias = "debounceAfter", env = "PILOT_DEBOUNCE_AFTER", default_value = "100ms", value_parser = parse_duration)]
    pub debounce_after: Duration,
    /// Longest a batch of registry changes waits.
    #[arg(long = "debounce-max", visible_alias = "debounceMax", env = "PILOT_DEBOUNCE_MAX", default_value = "10s", value_parser = parse_duration)]
    pub debounce_max: Duration,
    /// How long to wait for every registry's first state before serving anyway.
    #[arg(long = "sync-timeout", visible_alias = "syncTimeout", default_value = "30s", value_parser = parse_duration)]
    pub sync_timeout: Duration,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub log: LogArgs,
}

/// Logging flags.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log level (error, warn, info, debug, trace) or a tracing filter such as
    /// `info,wayfinder::xds=debug`; `RUST_LOG` overrides it.
    #[arg(
        long = "log-level",
        visible_alias = "log_output_level",
        default_value = "info"
    )]
    pub level: String,
    /// Log format.
    #[arg(long = "log-format", value_enum, default_value_t = LogFormat::Text)]
    pub format: LogFormat,
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines with `key=value` fields.
    Text,
    /// One JSON object per line.
    Json,
}

/// `wayfinder request` arguments.
#[derive(Debug, Args)]
pub struct RequestArgs {
    /// Path to GET, e.g. `/debug/registryz`.
    pub path: String,
    /// The server's debug address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    s.parse()
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

/// Parses a Go-style duration: one or more `<number><unit>` with units `ns`, `us`, `ms`, `s`,
/// `m`, `h` (`100ms`, `1m30s`, `0.5s`); a bare `0` is zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("{s:?} is not a duration: expected e.g. 100ms, 10s, 1m30s");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(err());
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (number, tail) = rest.split_at(split);
        let value: f64 = number.parse().map_err(|_| err())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        total += value * scale;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|_| err())
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
        ])
        .unwrap();
        let Command::Discovery(d) = cli.command else {
            panic!("expected discovery")
        };
        assert_eq!(d.registries, [Kind::Mock, Kind::File]);
        assert_eq!(d.grpc_addr.port(), 0);
        assert_eq!(d.log.level, "debug");
        let err = Cli::try_parse_from(["wayfinder", "discovery", "--registries", "Zookeeper"])
            .unwrap_err();
        assert!(err.to_string().contains("unknown registry"), "{err}");
    }
}
