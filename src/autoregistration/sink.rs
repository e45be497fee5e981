//! Where entries go: the `AutoRegistration` registry's blobs, or WorkloadEntry objects in
//! the cluster.

use std::collections::BTreeMap;
use std::sync::PoisonError;

#[cfg(feature = "kubernetes")]
use serde_json::Value;
use wayfinder_file::Blobs;

use super::Entry;
use super::registry::Marks;

/// Where [`AutoRegistration`](super::AutoRegistration) puts its entries.
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
    Kubernetes(
        tokio::sync::mpsc::UnboundedSender<Write>,
        wayfinder_kubernetes::workload_entries::WorkloadEntries,
    ),
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
    let cleaner = writer.clone();
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
    Handle::Kubernetes(tx, cleaner)
}

impl Handle {
    /// The leader's cleanup of entries whose replica has gone (see
    /// [`wayfinder_kubernetes::workload_entries`]), run every ten grace periods (Istio's
    /// period) while `leader` leads, until `shutdown`; `None` without Kubernetes, where
    /// entries live and die with their replica.
    #[cfg_attr(not(feature = "kubernetes"), allow(unused_variables))]
    pub fn clean_up(
        &self,
        leader: crate::leader::Leader,
        grace: std::time::Duration,
        max_age: Option<std::time::Duration>,
        shutdown: wayfinder_registry::CancellationToken,
    ) -> Option<futures::future::BoxFuture<'static, ()>> {
        match self {
            Handle::Files { .. } => None,
            #[cfg(feature = "kubernetes")]
            Handle::Kubernetes(_, writer) => {
                let writer = writer.clone();
                Some(Box::pin(async move {
                    let every = (grace * 10).max(std::time::Duration::from_millis(100));
                    while shutdown
                        .run_until_cancelled(tokio::time::sleep(every))
                        .await
                        .is_some()
                    {
                        if !leader.is_leader() {
                            continue;
                        }
                        match writer.clean_up(grace, max_age).await {
                            Ok(deleted) => {
                                for entry in deleted {
                                    tracing::info!(%entry, "leader: removed an auto-registered WorkloadEntry whose replica has gone");
                                }
                            }
                            Err(error) => {
                                tracing::warn!(%error, "leader: cannot clean up auto-registered WorkloadEntries")
                            }
                        }
                    }
                }))
            }
        }
    }

    /// Writes the entry (after a connect).
    pub(super) fn put(&self, blob: &str, e: &Entry) {
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
            Handle::Kubernetes(tx, _) => {
                let _ = tx.send(Write::Register(e.object.clone()));
                self.health(blob, e);
            }
        }
    }

    /// Writes the entry's health.
    pub(super) fn health(&self, blob: &str, e: &Entry) {
        match self {
            Handle::Files { blobs, .. } => blobs.set(blob, e.bytes()),
            #[cfg(feature = "kubernetes")]
            Handle::Kubernetes(tx, _) => {
                let (ns, name) = e.key();
                let _ = tx.send(Write::Health(ns, name, e.unhealthy.clone()));
            }
        }
    }

    /// The entry's last stream closed.
    #[cfg_attr(not(feature = "kubernetes"), allow(unused_variables))]
    pub(super) fn disconnected(&self, e: &Entry) {
        match self {
            Handle::Files { .. } => {}
            #[cfg(feature = "kubernetes")]
            Handle::Kubernetes(tx, _) => {
                let (ns, name) = e.key();
                let _ = tx.send(Write::Disconnected(ns, name));
            }
        }
    }

    /// The grace period after its last stream ended.
    #[cfg_attr(not(feature = "kubernetes"), allow(unused_variables))]
    pub(super) fn remove(&self, blob: &str, e: &Entry) {
        match self {
            Handle::Files { blobs, marks } => {
                blobs.remove(blob);
                marks
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(blob);
            }
            #[cfg(feature = "kubernetes")]
            Handle::Kubernetes(tx, _) => {
                let (ns, name) = e.key();
                let _ = tx.send(Write::Remove(ns, name));
            }
        }
    }
}
