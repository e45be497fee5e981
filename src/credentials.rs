//! Gateway credentials: the Kubernetes Secrets a Gateway server's `credentialName` names,
//! read by the control plane and served to the gateway over SDS on its ADS stream, as istiod
//! does (`pilot/pkg/xds/sds.go`). The gateway's pod mounts no Secret, and a rotated Secret
//! reaches its Envoy without a restart.
//!
//! [`spawn`] starts the task that keeps the [`Credentials`] table and publishes it whole on a
//! watch channel whenever it changes; the xDS server generates from the table beside the model
//! (`xds::generate::sds`). The task:
//!
//! - **reads Secrets only once they are needed**: when the model first holds a Gateway server
//!   with `credentialName(s)`, or a proxy first asks for one, it starts watching every
//!   cluster's Secrets ([`SecretStore::watch`]), and keeps watching. A mesh that names no
//!   credential never reads a Secret, and its control plane needs no right to.
//! - **keeps the last good state**: a watch failure is logged (once per new error), shown on
//!   `/debug/configz`, and leaves the Secrets as they were until the watch lists again.
//! - **decides who may read them**, as istiod does: a proxy is served a Secret only over the
//!   secure port (its identity is its certificate's), only from its own namespace, and, but for
//!   a CA certificate (`NAME-cacert`, public), only when its service account may `list`
//!   Secrets there, which the API server answers ([`SecretStore::may_read`], a
//!   SubjectAccessReview). Generation asks for a decision it lacks ([`Credentials::ask`]); the
//!   task asks the API server and publishes the answer, which a new xDS snapshot then serves.
//!   Answers are kept for five minutes when allowed and one when refused (istiod's times), and
//!   asked again after that when generation needs them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wayfinder_config::credentials::Secret;
use wayfinder_registry::{Event, RegistryError};

use crate::snapshot::{Snapshot, SnapshotReader};

mod task;

/// How long an answer that a service account may read Secrets is used (istiod's).
pub const ALLOWED_FOR: Duration = Duration::from_secs(5 * 60);
/// How long an answer that it may not is used (istiod's).
pub const REFUSED_FOR: Duration = Duration::from_secs(60);

/// Where one cluster's Secrets come from (the Kubernetes adapter, through
/// `registries/kubernetes.rs`).
pub trait SecretStore: Send + Sync + 'static {
    /// The cluster's Secrets, in the contract's events: a `Reset` when listed, then changes;
    /// errors are items, and the stream does not end.
    fn watch(&self) -> BoxStream<'static, Result<Event<Secret>, RegistryError>>;
    /// Whether `namespace/service_account` may `list` Secrets in `namespace`: `Ok(Ok(()))`
    /// allowed, `Ok(Err(why))` refused, `Err(why)` when the API server did not answer.
    fn may_read(
        &self,
        namespace: &str,
        service_account: &str,
    ) -> BoxFuture<'static, Result<Result<(), String>, String>>;
}

/// A proxy's verified identity, in the cluster its Secrets are read from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    /// The cluster id.
    pub cluster: Arc<str>,
    /// Its namespace.
    pub namespace: Arc<str>,
    /// Its service account.
    pub service_account: Arc<str>,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} in cluster {}",
            self.namespace, self.service_account, self.cluster
        )
    }
}

/// What the API server answered of an identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// `Err(why)` when it may not read Secrets.
    pub allowed: Result<(), String>,
    /// When it was answered.
    pub at: Instant,
}

impl Decision {
    /// True once the answer is older than it is used for.
    pub fn expired(&self) -> bool {
        let lasts = if self.allowed.is_ok() {
            ALLOWED_FOR
        } else {
            REFUSED_FOR
        };
        self.at.elapsed() > lasts
    }
}

/// One cluster's Secrets, and how reading them goes.
#[derive(Clone, Debug, Default)]
pub struct ClusterSecrets {
    /// Every Secret, by namespace and name.
    pub secrets: BTreeMap<(Arc<str>, Arc<str>), Arc<Secret>>,
    /// True once its Secrets are watched.
    pub watching: bool,
    /// True once they were listed.
    pub synced: bool,
    /// The last watch failure, while it lasts.
    pub error: Option<String>,
}

/// Every cluster's Secrets and the answers about who may read them.
#[derive(Debug, Default)]
pub struct Credentials {
    clusters: BTreeMap<Arc<str>, ClusterSecrets>,
    /// The cluster of proxies that name none.
    primary: Option<Arc<str>>,
    decisions: BTreeMap<Identity, Decision>,
    asks: Arc<Asks>,
}

/// Identities generation wants a decision about, for the task.
#[derive(Debug, Default)]
struct Asks {
    wanted: Mutex<BTreeSet<Identity>>,
    notify: Notify,
}

impl Credentials {
    /// The cluster a proxy's Secrets are read from: the one it names (`CLUSTER_ID`), else the
    /// primary. `None` when wayfinder reads no such cluster.
    pub fn cluster(&self, named: &str) -> Option<&Arc<str>> {
        if named.is_empty() {
            return self.primary.as_ref();
        }
        self.clusters.get_key_value(named).map(|(k, _)| k)
    }

    /// The Secret `namespace/name` of `cluster`.
    pub fn secret(&self, cluster: &str, namespace: &str, name: &str) -> Option<&Arc<Secret>> {
        let secrets = &self.clusters.get(cluster)?.secrets;
        secrets.get(&(Arc::from(namespace), Arc::from(name)))
    }

    /// The API server's answer about `identity`, if there is one.
    pub fn decision(&self, identity: &Identity) -> Option<&Decision> {
        self.decisions.get(identity)
    }

    /// Asks the task for a decision about `identity` (a new one when it has none, or it
    /// expired); the answer comes in a later table.
    pub fn ask(&self, identity: &Identity) {
        let mut wanted = self.asks.wanted.lock().unwrap_or_else(|e| e.into_inner());
        if wanted.insert(identity.clone()) {
            self.asks.notify.notify_one();
        }
    }

    /// Every cluster's Secrets, for debug pages.
    pub fn clusters(&self) -> &BTreeMap<Arc<str>, ClusterSecrets> {
        &self.clusters
    }

    /// Every decision, for debug pages.
    pub fn decisions(&self) -> &BTreeMap<Identity, Decision> {
        &self.decisions
    }

    /// A table of `cluster`'s `secrets` (the primary) where each of `allowed`, an identity of
    /// that cluster as `(namespace, service account)`, may read them: for tests of what is
    /// generated from it.
    #[cfg(test)]
    pub(crate) fn fixed(cluster: &str, secrets: Vec<Secret>, allowed: &[(&str, &str)]) -> Self {
        let cluster: Arc<str> = cluster.into();
        let secrets = secrets
            .into_iter()
            .map(|s| ((s.namespace.clone(), s.name.clone()), Arc::new(s)))
            .collect();
        let entry = ClusterSecrets {
            secrets,
            watching: true,
            synced: true,
            error: None,
        };
        let decisions = allowed
            .iter()
            .map(|(namespace, account)| {
                let identity = Identity {
                    cluster: cluster.clone(),
                    namespace: (*namespace).into(),
                    service_account: (*account).into(),
                };
                let decision = Decision {
                    allowed: Ok(()),
                    at: Instant::now(),
                };
                (identity, decision)
            })
            .collect();
        Self {
            clusters: BTreeMap::from([(cluster.clone(), entry)]),
            primary: Some(cluster),
            decisions,
            asks: Arc::default(),
        }
    }

    /// The identities asked about and not yet taken by the task, for tests.
    #[cfg(test)]
    pub(crate) fn asked(&self) -> BTreeSet<Identity> {
        self.asks
            .wanted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A copy of the table (the same clusters, decisions and asks), to change and publish.
    fn edit(&self) -> Self {
        Self {
            clusters: self.clusters.clone(),
            primary: self.primary.clone(),
            decisions: self.decisions.clone(),
            asks: self.asks.clone(),
        }
    }
}

/// Every credential the model's Gateways name, as the SDS name a gateway asks for it by
/// (`kubernetes://NAME`), with the Gateways (`namespace/name`) that name it. A bare name is a
/// Secret of the gateway proxy's namespace, which is not always the Gateway object's.
pub fn referenced(model: &Snapshot) -> BTreeMap<String, Vec<String>> {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (meta, gw) in model.config.gateways() {
        for tls in gw.servers.iter().filter_map(|s| s.tls.as_ref()) {
            let names = std::iter::once(&tls.credential_name)
                .chain(&tls.credential_names)
                .filter(|n| !n.is_empty());
            for name in names {
                let by = format!("{}/{}", meta.namespace, meta.name);
                let users = found
                    .entry(wayfinder_config::credentials::resource_name(name))
                    .or_default();
                if !users.contains(&by) {
                    users.push(by);
                }
            }
        }
    }
    found
}

/// Starts the task over `model`'s snapshots and `stores` (by cluster id, the primary first)
/// until `shutdown`: the table, published whenever it changes.
pub fn spawn(
    model: SnapshotReader,
    stores: Vec<(String, Arc<dyn SecretStore>)>,
    shutdown: CancellationToken,
) -> watch::Receiver<Arc<Credentials>> {
    let table = Credentials {
        clusters: stores
            .iter()
            .map(|(id, _)| (Arc::from(id.as_str()), ClusterSecrets::default()))
            .collect(),
        primary: stores.first().map(|(id, _)| Arc::from(id.as_str())),
        ..Credentials::default()
    };
    let (tx, rx) = watch::channel(Arc::new(table));
    tokio::spawn(task::Task::new(stores, tx).run(model, shutdown));
    rx
}

#[cfg(test)]
mod tests;
