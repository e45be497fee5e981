//! The flags that bound what a client may make the server hold: request sizes and the
//! request budget, streams and connections, idle and keepalive timeouts. Every default is
//! safe; SECURITY.md gives each with its reasoning.

use std::time::Duration;

use clap::Args;

use super::parse_duration;

/// Limits on clients (ADS and the HTTP ports).
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The largest ADS request message accepted; a larger one is refused with
    /// `RESOURCE_EXHAUSTED` before it is read. Bytes, or with a unit: `4MiB`, `512KiB`.
    #[arg(long = "max-request-bytes", env = "ISTIO_GPRC_MAXRECVMSGSIZE", default_value = "4MiB", value_parser = parse_bytes)]
    pub max_request_bytes: usize,
    /// Bytes that all ADS requests being read or handled may hold at once; a stream that
    /// would go beyond waits up to a second, then is refused with `RESOURCE_EXHAUSTED`.
    #[arg(long = "max-request-budget", default_value = "64MiB", value_parser = parse_bytes)]
    pub max_request_budget: usize,
    /// Bytes of copied ADS responses that all connections may hold unwritten at once (the
    /// push budget); a stream with no room waits for it.
    #[arg(long = "max-push-budget", default_value = "64MiB", value_parser = parse_bytes)]
    pub max_push_budget: usize,
    /// How long an ADS client may take none of its responses while it holds some of the push
    /// budget before its connection is closed.
    #[arg(long = "push-send-timeout", default_value = "60s", value_parser = parse_positive_duration)]
    pub push_send_timeout: Duration,
    /// Resource names in one ADS request, and per type in one delta stream's subscription.
    #[arg(long = "max-names-per-request", default_value_t = 100_000)]
    pub max_names_per_request: usize,
    /// The longest node id accepted.
    #[arg(long = "max-node-id-bytes", default_value = "1KiB", value_parser = parse_bytes)]
    pub max_node_id_bytes: usize,
    /// The largest node metadata accepted (encoded).
    #[arg(long = "max-node-metadata-bytes", default_value = "64KiB", value_parser = parse_bytes)]
    pub max_node_metadata_bytes: usize,
    /// Streams one ADS connection may have open at once (Envoy uses one).
    #[arg(long = "max-streams-per-connection", env = "ISTIO_GPRC_MAXSTREAMS", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_connection: u32,
    /// ADS connections from one IP address at once; more are closed as they arrive. 0: no
    /// limit (proxies behind NAT share an address).
    #[arg(long = "max-connections-per-peer", default_value_t = 0)]
    pub max_connections_per_peer: usize,
    /// ADS connections at once; more wait in the listen backlog. 0: the descriptor limit
    /// less a reserve for the HTTP ports, registries and files.
    #[arg(long = "max-connections", default_value_t = 0)]
    pub max_connections: usize,
    /// How long an ADS connection may go without a stream (from its first byte, and after
    /// its last stream), and a new stream without its first request, before it is closed.
    #[arg(long = "connection-idle-timeout", default_value = "10s", value_parser = parse_positive_duration)]
    pub connection_idle_timeout: Duration,
    /// How often an HTTP/2 ping checks that an ADS client is alive.
    #[arg(long = "keepalive-interval", visible_alias = "keepaliveInterval", default_value = "30s", value_parser = parse_positive_duration)]
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection is closed.
    #[arg(long = "keepalive-timeout", visible_alias = "keepaliveTimeout", default_value = "10s", value_parser = parse_positive_duration)]
    pub keepalive_timeout: Duration,
    /// The largest answer read from Consul or Eureka; a larger one is refused as an error of
    /// its registry (whose last good state stays) before more of it is read.
    #[arg(long = "max-registry-answer-bytes", default_value = "64MiB", value_parser = parse_bytes)]
    pub max_registry_answer_bytes: usize,
    /// How long a client of the HTTP ports (debug, monitoring) may take to send a request's
    /// headers, the first or the next on a kept-alive connection, before it is closed.
    #[arg(long = "http-header-read-timeout", default_value = "10s", value_parser = parse_positive_duration)]
    pub http_header_read_timeout: Duration,
}

/// Parses a size in bytes: a number, or a number with `KiB`, `MiB`, `GiB` (powers of 1024)
/// or `KB`, `MB`, `GB` (powers of 1000), as Kubernetes quantities and Envoy's docs write them.
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "Ki" => 1 << 10,
        "MiB" | "Mi" => 1 << 20,
        "GiB" | "Gi" => 1 << 30,
        "KB" | "K" | "k" => 1_000,
        "MB" | "M" => 1_000_000,
        "GB" | "G" => 1_000_000_000,
        other => return Err(format!("{s:?}: unknown unit {other:?} (use KiB, MiB, GiB)")),
    };
    let n: usize = number
        .parse()
        .map_err(|_| format!("{s:?} is not a size: expected bytes, or e.g. 4MiB"))?;
    n.checked_mul(scale)
        .ok_or_else(|| format!("{s:?} is too large"))
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be more than 0"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_bytes("4194304"), Ok(4 << 20));
        assert_eq!(parse_bytes("4MiB"), Ok(4 << 20));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("4MB"), Ok(4_000_000));
        assert!(
            parse_bytes("4 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_bytes("MiB").unwrap_err().contains("not a size"));
        assert!(parse_bytes("-1").is_err());
        assert!(parse_positive_duration("0").is_err());
    }
}
