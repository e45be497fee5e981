//! The coordinator's side of the phases: collecting what clients report, writing changes,
//! and turning receipts into latencies.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::time::timeout;

use crate::args::Kind;
use crate::fleet::{Event, Fleet, Pending};
use crate::load::{Logs, log_secs};
use crate::mesh::{self, Mesh};

/// Everything clients reported so far.
pub(crate) struct Collector {
    events: mpsc::UnboundedReceiver<Event>,
    /// Client → (connect started, initial configuration acknowledged).
    initial: HashMap<usize, (Instant, Instant)>,
    failed: HashMap<usize, String>,
    /// Change → client → first receipt of its endpoints.
    converged: HashMap<usize, HashMap<usize, Instant>>,
}

/// What the initial phase measured for a set of clients.
pub(crate) struct Initial {
    /// Per client, milliseconds from its own connect to its complete, acknowledged config.
    pub(crate) per_client_ms: Vec<f64>,
    /// Milliseconds from the first connect to the last complete client (all, or the timeout).
    pub(crate) all_done_ms: f64,
    pub(crate) failed: usize,
    /// The first failure's message, if any.
    pub(crate) first_error: Option<String>,
}

/// What the churn phase measured.
pub(crate) struct Churn {
    /// Milliseconds from a file's rename to each subscribed client's receipt.
    pub(crate) latency_ms: Vec<f64>,
    /// (change, client) pairs that should have received the change.
    pub(crate) expected: usize,
    /// Milliseconds from a file's rename to the server's "snapshot published" line.
    pub(crate) snapshot_ms: Vec<f64>,
}

impl Collector {
    pub(crate) fn new(events: mpsc::UnboundedReceiver<Event>) -> Self {
        Self {
            events,
            initial: HashMap::new(),
            failed: HashMap::new(),
            converged: HashMap::new(),
        }
    }

    fn take(&mut self, e: Event) {
        match e {
            Event::Initial {
                client,
                started,
                at,
            } => {
                self.initial.insert(client, (started, at));
            }
            Event::Converged { change, client, at } => {
                self.converged
                    .entry(change)
                    .or_default()
                    .entry(client)
                    .or_insert(at);
            }
            Event::Failed { client, error } => {
                self.failed.insert(client, error);
            }
        }
    }

    /// Takes events until `done` says so or `deadline` passes. `done` is asked again only
    /// after every event already queued is taken, so a burst costs one evaluation.
    async fn until(&mut self, deadline: Instant, done: impl Fn(&Self) -> bool) {
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match timeout(left, self.events.recv()).await {
                Ok(Some(e)) => self.take(e),
                Ok(None) | Err(_) => return,
            }
            while let Ok(e) = self.events.try_recv() {
                self.take(e);
            }
        }
    }

    fn live(&self, id: usize) -> bool {
        !self.failed.contains_key(&id)
    }
}

/// Starts clients `ids` and waits until each has its initial configuration or failed.
pub(crate) async fn initial(fleet: &Arc<Fleet>, c: &mut Collector, ids: Range<usize>) -> Initial {
    let start = Instant::now();
    fleet.spawn(ids.clone());
    let deadline = start + fleet.args.timeout + connect_time(fleet, ids.len());
    let finished = |c: &Collector, id| c.initial.contains_key(&id) || !c.live(id);
    c.until(deadline, |c| ids.clone().all(|id| finished(c, id)))
        .await;
    let done: Vec<_> = ids.clone().filter_map(|id| c.initial.get(&id)).collect();
    Initial {
        per_client_ms: done
            .iter()
            .map(|(s, at)| ms(at.duration_since(*s)))
            .collect(),
        all_done_ms: ms(done
            .iter()
            .map(|(_, at)| *at)
            .max()
            .unwrap_or(start)
            .duration_since(start)),
        failed: ids.clone().filter(|id| c.failed.contains_key(id)).count(),
        first_error: ids.clone().find_map(|id| c.failed.get(&id).cloned()),
    }
}

/// How long connecting `n` clients takes at `--connect-rate`.
fn connect_time(fleet: &Fleet, n: usize) -> Duration {
    fleet
        .args
        .connect_rate
        .map_or(Duration::ZERO, |r| Duration::from_secs_f64(n as f64 / r))
}

/// Writes `--changes` endpoint changes, one at a time or at `--rate`, and measures each
/// subscribed client's receipt. `log_from`: the index of the first server log line written
/// after the initial registry load.
pub(crate) async fn churn(
    fleet: &Arc<Fleet>,
    c: &mut Collector,
    mesh: &Arc<Mutex<Mesh>>,
    logs: &Logs,
    log_from: usize,
) -> Churn {
    let a = &fleet.args;
    // gRPC clients dial only their windows: change services someone dials.
    let eligible = match a.kind {
        Kind::Sidecar => a.services,
        Kind::Grpc => a.services.min(a.clients * a.grpc_targets),
    };
    let clients = 0..a.clients;
    let mut written = Vec::new();
    let start = Instant::now();
    for k in 1..=a.changes {
        if let Some(rate) = a.rate {
            let at = start + Duration::from_secs_f64((k - 1) as f64 / rate);
            tokio::time::sleep_until(at.into()).await;
        }
        let s = (k * 397 + 17) % eligible;
        let subscribers: HashSet<usize> = clients
            .clone()
            .filter(|id| c.live(*id) && fleet.subscribes(*id, s))
            .collect();
        let address = mesh.lock().unwrap().change(s, k);
        fleet.expect(Pending {
            change: k,
            cluster: mesh::cluster(s),
            address,
        });
        let m = mesh.clone();
        let (at, wall) = tokio::task::spawn_blocking(move || m.lock().unwrap().flush(s))
            .await
            .unwrap();
        if a.rate.is_none() {
            let deadline = at + a.timeout;
            c.until(deadline, |c| {
                settled(c, k, &subscribers) >= subscribers.len()
            })
            .await;
            fleet.forget(k);
        }
        written.push(Written {
            change: k,
            service: s,
            at,
            wall,
            subscribers,
        });
    }
    if a.rate.is_some() {
        let deadline = Instant::now() + a.timeout;
        c.until(deadline, |c| {
            written
                .iter()
                .all(|w| settled(c, w.change, &w.subscribers) >= w.subscribers.len())
        })
        .await;
    }
    fleet.forget_all();

    let mut out = Churn {
        latency_ms: Vec::new(),
        expected: 0,
        snapshot_ms: Vec::new(),
    };
    // Where each service's last "registry change" line was found: changes are searched from
    // there, as a file read may log several services in another order than they were written.
    let mut cursors: HashMap<usize, usize> = HashMap::new();
    // The server's log is read by another task: wait (once) until it has the last change's
    // publication, so that every earlier line is in.
    if let Some(last) = written.last() {
        let host = mesh::hostname(last.service);
        let change = |l: &serde_json::Value| {
            l["message"] == "registry change"
                && l["service"]
                    .as_str()
                    .is_some_and(|s| s.ends_with(host.as_str()))
        };
        if let Ok((i, _)) = timeout(Duration::from_secs(1), logs.wait(log_from, change)).await {
            let published = |l: &serde_json::Value| l["message"] == "snapshot published";
            let _ = timeout(Duration::from_secs(1), logs.wait(i, published)).await;
        }
    }
    for w in &written {
        out.expected += w.subscribers.len();
        if let Some(got) = c.converged.get(&w.change) {
            let mine = got.iter().filter(|(id, _)| w.subscribers.contains(id));
            out.latency_ms
                .extend(mine.map(|(_, t)| ms(t.saturating_duration_since(w.at))));
        }
        let from = cursors.get(&w.service).copied().unwrap_or(log_from);
        if let Some((i, line)) = snapshot_line(logs, from, &mesh::hostname(w.service)) {
            cursors.insert(w.service, i);
            out.snapshot_ms.push((log_secs(&line) - w.wall) * 1000.0);
        }
    }
    out
}

/// One change as written.
struct Written {
    change: usize,
    service: usize,
    /// When the rename returned.
    at: Instant,
    /// The same, in seconds since the epoch (to compare with the server's log).
    wall: f64,
    /// The live clients subscribed to the service at the time.
    subscribers: HashSet<usize>,
}

/// How many of `subscribers` received change `k` or failed (and never will). Only clients
/// that subscribe to a service receive its endpoints, so receipts need no filtering here.
fn settled(c: &Collector, k: usize, subscribers: &HashSet<usize>) -> usize {
    let got = c.converged.get(&k);
    let received = got.map_or(0, HashMap::len);
    let failed = c.failed.keys().filter(|id| subscribers.contains(id));
    received
        + failed
            .filter(|id| !got.is_some_and(|g| g.contains_key(id)))
            .count()
}

/// The server's "registry change" line for `host` at or after `from`, and the first
/// "snapshot published" line after it: returns the index after the first line, and the
/// second line. None if the server logged no change for it (two changes read at once, or a
/// change still in a batch when churn ended). Read after the receipts are in, so the lines are
/// already logged: nothing is waited for (waiting a second for each change a batch swallowed
/// made `--rate` runs take hours to report).
fn snapshot_line(logs: &Logs, from: usize, host: &str) -> Option<(usize, serde_json::Value)> {
    let change = |l: &serde_json::Value| {
        l["message"] == "registry change"
            && l["service"].as_str().is_some_and(|s| s.ends_with(host))
    };
    let (i, _) = logs.find(from, change)?;
    let published = |l: &serde_json::Value| l["message"] == "snapshot published";
    let (_, line) = logs.find(i, published)?;
    Some((i + 1, line))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
