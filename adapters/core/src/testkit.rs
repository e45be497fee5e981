//! The conformance suite every adapter's tests run.
//!
//! An adapter's test implements [`Harness`] (how to start its registry over a source it
//! controls, and how to change that source) and calls [`run_all`]. The suite checks the
//! contract written on [`Event`]: the first event is a `Reset`, changes to the source arrive as
//! events that leave the consumer's view equal to the source, unchanged services cause no
//! spurious changes, errors are items that keep the last good state, and shutdown is prompt.
//!
//! Services are described by [`Fixture`]s, which every registry can express; the harness maps
//! a fixture to its source's format (a ServiceEntry file, a Consul catalog entry) and says which
//! [`Registration`] the registry should report for it.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use futures::StreamExt;

use crate::{
    CancellationToken, Event, EventStream, Registration, Registry, RegistryError, ServiceKey,
};

/// How long the suite waits for a registry to show a change before failing.
pub const CHANGE_DEADLINE: Duration = Duration::from_secs(10);
/// How long a registry may take to end its stream after shutdown.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// A service in a form every registry can express: a name, one port, some endpoint IPs and a
/// `version` label on the endpoints.
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
    /// Prepares a fresh source holding `initial` and returns a registry watching it.
    fn start(&mut self, initial: &[Fixture]) -> impl Future<Output = Box<dyn Registry>> + Send;
    /// Creates or replaces a fixture in the source.
    fn put(&mut self, fixture: &Fixture) -> impl Future<Output = ()> + Send;
    /// Deletes a fixture from the source.
    fn delete(&mut self, fixture: &Fixture) -> impl Future<Output = ()> + Send;
    /// The registration the registry should report for a fixture.
    fn expected(&self, fixture: &Fixture) -> Registration;
    /// Makes the source answer something malformed. Returns `false` when this registry has
    /// no way to receive bad input (the memory registry); the error check is then skipped.
    fn corrupt(&mut self) -> impl Future<Output = bool> + Send {
        async { false }
    }
    /// Undoes [`Harness::corrupt`].
    fn repair(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Runs every check of the suite, each against a freshly started registry.
pub async fn run_all<H: Harness>(harness: &mut H) {
    first_event_is_reset(harness).await;
    changes_are_observed(harness).await;
    unchanged_puts_cause_no_changes(harness).await;
    errors_are_items(harness).await;
    shutdown_is_prompt(harness).await;
}

/// The first item is a `Reset` holding exactly the source's services.
pub async fn first_event_is_reset<H: Harness>(harness: &mut H) {
    let initial = [Fixture::new("alpha", 1, 2), Fixture::new("beta", 2, 1)];
    let registry = harness.start(&initial).await;
    let mut obs = Observer::new(registry);
    match obs.next().await {
        Some(Ok(Event::Reset(regs))) => {
            let got = state_of(regs);
            let want = expected_state(harness, &initial);
            assert_eq!(
                got, want,
                "the first Reset must hold exactly the source's services"
            );
        }
        other => panic!("the first item must be a Reset, got {other:?}"),
    }
    obs.stop().await;
}

/// Adding, changing and deleting services in the source reaches the consumer.
pub async fn changes_are_observed<H: Harness>(harness: &mut H) {
    let mut alpha = Fixture::new("alpha", 1, 2);
    let beta = Fixture::new("beta", 2, 3);
    let registry = harness.start(std::slice::from_ref(&alpha)).await;
    let mut obs = Observer::new(registry);
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

/// Writing a service again unchanged produces no event that changes it.
pub async fn unchanged_puts_cause_no_changes<H: Harness>(harness: &mut H) {
    let alpha = Fixture::new("alpha", 1, 2);
    let sentinel = Fixture::new("sentinel", 3, 1);
    let registry = harness.start(std::slice::from_ref(&alpha)).await;
    let mut obs = Observer::new(registry);
    let before = expected_state(harness, std::slice::from_ref(&alpha));
    obs.converge(&before, "initial state").await;
    harness.put(&alpha).await;
    harness.put(&sentinel).await;
    let alpha_key = harness.expected(&alpha).key();
    let alpha_reg = before.get(&alpha_key).cloned();
    let want = expected_state(harness, &[alpha, sentinel]);
    while obs.state != want {
        obs.step("waiting for the sentinel after an unchanged put")
            .await;
        assert_eq!(
            obs.state.get(&alpha_key),
            alpha_reg.as_ref(),
            "an unchanged put must not change the service"
        );
    }
    obs.stop().await;
}

/// A malformed source yields an error item; the stream goes on, the last good state stays,
/// and the registry recovers once the source is repaired.
pub async fn errors_are_items<H: Harness>(harness: &mut H) {
    let alpha = Fixture::new("alpha", 1, 2);
    let registry = harness.start(std::slice::from_ref(&alpha)).await;
    let mut obs = Observer::new(registry);
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
    let registry = harness.start(std::slice::from_ref(&alpha)).await;
    let mut obs = Observer::new(registry);
    obs.converge(&expected_state(harness, &[alpha]), "initial state")
        .await;
    obs.stop().await;
}

fn expected_state<H: Harness>(
    harness: &H,
    fixtures: &[Fixture],
) -> BTreeMap<ServiceKey, Registration> {
    state_of(fixtures.iter().map(|f| harness.expected(f)).collect())
}

fn state_of(regs: Vec<Registration>) -> BTreeMap<ServiceKey, Registration> {
    regs.into_iter()
        .map(|r| (r.key(), r.normalized()))
        .collect()
}

/// Consumes a registry's stream the way the aggregate does and records what it saw.
struct Observer {
    stream: EventStream,
    shutdown: CancellationToken,
    state: BTreeMap<ServiceKey, Registration>,
    errors: Vec<RegistryError>,
    seen_reset: bool,
}

impl Observer {
    fn new(registry: Box<dyn Registry>) -> Self {
        let shutdown = CancellationToken::new();
        let stream = registry.watch(shutdown.clone());
        Self {
            stream,
            shutdown,
            state: BTreeMap::new(),
            errors: Vec::new(),
            seen_reset: false,
        }
    }

    async fn next(&mut self) -> Option<Result<Event, RegistryError>> {
        match tokio::time::timeout(CHANGE_DEADLINE, self.stream.next()).await {
            Ok(item) => item,
            Err(_) => panic!("no item from the registry within {CHANGE_DEADLINE:?}"),
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
            Ok(Event::Reset(regs)) => {
                self.seen_reset = true;
                self.state = state_of(regs);
            }
            Ok(event) => {
                assert!(
                    self.seen_reset,
                    "{what}: {event:?} arrived before the first Reset"
                );
                match event {
                    Event::Upsert(reg) => {
                        self.state.insert(reg.key(), reg.normalized());
                    }
                    Event::Remove(key) => {
                        self.state.remove(&key);
                    }
                    Event::Batch { removes, upserts } => {
                        for key in removes {
                            self.state.remove(&key);
                        }
                        for reg in upserts {
                            self.state.insert(reg.key(), reg.normalized());
                        }
                    }
                    Event::Refused(_) | Event::Recovered => {}
                    Event::Reset(_) => unreachable!("handled above"),
                }
            }
            Err(err) => self.errors.push(err),
        }
    }

    async fn converge(&mut self, want: &BTreeMap<ServiceKey, Registration>, what: &str) {
        let deadline = tokio::time::Instant::now() + CHANGE_DEADLINE;
        while !self.seen_reset || &self.state != want {
            if tokio::time::Instant::now() > deadline {
                assert_eq!(&self.state, want, "{what}: the registry did not converge");
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
