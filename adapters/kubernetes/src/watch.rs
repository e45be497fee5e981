//! The watch loop of one cluster: four kube watchers (Services, EndpointSlices, Pods, Nodes)
//! into one [`Cache`], the cache's events out, and the health rules (errors as items,
//! `Recovered`, the grace period of a cluster that stays away).

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::Duration;

use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::time::Instant;
use wayfinder_registry::backoff::Backoff;
use wayfinder_registry::{CancellationToken, Event, EventStream, RegistryError};

use crate::cache::{AnyChange, Cache, Change};
use crate::convert::Scope;
use crate::errors::{describe, status};
use crate::objects::{NodeObj, PodObj, SliceObj, SvcObj};

/// The four kinds a cluster's registry watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Services,
    EndpointSlices,
    Pods,
    Nodes,
}

impl Kind {
    fn path(self) -> &'static str {
        match self {
            Kind::Services => "v1 services",
            Kind::EndpointSlices => "discovery.k8s.io/v1 endpointslices",
            Kind::Pods => "v1 pods",
            Kind::Nodes => "v1 nodes",
        }
    }
}

/// Backoff of a failing watch: shorter than kube's default (0.8 s to 30 s) so that a cluster
/// back from an outage is followed within seconds; jittered, so watches do not retry together.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(10);

/// Our jittered backoff as kube's watcher takes it.
pub(crate) struct Retry(Backoff);

/// The backoff of a failing watch (this registry's and the config source's).
pub(crate) fn retry() -> Retry {
    Retry(Backoff::new(RETRY_MIN, RETRY_MAX))
}

impl Iterator for Retry {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.0.next_delay())
    }
}

impl kube::runtime::utils::Backoff for Retry {
    fn reset(&mut self) {
        self.0.reset();
    }
}

/// What the loop needs.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) scope: Scope,
    /// Watch only this namespace (Services, EndpointSlices, Pods).
    pub(crate) namespace: Option<String>,
    /// How long an unreachable cluster's endpoints stay in force.
    pub(crate) grace_period: Duration,
}

type Item = Result<AnyChange, (Kind, watcher::Error)>;

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

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// One kind's watcher, its objects slimmed as they arrive.
fn watch<K, T, Key>(
    api: Api<K>,
    kind: Kind,
    slim: fn(K) -> (Key, T),
    key: fn(&K) -> Key,
    wrap: fn(Change<Key, T>) -> AnyChange,
) -> BoxStream<'static, Item>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    T: Send + 'static,
    Key: Send + 'static,
{
    watcher(api, watcher::Config::default())
        .backoff(retry())
        .map(move |item| {
            let change = match item.map_err(|e| (kind, e))? {
                watcher::Event::Init => Change::Init,
                watcher::Event::InitApply(obj) => {
                    let (k, t) = slim(obj);
                    Change::InitApply(k, t)
                }
                watcher::Event::InitDone => Change::InitDone,
                watcher::Event::Apply(obj) => {
                    let (k, t) = slim(obj);
                    Change::Apply(k, t)
                }
                watcher::Event::Delete(obj) => Change::Delete(key(&obj)),
            };
            Ok(wrap(change))
        })
        .boxed()
}

fn ns_name<K: Resource>(obj: &K) -> (std::sync::Arc<str>, std::sync::Arc<str>) {
    let meta = obj.meta();
    (
        meta.namespace.clone().unwrap_or_default().into(),
        meta.name.clone().unwrap_or_default().into(),
    )
}

fn watchers(client: &Client, namespace: Option<&str>) -> SelectAll<BoxStream<'static, Item>> {
    futures::stream::select_all([
        watch(
            api::<Service>(client, namespace),
            Kind::Services,
            |s| (ns_name(&s), SvcObj::from(s)),
            ns_name,
            AnyChange::Service,
        ),
        watch(
            api::<EndpointSlice>(client, namespace),
            Kind::EndpointSlices,
            |s| (ns_name(&s), SliceObj::from(s)),
            ns_name,
            AnyChange::Slice,
        ),
        watch(
            api::<Pod>(client, namespace),
            Kind::Pods,
            PodObj::from_pod,
            ns_name,
            AnyChange::Pod,
        ),
        watch(
            Api::<Node>::all(client.clone()),
            Kind::Nodes,
            NodeObj::from_node,
            |n| n.metadata.name.clone().unwrap_or_default().into(),
            AnyChange::Node,
        ),
    ])
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
