//! The watch loop of one cluster: five kube watchers (Services, EndpointSlices, Pods, Nodes,
//! Namespaces)
//! into one [`Cache`], the cache's events out, and the health rules (errors as items,
//! `Recovered`, the grace period of a cluster that stays away).

mod streams;

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio::time::Instant;
use wayfinder_registry::backoff::Backoff;
use wayfinder_registry::{CancellationToken, Event, EventStream, RegistryError};

use crate::cache::Cache;
use crate::convert::Scope;
use crate::errors::{describe, status};

use self::streams::{Kind, RETRY_MAX, RETRY_MIN, watchers};
pub(crate) use self::streams::{api, retry};

/// What the loop needs.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) scope: Scope,
    /// Watch only this namespace (Services, EndpointSlices, Pods).
    pub(crate) namespace: Option<String>,
    /// How long an unreachable cluster's endpoints stay in force.
    pub(crate) grace_period: Duration,
}

/// Starts the loop; the stream ends soon after `shutdown` is cancelled.
pub(crate) fn stream(
    client: Client,
    settings: Settings,
    shutdown: CancellationToken,
) -> EventStream {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(run(client, settings, shutdown, tx));
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed()
}

/// The loop's health bookkeeping.
struct Health {
    /// Kinds whose last word was an error.
    failing: BTreeSet<Kind>,
    /// When the cluster started failing.
    since: Option<Instant>,
    /// The grace period ran out and the endpoints were withdrawn.
    expired: bool,
    probe: Backoff,
}

type Tx = mpsc::Sender<Result<Event, RegistryError>>;

async fn run(client: Client, settings: Settings, shutdown: CancellationToken, tx: Tx) {
    let cluster = settings.scope.cluster_id.clone();
    let mut cache = Cache::new(settings.scope.clone());
    let mut changes = watchers(&client, settings.namespace.as_deref());
    let mut health = Health {
        failing: BTreeSet::new(),
        since: None,
        expired: false,
        probe: Backoff::new(RETRY_MIN, RETRY_MAX),
    };
    let mut nodes_refused = false;
    let mut namespaces_refused = false;
    loop {
        let probe_at = health
            .since
            .map(|_| Instant::now() + health.probe.next_delay());
        let expire_at = match (health.since, health.expired) {
            (Some(since), false) => Some(since + settings.grace_period),
            _ => None,
        };
        let mut out: Vec<Result<Event, RegistryError>> = Vec::new();
        tokio::select! {
            () = shutdown.cancelled() => return,
            item = changes.next() => {
                let Some(item) = item else { return };
                let mut batch = vec![item];
                // Take what is ready too, so that a relist is one flush.
                while batch.len() < 10_000 {
                    match changes.next().now_or_never() {
                        Some(Some(item)) => batch.push(item),
                        _ => break,
                    }
                }
                let mut ok = false;
                for item in batch {
                    match item {
                        Ok(change) => {
                            ok = true;
                            cache.apply(change);
                        }
                        Err((Kind::Nodes, err)) if forbidden(&err) => {
                            if !nodes_refused {
                                nodes_refused = true;
                                tracing::warn!(cluster = %cluster, "nodes cannot be read ({}); \
                                    localities come from EndpointSlice zones only", describe(&err));
                            }
                            cache.give_up_nodes();
                        }
                        Err((Kind::Namespaces, err)) if forbidden(&err) => {
                            if !namespaces_refused {
                                namespaces_refused = true;
                                tracing::warn!(cluster = %cluster, "namespaces cannot be read ({}); \
                                    networks come from pods' labels only", describe(&err));
                            }
                            cache.give_up_namespaces();
                        }
                        Err((kind, err)) if gone(&err) => {
                            // The watch's resourceVersion expired: kube's watcher relists,
                            // which is the normal course of things, not a failure.
                            tracing::debug!(cluster = %cluster, kind = kind.path(), "{}; relisting", describe(&err));
                        }
                        Err((kind, err)) => {
                            health.failing.insert(kind);
                            health.since.get_or_insert_with(Instant::now);
                            out.push(Err(error(&cluster, kind, &err)));
                        }
                    }
                }
                let (events, errors) = cache.flush();
                out.extend(errors.into_iter().map(Err));
                let changed = !events.is_empty();
                if !health.expired {
                    out.extend(events.into_iter().map(Ok));
                }
                if ok && health.since.is_some() && out.iter().all(Result::is_ok) {
                    recover(&mut health, &cache, changed, &mut out);
                }
            }
            () = sleep_until(probe_at) => {
                if probe(&client, &settings, &health.failing).await {
                    recover(&mut health, &cache, false, &mut out);
                }
            }
            () = sleep_until(expire_at) => {
                health.expired = true;
                tracing::warn!(cluster = %cluster, grace = ?settings.grace_period,
                    "cluster unreachable for longer than its grace period: withdrawing its endpoints");
                out.push(Ok(cache.reset(false)));
            }
        }
        for item in out {
            if tx.send(item).await.is_err() {
                return;
            }
        }
    }
}

/// The cluster works again: `Recovered` (or everything again, if the grace period had run
/// out), unless changes just went out and said so already.
fn recover(
    health: &mut Health,
    cache: &Cache,
    changed: bool,
    out: &mut Vec<Result<Event, RegistryError>>,
) {
    if health.expired {
        out.push(Ok(cache.reset(true)));
    } else if !changed && cache.synced() {
        out.push(Ok(Event::Recovered));
    }
    health.failing.clear();
    health.since = None;
    health.expired = false;
    health.probe.reset();
}

/// Lists one object of every failing kind: the same request, the same permissions.
async fn probe(client: &Client, settings: &Settings, failing: &BTreeSet<Kind>) -> bool {
    let ns = settings.namespace.as_deref();
    let one = ListParams::default().limit(1);
    for kind in failing {
        let ok = match kind {
            Kind::Services => api::<Service>(client, ns).list(&one).await.is_ok(),
            Kind::EndpointSlices => api::<EndpointSlice>(client, ns).list(&one).await.is_ok(),
            Kind::Pods => api::<Pod>(client, ns).list(&one).await.is_ok(),
            Kind::Nodes => Api::<Node>::all(client.clone()).list(&one).await.is_ok(),
            Kind::Namespaces => Api::<Namespace>::all(client.clone())
                .list(&one)
                .await
                .is_ok(),
        };
        if !ok {
            return false;
        }
    }
    true
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn gone(err: &watcher::Error) -> bool {
    status(err) == Some(410)
}

fn forbidden(err: &watcher::Error) -> bool {
    status(err) == Some(403)
}

fn error(cluster: &str, kind: Kind, err: &watcher::Error) -> RegistryError {
    let origin = format!("cluster {cluster}: list/watch {}", kind.path());
    let detail = describe(err);
    let malformed = matches!(
        err,
        watcher::Error::InitialListFailed(kube::Error::SerdeError(_))
            | watcher::Error::WatchFailed(kube::Error::SerdeError(_))
    );
    if malformed {
        RegistryError::Malformed { origin, detail }
    } else {
        RegistryError::Unavailable { origin, detail }
    }
}
