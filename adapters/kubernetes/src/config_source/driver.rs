//! The stream of one source: every kind's watch merged, lists reconciled, objects fed to the
//! config crate's model ([`Feed`]), rejections posted as Events.
//!
//! The feed does what it does for files (validation, last good versions, events, health); this
//! module only says which objects changed. A list (the first, or one after a failure or a
//! `410 Gone`) is buffered until its `InitDone`: objects not in it are gone, objects whose
//! reduced bytes are unchanged are not fed again (so a relist that changes nothing sends
//! nothing, and `Recovered` if the source had failed), the others are. Nothing is committed
//! before every kind has finished its first list, so the first item is a `Reset` of
//! everything (or a watch failure, when a kind cannot be read at all yet).

use std::collections::{BTreeMap, VecDeque};

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use kube::runtime::watcher::Event;
use wayfinder_config::Feed;
use wayfinder_registry::{CancellationToken, RegistryError};

use super::Target;
use super::events::Poster;
use super::kinds::ApiKind;
use super::object::ApiObject;
use super::watch::{self, Update};

/// The items of a source watching `kinds` of `cluster` through `feed`; the stream ends
/// promptly once `shutdown` is cancelled.
pub(super) fn stream<E: Send + 'static>(
    cluster: Target,
    kinds: &'static [ApiKind],
    feed: Feed<E>,
    shutdown: CancellationToken,
) -> BoxStream<'static, Result<E, RegistryError>> {
    let watches: SelectAll<BoxStream<'static, Tagged>> = kinds
        .iter()
        .enumerate()
        .map(|(index, kind)| {
            watch::watch(cluster.clone(), kind)
                .map(move |update| (index, update))
                .boxed()
        })
        .collect();
    let driver = Driver {
        kinds: kinds.iter().map(KindState::new).collect(),
        feed,
        poster: Poster::new(
            cluster.client.clone(),
            shutdown.clone(),
            cluster.leadership.clone(),
        ),
        started: false,
        out: VecDeque::new(),
    };
    futures::stream::unfold((driver, watches), |(mut driver, mut watches)| async move {
        loop {
            if let Some(item) = driver.out.pop_front() {
                return Some((item, (driver, watches)));
            }
            let (index, update) = watches.next().await?;
            driver.handle(index, update);
        }
    })
    .take_until(shutdown.cancelled_owned())
    .boxed()
}

/// An update and the index of its kind.
type Tagged = (usize, Result<Update, RegistryError>);

/// What the stream knows of one kind.
struct KindState {
    kind: &'static ApiKind,
    /// The objects in force, by name.
    objects: BTreeMap<String, ApiObject>,
    /// The objects of a list under way.
    listing: Option<BTreeMap<String, ApiObject>>,
    /// Whether a first list has finished.
    synced: bool,
}

impl KindState {
    fn new(kind: &'static ApiKind) -> Self {
        Self {
            kind,
            objects: BTreeMap::new(),
            listing: None,
            synced: false,
        }
    }
}

struct Driver<E> {
    kinds: Vec<KindState>,
    feed: Feed<E>,
    poster: Poster,
    /// Whether every kind had finished its first list (and the first commit was made).
    started: bool,
    out: VecDeque<Result<E, RegistryError>>,
}

impl<E: Send + 'static> Driver<E> {
    fn handle(&mut self, index: usize, update: Result<Update, RegistryError>) {
        let Some(state) = self.kinds.get_mut(index) else {
            return;
        };
        let watch = state.kind.plural;
        match update {
            Err(err) => {
                // A list cut short says nothing about what is gone.
                state.listing = None;
                self.out.extend(self.feed.fail(watch, err));
            }
            Ok(Update::Missing) => {
                state.listing = Some(BTreeMap::new());
                self.listed(index);
            }
            Ok(Update::Event(Event::Init)) => state.listing = Some(BTreeMap::new()),
            Ok(Update::Event(Event::InitApply(object))) => {
                if let Some(listing) = &mut state.listing {
                    listing.insert(object.name.clone(), object);
                }
            }
            Ok(Update::Event(Event::InitDone)) => self.listed(index),
            Ok(Update::Event(Event::Apply(object))) => {
                self.feed.clear(watch);
                self.put(index, object);
                self.commit();
            }
            Ok(Update::Event(Event::Delete(object))) => {
                self.feed.clear(watch);
                self.remove(index, &object.name);
                self.commit();
            }
        }
    }

    /// A list finished: what it lacks is gone, what it changed is fed.
    fn listed(&mut self, index: usize) {
        let Some(state) = self.kinds.get_mut(index) else {
            return;
        };
        let listed = state.listing.take().unwrap_or_default();
        state.synced = true;
        self.feed.clear(state.kind.plural);
        let gone: Vec<String> = state
            .objects
            .keys()
            .filter(|name| !listed.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            self.remove(index, &name);
        }
        for object in listed.into_values() {
            self.put(index, object);
        }
        self.commit();
    }

    /// Feeds a new or changed object, and posts an Event when the model rejects it.
    fn put(&mut self, index: usize, object: ApiObject) {
        let Some(state) = self.kinds.get_mut(index) else {
            return;
        };
        let unchanged = state
            .objects
            .get(&object.name)
            .is_some_and(|known| known.bytes == object.bytes);
        if unchanged {
            return;
        }
        let errors = self.feed.apply(&object.name, Some(&object.bytes));
        if !errors.is_empty() {
            self.poster.rejected(&object, &errors);
        }
        state.objects.insert(object.name.clone(), object);
    }

    fn remove(&mut self, index: usize, name: &str) {
        let Some(state) = self.kinds.get_mut(index) else {
            return;
        };
        if let Some(object) = state.objects.remove(name) {
            self.feed.apply(name, None);
            self.poster.forget(&object);
        }
    }

    /// Queues what the feed has to say, once every kind has been listed.
    fn commit(&mut self) {
        if !self.started && !self.kinds.iter().all(|kind| kind.synced) {
            return;
        }
        self.started = true;
        self.out.extend(self.feed.commit());
    }
}
