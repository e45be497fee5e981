//! Load figures for the ADS server: N simulated xDS clients against the release binary, in
//! three phases: initial configuration, endpoint churn, idle memory.
//!
//! ```sh
//! cargo build --release --bin wayfinder --example xds_load
//! ./target/release/examples/xds_load --services 1000 --endpoints 10 --clients 500 \
//!     --changes 20 --protocol delta -- --debounce-after 10ms
//! ```
//!
//! The server runs in its own process (`discovery --registries File --file-registry DIR` on
//! loopback ports the OS picks, JSON logs), so its memory and CPU are its own; it is killed at
//! the end, and the temporary directory removed. DIR holds `--services` ServiceEntries
//! `svc-NNNNN.load.svc.cluster.local` (namespace `load`, port `http` 8080, STATIC, `--endpoints`
//! addresses each), `--per-file` to a file, each file written to a temporary name and renamed.
//!
//! The clients share one tokio runtime (no thread per client) and each has its own HTTP/2
//! connection, as real proxies do. They connect at `--connect-rate` and ACK every response:
//! - `--kind sidecar`: node `sidecar~10.9.X.Y~load-N.load~load.svc.cluster.local`; wildcard CDS,
//!   then LDS, EDS for every EDS cluster received, RDS for every `rds.route_config_name` of the
//!   listeners' connection managers.
//! - `--kind grpc`: node `grpc-load-N` with a `gRPC` user agent and metadata `NAMESPACE=load`;
//!   LDS for `--grpc-targets` listeners `svc-…:8080` (client N dials services N×K to
//!   N×K+K−1, wrapping), then the route configurations, clusters and load assignments they name.
//!
//! Clients decode only what they must: resource names, the EDS names of clusters, the route
//! names of listeners, and a load assignment's endpoints only while a change is watched for.
//!
//! Phases and figures:
//! 1. **initial**: per client, from its connect to the moment it has ACKed a complete
//!    configuration (CDS, LDS, EDS for every cluster, RDS for every route name it wants):
//!    p50/p90/p99/max; and from the first connect until every client is complete.
//! 2. **churn**: `--changes` times, one service's endpoints all move to new addresses (its file
//!    rewritten). Latency = when a client received a load assignment of that service holding a
//!    new address − when the rename returned, over every (change, subscribed client) pair;
//!    clients that do not subscribe to the service (gRPC windows) are not counted. Also: rename
//!    → the server's `snapshot published` log line. Receipt is when the client task reads the
//!    response, so a tool short of CPU inflates latencies: its own CPU is reported.
//! 3. **idle**: server RSS with `--clients` connected (after `--settle`) against before any
//!    client, per connection (includes the snapshot's encoded resources, shared by all); then
//!    `--extra-clients` more connect to the warm server, and the RSS they add per connection.
//!
//! 4. **leave**: every client closes its connection; once the server's `pilot_xds` gauge reads 0,
//!    `--leave-settle` later (5 s), the server's RSS, against its RSS before any client.
//!
//! Also reported: per client in the initial phase, the server's CPU and the bytes it sent, its
//! CPU per byte sent, and its peak (VmHWM) and steady RSS (read when the last client has its
//! configuration) above its RSS before clients; this machine's memory-copy rate (the best of
//! five 256 MiB copies), to compare the CPU per byte with; and a warning when the tool used more
//! CPU than the server in the initial phase, so that a run bound by the tool says so.
//!
//! Clients read their streams with the gRPC framing done in `xds_load/stream.rs`, which holds
//! nothing between messages and reads each response field by field as it comes, keeping a
//! resource over 64 KiB cut to its first bytes (its name) and its length: tonic's `Streaming`
//! kept a buffer of the largest message for the stream's life (11 MB per full-mesh sidecar at
//! 10,000 services), and whole messages held 7.9 GB for 2,000 sidecars receiving at once.
//!
//! For each phase: responses, resources, bytes (sum of `Any.value` lengths) and removed names
//! per type received by all clients, total pushes (responses), server RSS and peak (VmHWM) at
//! its end, server CPU seconds (utime + stime from `/proc/PID/stat`, 100 ticks a second
//! assumed) in it and in total, and the tool's own CPU seconds.
//!
//! With `--sidecar-hosts K`, the tool also writes one Istio `Sidecar` per client namespace
//! (`--namespaces N` spreads the clients over `load-0` … `load-N-1`; 1 keeps them in `load`)
//! whose egress lists K services (`load/svc-…`, K consecutive ones from namespace index × K),
//! into a second directory passed as `--config-dir`: each sidecar then receives those K
//! services, as Istio recommends for large meshes.
//!
//! Flags: `--services N` (1000), `--endpoints M` (10), `--per-file F` (100), `--clients C`
//! (100), `--protocol sotw|delta` (sotw), `--kind sidecar|grpc` (sidecar), `--grpc-targets K`
//! (5), `--namespaces N` (1), `--sidecar-hosts K` (0: no Sidecar), `--changes K` (20),
//! `--rate R` (changes per second; default one at a time, each after the previous reached
//! every subscriber or timed out), `--connect-rate R` (1000 connections
//! per second; 0: no limit), `--extra-clients B` (C/4; 0: skip), `--timeout S` (60 s for the
//! initial phase after connecting, and per change), `--settle S` (2 s before memory
//! readings; the issue 13 runs use 5), `--leave-settle S` (5 s after the last client left,
//! before the last reading), `--binary PATH` (`target/release/wayfinder`), `--json PATH` (also write the figures as one
//! JSON object), `--secure` (the clients connect to the secure port over mutual TLS, each with
//! its namespace's certificate, got from the server's CA with a bootstrap token before the
//! load starts); anything after `--` goes to `wayfinder discovery` (e.g. `--debounce-after 10ms`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

#[path = "xds_load/args.rs"]
mod args;
#[path = "xds_load/client.rs"]
mod client;
#[path = "xds_load/decode.rs"]
mod decode;
#[path = "xds_load/delta.rs"]
mod delta;
#[path = "xds_load/fleet.rs"]
mod fleet;
#[path = "xds_load/leave.rs"]
mod leave;
#[path = "support/load.rs"]
mod load;
#[path = "xds_load/mesh.rs"]
mod mesh;
#[path = "xds_load/phases.rs"]
mod phases;
#[path = "xds_load/report.rs"]
mod report;
#[path = "xds_load/secure.rs"]
mod secure;
#[path = "xds_load/sotw.rs"]
mod sotw;
#[path = "xds_load/stream.rs"]
mod stream;
#[path = "xds_load/wire.rs"]
mod wire;

use fleet::Fleet;
use mesh::Mesh;
use phases::Collector;
use report::{Idle, Report, Sample};

/// The address the server's `listener` ("grpc", "secure-grpc", "monitoring") listens on, from
/// its log.
pub(crate) async fn listening(logs: &load::Logs, listener: &str) -> SocketAddr {
    let (_, line) = logs
        .wait(0, |l| {
            l["message"] == "listening" && l["listener"] == listener
        })
        .await;
    line["address"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("the {listener} address in {line}"))
}

#[tokio::main]
async fn main() {
    let args = args::parse();
    let memcpy = leave::memcpy_rate();
    let mesh = Mesh::write(args.services, args.endpoints, args.per_file);
    let mut flags: Vec<String> = vec![
        "--registries".into(),
        "File".into(),
        "--file-registry".into(),
    ];
    flags.push(mesh.path().display().to_string());
    let sidecars = (args.sidecar_hosts > 0)
        .then(|| mesh::write_sidecars(args.namespaces, args.sidecar_hosts, args.services));
    if let Some(dir) = &sidecars {
        flags.push("--config-dir".into());
        flags.push(dir.path().display().to_string());
    }
    flags.extend(args.extra.iter().cloned());
    let secure_dir = args
        .secure
        .then(|| secure::flags(&mut flags, args.namespaces));
    let (mut child, pid, logs) = load::spawn(&args.binary, &flags);
    let addr = listening(&logs, "grpc").await;
    let monitoring = listening(&logs, "monitoring").await;
    let (synced, _) = logs
        .wait(0, |l| l["message"] == "sources synced; serving")
        .await;
    tokio::time::sleep(args.settle).await;

    let (addr, tls) = match &secure_dir {
        None => (addr, Vec::new()),
        Some(dir) => secure::identities(&logs, dir.path(), args.namespaces).await,
    };
    let (fleet, events) = Fleet::new(args.clone(), addr, tls);
    let mut collector = Collector::new(events);
    let mut phases = Vec::new();
    let before = Sample::take(&fleet, pid);
    let rss_before = before.rss;

    let initial = phases::initial(&fleet, &mut collector, 0..args.clients).await;
    let after_initial = Sample::take(&fleet, pid);
    tokio::time::sleep(args.settle).await;
    let rss_connected = load::memory(pid).0;

    let mesh = Arc::new(Mutex::new(mesh));
    let churn_start = Sample::take(&fleet, pid);
    let churn = phases::churn(&fleet, &mut collector, &mesh, &logs, synced + 1).await;
    let after_churn = Sample::take(&fleet, pid);

    tokio::time::sleep(args.settle).await;
    let idle_start = Sample::take(&fleet, pid);
    let extra = args.extra_clients;
    let extra_initial = if extra > 0 {
        let ids = args.clients..args.clients + extra;
        let i = phases::initial(&fleet, &mut collector, ids).await;
        tokio::time::sleep(args.settle).await;
        Some(i)
    } else {
        None
    };
    let after_idle = Sample::take(&fleet, pid);
    fleet.cancel.cancel();
    let left = leave::leave(monitoring, pid, args.leave_settle).await;
    let server_exit = child.try_wait().unwrap().map(|status| status.to_string());
    child.kill().await.unwrap();
    drop(mesh); // removes the temporary directories
    drop(sidecars);

    let idle = Idle {
        rss_before,
        rss_connected,
        extra,
        rss_before_extra: idle_start.rss,
        rss_with_extra: after_idle.rss,
        extra_initial,
        left,
        memcpy,
    };
    phases.push(("initial", before, after_initial));
    phases.push(("churn", churn_start, after_churn));
    phases.push(("idle", idle_start, after_idle));
    let report = Report {
        args: &args,
        initial,
        churn,
        idle,
        phases,
        server_exit,
    };
    report.print();
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.json()).unwrap();
        std::fs::write(path, text + "\n").unwrap_or_else(|e| panic!("write {path}: {e}"));
    }
}
