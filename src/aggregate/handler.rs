//! The aggregate's handler chain.
//!
//! Every registry item passes through one chain, on the aggregate's single task:
//!
//! ```text
//! registry stream ─► store (validate, apply, classify) ─► handlers, in order ─► debounce
//!                                                                                  │
//!          handlers' on_snapshot ◄─ publish (ArcSwap) ◄─ validate ◄─ merge ◄──────┘
//! ```
//!
//! # Order and freshness
//!
//! - Handlers run one at a time, in the order they were added, and all are added before the
//!   aggregate starts. Each sees every change, in the order the changes were applied. Changes of
//!   one registry keep that registry's order; changes of different registries interleave in
//!   arrival order.
//! - When a handler sees a change, the registry's store **already holds it** (the store is at
//!   least as fresh as the change, and `current` is the stored state). The published snapshot
//!   does **not** yet: it follows after debouncing, and [`Handler::on_snapshot`] reports it.
//! - A refused registration or an error item reaches [`Handler::on_error`]; the store keeps the
//!   last good state.
//! - Handlers must return quickly: they run on the task that applies every registry's events.
//!   Slow work belongs on another task fed by a channel.

use wayfinder_config::ConfigObject;
use wayfinder_registry::{Registration, RegistryError, RegistryId};

use super::config_store::ConfigChange;
use super::store::{Change, ChangeKind};
use crate::metrics::{EventLabels, ModelMetrics, TypeLabel};
use crate::registries::Kind;
use crate::snapshot::Snapshot;
use std::sync::Arc;

/// A link of the chain.
pub trait Handler: Send {
    /// One service of one registry changed; `current` is its stored state (`None` once removed).
    fn on_change(&mut self, registry: &RegistryId, change: &Change, current: Option<&Registration>);

    /// A configuration object changed; `current` is the source's object (`None` once removed).
    fn on_config(
        &mut self,
        _source: &RegistryId,
        _change: &ConfigChange,
        _current: Option<&ConfigObject>,
    ) {
    }

    /// A source reported an error, or one of its registrations or objects was refused.
    fn on_error(&mut self, _registry: &RegistryId, _error: &RegistryError) {}

    /// A snapshot was published.
    fn on_snapshot(&mut self, _snapshot: &Snapshot) {}
}

/// Logs every change at debug level and every error at warn level.
pub struct LogHandler;

impl Handler for LogHandler {
    fn on_change(
        &mut self,
        registry: &RegistryId,
        change: &Change,
        current: Option<&Registration>,
    ) {
        let endpoints = current.map_or(0, |r| r.endpoints.len());
        tracing::debug!(%registry, service = %change.key, kind = ?change.kind, endpoints, "registry change");
    }

    fn on_config(
        &mut self,
        source: &RegistryId,
        change: &ConfigChange,
        current: Option<&ConfigObject>,
    ) {
        let origin = current
            .map(|o| o.meta.origin.to_string())
            .unwrap_or_default();
        tracing::debug!(%source, object = %change.key, kind = ?change.kind, %origin, "configuration change");
    }

    fn on_error(&mut self, registry: &RegistryId, error: &RegistryError) {
        tracing::warn!(source = %registry, %error, "source error; its last good state stays in force");
    }

    fn on_snapshot(&mut self, snapshot: &Snapshot) {
        tracing::debug!(
            version = snapshot.version,
            services = snapshot.services.len(),
            "snapshot published"
        );
    }
}

/// Counts changes (`pilot_inbound_updates`, and for Kubernetes sources Istio's
/// `pilot_k8s_reg_events` and `pilot_k8s_cfg_events`) and errors per registry.
pub struct MetricsHandler(pub Arc<ModelMetrics>);

impl Handler for MetricsHandler {
    fn on_change(
        &mut self,
        registry: &RegistryId,
        change: &Change,
        _current: Option<&Registration>,
    ) {
        let kind = match change.kind {
            ChangeKind::EndpointsOnly => "eds",
            ChangeKind::Added | ChangeKind::Updated => "svc",
            ChangeKind::Removed => "svcdelete",
        };
        self.0
            .inbound_updates
            .get_or_create(&TypeLabel { r#type: kind })
            .inc();
        if is_kubernetes(registry) {
            let (r#type, event) = match change.kind {
                ChangeKind::EndpointsOnly => ("EndpointSlice", "update"),
                kind => ("Services", event(kind)),
            };
            self.0
                .k8s_reg_events
                .get_or_create(&EventLabels { r#type, event })
                .inc();
        }
    }

    fn on_config(
        &mut self,
        source: &RegistryId,
        change: &ConfigChange,
        _current: Option<&ConfigObject>,
    ) {
        self.0
            .inbound_updates
            .get_or_create(&TypeLabel { r#type: "config" })
            .inc();
        if is_kubernetes(source) {
            let labels = EventLabels {
                r#type: change.key.kind.name(),
                event: event(change.kind),
            };
            self.0.k8s_cfg_events.get_or_create(&labels).inc();
        }
    }

    fn on_error(&mut self, registry: &RegistryId, error: &RegistryError) {
        // Every refusal a source reports: objects that fail validation and documents that
        // do not parse. Sources report an outstanding refusal again after a later change
        // (their health rule), which counts again, as Istio counts a rejected config at every
        // push context it builds.
        if matches!(
            error,
            RegistryError::Invalid { .. } | RegistryError::Malformed { .. }
        ) {
            self.0.rejected_configs.inc();
        }
        self.0
            .registry_errors
            .get_or_create(&ModelMetrics::registry_label(registry.as_str()))
            .inc();
    }
}

/// True for a Kubernetes cluster's registry (`Kubernetes`, or `Kubernetes/<cluster>` when
/// there are several) and for the Kubernetes configuration source (`Kubernetes`): the
/// sources whose changes Istio counts as Kubernetes events. The ServiceEntries and
/// WorkloadEntries read from the API (`Config/k8s`) reach the aggregate as the services they
/// define, not as objects, and are not counted as configuration events.
fn is_kubernetes(source: &RegistryId) -> bool {
    let name = Kind::Kubernetes.name();
    source
        .as_str()
        .strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Istio's name of an event (`model.Event`).
fn event(kind: ChangeKind) -> &'static str {
    match kind {
        ChangeKind::Added => "add",
        ChangeKind::Updated | ChangeKind::EndpointsOnly => "update",
        ChangeKind::Removed => "delete",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::EventLabels;
    use wayfinder_config::{ConfigKey, Kind as ConfigKind};
    use wayfinder_registry::ServiceKey;

    fn reg_events(m: &ModelMetrics, r#type: &'static str, event: &'static str) -> u64 {
        m.k8s_reg_events
            .get_or_create(&EventLabels { r#type, event })
            .get()
    }

    #[test]
    fn kubernetes_sources_count_istio_s_events_and_others_do_not() {
        let metrics = Arc::new(ModelMetrics::default());
        let mut handler = MetricsHandler(metrics.clone());
        let change = |kind| Change {
            registry: 0,
            key: ServiceKey::new("default", "a.default.svc.cluster.local"),
            kind,
        };
        for id in [
            "Kubernetes",
            "Kubernetes/east",
            "Consul",
            "KubernetesX",
            "Config/k8s",
        ] {
            let id = RegistryId::new(id);
            for kind in [
                ChangeKind::Added,
                ChangeKind::EndpointsOnly,
                ChangeKind::Updated,
                ChangeKind::Removed,
            ] {
                handler.on_change(&id, &change(kind), None);
            }
        }
        assert_eq!(reg_events(&metrics, "Services", "add"), 2);
        assert_eq!(reg_events(&metrics, "Services", "update"), 2);
        assert_eq!(reg_events(&metrics, "Services", "delete"), 2);
        assert_eq!(reg_events(&metrics, "EndpointSlice", "update"), 2);

        let config = ConfigChange {
            key: ConfigKey {
                kind: ConfigKind::VirtualService,
                namespace: "default".into(),
                name: "reviews".into(),
            },
            kind: ChangeKind::Updated,
        };
        handler.on_config(&RegistryId::new("Kubernetes"), &config, None);
        handler.on_config(&RegistryId::new("config-dir"), &config, None);
        let labels = EventLabels {
            r#type: "VirtualService",
            event: "update",
        };
        assert_eq!(metrics.k8s_cfg_events.get_or_create(&labels).get(), 1);
    }
}
