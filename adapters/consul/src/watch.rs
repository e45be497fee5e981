//! The supervisor: starts and stops one watch per datacenter catalog and one per service,
//! keeps what each last said, and turns changes into events of the registry's stream.
//!
//! Watches run as tasks and report to the supervisor over a channel; the supervisor alone
//! holds state, so the rules of the [`Event`] contract (first a `Reset`, then only changes;
//! errors as items; `Recovered`) are kept in one place. Beside the watches, one liveness probe
//! per datacenter reports whether Consul still answers new requests and knows its leader; the
//! registry counts as failing while a watch fails, a probe fails, or the last answer from a
//! datacenter came without a known leader.

#[cfg(feature = "fuzzing")]
pub mod fuzz;
mod gate;
mod liveness;
mod poll;
mod state;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use wayfinder_registry::{CancellationToken, Event, EventStream, RegistryError};

use crate::Datacenters;
use crate::api::{CatalogServices, HealthEntry};
use crate::client::{Client, Leader, Query};
use crate::convert::Mapping;
use gate::{ErrorGate, detail};
use poll::Mode;
use state::{Effects, State};

/// How often `Datacenters::All` re-reads the datacenter list (it cannot block).
const DATACENTER_REFRESH: Duration = Duration::from_secs(60);

/// What the registry was configured with.
pub(crate) struct Setup {
    pub(crate) client: Client,
    pub(crate) mapping: Mapping,
    pub(crate) interval: Duration,
    pub(crate) datacenters: Datacenters,
    /// Period of the liveness probe; zero: no probe.
    pub(crate) liveness: Duration,
}

/// Starts watching on the stream's first poll and returns the stream.
pub(crate) fn start(setup: Setup, shutdown: CancellationToken) -> EventStream {
    futures::stream::once(async move {
        let (out, rx) = mpsc::channel(256);
        tokio::spawn(Supervisor::new(setup, out).run(shutdown));
        ReceiverStream::new(rx)
    })
    .flatten()
    .boxed()
}

/// A datacenter: `None` is the agent's own.
type Dc = Option<Arc<str>>;

/// One service in one datacenter.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct WatchKey {
    dc: Dc,
    service: Arc<str>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TaskKey {
    Datacenters,
    Catalog(Dc),
    Health(WatchKey),
    /// The liveness probe of a datacenter.
    Liveness(Dc),
}

impl TaskKey {
    /// The datacenter the task reads, if it reads one.
    fn dc(&self) -> Option<&Dc> {
        match self {
            TaskKey::Datacenters => None,
            TaskKey::Catalog(dc) | TaskKey::Liveness(dc) => Some(dc),
            TaskKey::Health(w) => Some(&w.dc),
        }
    }
}

enum Answer {
    Datacenters(Vec<String>),
    Catalog(CatalogServices),
    Health(Vec<HealthEntry>),
    /// A probe found a leader.
    Alive,
}

struct Report {
    task: TaskKey,
    /// Which start of the task sent it, so that a report of a stopped watch is ignored.
    generation: u64,
    /// The answer, and what it said of its datacenter's leader.
    result: Result<(Answer, Leader), RegistryError>,
}

/// A running watch, stopped when dropped.
struct Task {
    generation: u64,
    handle: JoinHandle<()>,
}

impl Drop for Task {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

struct Supervisor {
    client: Arc<Client>,
    mode: Mode,
    datacenters: Datacenters,
    liveness: Duration,
    reports: mpsc::Sender<Report>,
    inbox: Option<mpsc::Receiver<Report>>,
    tasks: BTreeMap<TaskKey, Task>,
    generation: u64,
    state: State,
    /// Whether the first `Reset` went out.
    started: bool,
    /// The last error of each watch or probe that is failing now.
    failing: BTreeMap<TaskKey, RegistryError>,
    /// Datacenters whose last answer came without a known leader, with what it said.
    leaderless: BTreeMap<Dc, RegistryError>,
    gate: ErrorGate,
    out: mpsc::Sender<Result<Event, RegistryError>>,
}

/// The consumer went away.
struct Closed;

impl Supervisor {
    fn new(setup: Setup, out: mpsc::Sender<Result<Event, RegistryError>>) -> Self {
        let (reports, inbox) = mpsc::channel(1024);
        Self {
            client: Arc::new(setup.client),
            mode: if setup.interval.is_zero() {
                Mode::Blocking
            } else {
                Mode::Poll(setup.interval)
            },
            datacenters: setup.datacenters,
            liveness: setup.liveness,
            reports,
            inbox: Some(inbox),
            tasks: BTreeMap::new(),
            generation: 0,
            state: State::new(setup.mapping),
            started: false,
            failing: BTreeMap::new(),
            leaderless: BTreeMap::new(),
            gate: ErrorGate::default(),
            out,
        }
    }

    async fn run(mut self, shutdown: CancellationToken) {
        let Some(mut inbox) = self.inbox.take() else {
            return;
        };
        match self.datacenters.clone() {
            Datacenters::Local => {
                let fx = self.state.set_datacenters(vec![None]);
                self.apply(&fx);
            }
            Datacenters::List(list) => {
                let dcs = list.into_iter().map(|d| Some(d.into())).collect();
                let fx = self.state.set_datacenters(dcs);
                self.apply(&fx);
            }
            Datacenters::All => self.spawn(TaskKey::Datacenters),
        }
        loop {
            let report = tokio::select! {
                _ = shutdown.cancelled() => break,
                report = inbox.recv() => report,
            };
            let Some(report) = report else { break };
            if self.handle(report).await.is_err() {
                break;
            }
        }
        // Dropping `self.tasks` stops every watch; dropping `self.out` ends the stream.
    }

    async fn handle(&mut self, report: Report) -> Result<(), Closed> {
        let current = self.tasks.get(&report.task).map(|t| t.generation);
        if current != Some(report.generation) {
            return Ok(());
        }
        let task = report.task;
        let (answer, leader) = match report.result {
            Ok(answer) => answer,
            Err(err) => {
                self.failing.insert(task, err.clone());
                return self.error(err, false).await;
            }
        };
        let mut was_failing = self.failing.remove(&task).is_some();
        was_failing |= self.note_leader(&task, leader);
        let mut invalid = Vec::new();
        let fx = match (task, answer) {
            (TaskKey::Datacenters, Answer::Datacenters(list)) => self
                .state
                .set_datacenters(list.into_iter().map(|d| Some(d.into())).collect()),
            (TaskKey::Catalog(dc), Answer::Catalog(names)) => self.state.set_catalog(dc, names),
            (TaskKey::Health(key), Answer::Health(entries)) => {
                let origin = self.origin(&key);
                self.state.set_service(key, &entries, &origin, &mut invalid)
            }
            _ => Effects::default(),
        };
        self.apply(&fx);
        let events = self.state.recompute(fx.changed, &mut invalid);
        self.publish(events, invalid, was_failing).await
    }

    /// Sends what changed, keeping the consumer's idea of the registry's health true.
    async fn publish(
        &mut self,
        events: Vec<Event>,
        invalid: Vec<RegistryError>,
        was_failing: bool,
    ) -> Result<(), Closed> {
        let sent_ok = if self.started {
            let any = !events.is_empty();
            for event in events {
                self.send(Ok(event)).await?;
            }
            any
        } else if self.state.synced() {
            self.started = true;
            let all = self.state.all();
            self.send(Ok(Event::Reset(all))).await?;
            true
        } else {
            false
        };
        let clean = invalid.is_empty();
        for err in invalid {
            self.error(err, true).await?;
        }
        if !clean || !self.started {
            return Ok(());
        }
        let still = self.failing.values().chain(self.leaderless.values()).next();
        if let Some(err) = still.cloned() {
            // A change while something fails must not read as a recovery; and a failure this
            // answer brought (no known leader) is said even when nothing changed.
            self.error(err, sent_ok).await?;
        } else if !sent_ok && was_failing && self.gate.degraded {
            self.send(Ok(Event::Recovered)).await?;
        }
        Ok(())
    }

    /// Records what an answer said of its datacenter's leader; true if that ends a spell
    /// without one.
    fn note_leader(&mut self, task: &TaskKey, leader: Leader) -> bool {
        let Some(dc) = task.dc() else {
            return false;
        };
        match leader {
            Leader::Known => self.leaderless.remove(dc).is_some(),
            Leader::Unknown(err) => {
                self.leaderless.insert(dc.clone(), err);
                false
            }
            Leader::Unsaid => false,
        }
    }

    async fn error(&mut self, err: RegistryError, always: bool) -> Result<(), Closed> {
        if !always && !self.gate.admits(&err) {
            return Ok(());
        }
        self.gate.last = Some((detail(&err).to_string(), Instant::now()));
        self.send(Err(err)).await
    }

    async fn send(&mut self, item: Result<Event, RegistryError>) -> Result<(), Closed> {
        self.gate.degraded = item.is_err();
        self.out.send(item).await.map_err(|_| Closed)
    }

    fn spawn(&mut self, task: TaskKey) {
        self.generation += 1;
        let generation = self.generation;
        let tx = self.reports.clone();
        let client = self.client.clone();
        let key = task.clone();
        let wrap = move |result| Report {
            task: key.clone(),
            generation,
            result,
        };
        let handle = match &task {
            TaskKey::Datacenters => {
                let query = Query {
                    path: "catalog/datacenters".into(),
                    dc: None,
                };
                let mode = Mode::Poll(DATACENTER_REFRESH);
                tokio::spawn(poll::run(client, query, mode, tx, move |r| {
                    wrap(r.map(|(list, leader)| (Answer::Datacenters(list), leader)))
                }))
            }
            TaskKey::Catalog(dc) => {
                let query = Query {
                    path: "catalog/services".into(),
                    dc: dc.as_deref().map(str::to_string),
                };
                tokio::spawn(poll::run(client, query, self.mode, tx, move |r| {
                    wrap(r.map(|(names, leader)| (Answer::Catalog(names), leader)))
                }))
            }
            TaskKey::Health(w) => {
                let query = Query {
                    path: format!("health/service/{}", w.service),
                    dc: w.dc.as_deref().map(str::to_string),
                };
                tokio::spawn(poll::run(client, query, self.mode, tx, move |r| {
                    wrap(r.map(|(entries, leader)| (Answer::Health(entries), leader)))
                }))
            }
            TaskKey::Liveness(dc) => {
                let dc = dc.as_deref().map(str::to_string);
                tokio::spawn(liveness::run(client, dc, self.liveness, tx, move |r| {
                    wrap(r.map(|()| (Answer::Alive, Leader::Known)))
                }))
            }
        };
        self.tasks.insert(task, Task { generation, handle });
    }

    /// Starts and stops the watches an answer asks for, and with each datacenter's catalog
    /// watch its liveness probe.
    fn apply(&mut self, fx: &Effects) {
        for task in &fx.stop {
            if let TaskKey::Catalog(dc) = task {
                self.tasks.remove(&TaskKey::Liveness(dc.clone()));
                self.failing.remove(&TaskKey::Liveness(dc.clone()));
                self.leaderless.remove(dc);
            }
            self.tasks.remove(task);
            self.failing.remove(task);
        }
        for task in &fx.start {
            if let TaskKey::Catalog(dc) = task
                && !self.liveness.is_zero()
            {
                self.spawn(TaskKey::Liveness(dc.clone()));
            }
            self.spawn(task.clone());
        }
    }

    fn origin(&self, key: &WatchKey) -> String {
        self.client.origin(&Query {
            path: format!("health/service/{}", key.service),
            dc: key.dc.as_deref().map(str::to_string),
        })
    }
}
