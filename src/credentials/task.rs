//! The task that keeps the [`Credentials`] table: the clusters' Secret watches, started when
//! first needed, and the questions to the API server about who may read them.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered, SelectAll};
use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wayfinder_config::credentials::Secret;
use wayfinder_registry::{Event, RegistryError};

use super::{Credentials, Decision, Identity, SecretStore, referenced};
use crate::snapshot::{Snapshot, SnapshotReader};

/// Questions to the API server in flight at once.
const REVIEWS_IN_FLIGHT: usize = 16;
/// Secret events applied before the table is published, when more are ready.
const EVENTS_PER_PUBLICATION: usize = 4096;

/// One cluster's Secret event, tagged with its cluster.
type Tagged = (Arc<str>, Result<Event<Secret>, RegistryError>);

/// An identity and the API server's answer (or why there is none).
type Reviewed = (Identity, Result<Result<(), String>, String>);

/// What the task knows besides the table, which is the last one it published on `tx`.
pub(super) struct Task {
    stores: Vec<(Arc<str>, Arc<dyn SecretStore>)>,
    tx: watch::Sender<Arc<Credentials>>,
    in_review: BTreeSet<Identity>,
    /// Asked for while the reviews in flight were at their limit.
    queued: BTreeSet<Identity>,
    watching: bool,
    /// What the model named the last time it was looked at, to log what is missing once.
    named: BTreeSet<String>,
}

impl Task {
    pub(super) fn new(
        stores: Vec<(String, Arc<dyn SecretStore>)>,
        tx: watch::Sender<Arc<Credentials>>,
    ) -> Self {
        Self {
            stores: stores
                .into_iter()
                .map(|(id, store)| (Arc::from(id.as_str()), store))
                .collect(),
            tx,
            in_review: BTreeSet::new(),
            queued: BTreeSet::new(),
            watching: false,
            named: BTreeSet::new(),
        }
    }

    pub(super) async fn run(mut self, model: SnapshotReader, shutdown: CancellationToken) {
        let asks = self.tx.borrow().asks.clone();
        let mut versions = model.versions();
        let mut watches: SelectAll<BoxStream<'static, Tagged>> = SelectAll::new();
        let mut reviews: FuturesUnordered<BoxFuture<'static, Reviewed>> = FuturesUnordered::new();
        if self.follow_model(&model.snapshot()) {
            watches.extend(self.start_watching());
        }
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = versions.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if self.follow_model(&model.snapshot()) {
                        watches.extend(self.start_watching());
                    }
                }
                () = asks.notify.notified() => {
                    let wanted = std::mem::take(
                        &mut *asks.wanted.lock().unwrap_or_else(|e| e.into_inner()),
                    );
                    watches.extend(self.start_watching());
                    for identity in wanted {
                        reviews.extend(self.review(identity));
                    }
                }
                Some(first) = watches.next(), if !watches.is_empty() => {
                    let mut table = self.tx.borrow().edit();
                    apply(&mut table, first);
                    // Whatever else is ready goes into the same table.
                    for _ in 1..EVENTS_PER_PUBLICATION {
                        match watches.next().now_or_never() {
                            Some(Some(event)) => apply(&mut table, event),
                            _ => break,
                        }
                    }
                    self.tx.send_replace(Arc::new(table));
                }
                Some((identity, answer)) = reviews.next(), if !reviews.is_empty() => {
                    reviews.extend(self.decided(identity, answer));
                }
            }
        }
    }

    /// Notes what the model names, says which named credentials no cluster can give; true
    /// when it names any.
    fn follow_model(&mut self, model: &Snapshot) -> bool {
        let referenced = referenced(model);
        let named: BTreeSet<String> = referenced.keys().cloned().collect();
        if self.stores.is_empty() {
            for (credential, users) in &referenced {
                if !self.named.contains(credential) {
                    tracing::warn!(
                        credential = %credential,
                        gateways = %users.join(", "),
                        "a Gateway names a credential, but wayfinder reads no Kubernetes \
                         cluster to find its Secret in (--registries Kubernetes or \
                         --config-source k8s): its gateways get no certificate for it"
                    );
                }
            }
        }
        self.named = named;
        !referenced.is_empty()
    }

    /// The watches of every cluster's Secrets, the first time it is called.
    fn start_watching(&mut self) -> Vec<BoxStream<'static, Tagged>> {
        if std::mem::replace(&mut self.watching, true) {
            return Vec::new();
        }
        let mut table = self.tx.borrow().edit();
        let mut watches = Vec::new();
        for (id, store) in &self.stores {
            tracing::info!(cluster = %id, "watching Secrets for gateway credentials");
            table.clusters.entry(id.clone()).or_default().watching = true;
            let id = id.clone();
            watches.push(store.watch().map(move |e| (id.clone(), e)).boxed());
        }
        self.tx.send_replace(Arc::new(table));
        watches
    }

    /// The question to the API server about `identity`, unless a fresh answer is there or a
    /// question is in flight (or waits for a place among them).
    fn review(&mut self, identity: Identity) -> Option<BoxFuture<'static, Reviewed>> {
        let fresh = self
            .tx
            .borrow()
            .decision(&identity)
            .is_some_and(|d| !d.expired());
        if fresh || self.in_review.contains(&identity) {
            return None;
        }
        if self.in_review.len() >= REVIEWS_IN_FLIGHT {
            self.queued.insert(identity);
            return None;
        }
        let store = self
            .stores
            .iter()
            .find(|(id, _)| *id == identity.cluster)
            .map(|(_, store)| store.clone());
        self.in_review.insert(identity.clone());
        Some(match store {
            Some(store) => store
                .may_read(&identity.namespace, &identity.service_account)
                .map(move |answer| (identity, answer))
                .boxed(),
            None => {
                let refused = Ok(Err("wayfinder reads no Secrets of this cluster".into()));
                futures::future::ready((identity, refused)).boxed()
            }
        })
    }

    /// Records an answer (an unanswered question is a refusal, asked again after
    /// [`REFUSED_FOR`]); the question that waited for its place, if any.
    fn decided(
        &mut self,
        identity: Identity,
        answer: Result<Result<(), String>, String>,
    ) -> Option<BoxFuture<'static, Reviewed>> {
        self.in_review.remove(&identity);
        let allowed = answer.unwrap_or_else(|e| {
            Err(format!(
                "the API server did not answer whether it may read Secrets: {e}"
            ))
        });
        let mut table = self.tx.borrow().edit();
        let before = table.decisions.get(&identity).map(|d| d.allowed.clone());
        if before.as_ref() != Some(&allowed) {
            match &allowed {
                Ok(()) => {
                    tracing::info!(identity = %identity, "may read the Secrets of its namespace: its gateways get their credentials")
                }
                Err(why) => {
                    tracing::warn!(identity = %identity, "may not read the Secrets of its namespace, so its gateways get no credentials but CA certificates: {why}")
                }
            }
        }
        table.decisions.insert(
            identity,
            Decision {
                allowed,
                at: Instant::now(),
            },
        );
        self.tx.send_replace(Arc::new(table));
        let next = self.queued.pop_first()?;
        self.review(next)
    }
}

/// Applies one cluster's event to `table`. A failure keeps the Secrets as they were.
fn apply(table: &mut Credentials, (cluster, event): Tagged) {
    let entry = table.clusters.entry(cluster.clone()).or_default();
    let event = match event {
        Ok(event) => event,
        Err(e) => {
            let error = e.to_string();
            if entry.error.as_deref() != Some(error.as_str()) {
                tracing::warn!(
                    cluster = %cluster,
                    "cannot read Secrets: {error}; the last good ones stay in force"
                );
            }
            entry.error = Some(error);
            return;
        }
    };
    if entry.error.take().is_some() {
        tracing::info!(cluster = %cluster, "reading Secrets again");
    }
    let key = |s: &Secret| (s.namespace.clone(), s.name.clone());
    match event {
        Event::Reset(all) => {
            entry.secrets = all.into_iter().map(|s| (key(&s), Arc::new(s))).collect();
            entry.synced = true;
        }
        Event::Upsert(s) => {
            entry.secrets.insert(key(&s), Arc::new(s));
        }
        Event::Remove(k) => {
            entry.secrets.remove(&k);
        }
        Event::Batch { upserts, removes } => {
            for k in removes {
                entry.secrets.remove(&k);
            }
            for s in upserts {
                entry.secrets.insert(key(&s), Arc::new(s));
            }
        }
        Event::Refused(_) | Event::Recovered => {}
    }
}
