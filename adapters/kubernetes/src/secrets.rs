//! The Secrets a gateway's TLS credentials come from (Istio Gateway `credentialName`), watched
//! as istiod's credentials controller watches them (`pilot/pkg/credentials/kube/secrets.go`).
//!
//! - **What.** Core `v1` Secrets of every namespace, or of one. Each object is cut to the keys
//!   a gateway reads ([`KEYS`](wayfinder_config::credentials::KEYS)) as it arrives: the other entries, labels,
//!   annotations and managed fields are never kept, so a cluster's many unrelated Secrets cost
//!   their names only.
//! - **Which.** The list and the watch ask for [`FIELD_SELECTOR`], Istio's
//!   (`SecretsFieldSelector`): Helm release records and service-account token Secrets are
//!   the large, common Secrets of a cluster and never a gateway's credentials, so the API
//!   server does not send them at all. It is an optimisation only: everything else, any type,
//!   comes through, as users put certificates in `Opaque` and custom types too.
//! - **Permissions.** kube's watcher lists and then watches, so the server needs `list` and
//!   `watch` on `secrets` (cluster-wide, or in the one namespace). Istio's ClusterRole grants
//!   `get`, `list` and `watch`; `get` is not used here.
//! - **Events.** The [`Event`] contract: the first item is a `Reset` with every Secret once
//!   the list completes (kube's `Init`, `InitApply`s and `InitDone` gathered into one), then
//!   an `Upsert` per created or changed Secret and a `Remove` per deleted one. A relist is one
//!   `Reset` again.
//! - **Failures.** A failure is an `Err` item (`cluster <id>: list/watch v1 secrets`), never
//!   the end of the stream; the watcher is dropped and, after the crate's jittered backoff
//!   (0.5 s to 10 s), a fresh one lists again, so its `Reset` is the proof that Secrets are
//!   readable again. A `410 Gone` (the watch's resourceVersion was compacted away) is routine:
//!   it is relisted at once, without an error item.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret as ApiSecret;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use wayfinder_config::credentials::Secret;
use wayfinder_registry::{Event, RegistryError};

use crate::errors::{describe, status};

/// The field selector of the list and the watch (Istio's `SecretsFieldSelector`): every
/// Secret but Helm releases and service-account tokens.
pub const FIELD_SELECTOR: &str =
    "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token";

/// The Secrets of `client`'s cluster (of `namespace` only, when given), as gateways read them;
/// `cluster` names the cluster in error items. See the module docs. Nothing is requested until
/// the stream is polled; the stream never ends.
pub fn watch(
    client: kube::Client,
    cluster: &str,
    namespace: Option<String>,
) -> BoxStream<'static, Result<Event<Secret>, RegistryError>> {
    let state = SecretWatch {
        client,
        cluster: cluster.to_owned(),
        namespace,
        watcher: None,
        listing: None,
    };
    futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await;
        Some((item, state))
    })
    .boxed()
    .backoff(crate::watch::retry())
    .boxed()
}

type Watcher = BoxStream<'static, watcher::Result<WatchEvent<ApiSecret>>>;

/// The state of the watch.
struct SecretWatch {
    client: kube::Client,
    cluster: String,
    namespace: Option<String>,
    /// The running watcher; `None` after a failure, so that the next attempt lists again.
    watcher: Option<Watcher>,
    /// The Secrets of a list under way (from kube's `Init` to its `InitDone`).
    listing: Option<Vec<Secret>>,
}

impl SecretWatch {
    async fn next(&mut self) -> Result<Event<Secret>, RegistryError> {
        loop {
            let watcher = self.watcher.get_or_insert_with(|| {
                let api = crate::watch::api::<ApiSecret>(&self.client, self.namespace.as_deref());
                let config = watcher::Config::default().fields(FIELD_SELECTOR);
                watcher::watcher(api, config).boxed()
            });
            // kube's watcher never ends; should it, the next round starts a fresh one.
            let Some(item) = watcher.next().await else {
                self.watcher = None;
                continue;
            };
            let err = match item {
                Ok(WatchEvent::Init) => {
                    self.listing = Some(Vec::new());
                    continue;
                }
                Ok(WatchEvent::InitApply(secret)) => {
                    self.listing.get_or_insert_with(Vec::new).push(cut(secret));
                    continue;
                }
                Ok(WatchEvent::InitDone) => {
                    return Ok(Event::Reset(self.listing.take().unwrap_or_default()));
                }
                Ok(WatchEvent::Apply(secret)) => return Ok(Event::Upsert(cut(secret))),
                Ok(WatchEvent::Delete(secret)) => return Ok(Event::Remove(key(&secret))),
                Err(err) => err,
            };
            self.watcher = None;
            self.listing = None;
            if status(&err) == Some(410) {
                tracing::debug!(cluster = %self.cluster, "v1 secrets: {err}; listing again");
                continue;
            }
            return Err(RegistryError::Unavailable {
                origin: format!("cluster {}: list/watch v1 secrets", self.cluster),
                detail: describe(&err),
            });
        }
    }
}

/// The Secret cut to the keys a gateway reads. `data` arrives decoded (k8s-openapi's
/// `ByteString`); `stringData` is write-only, and the API server never returns it.
fn cut(secret: ApiSecret) -> Secret {
    let (namespace, name) = key(&secret);
    let data = secret.data.unwrap_or_default();
    Secret::new(
        &namespace,
        &name,
        data.into_iter().map(|(key, bytes)| (key, bytes.0)),
    )
}

/// The Secret's namespace and name, its key in the stream.
fn key(secret: &ApiSecret) -> (Arc<str>, Arc<str>) {
    let meta = &secret.metadata;
    (
        meta.namespace.as_deref().unwrap_or_default().into(),
        meta.name.as_deref().unwrap_or_default().into(),
    )
}
