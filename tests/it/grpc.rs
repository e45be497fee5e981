//! Real proxyless gRPC clients (Python grpcio, Node grpc-js-xds) resolving a service through
//! wayfinder, and the helpers that drive them (also used by `grpc_routing`).

use std::collections::BTreeMap;
use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::support::DEADLINE;
use crate::support::binary::Wayfinder;
use crate::support::fixtures::{service_entry, write};
use crate::tools::{Tools, tools};

/// A child process driven over stdin/stdout, killed by pid when dropped.
pub(crate) struct Driven {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Drop for Driven {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Driven {
    fn spawn(
        program: &std::path::Path,
        script: std::path::PathBuf,
        args: &[&str],
        env: &[(&str, &std::path::Path)],
    ) -> Self {
        let mut child = Command::new(program)
            .arg(script)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start a test client");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Asks the client to exit (it also exits, or is killed, when dropped).
    pub(crate) async fn quit(&mut self) {
        self.stdin.write_all(b"quit\n").await.unwrap();
    }

    pub(crate) async fn line(&mut self) -> Value {
        let line = tokio::time::timeout(DEADLINE, self.stdout.next_line())
            .await
            .expect("an answer within the deadline")
            .expect("readable stdout")
            .expect("the client is still running");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }
}

/// A backend answering `Whoami` with its name.
pub(crate) async fn backend(tools: &Tools, name: &str) -> (Driven, u16) {
    let mut b = Driven::spawn(&tools.python, tools.grpc_backend(), &["--name", name], &[]);
    let port = b.line().await["port"].as_u64().expect("the backend's port");
    (b, u16::try_from(port).unwrap())
}

/// Makes `n` calls with `metadata`; returns answers per backend name, and the whole answer
/// (with errors per status code).
pub(crate) async fn call(
    client: &mut Driven,
    n: u32,
    metadata: &[(&str, &str)],
) -> (BTreeMap<String, u64>, Value) {
    let mut command = format!("call {n} 5");
    for (k, v) in metadata {
        command.push_str(&format!(" {k}={v}"));
    }
    command.push('\n');
    client.stdin.write_all(command.as_bytes()).await.unwrap();
    let answer = client.line().await;
    let ok = answer["ok"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    (ok, answer)
}

/// Makes batches of `n` calls with `metadata` until one satisfies `done`; returns that one.
pub(crate) async fn until(
    client: &mut Driven,
    what: &str,
    n: u32,
    metadata: &[(&str, &str)],
    done: impl Fn(&BTreeMap<String, u64>) -> bool,
) -> (BTreeMap<String, u64>, Value) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (ok, answer) = call(client, n, metadata).await;
        if done(&ok) {
            return (ok, answer);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; last answer {answer}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Which xDS client library drives the calls.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Client {
    Python,
    Node,
}

impl Client {
    /// Starts this client for `xds:///HOST:PORT` `target` with ADS server `xds` and `node_id`.
    pub(crate) fn spawn(self, tools: &Tools, target: &str, xds: &str, node_id: &str) -> Driven {
        let args = [
            "--target",
            target,
            "--xds-server",
            xds,
            "--node-id",
            node_id,
        ];
        match self {
            Client::Python => Driven::spawn(&tools.python, tools.grpc_client(), &args, &[]),
            Client::Node => {
                let env = [("NODE_PATH", tools.node_modules.as_path())];
                Driven::spawn(&tools.node, tools.grpc_node_client(), &args, &env)
            }
        }
    }
}

#[tokio::test]
async fn python_grpcio_follows_endpoints_in_a_service_entry_file() {
    let Some(tools) = tools() else { return };
    follows_endpoints(&tools, Client::Python).await;
}

#[tokio::test]
async fn node_grpc_js_xds_follows_endpoints_in_a_service_entry_file() {
    let Some(tools) = tools() else { return };
    follows_endpoints(&tools, Client::Node).await;
}

/// Backends `a` and `b`, a ServiceEntry file listing both as `echo` (gRPC on 7070), a server
/// over it started with `flags`, and a `kind` client calling `echo` through it.
struct Echo {
    _backends: [Driven; 2],
    ports: [u16; 2],
    dir: tempfile::TempDir,
    server: Wayfinder,
    client: Driven,
}

const ECHO_HOST: &str = "echo.default.svc.cluster.local";

impl Echo {
    async fn start(tools: &Tools, kind: Client, flags: &[&str]) -> Self {
        let (a, port_a) = backend(tools, "a").await;
        let (b, port_b) = backend(tools, "b").await;
        let dir = tempfile::tempdir().unwrap();
        let ports = [port_a, port_b];
        write(dir.path(), "echo.yaml", &Self::entry(&ports));
        let server = Wayfinder::with_files_and("", dir.path(), flags).await;
        let target = format!("xds:///{ECHO_HOST}:7070");
        let client = kind.spawn(tools, &target, &server.grpc.to_string(), "grpc-test-client");
        Self {
            _backends: [a, b],
            ports,
            dir,
            server,
            client,
        }
    }

    fn entry(ports: &[u16]) -> String {
        service_entry("echo", ECHO_HOST, ("grpc", 7070, "GRPC"), ports)
    }

    /// Rewrites the file with the backends of `ports`.
    fn list(&self, ports: &[u16]) {
        write(self.dir.path(), "echo.yaml", &Self::entry(ports));
    }
}

/// Two backends in a ServiceEntry file; calls reach both, then only the one left in the file,
/// then both again.
async fn follows_endpoints(tools: &Tools, kind: Client) {
    let mut e = Echo::start(tools, kind, &[]).await;
    let [port_a, port_b] = e.ports;

    let (ok, answer) = call(&mut e.client, 20, &[]).await;
    assert_eq!(
        ok.values().sum::<u64>(),
        20,
        "every call answered: {answer}"
    );
    assert!(
        ok.get("a").copied().unwrap_or(0) > 0 && ok.get("b").copied().unwrap_or(0) > 0,
        "both backends reached: {answer}"
    );

    // Remove b: once the client has the change, every call goes to a.
    e.list(&[port_a]);
    until(&mut e.client, "calls to stop reaching b", 4, &[], |ok| {
        ok.get("a") == Some(&4)
    })
    .await;
    let (ok, answer) = call(&mut e.client, 20, &[]).await;
    assert_eq!(ok, BTreeMap::from([("a".to_string(), 20)]), "{answer}");

    // Add it back: both again.
    e.list(&[port_a, port_b]);
    until(&mut e.client, "calls to reach b again", 10, &[], |ok| {
        ok.contains_key("b")
    })
    .await;
    let (ok, answer) = call(&mut e.client, 20, &[]).await;
    assert!(
        ok.get("a").copied().unwrap_or(0) > 0 && ok.get("b").copied().unwrap_or(0) > 0,
        "{answer}"
    );
    assert_eq!(ok.values().sum::<u64>(), 20, "{answer}");

    let syncz = e.server.json("/debug/syncz").await;
    assert_eq!(syncz[0]["proxy_type"], "grpc");
    let types = syncz[0]["types"].as_object().unwrap();
    assert_eq!(types.len(), 4, "{syncz}");
    assert!(types.values().all(|t| t["last_nack"].is_null()), "{syncz}");
    e.client.quit().await;
}

#[tokio::test]
async fn python_grpcio_keeps_calling_and_following_across_connection_ages() {
    let Some(tools) = tools() else { return };
    across_connection_ages(&tools, Client::Python).await;
}

#[tokio::test]
async fn node_grpc_js_xds_keeps_calling_and_following_across_connection_ages() {
    let Some(tools) = tools() else { return };
    across_connection_ages(&tools, Client::Node).await;
}

/// With a 1 s maximum connection age the client's ADS connection is closed again and again:
/// every call still succeeds, the client comes back on a new stream each time, and it still
/// follows an endpoint change afterwards.
async fn across_connection_ages(tools: &Tools, kind: Client) {
    let mut e = Echo::start(tools, kind, &["--max-connection-age", "1s"]).await;
    let w = &e.server;
    let connection = || async { w.json("/debug/syncz").await[0]["connection_id"].clone() };
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while seen.len() < 3 {
        let (ok, answer) = call(&mut e.client, 10, &[]).await;
        assert_eq!(
            ok.values().sum::<u64>(),
            10,
            "every call answered: {answer}"
        );
        let id = connection().await;
        if id.is_u64() && !seen.contains(&id) {
            seen.push(id);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the client's stream was not replaced twice: {seen:?}"
        );
    }
    w.wait_log("a stream closed at its age", |l| {
        l["message"] == "ending an xDS stream"
            && l["why"].as_str().is_some_and(|w| w.contains("maximum age"))
    })
    .await;

    // Still following: b goes, and calls stop reaching it.
    e.list(&[e.ports[0]]);
    until(&mut e.client, "calls to stop reaching b", 4, &[], |ok| {
        ok.get("a") == Some(&4)
    })
    .await;
    e.client.quit().await;
}
