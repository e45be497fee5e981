//! Prometheus metrics, under Istio's names where Istio has one.
//!
//! One [`Metrics`] per server, registered in an explicit `prometheus-client` registry (no
//! globals, so tests run servers side by side). Served as text on `--monitoring-addr`
//! `/metrics`.
//!
//! Istio's counters (`pilot_xds_pushes`, `pilot_total_xds_rejects`, …) have no `_total`
//! suffix, and dashboards query them by those names. OpenMetrics requires the suffix on
//! samples typed `counter`, so these are exposed under Istio's exact names with the type
//! `unknown`; `rate()` and `increase()` work on them as on any counter. Wayfinder's own
//! counters are ordinary counters with `_total`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

/// Buckets for push and build times, in seconds.
const PUSH_BUCKETS: [f64; 6] = [0.01, 0.1, 0.5, 1.0, 3.0, 5.0];
/// Istio's buckets for `pilot_proxy_convergence_time`, in seconds.
const CONVERGENCE_BUCKETS: [f64; 8] = [0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0];
/// Istio's buckets for `pilot_xds_config_size_bytes` (4 MB is gRPC's default message limit).
const SIZE_BUCKETS: [f64; 6] = [
    1.0,
    10_000.0,
    1_000_000.0,
    4_000_000.0,
    10_000_000.0,
    40_000_000.0,
];

/// Labels `{type="cds"}` for per-xDS-type metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    /// `cds`, `eds`, `lds` or `rds`.
    pub r#type: &'static str,
}

/// Labels `{reason="budget"}` for refusals.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why: `rate`, `budget`, `size`, `names`, `node`, `compressed`, `slow`, `malformed`.
    pub reason: &'static str,
}

/// Labels `{registry="File"}` for per-registry metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryLabel {
    /// The registry's name.
    pub registry: String,
}

/// A monotonic counter exposed under a name without `_total` (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct IstioCounter(Counter<u64, AtomicU64>);

impl IstioCounter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.inc();
    }

    /// Adds `n`.
    pub fn inc_by(&self, n: u64) {
        self.0.inc_by(n);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

impl TypedMetric for IstioCounter {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for IstioCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let value = i64::try_from(self.0.get()).unwrap_or(i64::MAX);
        encoder.encode_gauge(&value)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Every metric the server records.
pub struct Metrics {
    registry: Registry,
    /// `pilot_xds`: connected xDS clients.
    pub xds_clients: Gauge,
    /// `pilot_xds_pushes{type}`: responses sent.
    pub xds_pushes: Family<TypeLabel, IstioCounter>,
    /// `pilot_xds_push_time{type}`: seconds to generate and queue one response.
    pub xds_push_time: Family<TypeLabel, Histogram>,
    /// `pilot_xds_config_size_bytes{type}`: size of the resources in one response.
    pub xds_config_size: Family<TypeLabel, Histogram>,
    /// `pilot_proxy_convergence_time`: seconds from a snapshot's publication to a proxy's push.
    pub proxy_convergence: Histogram,
    /// `pilot_total_xds_rejects`: NACKs of any type.
    pub xds_rejects: IstioCounter,
    /// `pilot_xds_{cds,eds,lds,rds}_reject`: NACKs per type.
    pub xds_type_rejects: Family<TypeLabel, IstioCounter>,
    /// `pilot_xds_expired_nonce`: requests ignored for a stale nonce.
    pub xds_expired_nonce: IstioCounter,
    /// `wayfinder_xds_refused_streams_total{reason}`: streams the server refused: `rate` (the
    /// new-stream rate limit), `budget` (the request budget was in use), `size`, `names`,
    /// `node` (a bad or oversized node), `compressed`, `slow` (a request that did not arrive
    /// in time), `malformed`, `stalled` (a client that stopped reading its responses).
    pub xds_refused_streams: Family<ReasonLabel, Counter>,
    /// `wayfinder_xds_request_budget_bytes`: bytes of the request budget
    /// (`--max-request-budget`) held by requests being read or handled.
    pub xds_request_budget: Gauge,
    /// `wayfinder_xds_push_budget_bytes`: bytes of the push budget (`--max-push-budget`)
    /// held by copied response chunks not yet written to their connections.
    pub xds_push_budget: Gauge,
    /// `pilot_inbound_updates{type}`: registry changes (`eds`, `svc`, `svcdelete`).
    pub inbound_updates: Family<TypeLabel, IstioCounter>,
    /// `pilot_services`: services in the published snapshot.
    pub services: Gauge,
    /// `pilot_total_rejected_configs`: refusals sources reported: objects and registrations
    /// that fail validation, documents (and registry answers) that do not parse.
    pub rejected_configs: IstioCounter,
    /// `wayfinder_config_objects`: configuration objects in the published snapshot.
    pub config_objects: Gauge,
    /// `pilot_pushcontext_init_seconds`: seconds to build and validate a snapshot.
    pub snapshot_build_time: Histogram,
    /// `pilot_debounce_time`: seconds from the first change of a batch to its snapshot.
    pub debounce_time: Histogram,
    /// `wayfinder_snapshot_version`: version of the published snapshot.
    pub snapshot_version: Gauge,
    /// `wayfinder_snapshots_rejected_total`: snapshots that failed validation. The aggregate
    /// validates each service as it merges it (one that fails keeps its previous state, and is
    /// logged), so it never publishes or refuses an invalid snapshot and this stays 0; it is
    /// kept for dashboards that read it.
    pub snapshots_rejected: Counter,
    /// `wayfinder_merge_conflicts`: registry disagreements in the published snapshot.
    pub merge_conflicts: Gauge,
    /// `wayfinder_registry_synced{registry}`: 1 once the registry delivered its first state.
    pub registry_synced: Family<RegistryLabel, Gauge>,
    /// `wayfinder_registry_degraded{registry}`: 1 while the registry's last item was an error.
    pub registry_degraded: Family<RegistryLabel, Gauge>,
    /// `wayfinder_registry_errors_total{registry}`: errors reported by or about the registry.
    pub registry_errors: Family<RegistryLabel, Counter>,
    /// `wayfinder_registry_services{registry}`: services the registry reports.
    pub registry_services: Family<RegistryLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            xds_clients: Gauge::default(),
            xds_pushes: Family::default(),
            xds_push_time: Family::new_with_constructor(|| Histogram::new(PUSH_BUCKETS)),
            xds_config_size: Family::new_with_constructor(|| Histogram::new(SIZE_BUCKETS)),
            proxy_convergence: Histogram::new(CONVERGENCE_BUCKETS),
            xds_rejects: IstioCounter::default(),
            xds_type_rejects: Family::default(),
            xds_expired_nonce: IstioCounter::default(),
            xds_refused_streams: Family::default(),
            xds_request_budget: Gauge::default(),
            xds_push_budget: Gauge::default(),
            inbound_updates: Family::default(),
            services: Gauge::default(),
            rejected_configs: IstioCounter::default(),
            config_objects: Gauge::default(),
            snapshot_build_time: Histogram::new(PUSH_BUCKETS),
            debounce_time: Histogram::new(CONVERGENCE_BUCKETS),
            snapshot_version: Gauge::default(),
            snapshots_rejected: Counter::default(),
            merge_conflicts: Gauge::default(),
            registry_synced: Family::default(),
            registry_degraded: Family::default(),
            registry_errors: Family::default(),
            registry_services: Family::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("pilot_xds", "Connected xDS clients", m.xds_clients.clone());
        r.register(
            "pilot_xds_pushes",
            "xDS responses sent, by type",
            m.xds_pushes.clone(),
        );
        r.register(
            "pilot_xds_push_time",
            "Seconds to generate and queue one response",
            m.xds_push_time.clone(),
        );
        r.register(
            "pilot_xds_config_size_bytes",
            "Bytes of resources per response",
            m.xds_config_size.clone(),
        );
        r.register(
            "pilot_proxy_convergence_time",
            "Seconds from a snapshot's publication to its push to a proxy",
            m.proxy_convergence.clone(),
        );
        r.register(
            "pilot_total_xds_rejects",
            "NACKs of any type",
            m.xds_rejects.clone(),
        );
        r.register(
            "pilot_xds_expired_nonce",
            "Requests ignored because their nonce was stale",
            m.xds_expired_nonce.clone(),
        );
        r.register(
            "wayfinder_xds_refused_streams",
            "xDS streams refused, by reason",
            m.xds_refused_streams.clone(),
        );
        r.register(
            "wayfinder_xds_request_budget_bytes",
            "Bytes of the request budget held by requests being read or handled",
            m.xds_request_budget.clone(),
        );
        r.register(
            "wayfinder_xds_push_budget_bytes",
            "Bytes of the push budget held by response chunks not yet written",
            m.xds_push_budget.clone(),
        );
        r.register(
            "pilot_inbound_updates",
            "Registry changes by kind",
            m.inbound_updates.clone(),
        );
        r.register(
            "pilot_total_rejected_configs",
            "Refusals reported by sources: invalid objects and registrations, documents that do not parse",
            m.rejected_configs.clone(),
        );
        r.register(
            "wayfinder_config_objects",
            "Configuration objects in the published snapshot",
            m.config_objects.clone(),
        );
        r.register(
            "pilot_services",
            "Services in the published snapshot",
            m.services.clone(),
        );
        r.register(
            "pilot_pushcontext_init_seconds",
            "Seconds to build and validate a snapshot",
            m.snapshot_build_time.clone(),
        );
        r.register(
            "pilot_debounce_time",
            "Seconds from the first change of a batch to its snapshot",
            m.debounce_time.clone(),
        );
        r.register(
            "wayfinder_snapshot_version",
            "Version of the published snapshot",
            m.snapshot_version.clone(),
        );
        r.register(
            "wayfinder_snapshots_rejected",
            "Snapshots that failed validation",
            m.snapshots_rejected.clone(),
        );
        r.register(
            "wayfinder_merge_conflicts",
            "Registry disagreements in the published snapshot",
            m.merge_conflicts.clone(),
        );
        r.register(
            "wayfinder_registry_synced",
            "1 once the registry delivered its first state",
            m.registry_synced.clone(),
        );
        r.register(
            "wayfinder_registry_degraded",
            "1 while the registry's last report was an error",
            m.registry_degraded.clone(),
        );
        r.register(
            "wayfinder_registry_errors",
            "Errors reported by or about the registry",
            m.registry_errors.clone(),
        );
        r.register(
            "wayfinder_registry_services",
            "Services the registry reports",
            m.registry_services.clone(),
        );
        // Istio names its per-type NACK counters pilot_xds_cds_reject, …: one family per name.
        for t in crate::xds::TypeUrl::PUSH_ORDER {
            let counter = m
                .xds_type_rejects
                .get_or_create(&TypeLabel { r#type: t.short() })
                .clone();
            r.register(
                format!("pilot_xds_{}_reject", t.short()),
                format!("NACKs of {} responses", t.short()),
                counter,
            );
        }
        Self { registry, ..m }
    }

    /// The metrics in Prometheus/OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Labels for a registry.
    pub fn registry_label(name: &str) -> RegistryLabel {
        RegistryLabel {
            registry: name.to_owned(),
        }
    }

    /// Labels for an xDS type.
    pub fn type_label(t: crate::xds::TypeUrl) -> TypeLabel {
        TypeLabel { r#type: t.short() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istio_counters_keep_their_names() {
        let m = Metrics::new();
        m.xds_pushes
            .get_or_create(&TypeLabel { r#type: "cds" })
            .inc();
        m.xds_rejects.inc();
        m.xds_type_rejects
            .get_or_create(&TypeLabel { r#type: "eds" })
            .inc();
        m.snapshots_rejected.inc();
        let text = m.render();
        assert!(text.contains("pilot_xds_pushes{type=\"cds\"} 1"), "{text}");
        assert!(text.contains("pilot_total_xds_rejects 1"), "{text}");
        assert!(text.contains("pilot_xds_eds_reject 1"), "{text}");
        assert!(
            text.contains("wayfinder_snapshots_rejected_total 1"),
            "{text}"
        );
    }
}
