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

use wayfinder_config::{ConfigKey, ConfigObject};
use wayfinder_registry::{Registration, RegistryError, RegistryId};

use super::store::{Change, ChangeKind};
use crate::metrics::{ModelMetrics, TypeLabel};
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
        _key: &ConfigKey,
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

    fn on_config(&mut self, source: &RegistryId, key: &ConfigKey, current: Option<&ConfigObject>) {
        let origin = current
            .map(|o| o.meta.origin.to_string())
            .unwrap_or_default();
        tracing::debug!(%source, object = %key, removed = current.is_none(), %origin, "configuration change");
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

/// Counts changes (`pilot_inbound_updates`) and errors per registry.
pub struct MetricsHandler(pub Arc<ModelMetrics>);

impl Handler for MetricsHandler {
    fn on_change(
        &mut self,
        _registry: &RegistryId,
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
    }

    fn on_config(
        &mut self,
        _source: &RegistryId,
        _key: &ConfigKey,
        _current: Option<&ConfigObject>,
    ) {
        self.0
            .inbound_updates
            .get_or_create(&TypeLabel { r#type: "config" })
            .inc();
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
