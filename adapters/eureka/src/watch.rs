//! The poll loop behind the stream: a full fetch, then a delta every interval reconciled with
//! the server's hashcode, each result diffed against what was last sent.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use futures::stream;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use wayfinder_registry::backoff::Backoff;
use wayfinder_registry::{
    CancellationToken, Event, EventStream, Registration, RegistryError, RegistryId, ServiceKey,
};

use crate::client::Client;
use crate::convert::convert;
use crate::mirror::{Mirror, Reconciled};

type Item = Result<Event, RegistryError>;

/// First retry delay after a failure (or the interval, if shorter).
const BACKOFF_INITIAL: Duration = Duration::from_millis(200);
/// Longest retry delay (or the interval, if longer).
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Deltas cover only the server's recently-changed queue (three minutes by default): when the
/// last good fetch is older than this, the next one is a full fetch.
const DELTA_HORIZON: Duration = Duration::from_secs(120);

/// What a registry's stream needs.
pub(crate) struct Settings {
    pub(crate) id: RegistryId,
    pub(crate) client: Client,
    pub(crate) interval: Duration,
    pub(crate) suffix: String,
}

/// The stream of a registry: polls run only while the consumer pulls, and everything (an
/// in-flight request included) is dropped when `shutdown` is cancelled.
pub(crate) fn stream(settings: Settings, shutdown: CancellationToken) -> EventStream {
    let watcher = Watcher::new(settings);
    stream::unfold(watcher, |mut watcher| async move {
        let batch = watcher.next_batch().await;
        Some((stream::iter(batch), watcher))
    })
    .flatten()
    .take_until(shutdown.cancelled_owned())
    .boxed()
}

/// How the last items left the registry's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Health {
    Good,
    /// Fetches work, but some instances or services were refused.
    Problems,
    /// The last fetch failed.
    Failed,
}

struct Watcher {
    settings: Settings,
    /// `None` until the first full fetch succeeded.
    ticker: Option<Interval>,
    backoff: Backoff,
    /// No attempt before this (set after a failure).
    retry_at: Option<Instant>,
    mirror: Mirror,
    /// When the mirror was last confirmed by the server.
    synced_at: Instant,
    /// What the consumer has: the registrations last sent, by key.
    sent: BTreeMap<ServiceKey, Registration>,
    /// The problems of the current mirror (refused instances and services).
    problems: Vec<RegistryError>,
    health: Health,
}

impl Watcher {
    fn new(settings: Settings) -> Self {
        let backoff = Backoff::new(
            BACKOFF_INITIAL.min(settings.interval),
            BACKOFF_MAX.max(settings.interval),
        );
        Self {
            settings,
            ticker: None,
            backoff,
            retry_at: None,
            mirror: Mirror::default(),
            synced_at: Instant::now(),
            sent: BTreeMap::new(),
            problems: Vec::new(),
            health: Health::Good,
        }
    }

    /// The next non-empty batch of items.
    async fn next_batch(&mut self) -> Vec<Item> {
        loop {
            self.wait_turn().await;
            let batch = if self.ticker.is_some() {
                self.poll().await
            } else {
                self.first_sync().await
            };
            if !batch.is_empty() {
                return batch;
            }
        }
    }

    /// Waits for the next tick (after the first sync) and for the retry time (after a
    /// failure), whichever is later.
    async fn wait_turn(&mut self) {
        if let Some(ticker) = &mut self.ticker {
            ticker.tick().await;
        }
        if let Some(at) = self.retry_at.take()
            && at > Instant::now()
        {
            tokio::time::sleep_until(at).await;
            if let Some(ticker) = &mut self.ticker {
                ticker.reset();
            }
        }
    }

    async fn first_sync(&mut self) -> Vec<Item> {
        tracing::debug!(registry = %self.settings.id, "eureka: full fetch");
        let apps = match self.settings.client.full().await {
            Ok(apps) => apps,
            Err(err) => return self.failed(err),
        };
        self.succeeded();
        self.mirror = Mirror::full(apps);
        let converted = convert(
            &self.mirror,
            self.settings.client.base(),
            &self.settings.suffix,
        );
        self.sent = converted.registrations;
        let mut items = vec![Ok(Event::Reset(self.sent.values().cloned().collect()))];
        items.extend(self.settle(converted.problems, true));
        let period = self.settings.interval;
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        self.ticker = Some(ticker);
        items
    }

    async fn poll(&mut self) -> Vec<Item> {
        let fresh = match self.refresh().await {
            Ok(fresh) => fresh,
            Err(err) => return self.failed(err),
        };
        self.succeeded();
        let (mut items, problems) = match fresh {
            Some(mirror) => {
                self.mirror = mirror;
                let base = self.settings.client.base();
                let converted = convert(&self.mirror, base, &self.settings.suffix);
                let changes = self.diff(converted.registrations, &converted.refused);
                (changes, converted.problems)
            }
            None => (Vec::new(), self.problems.clone()),
        };
        tracing::debug!(registry = %self.settings.id, changes = items.len(), "eureka: polled");
        let changed = !items.is_empty();
        items.extend(self.settle(problems, changed));
        items
    }

    /// The server's registry if it differs from the mirror (`None`: unchanged): a delta when
    /// it reconciles, else a full fetch.
    async fn refresh(&mut self) -> Result<Option<Mirror>, RegistryError> {
        if self.synced_at.elapsed() <= DELTA_HORIZON {
            match self.settings.client.delta().await? {
                Some(delta) => match self.mirror.reconcile(delta) {
                    Reconciled::Yes(mirror) => return Ok(mirror),
                    Reconciled::No { server, local } => tracing::debug!(
                        registry = %self.settings.id, ?server, %local,
                        "eureka: reconcile hashcode differs, fetching the full registry"
                    ),
                },
                None => tracing::debug!(
                    registry = %self.settings.id,
                    "eureka: no delta served, fetching the full registry"
                ),
            }
        }
        let mirror = Mirror::full(self.settings.client.full().await?);
        Ok((mirror != self.mirror).then_some(mirror))
    }

    fn diff(
        &mut self,
        current: BTreeMap<ServiceKey, Registration>,
        refused: &BTreeSet<ServiceKey>,
    ) -> Vec<Item> {
        diff(&mut self.sent, current, refused)
    }

    /// Items that keep the health true after a good fetch: the problems when they are new, or
    /// follow a change or a failure (so neither reads as a recovery); `Recovered` when the
    /// registry was degraded and is fine again without a change.
    fn settle(&mut self, problems: Vec<RegistryError>, changed: bool) -> Vec<Item> {
        let was = self.health;
        if problems.is_empty() {
            self.problems.clear();
            self.health = Health::Good;
            return if was != Health::Good && !changed {
                vec![Ok(Event::Recovered)]
            } else {
                Vec::new()
            };
        }
        let mut fresh = false;
        for problem in &problems {
            if !self.problems.contains(problem) {
                tracing::warn!(registry = %self.settings.id, error = %problem, "eureka: refused");
                fresh = true;
            }
        }
        fresh |= problems.len() != self.problems.len();
        self.health = Health::Problems;
        self.problems = problems;
        if fresh || changed || was != Health::Problems {
            self.problems.iter().cloned().map(Err).collect()
        } else {
            Vec::new()
        }
    }

    fn failed(&mut self, err: RegistryError) -> Vec<Item> {
        let delay = self.backoff.next_delay();
        self.retry_at = Some(Instant::now() + delay);
        self.health = Health::Failed;
        tracing::warn!(registry = %self.settings.id, error = %err, retry_in = ?delay, "eureka: fetch failed");
        vec![Err(err)]
    }

    fn succeeded(&mut self) {
        self.backoff.reset();
        self.synced_at = Instant::now();
        if self.health == Health::Failed {
            tracing::info!(registry = %self.settings.id, "eureka: the server answers again");
        }
    }
}

/// Upserts for changed services and removes for vanished ones, from what was `sent` to
/// `current`; refused services keep what was last sent. `sent` becomes what the consumer has.
pub(crate) fn diff(
    sent: &mut BTreeMap<ServiceKey, Registration>,
    mut current: BTreeMap<ServiceKey, Registration>,
    refused: &BTreeSet<ServiceKey>,
) -> Vec<Item> {
    let mut items: Vec<Item> = sent
        .keys()
        .filter(|key| !current.contains_key(*key) && !refused.contains(*key))
        .map(|key| Ok(Event::Remove(key.clone())))
        .collect();
    for (key, reg) in &current {
        if sent.get(key) != Some(reg) {
            items.push(Ok(Event::Upsert(reg.clone())));
        }
    }
    for key in refused {
        if let Some(last_good) = sent.remove(key) {
            current.insert(key.clone(), last_good);
        }
    }
    *sent = current;
    items
}
