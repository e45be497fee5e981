//! Memory figure for configuration: the server's RSS while one large file of VirtualServices
//! is added to and removed from its `--config-dir`, several times.
//!
//! The file holds N VirtualServices (75,000 by default, about 20 MB) of the shapes real
//! meshes have: a canary split by weight, a header match for testers, a path prefix with a
//! rewrite and a timeout, retries. Each add and each removal is waited for on the server's
//! `wayfinder_config_objects` gauge (the objects in the published snapshot), and the RSS of
//! the server is read from `/proc/PID/status` at each step.
//!
//! ```sh
//! cargo build --release --bin wayfinder
//! cargo run --example config_memory -- --objects 75000 --cycles 3
//! ```
//!
//! Figures and what they showed: BENCHMARKS.md, "Hardening (issue 12)".
//!
//! Flags: `--objects N` (75000), `--cycles C` (3), `--settle S` (5: seconds to wait, once the
//! server is idle, before each reading, as issue 13 reads RSS 5 s after the fact; an allocator
//! that returns memory does it over a few seconds), `--binary PATH`
//! (`target/release/wayfinder`), `--write FILE` (only write the file and exit),
//! `--keep` (leave the file in place after the last cycle's add), `--heaptrack OUT` (run the
//! server under `heaptrack -o OUT` and end it with SIGKILL, so that what `heaptrack_print`
//! calls leaked is the live heap at the end: after the last removal, or with `--keep` with
//! the objects in force);
//! anything after `--` goes to `wayfinder discovery`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

#[path = "support/load.rs"]
mod load;

struct Args {
    objects: usize,
    cycles: usize,
    binary: String,
    write: Option<String>,
    heaptrack: Option<String>,
    keep: bool,
    settle: Duration,
    extra: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        objects: 75_000,
        cycles: 3,
        binary: "target/release/wayfinder".into(),
        write: None,
        heaptrack: None,
        keep: false,
        settle: Duration::from_secs(5),
        extra: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--objects" => a.objects = it.next().unwrap().parse().unwrap(),
            "--cycles" => a.cycles = it.next().unwrap().parse().unwrap(),
            "--binary" => a.binary = it.next().unwrap(),
            "--write" => a.write = it.next(),
            "--heaptrack" => a.heaptrack = it.next(),
            "--keep" => a.keep = true,
            "--settle" => {
                a.settle = Duration::from_secs_f64(it.next().unwrap().parse().unwrap());
            }
            "--" => a.extra = it.by_ref().collect(),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// The YAML of `n` VirtualServices, spread over 100 namespaces; four shapes in turn.
fn virtual_services(n: usize) -> String {
    let mut out = String::with_capacity(n * 300);
    for i in 0..n {
        let ns = i % 100;
        let host = format!("svc-{i}");
        writeln!(
            out,
            "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  \
             name: {host}\n  namespace: ns-{ns}\nspec:\n  hosts:\n  - {host}\n  http:"
        )
        .unwrap();
        let route = match i % 4 {
            // A canary: 90/10 by weight.
            0 => format!(
                "  - route:\n    - destination:\n        host: {host}\n      weight: 90\n    \
                 - destination:\n        host: {host}-canary\n      weight: 10\n"
            ),
            // Testers go to the canary, everyone else to the stable version.
            1 => format!(
                "  - match:\n    - headers:\n        end-user:\n          exact: tester\n    \
                 route:\n    - destination:\n        host: {host}-canary\n  - route:\n    \
                 - destination:\n        host: {host}\n"
            ),
            // An API prefix rewritten, with a timeout, and a default route.
            2 => format!(
                "  - match:\n    - uri:\n        prefix: /api/v1/\n    rewrite:\n      \
                 uri: /\n    route:\n    - destination:\n        host: {host}-api\n        \
                 port:\n          number: 8080\n    timeout: 5s\n  - route:\n    \
                 - destination:\n        host: {host}\n"
            ),
            // Retries on a single destination.
            _ => format!(
                "  - route:\n    - destination:\n        host: {host}\n    retries:\n      \
                 attempts: 3\n      perTryTimeout: 2s\n      retryOn: 5xx,reset\n"
            ),
        };
        out.push_str(&route);
    }
    out
}

/// The value of the `wayfinder_config_objects` gauge, once the monitoring port answers.
async fn config_objects(client: &reqwest::Client, metrics: &str) -> Option<usize> {
    let text = client.get(metrics).send().await.ok()?.text().await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("wayfinder_config_objects "))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits until the published snapshot holds `want` configuration objects; returns how long.
async fn wait_objects(client: &reqwest::Client, metrics: &str, want: usize) -> Duration {
    let started = Instant::now();
    loop {
        if config_objects(client, metrics).await == Some(want) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the server did not reach {want} configuration objects in 10 minutes"
        );
        // Polling the gauge: a condition, checked often.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the server has used no CPU for half a second (work that follows a published
/// snapshot, dropping the previous one and the ADS side taking the new one, is done), then
/// `settle` more: the time an allocator is given to return what was freed.
async fn wait_idle(pid: u32, settle: Duration) {
    wait_quiet(pid).await;
    tokio::time::sleep(settle).await;
}

async fn wait_quiet(pid: u32) {
    let started = Instant::now();
    let mut last = load::cpu_seconds(pid);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = load::cpu_seconds(pid);
        if now == last || started.elapsed() > Duration::from_secs(60) {
            return;
        }
        last = now;
    }
}

/// The process heaptrack started: the child of `parent` running `discovery`.
fn child_of(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid: u32 = stat
            .rsplit_once(") ")?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let serving = cmdline.split(|b| *b == 0).any(|arg| arg == b"discovery");
        (ppid == parent && serving).then_some(pid)
    })
}

fn rss(pid: u32) -> f64 {
    load::memory(pid).0
}

#[tokio::main]
async fn main() {
    let args = args();
    let yaml = virtual_services(args.objects);
    if let Some(path) = &args.write {
        std::fs::write(path, &yaml).unwrap();
        println!(
            "wrote {} VirtualServices, {} bytes, to {path}",
            args.objects,
            yaml.len()
        );
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("config");
    std::fs::create_dir(&dir).unwrap();
    let staged = work.path().join("virtual-services.yaml");
    std::fs::write(&staged, &yaml).unwrap();
    let bytes = yaml.len();
    drop(yaml);

    let mut flags = vec!["--config-dir".to_string(), dir.display().to_string()];
    flags.extend(args.extra.iter().cloned());
    let (mut child, pid, logs) = match &args.heaptrack {
        Some(out) => {
            let mut wrapped = vec!["-o".to_string(), out.clone(), args.binary.clone()];
            wrapped.extend(load::server_flags("info", &flags));
            load::spawn_raw("heaptrack", &wrapped)
        }
        None => load::spawn_at(&args.binary, "info", &flags),
    };
    let (_, listening) = logs.wait(0, |l| l["listener"] == "monitoring").await;
    let metrics = format!("http://{}/metrics", listening["address"].as_str().unwrap());
    let pid = if args.heaptrack.is_some() {
        child_of(pid).expect("heaptrack's wayfinder process")
    } else {
        pid
    };
    // reqwest is built without a TLS provider (see ARCHITECTURE.md); plain HTTP needs one too.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    wait_objects(&client, &metrics, 0).await;
    wait_idle(pid, args.settle).await;
    println!(
        "{} VirtualServices, {:.1} MB; server pid {pid}",
        args.objects,
        bytes as f64 / 1e6
    );
    println!("start: RSS {:.1} MiB", rss(pid));
    let target = dir.join("virtual-services.yaml");
    for cycle in 1..=args.cycles {
        step(&staged, &target, true);
        let took = wait_objects(&client, &metrics, args.objects).await;
        wait_idle(pid, args.settle).await;
        let (now, peak) = load::memory(pid);
        println!(
            "cycle {cycle} added in {:.1} s: RSS {now:.1} MiB (peak {peak:.1})",
            took.as_secs_f64()
        );
        if args.keep && cycle == args.cycles {
            break;
        }
        step(&staged, &target, false);
        let took = wait_objects(&client, &metrics, 0).await;
        wait_idle(pid, args.settle).await;
        println!(
            "cycle {cycle} removed in {:.1} s: RSS {:.1} MiB",
            took.as_secs_f64(),
            rss(pid)
        );
    }
    // Under heaptrack, SIGKILL: nothing is freed on the way out, so what heaptrack reports
    // as leaked is the live heap at the end. heaptrack buffers what it records, and SIGKILL
    // loses the buffer: a few hundred requests first push out the frees of the work before
    // them. Otherwise SIGTERM.
    if args.heaptrack.is_some() {
        for _ in 0..300 {
            config_objects(&client, &metrics).await;
        }
    }
    let signal = if args.heaptrack.is_some() {
        "-KILL"
    } else {
        "-TERM"
    };
    let _ = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
    let _ = child.wait().await;
}

/// Puts the file into the watched directory (a rename, as editors and ConfigMaps do), or
/// takes it out.
fn step(staged: &Path, target: &Path, add: bool) {
    if add {
        let tmp = target.with_extension("tmp");
        std::fs::copy(staged, &tmp).unwrap();
        std::fs::rename(&tmp, target).unwrap();
    } else {
        std::fs::remove_file(target).unwrap();
    }
}
