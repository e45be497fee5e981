//! The process's own metrics, as every Prometheus client exposes them: `istio_build`, which
//! Istio's dashboards read the version from, and the standard `process_*` series
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …), read from the kernel
//! at each scrape by a [`Collector`].
//!
//! Istio's own dashboards read a Go binary's runtime (`go_memstats_*`, `go_goroutines`);
//! these are what a process that is not Go has in their place: CPU, resident and virtual
//! memory, threads and descriptors.
//!
//! # Why `/proc/self/stat` is read here
//!
//! No crate of the tree reads a process's resident memory, virtual size or start time:
//! rustix gives the clock tick, the page size and the descriptor limit (used below), but none
//! of those three. The crates that do were measured against a dozen lines of parsing:
//! `kubert-prometheus-process` 0.2.3, a collector for `prometheus-client`, is built on
//! `prometheus-client` 0.23, whose `Collector` trait is not the 0.25 one the server
//! registers in; `procfs` 0.18 (default features off) adds three crates (`procfs`,
//! `procfs-core`, `hex`) and 3.4 s to a clean build on the project's two-core machine, to read
//! six numbers of one line. So the line is split here, as client_golang's `procfs` does: the
//! fields after the last `)` (the command name between parentheses may hold spaces and
//! parentheses itself), by their positions in `proc(5)`.

use std::fmt;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// Registers `istio_build{component="pilot",tag="VERSION"} 1` and the process collector in `r`.
pub(super) fn register(r: &mut Registry) {
    let build: Family<BuildLabels, Gauge> = Family::default();
    build
        .get_or_create(&BuildLabels {
            component: "pilot",
            tag: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
    r.register(
        "istio_build",
        "Istio component build info (wayfinder's version as the tag)",
        build,
    );
    r.register_collector(Box::new(ProcessCollector::new()));
}

/// Istio's labels of `istio_build`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    /// `pilot`: the control plane, as istiod reports itself.
    component: &'static str,
    /// The version.
    tag: &'static str,
}

/// The `process_*` metrics of this process, read at each scrape.
#[derive(Debug)]
struct ProcessCollector {
    /// Seconds since the Unix epoch when the process started: it does not change, so it is
    /// read once (`/proc/stat`, which it needs, is long on machines with many cores).
    start_time: Option<f64>,
}

impl ProcessCollector {
    fn new() -> Self {
        let start_time = read_stat().ok().and_then(|stat| {
            let boot = std::fs::read_to_string("/proc/stat").ok()?;
            let boot: u64 = boot
                .lines()
                .find_map(|l| l.strip_prefix("btime "))?
                .trim()
                .parse()
                .ok()?;
            Some(boot as f64 + ticks(stat.start_ticks).as_secs_f64())
        });
        Self { start_time }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        match read_stat() {
            Ok(stat) => {
                let cpu = ticks(stat.user_ticks + stat.system_ticks).as_secs_f64();
                let page = rustix::param::page_size() as u64;
                let counter = ConstCounter::new(cpu);
                let metric = encoder.encode_descriptor(
                    "process_cpu_seconds",
                    "Total user and system CPU time spent in seconds.",
                    None,
                    MetricType::Counter,
                )?;
                counter.encode(metric)?;
                gauge(
                    &mut encoder,
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    stat.rss_pages.saturating_mul(page) as f64,
                )?;
                gauge(
                    &mut encoder,
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes.",
                    stat.virtual_bytes as f64,
                )?;
                gauge(
                    &mut encoder,
                    "process_threads",
                    "Number of OS threads in the process.",
                    stat.threads as f64,
                )?;
            }
            Err(err) => tracing::debug!(%err, "cannot read /proc/self/stat for process metrics"),
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                fds.count() as f64,
            )?;
        }
        // No limit is RLIM_INFINITY, as client_golang reports it.
        let limit = |r| rustix::process::getrlimit(r).current.unwrap_or(u64::MAX) as f64;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            limit(rustix::process::Resource::Nofile),
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            limit(rustix::process::Resource::As),
        )?;
        if let Some(start) = self.start_time {
            gauge(
                &mut encoder,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                start,
            )?;
        }
        Ok(())
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

/// `n` clock ticks (`proc(5)`'s unit of times) as a duration.
fn ticks(n: u64) -> Duration {
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    Duration::from_secs(n / per_second)
        + Duration::from_nanos((n % per_second) * 1_000_000_000 / per_second)
}

/// What the process metrics read of `/proc/self/stat`.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    user_ticks: u64,
    system_ticks: u64,
    threads: u64,
    start_ticks: u64,
    virtual_bytes: u64,
    rss_pages: u64,
}

fn read_stat() -> Result<Stat, String> {
    let line = std::fs::read_to_string("/proc/self/stat").map_err(|e| e.to_string())?;
    parse_stat(&line).ok_or_else(|| format!("unexpected /proc/self/stat: {line:?}"))
}

/// The fields of a `stat` line: after the command's closing parenthesis, field 3 of `proc(5)`
/// (the state) is the first, so field N is at N − 3.
fn parse_stat(line: &str) -> Option<Stat> {
    let (_, rest) = line.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        user_ticks: field(14)?,
        system_ticks: field(15)?,
        threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        rss_pages: field(24)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Exposition;

    #[test]
    fn stat_fields_are_read_after_the_command_whatever_it_holds() {
        let line = "8487 (a (b) c) R 8443 8443 29551 0 -1 4194304 97 0 0 0 7 3 0 0 20 0 5 0 \
                    652889 3133440 360 18446744073709551615 94451392962560\n";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                user_ticks: 7,
                system_ticks: 3,
                threads: 5,
                start_ticks: 652889,
                virtual_bytes: 3133440,
                rss_pages: 360,
            })
        );
        assert_eq!(parse_stat("8487 (cat) R 1 2"), None);
    }

    #[test]
    fn the_standard_process_series_and_istio_build_are_served() {
        let text = Exposition::new(Registry::default()).render();
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        };
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_threads") >= 1.0);
        let started = value("process_start_time_seconds");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            started <= now + 1.0 && started > now - 3600.0,
            "{started} vs {now}"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "istio_build{{component=\"pilot\",tag=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
    }
}
