//! Prometheus metrics, under Istio's names where Istio has one: the model's own
//! ([`ModelMetrics`]: registries, configuration, snapshots), the types both sides share, and
//! the [`Exposition`] that serves them.
//!
//! Each server has one explicit `prometheus-client` registry (no globals, so tests run servers
//! side by side), which `server::start` fills with [`ModelMetrics`] and the xDS server's
//! `xds::metrics::XdsMetrics`. It is served as text on `--monitoring-addr` `/metrics`. This
//! module names nothing of xDS, so the aggregate that records these never compiles against xDS
//! types.
//!
//! Istio's counters (`pilot_xds_pushes`, `pilot_total_xds_rejects`, …) have no `_total`
//! suffix, and dashboards query them by those names. OpenMetrics requires the suffix on
//! samples typed `counter`, so these are exposed under Istio's exact names with the type
//! `unknown`; `rate()` and `increase()` work on them as on any counter. Wayfinder's own
//! counters are ordinary counters with `_total`.
//!
//! Every series a dashboard may query exists from the start, at 0 until there is something
//! to count: a labelled family is created with the label values it counts
//! (`tests/it/dashboard.rs` checks this against Istio's control-plane dashboard). Besides
//! what the server records, the exposition serves the process's own metrics
//! (`metrics/process.rs`: `istio_build` and `process_*`) and the gauges the published
//! snapshot answers when scraped (`metrics/snapshot_gauges.rs`).

mod process;
mod snapshot_gauges;

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::snapshot::SnapshotReader;

/// Buckets for push and build times, in seconds.
pub(crate) const PUSH_BUCKETS: [f64; 6] = [0.01, 0.1, 0.5, 1.0, 3.0, 5.0];
/// Istio's buckets for `pilot_proxy_convergence_time`, in seconds.
pub(crate) const CONVERGENCE_BUCKETS: [f64; 8] = [0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0];
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

/// Labels `{type="Services",event="add"}` of Istio's Kubernetes event counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// The kind of object: `Services`, `EndpointSlice` (registry events), or a configuration
    /// kind such as `VirtualService`.
    pub r#type: &'static str,
    /// `add`, `update` or `delete`.
    pub event: &'static str,
}

/// Labels `{registry="File"}` for per-registry metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryLabel {
    /// The registry's name.
    pub registry: String,
}

/// Creates the series of `family` with `labels`, at 0 until something is recorded in it, so
/// that it is served from the start.
pub(crate) fn present<S, M, C>(family: &Family<S, M, C>, labels: &S)
where
    S: Clone + std::hash::Hash + Eq,
    C: MetricConstructor<M>,
{
    drop(family.get_or_create(labels));
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

/// The model's metrics: what the registries and configuration sources report, and the
/// snapshots the aggregate builds from it. They name nothing of xDS (the xDS server's own are
/// `xds::metrics::XdsMetrics`).
pub struct ModelMetrics {
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
    /// `pilot_k8s_reg_events{type,event}`: changes the Kubernetes registries reported, as
    /// Istio's service controller counts its informers' events: `Services` `add`, `update`
    /// and `delete` for a service added, redefined or removed, `EndpointSlice` `update` for
    /// one whose endpoints alone changed. Wayfinder's adapter reports services with their
    /// endpoints, not API objects, so one change of a service counts once however many
    /// EndpointSlices and Pods made it.
    pub k8s_reg_events: Family<EventLabels, IstioCounter>,
    /// `pilot_k8s_cfg_events{type,event}`: Istio configuration objects the Kubernetes
    /// configuration source added, changed or removed, by kind (`VirtualService`, …).
    pub k8s_cfg_events: Family<EventLabels, IstioCounter>,
}

/// The series of `pilot_k8s_reg_events` that wayfinder counts, present from the start.
const K8S_REG_EVENTS: [EventLabels; 4] = [
    EventLabels {
        r#type: "Services",
        event: "add",
    },
    EventLabels {
        r#type: "Services",
        event: "update",
    },
    EventLabels {
        r#type: "Services",
        event: "delete",
    },
    EventLabels {
        r#type: "EndpointSlice",
        event: "update",
    },
];

/// The events of `pilot_k8s_cfg_events`, each present from the start for every kind of
/// configuration.
const CONFIG_EVENTS: [&str; 3] = ["add", "update", "delete"];

impl Default for ModelMetrics {
    /// Metrics registered nowhere, for tests and tools that run an aggregate alone.
    fn default() -> Self {
        Self::new(&mut Registry::default())
    }
}

impl ModelMetrics {
    /// Creates every metric and registers it in `r`.
    pub fn new(r: &mut Registry) -> Self {
        let m = Self {
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
            k8s_reg_events: Family::default(),
            k8s_cfg_events: Family::default(),
        };
        for labels in &K8S_REG_EVENTS {
            present(&m.k8s_reg_events, labels);
        }
        for kind in wayfinder_config::Kind::ALL {
            for event in CONFIG_EVENTS {
                let labels = EventLabels {
                    r#type: kind.name(),
                    event,
                };
                present(&m.k8s_cfg_events, &labels);
            }
        }
        for r#type in ["config", "eds", "svc", "svcdelete"] {
            present(&m.inbound_updates, &TypeLabel { r#type });
        }
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
        r.register(
            "pilot_k8s_reg_events",
            "Events from k8s registry.",
            m.k8s_reg_events.clone(),
        );
        r.register(
            "pilot_k8s_cfg_events",
            "Events from k8s config.",
            m.k8s_cfg_events.clone(),
        );
        m
    }

    /// Labels for a registry.
    pub fn registry_label(name: &str) -> RegistryLabel {
        RegistryLabel {
            registry: name.to_owned(),
        }
    }
}

/// Registers the gauges the published snapshot answers when scraped (`pilot_virt_services`,
/// `pilot_destrule_subsets`, `pilot_eds_no_instances`, `pilot_endpoint_not_ready`,
/// `pilot_duplicate_envoy_clusters`; see `metrics/snapshot_gauges.rs`) in `r`, read from
/// `model`'s snapshots; `domain` (`--domain`) resolves short hosts in configuration.
pub fn register_snapshot_gauges(r: &mut Registry, model: SnapshotReader, domain: &str) {
    r.register_collector(Box::new(snapshot_gauges::SnapshotGauges::new(
        model, domain,
    )));
}

/// Every metric the server records, as `/metrics` serves them: one Prometheus registry, which
/// the server fills with the model's and the xDS server's metrics (`server::start`), and the
/// process's own (`istio_build`, `process_*`).
pub struct Exposition(Registry);

impl Exposition {
    /// Serves what is registered in `registry`, and the process's own metrics.
    pub fn new(mut registry: Registry) -> Self {
        process::register(&mut registry);
        Self(registry)
    }

    /// The metrics in Prometheus/OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wayfinder_counters_get_their_suffix() {
        let mut registry = Registry::default();
        let m = ModelMetrics::new(&mut registry);
        m.snapshots_rejected.inc();
        m.rejected_configs.inc();
        let text = Exposition::new(registry).render();
        assert!(
            text.contains("wayfinder_snapshots_rejected_total 1"),
            "{text}"
        );
        assert!(text.contains("pilot_total_rejected_configs 1"), "{text}");
    }
}
