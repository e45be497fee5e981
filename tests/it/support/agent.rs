//! `wayfinder agent proxy` as a child process in a test's network namespace, with real Envoy.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use rustix::process::{Pid, Signal, kill_process};
use serde_json::Value;
use tokio::process::Child;

use super::binary;
use super::eventually;
use super::logs::Logs;
use super::netns::Netns;

/// The agent's status port inside the namespace (the default, 15020).
pub(crate) const STATUS: &str = "127.0.0.1:15020";

/// A running agent. Dropping it kills the agent and every Envoy it started (by pid).
pub(crate) struct Agent {
    child: Child,
    pub(crate) logs: Logs,
    /// `--config-path`: the epoch files.
    pub(crate) config_path: PathBuf,
    /// Its status port, inside the namespace.
    status: std::net::SocketAddr,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        for (_, pid) in self.envoys() {
            if is_envoy(pid) {
                let _ = kill(pid, Signal::KILL);
            }
        }
    }
}

/// Sends `signal` to `pid`.
pub(crate) fn kill(pid: u32, signal: Signal) -> rustix::io::Result<()> {
    let pid = Pid::from_raw(i32::try_from(pid).expect("a pid")).expect("a non-zero pid");
    kill_process(pid, signal)
}

/// Is `pid` a running (not reaped, not zombie) Envoy?
pub(crate) fn is_envoy(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let comm_and_state = stat.split_once(" (").map(|(_, rest)| rest).unwrap_or("");
    comm_and_state.starts_with("envoy)") && !comm_and_state.starts_with("envoy) Z")
}

impl Agent {
    /// Starts `wayfinder agent proxy ROLE` inside `netns`, in the working directory `dir`
    /// (where `./etc/istio/pod/labels` would be), with `--config-path DIR/proxy`, JSON logs,
    /// `args` and the environment `env`; returns once its status port listens.
    pub(crate) async fn start(
        netns: &Netns,
        dir: &Path,
        role: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_at(netns, dir, role, STATUS, args, env).await
    }

    /// [`Agent::start`] for an agent whose `--status-port` (in `args`) makes its status port
    /// `status`, beside another agent.
    pub(crate) async fn start_at(
        netns: &Netns,
        dir: &Path,
        role: &str,
        status: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let config_path = dir.join("proxy");
        let mut command = netns.command(binary::path());
        command
            .args(["agent", "proxy", role, "--config-path"])
            .arg(&config_path)
            .args(["--log-format", "json"])
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start wayfinder agent proxy");
        let logs = Logs::collect(child.stderr.take().expect("piped stderr"));
        let agent = Self {
            child,
            logs,
            config_path,
            status: status.parse().expect("a status address"),
        };
        agent
            .logs
            .wait("the status port", |l| {
                l["message"] == "status port listening"
            })
            .await;
        agent
    }

    /// Every `(epoch, pid)` the agent started, in order.
    pub(crate) fn envoys(&self) -> Vec<(u64, u32)> {
        self.logs
            .matching(|l| l["message"] == "started Envoy")
            .iter()
            .filter_map(|l| {
                Some((
                    l["epoch"].as_u64()?,
                    u32::try_from(l["pid"].as_u64()?).ok()?,
                ))
            })
            .collect()
    }

    /// Waits until `n` lines carry `message`; returns them all.
    pub(crate) async fn wait_for(&self, message: &str, n: usize) -> Vec<Value> {
        self.logs
            .wait_n(message, n, |l| l["message"] == message)
            .await
    }

    /// Waits until `/healthz/ready` answers 200.
    pub(crate) async fn ready(&self, netns: &Netns) {
        eventually("the agent's /healthz/ready to answer 200", || async {
            (netns.get(self.status, "/healthz/ready").await.0 == 200).then_some(())
        })
        .await;
    }

    /// The admin address of `epoch`, once Envoy wrote it.
    pub(crate) async fn admin(&self, epoch: u64) -> std::net::SocketAddr {
        let file = self.config_path.join(format!("admin-rev{epoch}.txt"));
        eventually(&format!("epoch {epoch}'s admin address"), || async {
            std::fs::read_to_string(&file).ok()?.trim().parse().ok()
        })
        .await
    }

    /// Sends SIGTERM and waits for the agent to exit.
    pub(crate) async fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().expect("a running agent");
        kill(pid, Signal::TERM).expect("SIGTERM the agent");
        self.wait().await
    }

    /// Waits for the agent to exit.
    pub(crate) async fn wait(&mut self) -> ExitStatus {
        self.child.wait().await.expect("wait for the agent")
    }
}

/// GETs `http://ADDR/` with `Host: host`: status and body, or the error.
pub(crate) async fn get_host(
    client: &reqwest::Client,
    addr: std::net::SocketAddr,
    host: &str,
) -> Result<(u16, String), String> {
    let response = client
        .get(format!("http://{addr}/"))
        .header("host", host)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    Ok((status, response.text().await.map_err(|e| e.to_string())?))
}

/// Waits until `http://ADDR/` with `Host: host`, from inside `netns`, answers 200 and `body`.
pub(crate) async fn answers(
    netns: &Netns,
    addr: std::net::SocketAddr,
    host: &'static str,
    body: &str,
) {
    eventually(&format!("{host} at {addr} to answer {body:?}"), || async {
        let answer = netns
            .block_on(move || async move {
                let client = reqwest::Client::builder()
                    .no_proxy()
                    .build()
                    .expect("a client");
                get_host(&client, addr, host).await
            })
            .await;
        (answer == Ok((200, body.to_string()))).then_some(())
    })
    .await;
}

/// Requests in a loop from inside a namespace, each expecting 200 and `body`, until
/// [`RequestLoop::stop`].
pub(crate) struct RequestLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: tokio::sync::oneshot::Receiver<(u64, Vec<String>)>,
}

impl RequestLoop {
    /// Starts GETting `http://ADDR/` with `Host: host` in `netns`.
    pub(crate) fn start(
        netns: &Netns,
        addr: std::net::SocketAddr,
        host: &'static str,
        body: &'static str,
    ) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let done = netns.spawn_async(move || async move {
            let client = reqwest::Client::builder()
                .no_proxy()
                .timeout(std::time::Duration::from_secs(10))
                .build()
                .expect("a client");
            let (mut ok, mut failed) = (0u64, Vec::new());
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                match get_host(&client, addr, host).await {
                    Ok((200, answer)) if answer == body => ok += 1,
                    other => failed.push(format!("{other:?}")),
                }
            }
            (ok, failed)
        });
        Self { stop, done }
    }

    /// Stops the loop: the requests answered as expected, and the others' answers.
    pub(crate) async fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.done.await.expect("the request loop ended")
    }
}

/// The flags that make an agent get its certificate from `w`'s CA, proving itself with the
/// token in `token_file` (`token_flag`: `--bootstrap-token-file` or `--token-file`), and
/// speak xDS to `w`'s secure port.
pub(crate) async fn mutual_tls(
    w: &binary::Wayfinder,
    token_flag: &str,
    token_file: &Path,
) -> Vec<String> {
    vec![
        "--discovery-address".into(),
        w.secure_grpc().await.to_string(),
        "--control-plane-auth-policy".into(),
        "MUTUAL_TLS".into(),
        "--ca-root-cert".into(),
        w.ca_dir().join("root-cert.pem").display().to_string(),
        token_flag.into(),
        token_file.display().to_string(),
    ]
}

/// The connection in `/debug/syncz` (server debug address `http`, reached from `netns`)
/// whose proxy id starts with `prefix` (`router~`, `sidecar~`).
pub(crate) async fn syncz_connection(
    netns: &Netns,
    http: std::net::SocketAddr,
    prefix: &str,
) -> Value {
    let (status, syncz) = netns.get(http, "/debug/syncz").await;
    assert_eq!(status, 200, "{syncz}");
    let syncz: Value = serde_json::from_str(&syncz).expect("/debug/syncz is JSON");
    syncz
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["proxy"].as_str().is_some_and(|p| p.starts_with(prefix)))
        .cloned()
        .unwrap_or_else(|| panic!("no {prefix} proxy in /debug/syncz: {syncz}"))
}
