//! The conformance suite every adapter's tests run, for any [`Source`].
//!
//! An adapter's test implements [`Harness`] (how to start its source over an input it
//! controls, and how to change that input) and calls [`run_all`]. The suite checks the
//! contract written on [`Event`], whatever the source carries: the first event is a `Reset`,
//! changes to the input arrive as events that leave the consumer's view equal to the input,
//! unchanged items cause no spurious changes, errors are items that keep the last good state,
//! and shutdown is prompt.
//!
//! Inputs are described by [`Fixture`]s; the harness maps a fixture to its input's format (a
//! ServiceEntry file, a Consul catalog entry, a DestinationRule for a configuration source)
//! and says which item ([`Harness::Item`]: a [`Registration`], a configuration object) the
//! source should report for it. A fixture's every field must show in its item, so that each
//! change the suite makes is a change the source reports.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use futures::StreamExt;

use crate::{CancellationToken, Event, EventStream, Item, RegistryError, Source};

#[cfg(doc)]
use crate::Registration;

/// How long the suite waits for a source to show a change before failing.
pub const CHANGE_DEADLINE: Duration = Duration::from_secs(10);
/// How long a source may take to end its stream after shutdown.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// A service in a form every registry can express: a name, one port, some endpoint IPs and a
/// `version` label on the endpoints. A configuration source's harness maps it to an object
/// about that service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fixture {
    /// Short service name (`reviews`); the harness decides the hostname.
    pub name: String,
    /// The service's single port.
    pub port: u16,
    /// Endpoint addresses.
    pub endpoints: Vec<IpAddr>,
    /// Value of the `version` label on every endpoint.
    pub version: String,
}

impl Fixture {
    /// A fixture with `n` endpoints at `10.<seed>.0.1..=n`.
    pub fn new(name: &str, seed: u8, n: u8) -> Self {
        Self {
            name: name.into(),
            port: 8080,
            endpoints: (1..=n).map(|i| IpAddr::from([10, seed, 0, i])).collect(),
            version: "v1".into(),
        }
    }
}

/// What an adapter's test provides to the suite.
pub trait Harness: Send {
    /// What the source carries: [`Registration`] for a registry.
    type Item: Item;

    /// Prepares a fresh input holding `initial` and returns a source watching it.
    fn start(
        &mut self,
        initial: &[Fixture],
    ) -> impl Future<Output = Box<dyn Source<Self::Item>>> + Send;
    /// Creates or replaces a fixture in the input.
    fn put(&mut self, fixture: &Fixture) -> impl Future<Output = ()> + Send;
    /// Deletes a fixture from the input.
    fn delete(&mut self, fixture: &Fixture) -> impl Future<Output = ()> + Send;
    /// The item the source should report for a fixture.
    fn expected(&self, fixture: &Fixture) -> Self::Item;
    /// The form in which items are compared, reported and expected alike, so that two reports
    /// that mean the same compare equal. A registry's harness returns
    /// [`Registration::normalized`] (registries such as Consul report endpoints in no
    /// particular order); the default is the item as it is.
    fn canonical(item: Self::Item) -> Self::Item {
        item
    }
    /// Makes the input say something malformed. Returns `false` when this source has no way
    /// to receive bad input (the memory registry); the error check is then skipped.
    fn corrupt(&mut self) -> impl Future<Output = bool> + Send {
        async { false }
    }
    /// Undoes [`Harness::corrupt`].
    fn repair(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Runs every check of the suite, each against a freshly started source.
pub async fn run_all<H: Harness>(harness: &mut H) {
    first_event_is_reset(harness).await;
    changes_are_observed(harness).await;
    unchanged_puts_cause_no_changes(harness).await;
    errors_are_items(harness).await;
    shutdown_is_prompt(harness).await;
}

/// The first item is a `Reset` holding exactly the input's items.
pub async fn first_event_is_reset<H: Harness>(harness: &mut H) {
    let initial = [Fixture::new("alpha", 1, 2), Fixture::new("beta", 2, 1)];
    let source = harness.start(&initial).await;
    let mut obs = Observer::<H>::new(source);
    match obs.next().await {
        Some(Ok(Event::Reset(items))) => {
            let got = state_of::<H>(items);
            let want = expected_state(harness, &initial);
            assert_eq!(
                got, want,
                "the first Reset must hold exactly the input's items"
            );
        }
        other => panic!("the first item must be a Reset, got {other:?}"),
    }
    obs.stop().await;
}

/// Adding, changing and deleting items in the input reaches the consumer.
pub async fn changes_are_observed<H: Harness>(harness: &mut H) {
    let mut alpha = Fixture::new("alpha", 1, 2);
    let beta = Fixture::new("beta", 2, 3);
    let source = harness.start(std::slice::from_ref(&alpha)).await;
    let mut obs = Observer::<H>::new(source);
    obs.converge(
        &expected_state(harness, std::slice::from_ref(&alpha)),
        "initial state",
    )
    .await;

    harness.put(&beta).await;
    obs.converge(
        &expected_state(harness, &[alpha.clone(), beta.clone()]),
        "after adding beta",
    )
    .await;

    alpha.endpoints.push(IpAddr::from([10, 1, 0, 9]));
    alpha.version = "v2".into();
    harness.put(&alpha).await;
    obs.converge(
        &expected_state(harness, &[alpha.clone(), beta.clone()]),
        "after changing alpha",
    )
    .await;

    harness.delete(&beta).await;
    obs.converge(
        &expected_state(harness, std::slice::from_ref(&alpha)),
        "after deleting beta",
    )
    .await;
    obs.stop().await;
}

/// Writing an item again unchanged produces no event that changes it.
pub async fn unchanged_puts_cause_no_changes<H: Harness>(harness: &mut H) {
    let alpha = Fixture::new("alpha", 1, 2);
    let sentinel = Fixture::new("sentinel", 3, 1);
    let source = harness.start(std::slice::from_ref(&alpha)).await;
    let mut obs = Observer::<H>::new(source);
    let before = expected_state(harness, std::slice::from_ref(&alpha));
    obs.converge(&before, "initial state").await;
    harness.put(&alpha).await;
    harness.put(&sentinel).await;
    let alpha_key = harness.expected(&alpha).key();
    let alpha_item = before.get(&alpha_key).cloned();
    let want = expected_state(harness, &[alpha, sentinel]);
    while obs.state != want {
        obs.step("waiting for the sentinel after an unchanged put")
            .await;
        assert_eq!(
            obs.state.get(&alpha_key),
            alpha_item.as_ref(),
            "an unchanged put must not change the item"
        );
    }
    obs.stop().await;
}

/// A malformed input yields an error item; the stream goes on, the last good state stays,
/// and the source recovers once the input is repaired.
pub async fn errors_are_items<H: Harness>(harness: &mut H) {
    let alpha = Fixture::new("alpha", 1, 2);
    let source = harness.start(std::slice::from_ref(&alpha)).await;
    let mut obs = Observer::<H>::new(source);
    let good = expected_state(harness, std::slice::from_ref(&alpha));
    obs.converge(&good, "initial state").await;
    if !harness.corrupt().await {
        obs.stop().await;
        return;
    }
    while obs.errors.is_empty() {
        obs.step("waiting for an error item after corrupting the source")
            .await;
        assert_eq!(
            obs.state, good,
            "a malformed source must not change the last good state"
        );
    }
    assert_eq!(
        obs.state, good,
        "a malformed source must not change the last good state"
    );
    harness.repair().await;
    let beta = Fixture::new("beta", 2, 1);
    harness.put(&beta).await;
    obs.converge(
        &expected_state(harness, &[alpha, beta]),
        "after repairing the source",
    )
    .await;
    obs.stop().await;
}

/// After shutdown the stream ends within [`SHUTDOWN_DEADLINE`].
pub async fn shutdown_is_prompt<H: Harness>(harness: &mut H) {
    let alpha = Fixture::new("alpha", 1, 1);
    let source = harness.start(std::slice::from_ref(&alpha)).await;
    let mut obs = Observer::<H>::new(source);
    obs.converge(&expected_state(harness, &[alpha]), "initial state")
        .await;
    obs.stop().await;
}

/// The items of a source, by key.
type State<H> = BTreeMap<<<H as Harness>::Item as Item>::Key, <H as Harness>::Item>;

fn expected_state<H: Harness>(harness: &H, fixtures: &[Fixture]) -> State<H> {
    state_of::<H>(fixtures.iter().map(|f| harness.expected(f)).collect())
}

fn state_of<H: Harness>(items: Vec<H::Item>) -> State<H> {
    items
        .into_iter()
        .map(|item| (item.key(), H::canonical(item)))
        .collect()
}

/// Consumes a source's stream the way the aggregate does and records what it saw.
struct Observer<H: Harness> {
    stream: EventStream<H::Item>,
    shutdown: CancellationToken,
    state: State<H>,
    errors: Vec<RegistryError>,
    seen_reset: bool,
}

impl<H: Harness> Observer<H> {
    fn new(source: Box<dyn Source<H::Item>>) -> Self {
        let shutdown = CancellationToken::new();
        let stream = source.watch(shutdown.clone());
        Self {
            stream,
            shutdown,
            state: BTreeMap::new(),
            errors: Vec::new(),
            seen_reset: false,
        }
    }

    async fn next(&mut self) -> Option<Result<Event<H::Item>, RegistryError>> {
        match tokio::time::timeout(CHANGE_DEADLINE, self.stream.next()).await {
            Ok(item) => item,
            Err(_) => panic!("no item from the source within {CHANGE_DEADLINE:?}"),
        }
    }

    /// Applies one item; fails if the stream ends or stays silent.
    async fn step(&mut self, what: &str) {
        let item = match tokio::time::timeout(CHANGE_DEADLINE, self.stream.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => panic!("{what}: the stream ended before shutdown"),
            Err(_) => panic!(
                "{what}: nothing within {CHANGE_DEADLINE:?}; state is {:#?}",
                self.state.keys().collect::<Vec<_>>()
            ),
        };
        match item {
            Ok(Event::Reset(items)) => {
                self.seen_reset = true;
                self.state = state_of::<H>(items);
            }
            Ok(event) => {
                assert!(
                    self.seen_reset,
                    "{what}: {event:?} arrived before the first Reset"
                );
                match event {
                    Event::Upsert(item) => {
                        self.state.insert(item.key(), H::canonical(item));
                    }
                    Event::Remove(key) => {
                        self.state.remove(&key);
                    }
                    Event::Batch { removes, upserts } => {
                        for key in removes {
                            self.state.remove(&key);
                        }
                        for item in upserts {
                            self.state.insert(item.key(), H::canonical(item));
                        }
                    }
                    Event::Refused(_) | Event::Recovered => {}
                    Event::Reset(_) => unreachable!("handled above"),
                }
            }
            Err(err) => self.errors.push(err),
        }
    }

    async fn converge(&mut self, want: &State<H>, what: &str) {
        let deadline = tokio::time::Instant::now() + CHANGE_DEADLINE;
        while !self.seen_reset || &self.state != want {
            if tokio::time::Instant::now() > deadline {
                assert_eq!(&self.state, want, "{what}: the source did not converge");
            }
            self.step(what).await;
        }
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        let ended = tokio::time::timeout(SHUTDOWN_DEADLINE, async {
            while self.stream.next().await.is_some() {}
        })
        .await;
        assert!(
            ended.is_ok(),
            "the stream did not end within {SHUTDOWN_DEADLINE:?} of shutdown"
        );
    }
}
