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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value, json};
use wayfinder_file::{Blobs, FileRegistry};
use wayfinder_registry::{
    CancellationToken, Endpoint, Event, EventStream, Registration, RegistryId, ServiceKey, Source,
};

use crate::snapshot::Snapshot;
use crate::xds::observe::StreamObserver;
use crate::xds::proxy::Proxy;

/// The registry that serves auto-registered entries.
pub const REGISTRY: &str = "AutoRegistration";

/// Istio's default `PILOT_WORKLOAD_ENTRY_GRACE_PERIOD`.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// The endpoints the registry reports: each entry's address and ports, by blob name.
pub type Marks = Arc<Mutex<HashMap<String, (String, BTreeMap<String, u16>)>>>;

/// The `AutoRegistration` registry: see the module docs.
pub struct AutoRegistry {
    files: FileRegistry,
    marks: Marks,
}

/// Where [`AutoRegistration`] puts its entries.
pub enum Handle {
    /// The `AutoRegistration` registry: its blobs, and the endpoints it reports.
    Files {
        /// The registry's blobs.
        blobs: Blobs,
        /// The endpoints it reports.
        marks: Marks,
    },
    /// WorkloadEntry objects in the cluster (`--config-source k8s`), written in order by one
    /// task, which every replica reads back.
    #[cfg(feature = "kubernetes")]
    Kubernetes(tokio::sync::mpsc::UnboundedSender<Write>),
}

/// A write to the cluster.
#[cfg(feature = "kubernetes")]
#[derive(Debug)]
pub enum Write {
    /// Create or take over the entry (a `WorkloadEntry` without status).
    Register(Value),
    /// Set its `Healthy` condition: `None` healthy.
    Health(String, String, Option<String>),
    /// Its last stream to this replica closed.
    Disconnected(String, String),
    /// The grace period ended: delete it if it is still ours and disconnected.
    Remove(String, String),
}

/// Entries go to the cluster through `writer` (see [`wayfinder_kubernetes::workload_entries`]).
#[cfg(feature = "kubernetes")]
pub fn kubernetes(writer: wayfinder_kubernetes::workload_entries::WorkloadEntries) -> Handle {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(write) = rx.recv().await {
            let (what, result) = match &write {
                Write::Register(object) => ("create", writer.register(object).await),
                Write::Health(ns, name, unhealthy) => (
                    "set the health of",
                    writer.set_health(ns, name, unhealthy.as_deref()).await,
                ),
                Write::Disconnected(ns, name) => {
                    ("mark disconnected", writer.disconnected(ns, name).await)
                }
                Write::Remove(ns, name) => ("delete", writer.remove(ns, name).await.map(|_| ())),
            };
            if let Err(error) = result {
                tracing::warn!(?write, %error, "could not {what} an auto-registered WorkloadEntry in the cluster");
            }
        }
    });
    Handle::Kubernetes(tx)
}

impl Handle {
    /// Writes the entry (after a connect).
    fn put(&self, blob: &str, e: &Entry) {
        match self {
            Handle::Files { blobs, marks } => {
                let ports: BTreeMap<String, u16> = e.object["spec"]["ports"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(n, p)| Some((n.clone(), u16::try_from(p.as_u64()?).ok()?)))
                    .collect();
                let address = e.object["spec"]["address"].as_str().unwrap_or_default();
                marks
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(blob.to_string(), (address.to_string(), ports));
                blobs.set(blob, e.bytes());
            }
            #[cfg(feature = "kubernetes")]
            Handle::Kubernetes(tx) => {
                let _ = tx.send(Write::Register(e.object.clone()));
                self.health(blob, e);
            }
        }
    }

    /// Writes the entry's health.
    fn health(&self, blob: &str, e: &Entry) {
        match self {
            Handle::Files { blobs, .. } => blobs.set(blob, e.bytes()),
            #[cfg(feature = "kubernetes")]
            Handle::Kubernetes(tx) => {
                let (ns, name) = e.key();
                let _ = tx.send(Write::Health(ns, name, e.unhealthy.clone()));
            }
        }
    }

    /// The entry's last stream closed.
    #[cfg_attr(not(feature = "kubernetes"), allow(unused_variables))]
    fn disconnected(&self, e: &Entry) {
        match self {
            Handle::Files { .. } => {}
            #[cfg(feature = "kubernetes")]
            Handle::Kubernetes(tx) => {
                let (ns, name) = e.key();
                let _ = tx.send(Write::Disconnected(ns, name));
            }
        }
    }

    /// The grace period after its last stream ended.
    #[cfg_attr(not(feature = "kubernetes"), allow(unused_variables))]
    fn remove(&self, blob: &str, e: &Entry) {
        match self {
            Handle::Files { blobs, marks } => {
                blobs.remove(blob);
                marks
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(blob);
            }
            #[cfg(feature = "kubernetes")]
            Handle::Kubernetes(tx) => {
                let (ns, name) = e.key();
                let _ = tx.send(Write::Remove(ns, name));
            }
        }
    }
}

/// The `AutoRegistration` registry over `files` (a File registry with the id
/// [`REGISTRY`] over every file), and the handle entries go through.
pub fn registry(files: FileRegistry) -> (AutoRegistry, Handle) {
    let (files, blobs) = files.with_blobs();
    let marks = Marks::default();
    (
        AutoRegistry {
            files,
            marks: marks.clone(),
        },
        Handle::Files { blobs, marks },
    )
}

impl Source<Registration> for AutoRegistry {
    fn id(&self) -> &RegistryId {
        self.files.id()
    }

    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream {
        let marks = self.marks;
        let mut reported = HashSet::new();
        Box::new(self.files)
            .watch(shutdown)
            .filter_map(move |item| {
                let event = item
                    .ok()
                    .and_then(|e| only_entries(e, &marks, &mut reported));
                std::future::ready(event.map(Ok))
            })
            .boxed()
    }
}

/// `event` with only the entries' endpoints, and services without any left out (removed
/// when they were reported before); `None` when nothing is left. Refusals and recoveries are
/// the files' own registries' to report.
fn only_entries(event: Event, marks: &Marks, reported: &mut HashSet<ServiceKey>) -> Option<Event> {
    let marks = marks.lock().unwrap_or_else(PoisonError::into_inner);
    let keep = |r: Registration| -> Option<Registration> {
        let endpoints: Vec<Endpoint> = r
            .endpoints
            .iter()
            .filter(|e| {
                marks.values().any(|(address, ports)| {
                    *e.address == **address
                        && e.ports.len() == ports.len()
                        && e.ports.iter().all(|(n, p)| ports.get(&**n) == Some(p))
                })
            })
            .cloned()
            .collect();
        (!endpoints.is_empty()).then(|| Registration {
            service: r.service.clone(),
            endpoints: endpoints.into(),
        })
    };
    let mut upserts = Vec::new();
    let mut removes = Vec::new();
    let (mut changed, mut gone) = (Vec::new(), Vec::new());
    match event {
        Event::Reset(all) => {
            reported.clear();
            for r in all {
                if let Some(r) = keep(r) {
                    reported.insert(r.key());
                    upserts.push(r);
                }
            }
            return Some(Event::Reset(upserts));
        }
        Event::Upsert(r) => changed.push(r),
        Event::Remove(key) => gone.push(key),
        Event::Batch {
            removes: keys,
            upserts: registrations,
        } => {
            gone = keys;
            changed = registrations;
        }
        Event::Refused(_) | Event::Recovered => return None,
    }
    for key in gone {
        if reported.remove(&key) {
            removes.push(key);
        }
    }
    for r in changed {
        let key = r.key();
        match keep(r) {
            Some(r) => {
                reported.insert(key);
                upserts.push(r);
            }
            None if reported.remove(&key) => removes.push(key),
            None => {}
        }
    }
    Event::changes(upserts, removes)
}

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

#[cfg(test)]
mod tests {
    use wayfinder_registry::Service;

    use super::*;

    fn reg(host: &str, endpoints: &[(&str, u16)]) -> Registration {
        Registration::new(
            Service::new(host, "default"),
            endpoints
                .iter()
                .map(|(a, p)| Endpoint::new(*a).with_port("http", *p))
                .collect(),
        )
    }

    fn marks(entries: &[(&str, u16)]) -> Marks {
        let marks = Marks::default();
        for (i, (a, p)) in entries.iter().enumerate() {
            marks.lock().unwrap().insert(
                format!("blob-{i}"),
                (a.to_string(), [("http".to_string(), *p)].into()),
            );
        }
        marks
    }

    fn hosts(event: &Event) -> Vec<String> {
        match event {
            Event::Reset(all) => all
                .iter()
                .map(|r| format!("{}={}", r.service.hostname, r.endpoints.len()))
                .collect(),
            Event::Upsert(r) => vec![format!("+{}={}", r.service.hostname, r.endpoints.len())],
            Event::Remove(k) => vec![format!("-{}", k.hostname)],
            Event::Batch { removes, upserts } => removes
                .iter()
                .map(|k| format!("-{}", k.hostname))
                .chain(
                    upserts
                        .iter()
                        .map(|r| format!("+{}={}", r.service.hostname, r.endpoints.len())),
                )
                .collect(),
            other => vec![format!("{other:?}")],
        }
    }

    #[test]
    fn only_the_entries_endpoints_are_reported_and_emptied_services_removed() {
        let m = marks(&[("10.0.0.7", 9080)]);
        let mut reported = HashSet::new();
        // The files' own endpoint (same address, another port) is left out, and so is a
        // service without an entry.
        let reset = Event::Reset(vec![
            reg("vm.example", &[("10.0.0.7", 9080), ("10.0.0.7", 7000)]),
            reg("other.example", &[("10.0.0.9", 9080)]),
        ]);
        let out = only_entries(reset, &m, &mut reported).unwrap();
        assert_eq!(hosts(&out), ["vm.example=1"]);
        // A change that leaves a reported service without entries removes it; one of a
        // service never reported says nothing.
        let out = only_entries(
            Event::Upsert(reg("vm.example", &[("10.0.0.7", 7000)])),
            &m,
            &mut reported,
        );
        assert_eq!(hosts(&out.unwrap()), ["-vm.example"]);
        assert!(
            only_entries(Event::Upsert(reg("other.example", &[])), &m, &mut reported).is_none()
        );
        assert!(
            only_entries(
                Event::Remove(reg("other.example", &[]).key()),
                &m,
                &mut reported
            )
            .is_none()
        );
        // Health events of the files are not this registry's.
        assert!(only_entries(Event::Recovered, &m, &mut reported).is_none());
        let batch = Event::Batch {
            removes: vec![reg("gone.example", &[]).key()],
            upserts: vec![reg("vm.example", &[("10.0.0.7", 9080)])],
        };
        assert_eq!(
            hosts(&only_entries(batch, &m, &mut reported).unwrap()),
            ["+vm.example=1"]
        );
    }
}
