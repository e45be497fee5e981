//! Load figure for the Kubernetes registry: initial sync time and server memory for N
//! Services with S EndpointSlices of E endpoints each (by default 5,000 × 4 × 5: 20,000
//! slices, 100,000 endpoints), and the time from one EndpointSlice change to the aggregate and
//! to a new snapshot.
//!
//! The API server is the in-process fake of `wayfinder-kubernetes` (no kube-apiserver can be
//! installed here), listing in pages of 500 as a real one does; the server is the real release
//! binary in its own process, so its memory is its own.
//!
//! ```sh
//! cargo build --release
//! cargo run --release --example kubernetes_load -- --services 5000 --slices 4 --endpoints 5
//! ```
//!
//! Flags: `--services N` (5000), `--slices S` (4 per Service), `--endpoints E` (5 per slice),
//! `--pods` (also one Pod per endpoint, labelled, as a real cluster has), `--changes K` (5),
//! `--gap-ms G` (250: the pause before each change, longer than the default 100 ms quiet
//! period, so that each change is a lone one; 0 makes them a burst), `--binary PATH`
//! (`target/release/wayfinder`); anything after `--` goes to `wayfinder discovery`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::fixtures::{SliceEndpoint, endpoint_slice, node, pod, service};

#[path = "support/load.rs"]
mod load;

use load::{log_secs, memory, now_secs};

struct Args {
    services: usize,
    slices: usize,
    endpoints: usize,
    pods: bool,
    changes: usize,
    gap_ms: usize,
    binary: String,
    extra: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        services: 5000,
        slices: 4,
        endpoints: 5,
        pods: false,
        changes: 5,
        gap_ms: 250,
        binary: "target/release/wayfinder".into(),
        extra: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap().parse::<usize>().unwrap();
        match flag.as_str() {
            "--services" => a.services = value(),
            "--slices" => a.slices = value(),
            "--endpoints" => a.endpoints = value(),
            "--changes" => a.changes = value(),
            "--gap-ms" => a.gap_ms = value(),
            "--pods" => a.pods = true,
            "--binary" => a.binary = it.next().unwrap(),
            "--" => a.extra = it.by_ref().collect(),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

const NODES: usize = 50;

/// The slice `k` of service `s`, its endpoints numbered from `first`.
fn slice(s: usize, k: usize, endpoints: usize, shift: usize) -> serde_json::Value {
    let eps: Vec<SliceEndpoint> = (0..endpoints)
        .map(|e| {
            let n = (s * 64 + k * 8 + e + shift) as u32;
            let ip = format!("10.{}.{}.{}", n >> 16 & 255, n >> 8 & 255, n & 255);
            SliceEndpoint::new(
                &ip,
                &format!("svc-{s:05}-{k}-{e}"),
                &format!("node-{}", n as usize % NODES),
            )
        })
        .collect();
    let name = format!("svc-{s:05}-{k}");
    endpoint_slice(
        &namespace(s),
        &name,
        &format!("svc-{s:05}"),
        &[("http", 8080)],
        &eps,
    )
}

fn namespace(s: usize) -> String {
    format!("ns-{:02}", s % 20)
}

#[tokio::main]
async fn main() {
    let args = args();
    let fake = FakeApiServer::start().await;
    let mut objects = Vec::new();
    for n in 0..NODES {
        objects.push(node(
            &format!("node-{n}"),
            "us-east1",
            &format!("us-east1-{}", n % 3),
        ));
    }
    for s in 0..args.services {
        let vip = format!("10.96.{}.{}", s / 250, s % 250 + 1);
        objects.push(service(
            &namespace(s),
            &format!("svc-{s:05}"),
            &vip,
            &[("http", 80, 8080)],
        ));
        for k in 0..args.slices {
            let slice = slice(s, k, args.endpoints, 0);
            if args.pods {
                for ep in slice["endpoints"].as_array().unwrap() {
                    let (ip, name) = (
                        ep["addresses"][0].as_str().unwrap(),
                        ep["targetRef"]["name"].as_str().unwrap(),
                    );
                    let labels = [("app", "svc"), ("version", "v1")];
                    objects.push(pod(
                        &namespace(s),
                        name,
                        ip,
                        ep["nodeName"].as_str().unwrap(),
                        &labels,
                        "default",
                    ));
                }
            }
            objects.push(slice);
        }
    }
    let total = objects.len();
    fake.apply_many(objects);
    let dir = std::env::temp_dir().join(format!("wayfinder-kube-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = fake.write_kubeconfig(&dir, "load");

    let started = Instant::now();
    let mut flags: Vec<String> = ["--registries", "Kubernetes", "--kubeconfig"]
        .map(String::from)
        .into();
    flags.push(kubeconfig.display().to_string());
    flags.extend(args.extra.iter().cloned());
    let (mut child, pid, logs) = load::spawn(&args.binary, &flags);
    let (mut at, _) = logs
        .wait(0, |l| l["message"] == "sources synced; serving")
        .await;
    let sync = started.elapsed();
    let (rss, hwm) = memory(pid);
    println!(
        "{} Services, {} EndpointSlices, {} endpoints{} ({total} objects): synced and serving after {:.0} ms; server RSS {rss:.1} MiB (peak {hwm:.1} MiB)",
        args.services,
        args.services * args.slices,
        args.services * args.slices * args.endpoints,
        if args.pods { ", one Pod each" } else { "" },
        sync.as_secs_f64() * 1000.0,
    );

    for n in 0..args.changes {
        let s = (n * 397 + 17) % args.services;
        tokio::time::sleep(std::time::Duration::from_millis(args.gap_ms as u64)).await;
        let changed_at = now_secs();
        // The slice's endpoints move: a rolling update's step.
        fake.apply(slice(s, 0, args.endpoints, 1 + n));
        let host = format!(
            "{}/svc-{s:05}.{}.svc.cluster.local",
            namespace(s),
            namespace(s)
        );
        let (i, change) = logs
            .wait(at, |l| {
                l["message"] == "registry change" && l["service"].as_str() == Some(host.as_str())
            })
            .await;
        let (j, snapshot) = logs.wait(i, |l| l["message"] == "snapshot published").await;
        at = j + 1;
        println!(
            "change {n} (svc-{s:05}: one slice's endpoints moved): in the aggregate after {:.1} ms, new snapshot after {:.1} ms",
            (log_secs(&change) - changed_at) * 1000.0,
            (log_secs(&snapshot) - changed_at) * 1000.0,
        );
    }
    let (rss, hwm) = memory(pid);
    println!("server RSS at the end {rss:.1} MiB (peak {hwm:.1} MiB)");
    child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
