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

use std::time::Instant;

use wayfinder_consul::fake::{FakeConsul, Instance};

#[path = "support/load.rs"]
mod load;

use load::{log_secs, memory, now_secs};

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
    let mut flags: Vec<String> = ["--registries", "Consul", "--consul-addr"]
        .map(String::from)
        .into();
    flags.push(fake.url());
    flags.extend(args.extra.iter().cloned());
    let (mut child, pid, logs) = load::spawn(&args.binary, &flags);
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
