//! Load figure for the File registry: one file of N ServiceEntries (by default 100,000, one
//! host and two endpoints each, about 33 MB of YAML), ingested by the release binary when it
//! is there at start, and when it is added to a watched directory while the server runs, with
//! a small edit to another file right behind it. Then another file is edited with the big one
//! in place, and the big file is removed.
//!
//! The server is the real binary in its own process (`--registries File`); what it did and
//! when is read from its JSON log: the aggregate's `registry change` and `snapshot published`
//! lines (the latter with the snapshot's service count).
//!
//! ```sh
//! cargo build --release --bin wayfinder --example file_load
//! ./target/release/examples/file_load --services 100000
//! ./target/release/examples/file_load --services 100000 --write /tmp/entries.yaml   # only the file
//! ```
//!
//! Flags: `--services N` (100000), `--binary PATH` (`target/release/wayfinder`), `--write PATH`
//! (write the generated file there and exit); anything after `--` goes to
//! `wayfinder discovery`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use serde_json::Value;

#[path = "support/load.rs"]
mod load;

use load::{Logs, cpu_seconds, log_secs, memory, now_secs};

struct Args {
    services: usize,
    binary: String,
    write: Option<String>,
    extra: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        services: 100_000,
        binary: "target/release/wayfinder".into(),
        write: None,
        extra: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--services" => a.services = it.next().unwrap().parse().unwrap(),
            "--binary" => a.binary = it.next().unwrap(),
            "--write" => a.write = it.next(),
            "--" => a.extra = it.by_ref().collect(),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// `n` ServiceEntries in one multi-document YAML file, as a generator script would write them.
fn entries(n: usize) -> String {
    let mut out = String::with_capacity(n * 340);
    for i in 0..n {
        let (a, b) = (i >> 8 & 255, i & 255);
        write!(
            out,
            "apiVersion: networking.istio.io/v1\n\
             kind: ServiceEntry\n\
             metadata:\n  name: svc-{i:06}\n  namespace: load\n\
             spec:\n  hosts: [svc-{i:06}.load.example.com]\n  location: MESH_INTERNAL\n  \
             resolution: STATIC\n  ports:\n  - {{name: http, number: 8080, protocol: HTTP}}\n  \
             endpoints:\n  - {{address: 10.1.{a}.{b}, labels: {{version: v1}}}}\n  \
             - {{address: 10.2.{a}.{b}, labels: {{version: v2}}}}\n---\n"
        )
        .unwrap();
    }
    out
}

/// The small file edited behind the big one: one service whose endpoint port is `port`.
fn small(port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: edit, namespace: load}}\n\
         spec:\n  hosts: [edit.load.example.com]\n  resolution: STATIC\n  \
         ports: [{{name: http, number: 8080, protocol: HTTP}}]\n  \
         endpoints: [{{address: 10.9.0.1, ports: {{http: {port}}}}}]\n"
    )
}

/// Writes `text` to `dir/name` the way a deployment tool does: a hidden temporary file, then a
/// rename, so the watcher sees the whole file at once.
fn put(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

fn services_in(line: &Value) -> Option<u64> {
    (line["message"] == "snapshot published").then(|| line["services"].as_u64())?
}

fn ms(from: f64, line: &Value) -> f64 {
    (log_secs(line) - from) * 1000.0
}

fn start(args: &Args, dir: &Path) -> (tokio::process::Child, u32, Logs) {
    let mut flags: Vec<String> = ["--registries", "File", "--file-registry"]
        .map(String::from)
        .into();
    flags.push(dir.display().to_string());
    flags.extend(args.extra.iter().cloned());
    load::spawn(&args.binary, &flags)
}

#[tokio::main]
async fn main() {
    let args = args();
    let n = args.services;
    let big = entries(n);
    if let Some(path) = &args.write {
        std::fs::write(path, &big).unwrap();
        println!("{n} ServiceEntries, {} bytes: {path}", big.len());
        return;
    }
    let mb = big.len() as f64 / 1e6;
    let root = std::env::temp_dir().join(format!("wayfinder-file-load-{}", std::process::id()));

    // 1. The file is there when the server starts.
    let dir = root.join("at-start");
    std::fs::create_dir_all(&dir).unwrap();
    put(&dir, "big.yaml", &big);
    put(&dir, "small.yaml", &small(9000));
    let started = now_secs();
    let clock = Instant::now();
    let (mut child, pid, logs) = start(&args, &dir);
    let (_, snapshot) = logs
        .wait(0, |l| services_in(l).is_some_and(|s| s as usize > n))
        .await;
    let (rss, hwm) = memory(pid);
    println!(
        "at start: {n} services ({mb:.1} MB) in a snapshot {:.0} ms after the process started \
         (wall {:.0} ms), server CPU {:.2} s; server RSS {rss:.1} MiB (peak {hwm:.1} MiB)",
        ms(started, &snapshot),
        clock.elapsed().as_secs_f64() * 1000.0,
        cpu_seconds(pid),
    );
    child.kill().await.unwrap();

    // 2. The file is added while the server runs, and another file is edited right after.
    let dir = root.join("added");
    std::fs::create_dir_all(&dir).unwrap();
    put(&dir, "small.yaml", &small(9000));
    let (mut child, pid, logs) = start(&args, &dir);
    let (at, _) = logs
        .wait(0, |l| l["message"] == "sources synced; serving")
        .await;
    let cpu = cpu_seconds(pid);
    let added = now_secs();
    put(&dir, "big.yaml", &big);
    put(&dir, "small.yaml", &small(9001));
    let (last, snapshot) = logs
        .wait(at, |l| services_in(l).is_some_and(|s| s as usize > n))
        .await;
    let pushes = logs
        .count(at, last + 1, |l| services_in(l).is_some())
        .max(1);
    let (edited, _) = logs
        .wait(at, |l| {
            l["message"] == "registry change"
                && l["service"].as_str() == Some("load/edit.load.example.com")
        })
        .await;
    let (_, edit) = logs.wait(edited, |l| services_in(l).is_some()).await;
    let cpu = cpu_seconds(pid) - cpu;
    let (rss, hwm) = memory(pid);
    println!(
        "added while running: all {n} services in a snapshot {:.0} ms after the rename, \
         {pushes} snapshot(s) published until then; the edit behind it published after {:.0} ms; \
         server CPU {cpu:.2} s until now; server RSS {rss:.1} MiB (peak {hwm:.1} MiB)",
        ms(added, &snapshot),
        ms(added, &edit),
    );

    // 3. Another file is edited with the big one in place.
    let edited_at = now_secs();
    put(&dir, "small.yaml", &small(9002));
    let (from, _) = logs
        .wait(last + 1, |l| {
            l["message"] == "registry change"
                && l["service"].as_str() == Some("load/edit.load.example.com")
        })
        .await;
    let (last, edit) = logs.wait(from, |l| services_in(l).is_some()).await;
    println!(
        "an edit of another file with the {n} services in place: published after {:.0} ms",
        ms(edited_at, &edit),
    );

    // 4. The file is removed.
    let removed = now_secs();
    std::fs::remove_file(dir.join("big.yaml")).unwrap();
    let (_, snapshot) = logs.wait(last + 1, |l| services_in(l) == Some(1)).await;
    println!(
        "removed: {n} services gone from the snapshot {:.0} ms after the file",
        ms(removed, &snapshot),
    );
    child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&root);
}
