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
//! - labelled `security.istio.io/tlsMode: istio` when the proxy holds a mesh certificate
//!   (connected to the secure port), else `disabled`, unless its labels say: whether mesh
//!   clients send it mTLS (auto mTLS);
//! - named `<group>-<address>` (with `-<network>` when it has one), with the characters a
//!   name cannot hold replaced by `-`, as Istio names it, and annotated
//!   `istio.io/autoRegistrationGroup: <group>` and `istio.io/workloadController: wayfinder`.
//!
//! The entry is served by the registry `AutoRegistration` ([`AutoRegistry`]): the File
//! registry's model over the same files as `--file-registry` and `--config-dir`, whose
//! ServiceEntries select it, with the entries handed in as objects
//! ([`wayfinder_file::FileRegistry::with_blobs`]). It reports only the entries' endpoints
//! (what the files define themselves is the File and Config registries' to report), and
//! stays quiet about the files' errors, which those registries report. So `/debug/registryz`
//! lists the services with auto-registered workloads under `AutoRegistration`, and
//! `/debug/endpointz` tags those workloads' endpoints `AutoRegistration`. When a
//! ServiceEntry changes, this registry may follow a moment after the one that reads it first,
//! which can show as a merge conflict for that moment.
//!
//! An entry lives while any stream of its proxies is open. When the last one closes it stays
//! for the grace period (`--workload-entry-grace-period`, Istio's
//! `PILOT_WORKLOAD_ENTRY_GRACE_PERIOD`, 10 s by default) and is then removed; a reconnect
//! within the period keeps it. A proxy naming a group that does not exist is logged and not
//! registered. Entries live in the replica the proxy is connected to.
//!
//! Health: a group with a `probe` has its agents run it and report the result as
//! `istio.io/health` requests ([`crate::xds::observe::HEALTH_TYPE`]); the entry carries Istio's
//! `Healthy` condition, and an unhealthy workload gets no traffic. Such an entry is unhealthy
//! until its first good report. Without a probe, the entry is healthy while it is connected.

mod registry;
mod sink;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value, json};

pub use registry::{AutoRegistry, Marks, registry};
pub use sink::Handle;
#[cfg(feature = "kubernetes")]
pub use sink::{Write, kubernetes};

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
    handle: Arc<Handle>,
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
    /// The `WorkloadEntry` without its status.
    object: Value,
    /// What the proxy's last health report said: `None` healthy, `Some(why)` unhealthy.
    unhealthy: Option<String>,
    /// Open streams keeping it.
    streams: usize,
    /// Changes with every connect and disconnect, so that a removal scheduled before a
    /// reconnect does nothing.
    generation: u64,
    /// `namespace/name`, for logs.
    name: String,
}

impl AutoRegistration {
    /// Registers entries through `handle` (the `AutoRegistration` registry's), removing each
    /// `grace` after its last stream closed.
    pub fn new(handle: Handle, grace: Duration) -> Self {
        Self {
            handle: Arc::new(handle),
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
        let object = workload_entry(group_name, namespace, &address.to_string(), proxy, &group);
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let blob = format!("auto-registration/{namespace}/{name}");
        let mut state = self.lock();
        state.streams.insert(stream, blob.clone());
        let e = state.entries.entry(blob.clone()).or_insert_with(|| Entry {
            object: Value::Null,
            // With a probe, the workload waits for its first good report.
            unhealthy: group
                .probe
                .then(|| "waiting for the first health report".to_string()),
            streams: 0,
            generation: 0,
            name: format!("{namespace}/{name}"),
        });
        e.object = object;
        e.streams += 1;
        e.generation += 1;
        tracing::info!(proxy = %proxy, entry = %e.name, streams = e.streams, "auto-registered WorkloadEntry");
        self.handle.put(&blob, e);
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
        self.handle.disconnected(e);
        let (state, grace, handle) = (self.state.clone(), self.grace, self.handle.clone());
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
                handle.remove(&blob, &e);
            }
        });
    }

    fn health(&self, stream: u64, unhealthy: Option<&str>) {
        let mut state = self.lock();
        let Some(blob) = state.streams.get(&stream).cloned() else {
            return;
        };
        let Some(e) = state.entries.get_mut(&blob) else {
            return;
        };
        if e.unhealthy.as_deref() == unhealthy {
            return;
        }
        e.unhealthy = unhealthy.map(str::to_string);
        match unhealthy {
            None => tracing::info!(entry = %e.name, "an auto-registered workload reports healthy"),
            Some(why) => {
                tracing::info!(entry = %e.name, reason = %why, "an auto-registered workload reports unhealthy")
            }
        }
        self.handle.health(&blob, e);
    }
}

impl Entry {
    /// Namespace and name of its object.
    #[cfg(feature = "kubernetes")]
    fn key(&self) -> (String, String) {
        let meta = &self.object["metadata"];
        let field = |f: &str| meta[f].as_str().unwrap_or_default().to_string();
        (field("namespace"), field("name"))
    }

    /// The object with Istio's `Healthy` condition, as bytes for the registry.
    fn bytes(&self) -> Vec<u8> {
        let mut object = self.object.clone();
        let (status, message) = match &self.unhealthy {
            None => ("True", ""),
            Some(why) => ("False", why.as_str()),
        };
        object["status"] = json!({"conditions": [{
            "type": "Healthy",
            "status": status,
            "message": message,
        }]});
        serde_json::to_vec(&object).unwrap_or_default()
    }
}

/// A WorkloadGroup as auto-registration reads it: the entry's metadata and spec template,
/// as JSON.
struct Group {
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
    template: Map<String, Value>,
    /// Whether the group defines a `probe`: its workloads report their health.
    probe: bool,
}

/// The WorkloadGroup `namespace/name` in the model's configuration.
fn find_group(model: &Snapshot, namespace: &str, name: &str) -> Option<Group> {
    let (_, wg) = model.config.workload_group(namespace, name)?;
    let strings = |m: &BTreeMap<String, String>| -> Map<String, Value> {
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect()
    };
    let template = match serde_json::to_value(wg.template.as_ref()?) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    Some(Group {
        labels: strings(&wg.metadata.labels),
        annotations: strings(&wg.metadata.annotations),
        template,
        probe: wg.probe.is_some(),
    })
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
    // Whether the workload's sidecar speaks mesh mTLS: it does when it holds a mesh
    // certificate, unless its labels say otherwise.
    let tls_mode = if proxy.mesh_tls() {
        "istio"
    } else {
        "disabled"
    };
    labels
        .entry(wayfinder_config::TLS_MODE_LABEL)
        .or_insert_with(|| Value::String(tls_mode.into()));
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
