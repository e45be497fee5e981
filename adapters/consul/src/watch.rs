//! The supervisor: starts and stops one watch per datacenter catalog and one per service,
//! keeps what each last said, and turns changes into events of the registry's stream.
//!
//! Watches run as tasks and report to the supervisor over a channel; the supervisor alone
//! holds state, so the rules of the [`Event`] contract (first a `Reset`, then only changes;
//! errors as items; `Recovered`) are kept in one place.

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
use crate::client::{Client, Query};
use crate::convert::Mapping;
use poll::Mode;
use state::{Effects, State};

/// How often `Datacenters::All` re-reads the datacenter list (it cannot block).
const DATACENTER_REFRESH: Duration = Duration::from_secs(60);
/// While errors keep their wording, one is sent this often rather than one per watch.
const ERROR_REPEAT: Duration = Duration::from_secs(10);

/// What the registry was configured with.
pub(crate) struct Setup {
    pub(crate) client: Client,
    pub(crate) mapping: Mapping,
    pub(crate) interval: Duration,
    pub(crate) datacenters: Datacenters,
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
}

enum Answer {
    Datacenters(Vec<String>),
    Catalog(CatalogServices),
    Health(Vec<HealthEntry>),
}

struct Report {
    task: TaskKey,
    /// Which start of the task sent it, so that a report of a stopped watch is ignored.
    generation: u64,
    result: Result<Answer, RegistryError>,
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
    reports: mpsc::Sender<Report>,
    inbox: Option<mpsc::Receiver<Report>>,
    tasks: BTreeMap<TaskKey, Task>,
    generation: u64,
    state: State,
    /// Whether the first `Reset` went out.
    started: bool,
    /// The last error of each watch that is failing now.
    failing: BTreeMap<TaskKey, RegistryError>,
    gate: ErrorGate,
    out: mpsc::Sender<Result<Event, RegistryError>>,
}

/// The consumer's view of the registry's health, and the rule against error floods.
#[derive(Default)]
struct ErrorGate {
    /// Whether the last item sent was an error.
    degraded: bool,
    last: Option<(String, Instant)>,
}

impl ErrorGate {
    fn admits(&self, err: &RegistryError) -> bool {
        let detail = detail(err);
        match &self.last {
            Some((d, at)) if self.degraded => d != detail || at.elapsed() >= ERROR_REPEAT,
            _ => true,
        }
    }
}

fn detail(err: &RegistryError) -> &str {
    match err {
        RegistryError::Malformed { detail, .. }
        | RegistryError::Invalid { detail, .. }
        | RegistryError::Unavailable { detail, .. } => detail,
    }
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
            reports,
            inbox: Some(inbox),
            tasks: BTreeMap::new(),
            generation: 0,
            state: State::new(setup.mapping),
            started: false,
            failing: BTreeMap::new(),
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
        let answer = match report.result {
            Ok(answer) => answer,
            Err(err) => {
                self.failing.insert(task, err.clone());
                return self.error(err, false).await;
            }
        };
        let was_failing = self.failing.remove(&task).is_some();
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
        if let Some(err) = self.failing.values().next().cloned() {
            if sent_ok {
                // A change while other watches fail must not read as a recovery.
                self.error(err, true).await?;
            }
        } else if !sent_ok && was_failing && self.gate.degraded {
            self.send(Ok(Event::Recovered)).await?;
        }
        Ok(())
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
                    wrap(r.map(Answer::Datacenters))
                }))
            }
            TaskKey::Catalog(dc) => {
                let query = Query {
                    path: "catalog/services".into(),
                    dc: dc.as_deref().map(str::to_string),
                };
                tokio::spawn(poll::run(client, query, self.mode, tx, move |r| {
                    wrap(r.map(Answer::Catalog))
                }))
            }
            TaskKey::Health(w) => {
                let query = Query {
                    path: format!("health/service/{}", w.service),
                    dc: w.dc.as_deref().map(str::to_string),
                };
                tokio::spawn(poll::run(client, query, self.mode, tx, move |r| {
                    wrap(r.map(Answer::Health))
                }))
            }
        };
        self.tasks.insert(task, Task { generation, handle });
    }

    /// Starts and stops the watches an answer asks for.
    fn apply(&mut self, fx: &Effects) {
        for task in &fx.stop {
            self.tasks.remove(task);
            self.failing.remove(task);
        }
        for task in &fx.start {
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
