//! The figures: samples of counters, memory and CPU at phase boundaries, percentiles, and the
//! two outputs (a table for people, one JSON object for scripts) built from the same values.

use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::{Value, json};
use wayfinder::xds::TypeUrl;

use crate::args::Args;
use crate::fleet::Fleet;
use crate::load::{cpu_seconds, memory};
use crate::phases::{Churn, Initial};

/// Counters, server memory and CPU, and the tool's CPU at one moment.
pub(crate) struct Sample {
    at: Instant,
    /// Per type: responses, resources, bytes, removed.
    counters: [[u64; 4]; 4],
    server_cpu: f64,
    tool_cpu: f64,
    tool_rss: f64,
    pub(crate) rss: f64,
    peak: f64,
}

impl Sample {
    pub(crate) fn take(fleet: &Fleet, pid: u32) -> Self {
        let counters = fleet.counters.each_ref().map(|c| {
            [&c.responses, &c.resources, &c.bytes, &c.removed].map(|a| a.load(Ordering::Relaxed))
        });
        let (rss, peak) = memory(pid);
        Self {
            at: Instant::now(),
            counters,
            server_cpu: cpu_seconds(pid),
            tool_cpu: cpu_seconds(std::process::id()),
            tool_rss: memory(std::process::id()).0,
            rss,
            peak,
        }
    }
}

/// The idle-memory phase.
pub(crate) struct Idle {
    pub(crate) rss_before: f64,
    pub(crate) rss_connected: f64,
    pub(crate) extra: usize,
    pub(crate) rss_before_extra: f64,
    pub(crate) rss_with_extra: f64,
    pub(crate) extra_initial: Option<Initial>,
    /// Every client gone, and the server's RSS a while after.
    pub(crate) left: crate::leave::Left,
    /// This machine's memory-copy rate, bytes per second.
    pub(crate) memcpy: f64,
}

pub(crate) struct Report<'a> {
    pub(crate) args: &'a Args,
    pub(crate) initial: Initial,
    pub(crate) churn: Churn,
    pub(crate) idle: Idle,
    /// (name, sample at its start, sample at its end).
    pub(crate) phases: Vec<(&'static str, Sample, Sample)>,
    /// How the server ended, if it did before the tool stopped it.
    pub(crate) server_exit: Option<String>,
}

impl Report<'_> {
    /// Everything as one JSON object.
    pub(crate) fn json(&self) -> Value {
        let a = self.args;
        let i = &self.idle;
        let c = &self.churn;
        let phases: Vec<Value> = self
            .phases
            .iter()
            .map(|(n, a, b)| phase_json(n, a, b))
            .collect();
        json!({
            "config": {
                "services": a.services, "endpoints": a.endpoints, "per_file": a.per_file,
                "clients": a.clients, "protocol": a.protocol.as_str(), "kind": a.kind.as_str(), "secure": a.secure,
                "grpc_targets": a.grpc_targets, "changes": a.changes, "rate": a.rate,
                "connect_rate": a.connect_rate, "extra_clients": a.extra_clients,
                "server_flags": a.extra,
            },
            "initial": initial_json(&self.initial, a.clients),
            "churn": {
                "changes": a.changes, "expected": c.expected, "received": c.latency_ms.len(),
                "latency_ms": summary(&c.latency_ms), "snapshot_ms": summary(&c.snapshot_ms),
            },
            "idle": {
                "rss_before_mib": i.rss_before, "rss_connected_mib": i.rss_connected,
                "per_connection_kib": kib_each(i.rss_before, i.rss_connected, a.clients),
                "extra_clients": i.extra, "rss_before_extra_mib": i.rss_before_extra,
                "rss_with_extra_mib": i.rss_with_extra,
                "marginal_kib": kib_each(i.rss_before_extra, i.rss_with_extra, i.extra),
                "extra_initial": i.extra_initial.as_ref().map(|e| initial_json(e, i.extra)),
            },
            "leave": {
                "gone_after_s": i.left.gone_after_s,
                "settle_s": a.leave_settle.as_secs_f64(),
                "rss_after_mib": i.left.rss_mib,
                "of_before": i.left.rss_mib / i.rss_before,
            },
            "per_client_initial": self.per_client(),
            "memcpy_bytes_per_s": i.memcpy,
            "server_exit": self.server_exit,
            "phases": phases,
        })
    }

    /// The initial phase per client: server CPU and bytes sent, CPU per byte, and the server's
    /// peak and steady RSS above its RSS before any client, each divided by the clients.
    fn per_client(&self) -> Value {
        let Some((_, from, to)) = self.phases.iter().find(|(n, _, _)| *n == "initial") else {
            return Value::Null;
        };
        let n = self.args.clients as f64;
        let cpu = to.server_cpu - from.server_cpu;
        let bytes: u64 = (0..4)
            .map(|t| to.counters[t][2] - from.counters[t][2])
            .sum();
        json!({
            "server_cpu_ms": cpu * 1e3 / n,
            "bytes": bytes as f64 / n,
            "server_ns_per_byte": cpu * 1e9 / bytes.max(1) as f64,
            "peak_kib": kib_each(self.idle.rss_before, to.peak, self.args.clients),
            // Steady: when the last client has its configuration, every client connected.
            "steady_kib": kib_each(self.idle.rss_before, to.rss, self.args.clients),
            "tool_bound": to.tool_cpu - from.tool_cpu > cpu,
        })
    }

    /// The table, from [`Report::json`]'s values.
    pub(crate) fn print(&self) {
        let j = self.json();
        let a = self.args;
        println!(
            "xds_load: {} services x {} endpoints ({} per file), {} {} clients over {} ADS{}, \
             {} changes {}",
            a.services,
            a.endpoints,
            a.per_file,
            a.clients,
            a.kind.as_str(),
            a.protocol.as_str(),
            if a.secure { " (mutual TLS)" } else { "" },
            a.changes,
            a.rate
                .map_or("one at a time".to_string(), |r| format!("at {r}/s")),
        );
        if let Some(status) = &self.server_exit {
            println!("THE SERVER EXITED BEFORE THE END ({status}): the figures are not valid");
        }
        println!(
            "server flags: {}",
            if a.extra.is_empty() {
                "(none)".into()
            } else {
                a.extra.join(" ")
            }
        );
        println!(
            "\n{:<46}{:>7}{:>9}{:>9}{:>9}{:>9}",
            "latency (ms)", "n", "p50", "p90", "p99", "max"
        );
        row(
            "initial: connect -> all ACKed, per client",
            &j["initial"]["per_client_ms"],
        );
        row(
            "churn: file renamed -> client has endpoints",
            &j["churn"]["latency_ms"],
        );
        row(
            "churn: file renamed -> snapshot published",
            &j["churn"]["snapshot_ms"],
        );
        let ini = &j["initial"];
        println!(
            "initial: {} of {} clients complete {:.0} ms after the first connect ({} failed{})",
            ini["done"],
            a.clients,
            f(&ini["all_done_ms"]),
            ini["failed"],
            ini["first_error"]
                .as_str()
                .map_or(String::new(), |e| format!(": {e}")),
        );
        let ch = &j["churn"];
        println!(
            "churn: {} of {} (change, subscribed client) receipts",
            ch["received"], ch["expected"]
        );
        let id = &j["idle"];
        println!(
            "idle: server RSS {:.1} MiB before clients, {:.1} MiB with {}: \
             {:.1} KiB per connection (shared caches included)",
            f(&id["rss_before_mib"]),
            f(&id["rss_connected_mib"]),
            a.clients,
            f(&id["per_connection_kib"]),
        );
        if self.idle.extra > 0 {
            println!(
                "idle: {} more clients on a warm server: {:.1} -> {:.1} MiB: \
                 {:.1} KiB per connection (all ACKed after {:.0} ms)",
                self.idle.extra,
                f(&id["rss_before_extra_mib"]),
                f(&id["rss_with_extra_mib"]),
                f(&id["marginal_kib"]),
                f(&id["extra_initial"]["all_done_ms"]),
            );
        }
        let lv = &j["leave"];
        println!(
            "leave: every client gone {:.1} s after they were told; server RSS {:.1} s later \
             {:.1} MiB ({:.0}% of before clients)",
            f(&lv["gone_after_s"]),
            f(&lv["settle_s"]),
            f(&lv["rss_after_mib"]),
            f(&lv["of_before"]) * 100.0,
        );
        let pc = &j["per_client_initial"];
        println!(
            "per client, initial phase: server CPU {:.2} ms, {:.2} MB sent, \
             {:.2} ns of server CPU per byte; peak +{:.0} KiB, steady +{:.0} KiB over before",
            f(&pc["server_cpu_ms"]),
            f(&pc["bytes"]) / 1e6,
            f(&pc["server_ns_per_byte"]),
            f(&pc["peak_kib"]),
            f(&pc["steady_kib"]),
        );
        println!(
            "this machine copies memory at {:.1} GB/s ({:.3} ns per byte)",
            f(&j["memcpy_bytes_per_s"]) / 1e9,
            1e9 / f(&j["memcpy_bytes_per_s"]),
        );
        if pc["tool_bound"].as_bool() == Some(true) {
            println!(
                "THE TOOL USED MORE CPU THAN THE SERVER in the initial phase: its figures are \
                 bound by the tool as much as by the server"
            );
        }
        println!(
            "\n{:<8}{:>7}{:>5}{:>11}{:>11}{:>13}{:>9}",
            "phase", "secs", "type", "responses", "resources", "bytes", "removed"
        );
        for p in j["phases"].as_array().into_iter().flatten() {
            let counted = TypeUrl::PUSH_ORDER
                .iter()
                .filter(|t| p["types"].get(t.short()).is_some());
            for (n, t) in counted.enumerate() {
                let c = &p["types"][t.short()];
                let (name, secs) = if n == 0 {
                    (
                        p["name"].as_str().unwrap_or(""),
                        format!("{:.2}", f(&p["seconds"])),
                    )
                } else {
                    ("", String::new())
                };
                println!(
                    "{name:<8}{secs:>7}{:>5}{:>11}{:>11}{:>13}{:>9}",
                    t.short(),
                    u(&c["responses"]),
                    u(&c["resources"]),
                    u(&c["bytes"]),
                    u(&c["removed"])
                );
            }
        }
        println!(
            "\n{:<8}{:>8}{:>9}{:>15}{:>10}{:>13}{:>9}{:>12}{:>14}",
            "phase",
            "pushes",
            "MB recv",
            "server RSS MiB",
            "peak MiB",
            "server CPU s",
            "(total)",
            "tool CPU s",
            "tool RSS MiB"
        );
        for p in j["phases"].as_array().into_iter().flatten() {
            println!(
                "{:<8}{:>8}{:>9.1}{:>15.1}{:>10.1}{:>13.2}{:>9.2}{:>12.2}{:>14.1}",
                p["name"].as_str().unwrap_or(""),
                u(&p["pushes"]),
                f(&p["bytes"]) / 1e6,
                f(&p["server_rss_mib"]),
                f(&p["server_peak_mib"]),
                f(&p["server_cpu_s"]),
                f(&p["server_cpu_total_s"]),
                f(&p["tool_cpu_s"]),
                f(&p["tool_rss_mib"]),
            );
        }
    }
}

fn initial_json(i: &Initial, clients: usize) -> Value {
    json!({
        "clients": clients, "done": i.per_client_ms.len(), "failed": i.failed,
        "first_error": i.first_error, "all_done_ms": i.all_done_ms,
        "per_client_ms": summary(&i.per_client_ms),
    })
}

fn phase_json(name: &str, from: &Sample, to: &Sample) -> Value {
    let d = |t: usize, k: usize| to.counters[t][k] - from.counters[t][k];
    // The simulated clients subscribe to CDS, EDS, LDS and RDS only: the types with a counter.
    let types: serde_json::Map<String, Value> = TypeUrl::PUSH_ORDER
        .iter()
        .filter(|t| (**t as usize) < to.counters.len())
        .map(|t| {
            let i = *t as usize;
            let v = json!({
                "responses": d(i, 0), "resources": d(i, 1), "bytes": d(i, 2), "removed": d(i, 3),
            });
            (t.short().to_string(), v)
        })
        .collect();
    json!({
        "name": name, "seconds": to.at.duration_since(from.at).as_secs_f64(), "types": types,
        "pushes": (0..4).map(|t| d(t, 0)).sum::<u64>(),
        "bytes": (0..4).map(|t| d(t, 2)).sum::<u64>(),
        "server_rss_mib": to.rss, "server_peak_mib": to.peak,
        "server_cpu_s": to.server_cpu - from.server_cpu, "server_cpu_total_s": to.server_cpu,
        "tool_cpu_s": to.tool_cpu - from.tool_cpu, "tool_rss_mib": to.tool_rss,
    })
}

/// `{n, p50, p90, p99, max}` of `values` (nearest rank), or null when there are none.
fn summary(values: &[f64]) -> Value {
    if values.is_empty() {
        return Value::Null;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    let max = v[v.len() - 1];
    json!({"n": v.len(), "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99), "max": max})
}

fn kib_each(before_mib: f64, after_mib: f64, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        (after_mib - before_mib) * 1024.0 / n as f64
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn row(what: &str, s: &Value) {
    if s.is_null() {
        println!("{what:<46}{:>7}", 0);
        return;
    }
    println!(
        "{what:<46}{:>7}{:>9.1}{:>9.1}{:>9.1}{:>9.1}",
        u(&s["n"]),
        f(&s["p50"]),
        f(&s["p90"]),
        f(&s["p99"]),
        f(&s["max"])
    );
}
