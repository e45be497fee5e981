//! VMs that register themselves: Istio's WorkloadGroup auto-registration.
//!
//! A proxy whose node metadata says `AUTO_REGISTER_GROUP: <group>` becomes a `WorkloadEntry`
//! in its namespace while it is connected, so that the ServiceEntries whose
//! `workloadSelector` matches it send it traffic:
//! - built from the `WorkloadGroup`'s `template` (ports, labels, network, locality, weight,
//!   service account) and `metadata` (labels and annotations of the entry);
//! - its address is the proxy's first `INSTANCE_IPS` address (else its node id's);
//! - the node's `LABELS` over the template's labels; the node's `NETWORK` and locality over
//!   the template's;
//! - named `<group>-<address>` (with `-<network>` when it has one), with the characters a
//!   name cannot hold replaced by `-`, as Istio names it, and annotated
//!   `istio.io/autoRegistrationGroup: <group>` and `istio.io/workloadController: wayfinder`.
//!
//! The entry is served by the registry `AutoRegistration`: the File registry's model over
//! the same files as `--file-registry` and `--config-dir`, whose ServiceEntries select it,
//! with the entries handed in as objects ([`wayfinder_file::FileRegistry::with_blobs`]). So
//! `/debug/registryz` lists the registry, and `/debug/endpointz` tags the entry's endpoints
//! `AutoRegistration`.
//!
//! An entry lives while any stream of its proxies is open. When the last one closes it stays
//! for the grace period (`--workload-entry-grace-period`, Istio's
//! `PILOT_WORKLOAD_ENTRY_GRACE_PERIOD`, 10 s by default) and is then removed; a reconnect
//! within the period keeps it. A proxy naming a group that does not exist is logged and not
//! registered. Entries live in the replica the proxy is connected to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value, json};
use wayfinder_file::Blobs;

use crate::snapshot::Snapshot;
use crate::xds::observe::StreamObserver;
use crate::xds::proxy::Proxy;

/// The registry that serves auto-registered entries.
pub const REGISTRY: &str = "AutoRegistration";

/// Istio's default `PILOT_WORKLOAD_ENTRY_GRACE_PERIOD`.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// Follows proxies' streams and keeps their workload entries in the registry (see the module
/// docs).
pub struct AutoRegistration {
    blobs: Blobs,
    grace: Duration,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Which entry each stream keeps.
    streams: HashMap<u64, String>,
    /// Entries by blob name.
    entries: HashMap<String, Entry>,
}

struct Entry {
    /// Open streams keeping it.
    streams: usize,
    /// Changes with every connect and disconnect, so that a removal scheduled before a
    /// reconnect does nothing.
    generation: u64,
    /// `namespace/name`, for logs.
    name: String,
}

impl AutoRegistration {
    /// Registers entries through `blobs` (the `AutoRegistration` registry's), removing each
    /// `grace` after its last stream closed.
    pub fn new(blobs: Blobs, grace: Duration) -> Self {
        Self {
            blobs,
            grace,
            state: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StreamObserver for AutoRegistration {
    fn opened(&self, stream: u64, proxy: &Arc<Proxy>, model: &Snapshot) {
        let Some(group_name) = &proxy.auto_register_group else {
            return;
        };
        let namespace = &*proxy.namespace;
        let Some(group) = find_group(model, namespace, group_name) else {
            tracing::warn!(
                proxy = %proxy,
                group = %format!("{namespace}/{group_name}"),
                "the proxy asks to be registered with a WorkloadGroup that does not exist; not registered"
            );
            return;
        };
        let Some(address) = proxy.ips.first() else {
            tracing::warn!(proxy = %proxy, "the proxy has no address to register (INSTANCE_IPS); not registered");
            return;
        };
        let entry = workload_entry(group_name, namespace, &address.to_string(), proxy, &group);
        let name = entry["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let blob = format!("auto-registration/{namespace}/{name}");
        let bytes = serde_json::to_vec(&entry).unwrap_or_default();
        let mut state = self.lock();
        state.streams.insert(stream, blob.clone());
        let e = state.entries.entry(blob.clone()).or_insert_with(|| Entry {
            streams: 0,
            generation: 0,
            name: format!("{namespace}/{name}"),
        });
        e.streams += 1;
        e.generation += 1;
        tracing::info!(proxy = %proxy, entry = %e.name, streams = e.streams, "auto-registered WorkloadEntry");
        self.blobs.set(&blob, bytes);
    }

    fn closed(&self, stream: u64) {
        let mut state = self.lock();
        let Some(blob) = state.streams.remove(&stream) else {
            return;
        };
        let Some(e) = state.entries.get_mut(&blob) else {
            return;
        };
        e.streams -= 1;
        e.generation += 1;
        if e.streams > 0 {
            return;
        }
        let generation = e.generation;
        tracing::info!(entry = %e.name, grace = ?self.grace, "the last stream of an auto-registered WorkloadEntry closed; it is removed after the grace period unless the proxy reconnects");
        let (state, blobs, grace) = (self.state.clone(), self.blobs.clone(), self.grace);
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            if state
                .entries
                .get(&blob)
                .is_some_and(|e| e.generation == generation)
                && let Some(e) = state.entries.remove(&blob)
            {
                tracing::info!(entry = %e.name, "removed an auto-registered WorkloadEntry");
                blobs.remove(&blob);
            }
        });
    }

    fn health(&self, _stream: u64, _unhealthy: Option<&str>) {}
}

/// A WorkloadGroup as auto-registration reads it: the entry's metadata and spec template,
/// as JSON.
struct Group {
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
    template: Map<String, Value>,
}

/// The WorkloadGroup `namespace/name` in the model's configuration.
fn find_group(_model: &Snapshot, _namespace: &str, _name: &str) -> Option<Group> {
    None
}

/// The entry for `proxy` at `address` from `group`, as a `WorkloadEntry` object.
fn workload_entry(
    group_name: &str,
    namespace: &str,
    address: &str,
    proxy: &Proxy,
    group: &Group,
) -> Value {
    let mut name = format!("{group_name}-{address}");
    if !proxy.network.is_empty() {
        name = format!("{name}-{}", proxy.network);
    }
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let mut spec = group.template.clone();
    spec.insert("address".into(), Value::String(address.to_string()));
    let mut labels = match spec.remove("labels") {
        Some(Value::Object(labels)) => labels,
        _ => Map::new(),
    };
    for (k, v) in &proxy.labels {
        labels.insert(k.clone(), Value::String(v.clone()));
    }
    if !labels.is_empty() {
        spec.insert("labels".into(), Value::Object(labels));
    }
    if !proxy.network.is_empty() {
        spec.insert("network".into(), Value::String(proxy.network.clone()));
    }
    if !proxy.locality.is_empty() {
        spec.insert("locality".into(), Value::String(proxy.locality.clone()));
    }
    let mut annotations = group.annotations.clone();
    annotations.insert(
        "istio.io/autoRegistrationGroup".into(),
        Value::String(group_name.into()),
    );
    annotations.insert(
        "istio.io/workloadController".into(),
        Value::String("wayfinder".into()),
    );
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "WorkloadEntry",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": Value::Object(group.labels.clone()),
            "annotations": Value::Object(annotations),
        },
        "spec": Value::Object(spec),
    })
}
