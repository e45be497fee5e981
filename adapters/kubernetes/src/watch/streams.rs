//! The five kube watchers of a cluster (Services, EndpointSlices, Pods, Nodes, Namespaces),
//! each object cut down as it arrives, and the backoff they retry with.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use wayfinder_registry::backoff::Backoff;

use crate::cache::{AnyChange, Change};
use crate::objects::{NamespaceObj, NodeObj, PodObj, SliceObj, SvcObj};

/// The five kinds a cluster's registry watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Services,
    EndpointSlices,
    Pods,
    Nodes,
    Namespaces,
}

impl Kind {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Kind::Services => "v1 services",
            Kind::EndpointSlices => "discovery.k8s.io/v1 endpointslices",
            Kind::Pods => "v1 pods",
            Kind::Nodes => "v1 nodes",
            Kind::Namespaces => "v1 namespaces",
        }
    }
}

/// Backoff of a failing watch: shorter than kube's default (0.8 s to 30 s) so that a cluster
/// back from an outage is followed within seconds; jittered, so watches do not retry together.
pub(crate) const RETRY_MIN: Duration = Duration::from_millis(500);
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(10);

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

/// One change, or a watch failure of a kind.
pub(crate) type Item = Result<AnyChange, (Kind, watcher::Error)>;

pub(crate) fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
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

pub(crate) fn watchers(
    client: &Client,
    namespace: Option<&str>,
) -> SelectAll<BoxStream<'static, Item>> {
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
        // Every namespace, as nodes: cluster-scoped objects (a source of one namespace
        // reads the others' labels and uses none of them).
        watch(
            Api::<Namespace>::all(client.clone()),
            Kind::Namespaces,
            NamespaceObj::from_namespace,
            |n| n.metadata.name.clone().unwrap_or_default().into(),
            AnyChange::Namespace,
        ),
    ])
}
