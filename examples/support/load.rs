//! What the load examples share: the release binary in its own process, its JSON log lines,
//! the time they carry, and its memory.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

/// Log lines of the server, shared with the task that reads them.
#[derive(Clone, Default)]
pub(crate) struct Logs {
    lines: Arc<Mutex<Vec<Value>>>,
    more: Arc<Notify>,
}

impl Logs {
    /// The first line at or after `from` that matches, among those logged so far.
    #[allow(dead_code)] // not every load example reads back its logs this way
    pub(crate) fn find(
        &self,
        from: usize,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<(usize, Value)> {
        let lines = self.lines.lock().unwrap();
        let found = lines.iter().enumerate().skip(from).find(|(_, l)| pred(l));
        found.map(|(i, l)| (i, l.clone()))
    }

    /// How many lines in `from..to` `pred` accepts.
    #[allow(dead_code)] // not every load example counts lines
    pub(crate) fn count(&self, from: usize, to: usize, pred: impl Fn(&Value) -> bool) -> usize {
        let lines = self.lines.lock().unwrap();
        let to = to.min(lines.len());
        lines[from.min(to)..to].iter().filter(|l| pred(l)).count()
    }

    /// The first line at or after `from` that `pred` accepts, waiting for it. Each line is
    /// looked at once: rescanning from `from` at every new line made waiting through 100,000
    /// lines cost minutes of the tool's CPU, and held the lock the reader needs.
    pub(crate) async fn wait(&self, from: usize, pred: impl Fn(&Value) -> bool) -> (usize, Value) {
        let mut next = from;
        loop {
            let notified = self.more.notified();
            {
                let lines = self.lines.lock().unwrap();
                if let Some((i, l)) = lines.iter().enumerate().skip(next).find(|(_, l)| pred(l)) {
                    return (i, l.clone());
                }
                next = next.max(lines.len());
            }
            tokio::time::timeout(Duration::from_secs(120), notified)
                .await
                .expect("the server logged nothing for two minutes");
        }
    }
}

/// Starts `binary discovery ARGS` on loopback ports with JSON logs (aggregate at debug, for
/// its "registry change" and "snapshot published" lines); returns it, its pid and its log.
#[allow(dead_code)] // not every load example logs the aggregate at debug
pub(crate) fn spawn(binary: &str, args: &[String]) -> (Child, u32, Logs) {
    spawn_at(binary, "info,wayfinder::aggregate=debug", args)
}

/// [`spawn`] with the log level `level`.
#[allow(dead_code)] // not every load example chooses its log level
pub(crate) fn spawn_at(binary: &str, level: &str, args: &[String]) -> (Child, u32, Logs) {
    spawn_raw(binary, &server_flags(level, args))
}

/// `discovery` on loopback ports with JSON logs at `level`, then `args`. The load is on the
/// plaintext port; the secure port (and its CA) is off unless `args` name
/// `--secure-grpc-addr`.
pub(crate) fn server_flags(level: &str, args: &[String]) -> Vec<String> {
    let secure_off = ["--secure-grpc-addr", ""];
    let secure_off = if args.iter().any(|a| a == "--secure-grpc-addr") {
        &secure_off[..0]
    } else {
        &secure_off[..]
    };
    let mut flags: Vec<String> = ["discovery", "--grpc-addr", "127.0.0.1:0", "--http-addr"]
        .into_iter()
        .chain(["127.0.0.1:0", "--monitoring-addr", "127.0.0.1:0"])
        .chain(secure_off.iter().copied())
        .chain(["--log-format", "json", "--log-level", level])
        .map(String::from)
        .collect();
    flags.extend(args.iter().cloned());
    flags
}

/// Starts `program ARGS` (the server, or a wrapper that starts it) with its log read as
/// [`spawn`] reads it; returns it, its pid and its log.
pub(crate) fn spawn_raw(program: &str, args: &[String]) -> (Child, u32, Logs) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {program}: {e} (cargo build --release first)"));
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
    (child, pid, logs)
}

/// Seconds since the epoch, now.
#[allow(dead_code)] // not every load example times from the log
pub(crate) fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The `timestamp` of a JSON log line (`2026-11-22T10:15:42.123456Z`), as seconds since the
/// epoch. Only the time of day is read, added to today's date from the local clock.
#[allow(dead_code)] // not every load example times from the log
pub(crate) fn log_secs(line: &Value) -> f64 {
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
pub(crate) fn memory(pid: u32) -> (f64, f64) {
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

/// CPU seconds a process has used (user + system), from fields 14 and 15 of `/proc/PID/stat`,
/// assuming the usual 100 clock ticks per second (`getconf CLK_TCK`; reading it needs libc).
#[allow(dead_code)] // not every load example reports CPU
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces and parentheses: count from its last `)`.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |n: usize| {
        rest.split_whitespace()
            .nth(n - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field(14) + field(15)) / 100.0
}
