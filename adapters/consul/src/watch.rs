//! The supervisor: starts and stops one watch per datacenter catalog and one per service,
//! keeps what each last said, and turns changes into events of the registry's stream.
//!
//! Watches run as tasks and report to the supervisor over a channel; the supervisor alone
//! holds state, so the rules of the [`Event`] contract (first a `Reset`, then only changes;
//! errors as items; `Recovered`) are kept in one place.

mod poll;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use wayfinder_registry::{
    CancellationToken, Event, EventStream, Registration, RegistryError, ServiceKey,
};

use crate::Datacenters;
use crate::api::{CatalogServices, HealthEntry};
use crate::client::{Client, Query};
use crate::convert::{Instance, Mapping, registration};
use poll::Mode;

/// How often `Datacenters::All` re-reads the datacenter list (it cannot block).
const DATACENTER_REFRESH: Duration = Duration::from_secs(60);
/// While errors keep their wording, one is sent this often rather than one per watch.
const ERROR_REPEAT: Duration = Duration::from_secs(10);
/// Consul's own service (its servers' RPC port) is not a service of the mesh.
const CONSUL_SERVICE: &str = "consul";

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
    mapping: Mapping,
    mode: Mode,
    datacenters: Datacenters,
    reports: mpsc::Sender<Report>,
    inbox: Option<mpsc::Receiver<Report>>,
    tasks: BTreeMap<TaskKey, Task>,
    generation: u64,
    /// Whether the datacenter list is known.
    dcs_known: bool,
    /// Each datacenter's service names; `None` until its catalog answered.
    catalogs: BTreeMap<Dc, Option<BTreeSet<Arc<str>>>>,
    /// Each watched service's mapped instances; `None` until it answered.
    services: BTreeMap<WatchKey, Option<Vec<Instance>>>,
    /// Which watched services have instances under each model key.
    contributors: BTreeMap<ServiceKey, BTreeSet<WatchKey>>,
    /// What the consumer holds (or will, at the first `Reset`).
    sent: BTreeMap<ServiceKey, Registration>,
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
            mapping: setup.mapping,
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
            dcs_known: false,
            catalogs: BTreeMap::new(),
            services: BTreeMap::new(),
            contributors: BTreeMap::new(),
            sent: BTreeMap::new(),
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
                self.set_datacenters(vec![None]);
            }
            Datacenters::List(list) => {
                self.set_datacenters(list.into_iter().map(|d| Some(d.into())).collect());
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
        let changed: BTreeSet<ServiceKey> = match (task, answer) {
            (TaskKey::Datacenters, Answer::Datacenters(list)) => {
                self.set_datacenters(list.into_iter().map(|d| Some(d.into())).collect())
            }
            (TaskKey::Catalog(dc), Answer::Catalog(names)) => self.set_catalog(dc, names),
            (TaskKey::Health(key), Answer::Health(entries)) => {
                self.set_service(key, &entries, &mut invalid)
            }
            _ => BTreeSet::new(),
        };
        let events = self.recompute(changed, &mut invalid);
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
        } else if self.synced() {
            self.started = true;
            let all = self.sent.values().cloned().collect();
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

    fn synced(&self) -> bool {
        self.dcs_known
            && self.catalogs.values().all(Option::is_some)
            && self.services.values().all(Option::is_some)
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

    /// Starts catalog watches for new datacenters and forgets the ones that are gone.
    fn set_datacenters(&mut self, dcs: Vec<Dc>) -> BTreeSet<ServiceKey> {
        self.dcs_known = true;
        let wanted: BTreeSet<Dc> = dcs.into_iter().collect();
        for dc in &wanted {
            if !self.catalogs.contains_key(dc) {
                self.catalogs.insert(dc.clone(), None);
                self.spawn(TaskKey::Catalog(dc.clone()));
            }
        }
        let gone: Vec<Dc> = self
            .catalogs
            .keys()
            .filter(|dc| !wanted.contains(*dc))
            .cloned()
            .collect();
        let mut changed = BTreeSet::new();
        for dc in gone {
            self.catalogs.remove(&dc);
            self.stop(&TaskKey::Catalog(dc.clone()));
            changed.extend(self.set_catalog_names(&dc, BTreeSet::new()));
        }
        changed
    }

    fn set_catalog(&mut self, dc: Dc, names: CatalogServices) -> BTreeSet<ServiceKey> {
        let names = names
            .into_keys()
            .filter(|n| n != CONSUL_SERVICE)
            .map(Arc::from)
            .collect();
        self.set_catalog_names(&dc, names)
    }

    /// Starts a watch per new service of `dc` and stops those of services that are gone.
    fn set_catalog_names(&mut self, dc: &Dc, names: BTreeSet<Arc<str>>) -> BTreeSet<ServiceKey> {
        for service in &names {
            let key = WatchKey {
                dc: dc.clone(),
                service: service.clone(),
            };
            if !self.services.contains_key(&key) {
                self.services.insert(key.clone(), None);
                self.spawn(TaskKey::Health(key));
            }
        }
        let gone: Vec<WatchKey> = self
            .services
            .keys()
            .filter(|k| &k.dc == dc && !names.contains(&k.service))
            .cloned()
            .collect();
        let mut changed = BTreeSet::new();
        for key in gone {
            self.stop(&TaskKey::Health(key.clone()));
            if let Some(Some(old)) = self.services.remove(&key) {
                changed.extend(self.unlink(&key, &old));
            }
        }
        if self.catalogs.contains_key(dc) {
            self.catalogs.insert(dc.clone(), Some(names));
        }
        changed
    }

    fn set_service(
        &mut self,
        key: WatchKey,
        entries: &[HealthEntry],
        invalid: &mut Vec<RegistryError>,
    ) -> BTreeSet<ServiceKey> {
        let (instances, errors) = self.mapping.instances(entries, key.dc.as_deref());
        let origin = self.origin(&key);
        invalid.extend(errors.into_iter().map(|detail| RegistryError::Invalid {
            origin: origin.clone(),
            detail,
        }));
        let Some(slot) = self.services.get_mut(&key) else {
            return BTreeSet::new();
        };
        if slot.as_ref() == Some(&instances) {
            return BTreeSet::new();
        }
        let old = slot.replace(instances.clone()).unwrap_or_default();
        let mut changed = self.unlink(&key, &old);
        for i in &instances {
            self.contributors
                .entry(i.key.clone())
                .or_default()
                .insert(key.clone());
            changed.insert(i.key.clone());
        }
        changed
    }

    /// Forgets that `key` contributed `old` and returns the model keys that touches.
    fn unlink(&mut self, key: &WatchKey, old: &[Instance]) -> BTreeSet<ServiceKey> {
        let mut changed = BTreeSet::new();
        for i in old {
            if let Some(set) = self.contributors.get_mut(&i.key) {
                set.remove(key);
                if set.is_empty() {
                    self.contributors.remove(&i.key);
                }
            }
            changed.insert(i.key.clone());
        }
        changed
    }

    /// The new registration of each changed key, as the events that bring the consumer there.
    fn recompute(
        &mut self,
        changed: BTreeSet<ServiceKey>,
        invalid: &mut Vec<RegistryError>,
    ) -> Vec<Event> {
        let mut events = Vec::new();
        for key in changed {
            let watches = self.contributors.get(&key);
            let instances = watches
                .into_iter()
                .flatten()
                .filter_map(|w| self.services.get(w).and_then(Option::as_ref))
                .flatten()
                .filter(|i| i.key == key);
            match registration(&key, instances) {
                None => {
                    if self.sent.remove(&key).is_some() {
                        events.push(Event::Remove(key));
                    }
                }
                Some(reg) => {
                    if let Err(e) = reg.validate() {
                        invalid.push(RegistryError::Invalid {
                            origin: format!("consul service {key}"),
                            detail: e.to_string(),
                        });
                    } else if self.sent.get(&key) != Some(&reg) {
                        self.sent.insert(key, reg.clone());
                        events.push(Event::Upsert(reg));
                    }
                }
            }
        }
        events
    }

    fn stop(&mut self, task: &TaskKey) {
        self.tasks.remove(task);
        self.failing.remove(task);
    }

    fn origin(&self, key: &WatchKey) -> String {
        self.client.origin(&Query {
            path: format!("health/service/{}", key.service),
            dc: key.dc.as_deref().map(str::to_string),
        })
    }
}
