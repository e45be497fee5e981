//! Envoy's lifecycle: epochs, hot restarts, crash restarts with backoff, and drain on
//! shutdown, as pilot-agent 1.0's agent ran them.
//!
//! - Each Envoy process is an *epoch*, started with `--restart-epoch N`. A new configuration
//!   (a changed hash: see [`super::watch`]) starts epoch `newest + 1`, strictly one more than
//!   the newest running, and Envoy's hot restart hands the listeners over; the older epoch
//!   drains (`--drain-time-s`) and exits by itself (`--parent-shutdown-time-s`).
//! - An epoch that exits while it is the newest, or exits with a failure at any time, is a
//!   crash: every other epoch is killed (Envoy cannot hot-restart from a dead parent) and
//!   Envoy starts again from epoch 0 after `200 ms·2ⁿ` for the n-th restart in a row. After
//!   [`MAX_RESTARTS`] restarts that fail ([`MAX_RESTARTS`]` + 1` launches) the agent gives up
//!   and exits non-zero. An epoch that ran for [`STABLE_AFTER`] resets the count, and so does
//!   a new configuration, as pilot-agent's retry budget did.
//! - Epoch 0 picks an unused shared-memory base id (`--use-dynamic-base-id`) and writes it to
//!   `envoy-base-id` in the config path; later epochs pass it as `--base-id`, so two agents on
//!   one machine never share one.
//! - Where Envoy cannot hot-restart (a build without it: `--hot-restart-version` says
//!   `disabled`; or no writable `/dev/shm`), every restart is cold: every epoch is stopped, and
//!   epoch 0 starts again with `--disable-hot-restart`. The agent says so when it starts.
//! - On shutdown the newest epoch drains its listeners (admin `POST
//!   /drain_listeners?graceful`), the agent waits the drain duration, stops every epoch
//!   (SIGTERM, then SIGKILL after [`STOP_GRACE`]) and returns.
//! - The files of an epoch (`envoy-rev<N>.json`, `admin-rev<N>.txt`) are removed when it
//!   exits; the base-id file when the agent returns.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};

use super::watch::{Config, Desired};

/// Restarts in a row that may fail before the agent gives up.
pub const MAX_RESTARTS: u32 = 10;
/// The first restart's delay; each further restart in a row doubles it.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// An epoch that ran this long before exiting resets the count of failed restarts.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);
/// How long an epoch has to exit after SIGTERM on shutdown before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How to start Envoy: everything but the epoch and its configuration.
#[derive(Clone, Debug)]
pub struct Launcher {
    /// The Envoy binary.
    pub binary: PathBuf,
    /// Where epoch files go.
    pub dir: PathBuf,
    /// `--drain-time-s`.
    pub drain: Duration,
    /// `--parent-shutdown-time-s`.
    pub parent_shutdown: Duration,
    /// `--service-cluster`.
    pub cluster: String,
    /// `--service-node`.
    pub node_id: String,
    /// `-l`.
    pub log_level: String,
    /// `--concurrency`.
    pub concurrency: Option<u32>,
    /// Whether Envoy can hot-restart here (see [`hot_restart_available`]).
    pub hot_restart: bool,
}

impl Launcher {
    /// `envoy-rev<N>.json`.
    fn config_file(&self, epoch: u32) -> PathBuf {
        self.dir.join(format!("envoy-rev{epoch}.json"))
    }

    /// `admin-rev<N>.txt`, where Envoy writes its admin address.
    pub fn admin_file(&self, epoch: u32) -> PathBuf {
        self.dir.join(format!("admin-rev{epoch}.txt"))
    }

    fn base_id_file(&self) -> PathBuf {
        self.dir.join("envoy-base-id")
    }

    /// Writes the epoch's files and starts it.
    fn start(&self, epoch: u32, config: &Config) -> anyhow::Result<tokio::process::Child> {
        let config_file = match config {
            Config::Generated(text) => {
                let path = self.config_file(epoch);
                write_atomically(&path, text.as_bytes())?;
                path
            }
            Config::Custom(path) => path.clone(),
        };
        let admin = self.admin_file(epoch);
        remove_quietly(&admin);
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .arg("-c")
            .arg(&config_file)
            .arg("--restart-epoch")
            .arg(epoch.to_string())
            .arg("--drain-time-s")
            .arg(self.drain.as_secs().to_string())
            .arg("--parent-shutdown-time-s")
            .arg(self.parent_shutdown.as_secs().to_string())
            .arg("--service-cluster")
            .arg(&self.cluster)
            .arg("--service-node")
            .arg(&self.node_id)
            .arg("--admin-address-path")
            .arg(&admin)
            .arg("-l")
            .arg(&self.log_level);
        if let Some(n) = self.concurrency {
            command.arg("--concurrency").arg(n.to_string());
        }
        if !self.hot_restart {
            command.arg("--disable-hot-restart");
        } else if epoch == 0 {
            remove_quietly(&self.base_id_file());
            command
                .arg("--use-dynamic-base-id")
                .arg("--base-id-path")
                .arg(self.base_id_file());
        } else {
            let file = self.base_id_file();
            let id = std::fs::read_to_string(&file).map_err(|e| {
                anyhow::anyhow!(
                    "reading the base id epoch 0 wrote to {}: {e}",
                    file.display()
                )
            })?;
            command.arg("--base-id").arg(id.trim());
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {}: {e}", self.binary.display()))?;
        Ok(child)
    }

    /// Removes an exited epoch's files.
    fn remove_files(&self, epoch: u32) {
        remove_quietly(&self.config_file(epoch));
        remove_quietly(&self.admin_file(epoch));
    }
}

/// Can `binary` hot-restart here? Envoy built without hot restart prints `disabled` for
/// `--hot-restart-version`; shared memory needs a writable `/dev/shm`. The reason is returned
/// when it cannot.
pub async fn hot_restart_available(binary: &Path) -> Result<(), String> {
    let output = tokio::process::Command::new(binary)
        .arg("--hot-restart-version")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{} --hot-restart-version: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{} --hot-restart-version failed ({})",
            binary.display(),
            output.status
        ));
    }
    if text.trim() == "disabled" {
        return Err("this Envoy was built without hot restart".to_string());
    }
    let shm = Path::new("/dev/shm");
    match std::fs::metadata(shm) {
        Ok(m) if m.is_dir() && !m.permissions().readonly() => Ok(()),
        _ => Err("/dev/shm (shared memory) is not available".to_string()),
    }
}

/// A running epoch.
struct Epoch {
    /// Signals for its process.
    control: mpsc::UnboundedSender<Signal>,
    started: Instant,
    /// Stopped on purpose (aborted after another's crash, or stopped for a cold restart):
    /// its exit is not a crash.
    expected: bool,
}

/// Why the supervisor returned with an error.
#[derive(Debug, thiserror::Error)]
#[error("Envoy failed {launches} times in a row (the last: {last}); giving up")]
pub struct GaveUp {
    launches: u32,
    last: String,
}

/// The state of the epochs, and what comes next.
struct Supervisor {
    launcher: Launcher,
    epochs: BTreeMap<u32, Epoch>,
    exits_tx: mpsc::UnboundedSender<(u32, std::io::Result<ExitStatus>)>,
    /// The newest epoch's admin address file, for the status port and the drain.
    admin_tx: watch::Sender<Option<PathBuf>>,
    /// Hash of the configuration the newest epoch was started with.
    running_hash: Option<u64>,
    /// Failed runs in a row.
    failures: u32,
    /// When the next start from epoch 0 is due (after a crash or for a cold restart); it
    /// waits until every old epoch has exited.
    restart_at: Option<Instant>,
}

/// Runs Envoy with the configuration `desired` holds, following its changes, until `stop`
/// resolves; then drains and stops every epoch. Errors when Envoy fails too often.
pub async fn run(
    launcher: Launcher,
    mut desired: watch::Receiver<Desired>,
    admin_tx: watch::Sender<Option<PathBuf>>,
    stop: impl Future<Output = ()>,
) -> Result<(), GaveUp> {
    let (exits_tx, mut exits) = mpsc::unbounded_channel();
    let mut s = Supervisor {
        launcher,
        epochs: BTreeMap::new(),
        exits_tx,
        admin_tx,
        running_hash: None,
        failures: 0,
        restart_at: None,
    };
    let current = desired.borrow_and_update().clone();
    s.launch(0, &current)?;
    tokio::pin!(stop);
    loop {
        let restart = s.restart_at;
        tokio::select! {
            () = &mut stop => break,
            changed = desired.changed() => {
                if changed.is_err() {
                    break;
                }
                let next = desired.borrow_and_update().clone();
                s.configuration_changed(&next)?;
            }
            Some((epoch, status)) = exits.recv() => s.exited(epoch, status)?,
            // A pending start waits for its time and for every old epoch to be gone.
            () = sleep_until(restart.unwrap_or_else(Instant::now)),
                if restart.is_some() && s.epochs.is_empty() =>
            {
                s.restart_at = None;
                let next = desired.borrow().clone();
                s.launch(0, &next)?;
            }
        }
    }
    s.shut_down(&mut exits).await;
    Ok(())
}

impl Supervisor {
    fn newest(&self) -> Option<u32> {
        self.epochs.keys().next_back().copied()
    }

    /// Starts `epoch`; a failure to start counts as a failed run.
    fn launch(&mut self, epoch: u32, desired: &Desired) -> Result<(), GaveUp> {
        match self.launcher.start(epoch, &desired.config) {
            Ok(child) => {
                let pid = child.id();
                tracing::info!(epoch, pid, "started Envoy");
                let (control, rx) = mpsc::unbounded_channel();
                tokio::spawn(wait_for(epoch, child, rx, self.exits_tx.clone()));
                self.epochs.insert(
                    epoch,
                    Epoch {
                        control,
                        started: Instant::now(),
                        expected: false,
                    },
                );
                self.running_hash = Some(desired.hash);
                self.admin_tx
                    .send_replace(Some(self.launcher.admin_file(epoch)));
                Ok(())
            }
            Err(e) => {
                tracing::error!(epoch, error = %format!("{e:#}"), "Envoy did not start");
                self.failed(format!("{e:#}"))
            }
        }
    }

    /// A new configuration: hot restart (or a cold one), with a fresh restart budget.
    fn configuration_changed(&mut self, desired: &Desired) -> Result<(), GaveUp> {
        if self.running_hash == Some(desired.hash) {
            return Ok(());
        }
        self.failures = 0;
        if self.restart_at.is_some() {
            // A restart is pending: it starts with the new configuration.
            return Ok(());
        }
        match self.newest() {
            None => self.launch(0, desired),
            Some(newest) if self.launcher.hot_restart => {
                tracing::info!(
                    from = newest,
                    to = newest + 1,
                    "configuration or certificates changed: hot restart"
                );
                self.launch(newest + 1, desired)
            }
            Some(_) => {
                tracing::info!("configuration or certificates changed: cold restart");
                self.signal_all(Signal::TERM);
                self.restart_at = Some(Instant::now());
                Ok(())
            }
        }
    }

    /// An epoch's process ended.
    fn exited(&mut self, epoch: u32, status: std::io::Result<ExitStatus>) -> Result<(), GaveUp> {
        self.launcher.remove_files(epoch);
        let Some(gone) = self.epochs.remove(&epoch) else {
            return Ok(());
        };
        let status = match status {
            Ok(status) => status,
            Err(e) => {
                tracing::error!(epoch, error = %e, "lost track of Envoy");
                return self.crashed(epoch, gone, format!("waiting for it failed: {e}"));
            }
        };
        if gone.expected {
            // Stopped for a restart, which starts once every epoch is gone.
            tracing::info!(epoch, %status, "Envoy stopped");
            return Ok(());
        }
        let newer = self.newest().is_some_and(|n| n > epoch);
        if status.success() && newer {
            tracing::info!(epoch, "Envoy handed over to a newer epoch and exited");
            return Ok(());
        }
        tracing::warn!(epoch, %status, "Envoy exited");
        self.crashed(epoch, gone, format!("epoch {epoch} exited with {status}"))
    }

    /// A crash: every epoch is killed and Envoy starts again from epoch 0 after the backoff.
    fn crashed(&mut self, epoch: u32, gone: Epoch, why: String) -> Result<(), GaveUp> {
        if gone.started.elapsed() >= STABLE_AFTER {
            self.failures = 0;
        }
        if !self.epochs.is_empty() {
            tracing::warn!(
                epoch,
                others = ?self.epochs.keys().collect::<Vec<_>>(),
                "an epoch crashed: stopping every other epoch, Envoy cannot hot-restart from a dead parent"
            );
            self.signal_all(Signal::KILL);
        }
        self.failed(why)
    }

    /// Counts a failed run and schedules the next start, or gives up.
    fn failed(&mut self, why: String) -> Result<(), GaveUp> {
        self.failures += 1;
        if self.failures > MAX_RESTARTS {
            self.signal_all(Signal::KILL);
            tracing::error!(
                launches = self.failures,
                "Envoy failed {} times in a row; giving up",
                self.failures
            );
            return Err(GaveUp {
                launches: self.failures,
                last: why,
            });
        }
        let delay = FIRST_BACKOFF * 2u32.pow(self.failures - 1);
        tracing::warn!(
            restart = self.failures,
            of = MAX_RESTARTS,
            delay_ms = delay.as_millis() as u64,
            "restarting Envoy from epoch 0"
        );
        self.restart_at = Some(Instant::now() + delay);
        Ok(())
    }

    /// Sends `signal` to every epoch, marking each stopped on purpose.
    fn signal_all(&mut self, signal: Signal) {
        for epoch in self.epochs.values_mut() {
            epoch.expected = true;
            let _ = epoch.control.send(signal);
        }
    }

    /// Drains the newest epoch, waits the drain duration, stops every epoch.
    async fn shut_down(
        mut self,
        exits: &mut mpsc::UnboundedReceiver<(u32, std::io::Result<ExitStatus>)>,
    ) {
        if let Some(admin) = self
            .newest()
            .and_then(|e| read_admin(&self.launcher.admin_file(e)))
        {
            tracing::info!(drain = ?self.launcher.drain, "draining Envoy's listeners");
            match drain_listeners(&admin).await {
                Ok(()) => {
                    let until = Instant::now() + self.launcher.drain;
                    while !self.epochs.is_empty() {
                        tokio::select! {
                            () = sleep_until(until) => break,
                            Some((epoch, _)) = exits.recv() => self.forget(epoch),
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not drain Envoy; stopping it"),
            }
        }
        self.signal_all(Signal::TERM);
        let until = Instant::now() + STOP_GRACE;
        while !self.epochs.is_empty() {
            tokio::select! {
                () = sleep_until(until) => {
                    tracing::warn!("Envoy did not stop within {STOP_GRACE:?}: killing it");
                    self.signal_all(Signal::KILL);
                    break;
                }
                Some((epoch, _)) = exits.recv() => self.forget(epoch),
            }
        }
        while !self.epochs.is_empty() {
            match exits.recv().await {
                Some((epoch, _)) => self.forget(epoch),
                None => break,
            }
        }
        remove_quietly(&self.launcher.base_id_file());
        tracing::info!("Envoy stopped");
    }

    fn forget(&mut self, epoch: u32) {
        self.epochs.remove(&epoch);
        self.launcher.remove_files(epoch);
    }
}

/// Owns one epoch's process: reports its exit, and signals it on request. The process is
/// reaped only here, so its pid cannot be reused while a signal may still be sent to it.
async fn wait_for(
    epoch: u32,
    mut child: tokio::process::Child,
    mut control: mpsc::UnboundedReceiver<Signal>,
    exits: mpsc::UnboundedSender<(u32, std::io::Result<ExitStatus>)>,
) {
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            Some(signal) = control.recv() => {
                if let Some(pid) = pid {
                    let _ = kill_process(pid, signal);
                }
            }
        }
    };
    let _ = exits.send((epoch, status));
}

/// The admin address Envoy wrote, once it has.
pub fn read_admin(file: &Path) -> Option<std::net::SocketAddr> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// `POST /drain_listeners?graceful` on Envoy's admin.
async fn drain_listeners(admin: &std::net::SocketAddr) -> Result<(), reqwest::Error> {
    reqwest::Client::new()
        .post(format!("http://{admin}/drain_listeners?graceful"))
        .timeout(Duration::from_secs(5))
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}

/// Writes `path` through a temporary file renamed over it, so Envoy never reads half of it.
fn write_atomically(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, contents)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}

fn remove_quietly(path: &Path) {
    let _ = std::fs::remove_file(path);
}
