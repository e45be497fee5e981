//! The `wayfinder` binary as a child process on loopback ports it chooses.

use serde_json::Value;
use std::net::SocketAddr;
use std::process::Stdio;
use tokio::process::{Child, Command};

use super::eventually;
use super::logs::Logs;

/// A running `wayfinder discovery`. Killed (by pid) when dropped.
pub(crate) struct Wayfinder {
    child: Child,
    pub(crate) grpc: SocketAddr,
    pub(crate) http: SocketAddr,
    pub(crate) monitoring: SocketAddr,
    logs: Logs,
    /// The self-signed CA's directory (`--ca-dir`), when the harness made one.
    ca_dir: Option<tempfile::TempDir>,
    /// Stopped with SIGTERM, not SIGKILL: see [`Wayfinder::spawn_under_runner`].
    graceful: bool,
}

impl Drop for Wayfinder {
    fn drop(&mut self) {
        if self.graceful {
            stop_gracefully(&mut self.child);
        }
        // Child::start_kill signals the child's own pid.
        let _ = self.child.start_kill();
    }
}

/// SIGTERM to `child`'s pid, then up to [`super::DEADLINE`] for it to exit (polled: a drop
/// cannot await).
pub(crate) fn stop_gracefully(child: &mut Child) {
    use rustix::process::{Pid, Signal, kill_process};
    let Some(pid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw)
    else {
        return;
    };
    let _ = kill_process(pid, Signal::TERM);
    let deadline = std::time::Instant::now() + super::DEADLINE;
    while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Flags that put every listener on a loopback port the OS picks, with the secure port off
/// (it needs a CA directory of its own: see [`Wayfinder::start_in`]).
pub(crate) const LOOPBACK: [&str; 8] = [
    "--grpc-addr",
    "127.0.0.1:0",
    "--http-addr",
    "127.0.0.1:0",
    "--monitoring-addr",
    "127.0.0.1:0",
    "--secure-grpc-addr",
    "",
];

/// The path of the binary under test.
pub(crate) fn path() -> &'static str {
    env!("CARGO_BIN_EXE_wayfinder")
}

impl Wayfinder {
    /// Starts `wayfinder discovery ARGS` on loopback port 0 with JSON logs, and waits until it
    /// logged the three addresses it bound.
    pub(crate) async fn start(args: &[&str]) -> Self {
        Self::start_at("127.0.0.1:0", args).await
    }

    /// [`Wayfinder::start`] with ADS on `grpc` (to restart a server on the same address).
    pub(crate) async fn start_at(grpc: &str, args: &[&str]) -> Self {
        Self::start_in(Command::new(path()), grpc, args).await
    }

    /// [`Wayfinder::start`] under a command that runs it, such as `prlimit --nofile=256:256`
    /// (which execs it, so the pid is the server's).
    pub(crate) async fn start_under(wrapper: &[&str], args: &[&str]) -> Self {
        let mut command = Command::new(wrapper[0]);
        command.args(&wrapper[1..]).arg(path());
        Self::start_in(command, "127.0.0.1:0", args).await
    }

    /// [`Wayfinder::start`] as the unprivileged user `nobody` (uid and gid 65534, no
    /// supplementary groups, through util-linux's `setpriv`), for tests that need the file
    /// permissions root ignores.
    /// The secure port is off: `nobody` cannot write the CA directory the harness makes.
    pub(crate) async fn start_as_nobody(args: &[&str]) -> Self {
        let mut args = args.to_vec();
        args.extend(["--secure-grpc-addr", ""]);
        Self::start_under(
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ],
            &args,
        )
        .await
    }

    /// `command` (the binary, or a wrapper that execs it) with `discovery`, loopback
    /// addresses (the secure port's too, with a self-signed CA in a temporary directory, unless
    /// `args` name `--secure-grpc-addr`), JSON logs and `args`.
    pub(crate) async fn start_in(mut command: Command, grpc: &str, args: &[&str]) -> Self {
        let ca_dir = (!args.contains(&"--secure-grpc-addr"))
            .then(|| tempfile::tempdir().expect("a CA directory"));
        command.arg("discovery");
        if let Some(dir) = &ca_dir {
            let dir = dir.path().to_str().expect("a UTF-8 temporary path");
            command.args(["--secure-grpc-addr", "127.0.0.1:0", "--ca-dir", dir]);
        }
        command
            .args(["--grpc-addr", grpc])
            .args(&LOOPBACK[2..6])
            .args([
                "--log-format",
                "json",
                "--log-level",
                "info,wayfinder=debug",
            ])
            .args(args);
        let mut w = Self::spawn(command).await;
        w.ca_dir = ca_dir;
        w
    }

    /// Runs `command`, which must start `wayfinder discovery` with `--log-format json` (perhaps
    /// through a wrapper that execs it, such as `ip netns exec`, so that the child's pid is
    /// the server's), and waits until it logged the three addresses it bound.
    pub(crate) async fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the wayfinder binary");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut w = Self {
            child,
            grpc: unspecified(),
            http: unspecified(),
            monitoring: unspecified(),
            logs: Logs::collect(stderr),
            ca_dir: None,
            graceful: false,
        };
        w.grpc = w.bound("grpc").await;
        w.http = w.bound("http").await;
        w.monitoring = w.bound("monitoring").await;
        w
    }

    /// [`Wayfinder::spawn`] under a runner that does not exec the server but runs it as its
    /// child, such as `buildah run`: dropping it sends the runner SIGTERM, which the runner
    /// passes on (SIGKILL would orphan the server), and waits for it to exit. Used by
    /// `image`, which default-features builds compile only.
    #[cfg_attr(
        not(all(
            feature = "jemalloc",
            feature = "kubernetes",
            feature = "consul",
            feature = "eureka"
        )),
        allow(dead_code)
    )]
    pub(crate) async fn spawn_under_runner(command: Command) -> Self {
        let mut w = Self::spawn(command).await;
        w.graceful = true;
        w
    }

    /// Starts it with the File registry over `dir` (after `registries_before`, e.g. `Mock,`)
    /// and a short debounce, so tests see file changes quickly.
    pub(crate) async fn with_files(registries_before: &str, dir: &std::path::Path) -> Self {
        Self::with_files_and(registries_before, dir, &[]).await
    }

    /// [`Wayfinder::with_files`] with more flags.
    pub(crate) async fn with_files_and(
        registries_before: &str,
        dir: &std::path::Path,
        more: &[&str],
    ) -> Self {
        let registries = format!("{registries_before}File");
        let dir = dir.to_str().expect("a UTF-8 temporary path");
        let mut args = vec![
            "--registries",
            &registries,
            "--file-registry",
            dir,
            "--debounce-after",
            "10ms",
        ];
        args.extend_from_slice(more);
        Self::start(&args).await
    }

    async fn bound(&self, listener: &str) -> SocketAddr {
        let line = self
            .wait_log(&format!("the {listener} listening line"), |l| {
                l["message"] == "listening" && l["listener"] == listener
            })
            .await;
        line["address"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .expect("a socket address in the listening line")
    }

    /// The secure port's address (when it is on).
    pub(crate) async fn secure_grpc(&self) -> SocketAddr {
        self.bound("secure-grpc").await
    }

    /// The CA directory the harness gave it (`--ca-dir`): `root-cert.pem` is there.
    pub(crate) fn ca_dir(&self) -> &std::path::Path {
        self.ca_dir
            .as_ref()
            .expect("a server started with the harness's CA directory")
            .path()
    }

    /// Waits for a log line matching `pred` (logged at any time since start).
    pub(crate) async fn wait_log(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.logs.wait(what, pred).await
    }

    /// Sends SIGTERM to its pid (a graceful stop, as Kubernetes stops a pod) and waits, within
    /// the deadline, for it to exit.
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    pub(crate) async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.pid();
        super::agent::kill(pid, rustix::process::Signal::TERM).expect("SIGTERM the server");
        tokio::time::timeout(super::DEADLINE, self.child.wait())
            .await
            .expect("the server exits after SIGTERM")
            .expect("wait for the server")
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().expect("a running server")
    }

    /// `VmRSS` and `VmHWM` (the peak) of the server, in KiB, from `/proc/PID/status`.
    pub(crate) fn memory_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the server's /proc status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {status}"))
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Every log line so far that matches `pred`.
    pub(crate) fn logs_matching(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.logs.matching(pred)
    }

    /// Every line logged so far, as written.
    pub(crate) fn raw_logs(&self) -> Vec<String> {
        self.logs.raw()
    }

    /// The value of an unlabelled gauge or counter on `/metrics`, if it is there.
    pub(crate) async fn metric(&self, name: &str) -> Option<u64> {
        let (_, text) = get(self.monitoring, "/metrics").await;
        let prefix = format!("{name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
    }

    /// GETs a debug path; returns the status and body.
    pub(crate) async fn get(&self, path: &str) -> (u16, String) {
        get(self.http, path).await
    }

    /// GETs a debug path that answers JSON with 200.
    pub(crate) async fn json(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
    }

    /// Waits until the server answers `/ready` with 200.
    pub(crate) async fn ready(&self) {
        eventually("/ready to answer 200", || async {
            (self.get("/ready").await.0 == 200).then_some(())
        })
        .await;
    }

    /// The File registry's status from `/debug/registryz`.
    pub(crate) async fn registry_status(&self, name: &str) -> Value {
        let z = self.json("/debug/registryz").await;
        z["registries"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["status"]["registry"] == name))
            .map(|r| r["status"].clone())
            .unwrap_or_else(|| panic!("no registry {name} in {z}"))
    }

    /// Waits until `/debug/registryz` shows registry `name` with `health`, and returns its
    /// status. The debug pages follow the registry's stream by a moment.
    pub(crate) async fn wait_health(&self, name: &str, health: &str) -> Value {
        eventually(&format!("registry {name} to be {health}"), || async {
            let status = self.registry_status(name).await;
            (status["health"] == health).then_some(status)
        })
        .await
    }

    /// Endpoint addresses (`ip:port` of the first port) of a service from `/debug/endpointz`.
    pub(crate) async fn endpoints(&self, host: &str) -> Vec<String> {
        let z = self.json(&format!("/debug/endpointz?svc={host}")).await;
        let Some(svc) = z.as_array().and_then(|a| a.first()) else {
            return Vec::new();
        };
        let mut out: Vec<String> = svc["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let port = e["ports"]
                    .as_object()
                    .and_then(|p| p.values().next())
                    .cloned()
                    .unwrap_or_default();
                format!(
                    "{}:{port}",
                    e["endpoint"]["address"].as_str().unwrap_or_default()
                )
            })
            .collect();
        out.sort();
        out
    }
}

/// GETs `http://addr/path`.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let url = format!("http://{addr}{path}");
    crate::support::tls_provider();
    let response = reqwest::get(&url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

fn unspecified() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}
