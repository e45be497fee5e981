//! One kind's watch: kube's [`watcher`] over the first version the API serves, its objects
//! reduced ([`ApiObject`]), its failures as items.
//!
//! Three things are added around the watcher:
//!
//! - **A relist after every failure.** kube's watcher resumes a failed watch from where it
//!   was, which says nothing when nothing changed; so a recovery would never be seen. Instead
//!   each failure drops the watcher, and the next attempt (after the registry's jittered backoff,
//!   0.5 s to 10 s)
//!   lists again: its `InitDone` is the proof that the kind is readable again. A `410 Gone`
//!   (the watch's resource version was compacted away) is routine: it is relisted at once
//!   without an error item.
//! - **Versions.** A kind not served in `v1` (HTTP 404) is tried in `v1beta1`.
//! - **Missing CRDs.** A kind served in neither is reported once (a warning) and stands as an
//!   empty, synced list ([`Update::Missing`]), so that a cluster without Istio is ready at
//!   once; it is tried again every [`MISSING_RETRY`], so installing the CRD later works.

use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use wayfinder_registry::RegistryError;
use wayfinder_registry::backoff::jittered;

use super::Target;
use super::kinds::ApiKind;
use super::object::ApiObject;
use crate::errors::{describe, status};

/// How often a kind whose CRD is missing is looked for again.
pub(super) const MISSING_RETRY: Duration = Duration::from_secs(30);

/// What a kind's watch reports.
#[derive(Debug)]
// Each update is moved once, from the watch to the driver; boxing the common variant would
// only add an allocation per object.
#[allow(clippy::large_enum_variant)]
pub(super) enum Update {
    /// An event of kube's watcher, its objects reduced.
    Event(Event<ApiObject>),
    /// The kind is served in no version (its CRD is not installed): an empty list.
    Missing,
}

/// The updates of one kind. A failure is an `Err` item naming the watch
/// (`cluster <id>: list/watch networking.istio.io/v1 virtualservices`); the next item comes after
/// the registry's watch backoff, from a fresh list. The stream never ends.
pub(super) fn watch(
    cluster: Target,
    kind: &'static ApiKind,
) -> impl Stream<Item = Result<Update, RegistryError>> + Send {
    let state = KindWatch {
        cluster,
        kind,
        version: 0,
        watcher: None,
        listing: false,
        queued: None,
        missing: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await;
        Some((item, state))
    })
    .boxed()
    .backoff(crate::watch::retry())
}

type Watcher = BoxStream<'static, watcher::Result<Event<DynamicObject>>>;

/// The state of one kind's watch.
struct KindWatch {
    cluster: Target,
    kind: &'static ApiKind,
    /// Index in the kind's versions of the version watched (or tried next).
    version: usize,
    /// The running watcher; `None` after a failure, so that the next attempt lists again.
    watcher: Option<Watcher>,
    /// Whether the watcher said `Init` and nothing since. kube's watcher says `Init` before
    /// it lists, so the `Init` is held back until the list answers: a kind that is not
    /// served never starts a list.
    listing: bool,
    /// An update to return before polling again (the one that followed a held-back `Init`).
    queued: Option<Update>,
    /// Whether the kind was last found served in no version (and said so).
    missing: bool,
}

impl KindWatch {
    async fn next(&mut self) -> Result<Update, RegistryError> {
        if let Some(update) = self.queued.take() {
            return Ok(update);
        }
        loop {
            let version = self.kind.versions[self.version];
            let watcher = self.watcher.get_or_insert_with(|| {
                let api = self.kind.api(&self.cluster, version);
                watcher::watcher(api, watcher::Config::default()).boxed()
            });
            // kube's watcher never ends; should it, the next round starts a fresh one.
            let Some(item) = watcher.next().await else {
                self.watcher = None;
                continue;
            };
            let err = match item {
                Ok(Event::Init) => {
                    self.listing = true;
                    continue;
                }
                Ok(event) if std::mem::take(&mut self.listing) => {
                    self.queued = Some(self.served(version, event));
                    return Ok(Update::Event(Event::Init));
                }
                Ok(event) => return Ok(self.served(version, event)),
                Err(err) => err,
            };
            self.watcher = None;
            self.listing = false;
            match status(&err) {
                Some(410) => tracing::debug!(
                    cluster = %self.cluster.name,
                    "{}: {err}; listing again",
                    self.kind.watched(version)
                ),
                Some(404) if self.version + 1 < self.kind.versions.len() => self.version += 1,
                Some(404) => {
                    self.version = 0;
                    if !self.missing {
                        self.missing = true;
                        self.warn_missing();
                        return Ok(Update::Missing);
                    }
                    tokio::time::sleep(jittered(MISSING_RETRY, 0.1)).await;
                }
                _ => return Err(self.unavailable(version, &err)),
            }
        }
    }

    /// The event, from a version that is served.
    fn served(&mut self, version: &str, event: Event<DynamicObject>) -> Update {
        if std::mem::take(&mut self.missing) {
            tracing::info!(
                cluster = %self.cluster.name,
                "{} is served now; reading its objects",
                self.kind.watched(version)
            );
        }
        let reduce = |object| ApiObject::new(&self.cluster.name, self.kind, version, object);
        Update::Event(match event {
            Event::Init => Event::Init,
            Event::InitApply(object) => Event::InitApply(reduce(object)),
            Event::InitDone => Event::InitDone,
            Event::Apply(object) => Event::Apply(reduce(object)),
            Event::Delete(object) => Event::Delete(reduce(object)),
        })
    }

    fn warn_missing(&self) {
        tracing::warn!(
            cluster = %self.cluster.name,
            "{}/{{{}}} {} is not served (is Istio's CRD installed?): no {} objects until it \
             is; looking again every {}s",
            self.kind.group,
            self.kind.versions.join(","),
            self.kind.plural,
            self.kind.kind,
            MISSING_RETRY.as_secs(),
        );
    }

    fn unavailable(&self, version: &str, err: &watcher::Error) -> RegistryError {
        RegistryError::Unavailable {
            origin: format!(
                "cluster {}: list/watch {}",
                self.cluster.name,
                self.kind.watched(version)
            ),
            detail: describe(err),
        }
    }
}
