//! Load figure for the Consul registry: initial sync time and server memory for N services ×
//! M instances, and the time from one Consul change to the aggregate and to a new snapshot.
//!
//! The Consul is the in-process fake of `wayfinder-consul` (no real Consul can be installed
//! here); the server is the real release binary in its own process, so its memory is its own.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example consul_load -- --services 1000 --instances 10
//! ```
//!
//! Flags: `--services N` (1000), `--instances M` (10), `--changes K` (5, measured one at a
//! time), `--binary PATH` (`target/release/wayfinder`); anything after `--` goes to
//! `wayfinder discovery` (e.g. `-- --debounce-after 10ms`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::Notify;
use wayfinder_consul::fake::{FakeConsul, Instance};

struct Args {
    services: usize,
    instances: usize,
    changes: usize,
    binary: String,
    extra: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        services: 1000,
        instances: 10,
        changes: 5,
        binary: "target/release/wayfinder".into(),
        extra: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--services" => a.services = it.next().unwrap().parse().unwrap(),
            "--instances" => a.instances = it.next().unwrap().parse().unwrap(),
            "--changes" => a.changes = it.next().unwrap().parse().unwrap(),
            "--binary" => a.binary = it.next().unwrap(),
            "--" => a.extra = it.by_ref().collect(),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// Log lines of the server, shared with the task that reads them.
#[derive(Clone, Default)]
struct Logs {
    lines: Arc<Mutex<Vec<Value>>>,
    more: Arc<Notify>,
}

impl Logs {
    async fn wait(&self, from: usize, pred: impl Fn(&Value) -> bool) -> (usize, Value) {
        loop {
            let notified = self.more.notified();
            {
                let lines = self.lines.lock().unwrap();
                if let Some((i, l)) = lines.iter().enumerate().skip(from).find(|(_, l)| pred(l)) {
                    return (i, l.clone());
                }
            }
            tokio::time::timeout(Duration::from_secs(120), notified)
                .await
                .expect("the server logged nothing for two minutes");
        }
    }
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = args();
    let fake = FakeConsul::start().await.unwrap();
    let mut all = Vec::new();
    for s in 0..args.services {
        for i in 0..args.instances {
            let ip = format!("10.{}.{}.{}", s / 256, s % 256, i + 1);
            all.push(Instance::new(
                &format!("svc-{s:05}"),
                &format!("i{i}"),
                &ip,
                8080,
            ));
        }
    }
    fake.register_many(all);

    let started = Instant::now();
    let mut child = Command::new(&args.binary)
        .args(["discovery", "--registries", "Consul", "--consul-addr"])
        .arg(fake.url())
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--monitoring-addr", "127.0.0.1:0", "--log-format", "json"])
        .args(["--log-level", "info,wayfinder::aggregate=debug"])
        .args(&args.extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e} (cargo build --release first)", args.binary));
    let pid = child.id().unwrap();
    let logs = Logs::default();
    let reader = logs.clone();
    let stderr = child.stderr.take().unwrap();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
            reader.lines.lock().unwrap().push(v);
            reader.more.notify_waiters();
        }
    });
    let (mut at, _) = logs
        .wait(0, |l| l["message"] == "sources synced; serving")
        .await;
    let sync = started.elapsed();
    let (rss, hwm) = memory(pid);
    let counts = fake.counts();
    println!(
        "{} services x {} instances: synced and serving after {:.0} ms; server RSS {:.1} MiB (peak {:.1} MiB); {} health reads, {} catalog reads",
        args.services,
        args.instances,
        sync.as_secs_f64() * 1000.0,
        rss,
        hwm,
        counts.health_total(),
        counts.catalog_services
    );

    for n in 0..args.changes {
        let service = format!("svc-{:05}", (n * 397 + 17) % args.services);
        // A different service each time, so each change is a real one.
        let status = "critical";
        let changed_at = now_secs();
        fake.set_check_status("dc1", &service, "i3", status);
        let host = format!("default/{service}.service.consul");
        let (i, change) = logs
            .wait(at, |l| {
                l["message"] == "registry change" && l["service"].as_str() == Some(host.as_str())
            })
            .await;
        let (j, snapshot) = logs.wait(i, |l| l["message"] == "snapshot published").await;
        at = j + 1;
        println!(
            "change {n} ({service} i3 -> {status}): in the aggregate after {:.1} ms, new snapshot after {:.1} ms",
            (log_secs(&change) - changed_at) * 1000.0,
            (log_secs(&snapshot) - changed_at) * 1000.0,
        );
    }
    let after = fake.counts();
    println!(
        "reads for {} changes: {} health, {} catalog",
        args.changes,
        after.health_total() - counts.health_total(),
        after.catalog_services - counts.catalog_services
    );
    let (rss, hwm) = memory(pid);
    println!("server RSS at the end {rss:.1} MiB (peak {hwm:.1} MiB)");
    child.kill().await.unwrap();
}

/// Seconds since the epoch, now.
fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The `timestamp` of a JSON log line (`2026-11-22T10:15:42.123456Z`), as seconds since the
/// epoch. Only the time of day is read, added to today's date from the local clock.
fn log_secs(line: &Value) -> f64 {
    let ts = line["timestamp"].as_str().expect("a timestamp");
    let time = &ts[ts.find('T').unwrap() + 1..ts.len() - 1];
    let mut parts = time.split(':');
    let h: f64 = parts.next().unwrap().parse().unwrap();
    let m: f64 = parts.next().unwrap().parse().unwrap();
    let s: f64 = parts.next().unwrap().parse().unwrap();
    let now = now_secs();
    let midnight = now - now.rem_euclid(86_400.0);
    midnight + h * 3600.0 + m * 60.0 + s
}

/// Resident and peak resident memory of a process, in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
