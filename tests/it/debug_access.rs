//! Who may read the debug pages, tested from a non-loopback address of the machine, and
//! istiod's names for them.
//!
//! Each test makes its own network namespace (`ip netns add`; we are root) with `lo` up and a
//! veth pair holding 198.51.100.1/24 (TEST-NET-2), and runs both the server and
//! `wayfinder request` inside it: a request to 198.51.100.1 comes from 198.51.100.1, a peer
//! that is not loopback, and nothing leaves the namespace. The namespace is deleted when the
//! test ends, passing or not. Where `ip netns` is not permitted the tests skip with a notice,
//! and fail under `scripts/test` (`WAYFINDER_REQUIRE_TOOLS=1`), as the real-client tests do.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use wayfinder::xds::TypeUrl;

use crate::support::ads::{Ads, sidecar};
use crate::support::binary::{Wayfinder, path};
use crate::support::eventually;
use crate::tools;

/// The address the namespace's veth end holds.
pub(crate) const OTHER_HOST: &str = "198.51.100.1";

/// A network namespace of this test process, deleted when dropped.
pub(crate) struct Netns {
    name: String,
}

impl Netns {
    /// Makes a namespace with `lo` up and [`OTHER_HOST`] on a veth pair; `None` (after a
    /// notice) where namespaces cannot be made and the run does not require them.
    pub(crate) fn create() -> Option<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "wf-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        if let Err(why) = ip(&["netns", "add", &name]) {
            let why = format!("`ip netns add` failed: {why}");
            if tools::required() {
                panic!(
                    "{}=1 but this test needs a network namespace: {why}",
                    tools::REQUIRE_ENV
                );
            }
            // The real stderr, not eprintln!: libtest would hide it for a passing test.
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: the debug-port trust tests need `ip netns` (root): {why}"
            );
            return None;
        }
        let ns = Self { name };
        let n = ns.name.as_str();
        for args in [
            &["-n", n, "link", "set", "lo", "up"][..],
            &[
                "-n", n, "link", "add", "wf0", "type", "veth", "peer", "name", "wf1",
            ],
            &["-n", n, "addr", "add", "198.51.100.1/24", "dev", "wf0"],
            &["-n", n, "link", "set", "wf0", "up"],
            &["-n", n, "link", "set", "wf1", "up"],
        ] {
            ip(args).unwrap_or_else(|why| panic!("ip {}: {why}", args.join(" ")));
        }
        Some(ns)
    }

    /// `ip netns exec NAME PROGRAM`: the program runs in the namespace under its own pid.
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// `wayfinder request PATH --addr ADDR [--token-file FILE]` inside the namespace.
    fn request(&self, addr: &str, path_and_query: &str, token_file: Option<&Path>) -> Output {
        let mut command = self.command(path());
        command.args(["request", path_and_query, "--addr", addr]);
        if let Some(file) = token_file {
            command.arg("--token-file").arg(file);
        }
        command.output().unwrap()
    }

    /// Starts `wayfinder discovery` inside the namespace, debug pages on `http_addr`.
    pub(crate) async fn server(&self, http_addr: &str, more: &[&str]) -> Wayfinder {
        let mut command = tokio::process::Command::from(self.command(path()));
        command
            .args(["discovery", "--grpc-addr", "127.0.0.1:0"])
            .args(["--http-addr", http_addr])
            .args(["--monitoring-addr", "127.0.0.1:0", "--secure-grpc-addr", ""])
            .args([
                "--log-format",
                "json",
                "--log-level",
                "info,wayfinder=debug",
            ])
            .args(more);
        Wayfinder::spawn(command).await
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(why) = ip(&["netns", "del", &self.name]) {
            let _ = writeln!(
                std::io::stderr(),
                "could not delete network namespace {}: {why}",
                self.name
            );
        }
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    match Command::new("ip").args(args).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a request was refused with 403 and a body containing `says`.
fn assert_forbidden(out: &Output, says: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "answered: {}", stdout(out));
    assert!(err.contains("403 Forbidden"), "{err}");
    assert!(err.contains(says), "{err}");
}

pub(crate) fn port(addr: SocketAddr) -> u16 {
    assert_ne!(addr.port(), 0);
    addr.port()
}

#[tokio::test]
async fn other_hosts_need_the_bearer_token_of_debug_token_file() {
    let Some(ns) = Netns::create() else { return };
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef-debug-token\n").unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "0123456789abcdef-debug-tokeN\n").unwrap();
    let w = ns
        .server(
            "0.0.0.0:0",
            &["--debug-token-file", token.to_str().unwrap()],
        )
        .await;
    let other = format!("{OTHER_HOST}:{}", port(w.http));
    let loopback = format!("127.0.0.1:{}", port(w.http));

    // Probes need nothing.
    eventually("/ready from another host", || async {
        let out = ns.request(&other, "/ready", None);
        out.status.success().then_some(())
    })
    .await;

    // istiod's names for the pages are behind the same rule.
    for page in [
        "/debug/syncz",
        "/debug",
        "/debug/config_dump?proxyID=x",
        "/debug/adsz",
        "/debug/connections",
        "/debug/instancesz",
        "/debug/endpointShardz",
        "/debug/list",
    ] {
        assert_forbidden(
            &ns.request(&other, page, None),
            "with the token of the server's --debug-token-file",
        );
    }
    assert_forbidden(
        &ns.request(&other, "/debug/syncz", Some(&wrong)),
        "not the one in the server's --debug-token-file",
    );
    let out = ns.request(&other, "/debug/syncz", Some(&token));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "[]");
    let out = ns.request(&other, "/debug/registryz", Some(&token));
    assert!(stdout(&out).contains("\"Mock\""), "{}", stderr(&out));
    let out = ns.request(&other, "/debug/adsz", Some(&token));
    assert_eq!(stdout(&out).trim(), "[]", "{}", stderr(&out));

    // The web view loads from another host (it asks for the token; see tests/it/ui.rs).
    let out = ns.request(&other, "/ui", None);
    assert!(stdout(&out).contains("/ui/app.js"), "{}", stderr(&out));

    // Loopback inside the namespace needs no token.
    let out = ns.request(&loopback, "/debug/syncz", None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "[]");

    let refused = w
        .wait_log("the wrong token's warning", |l| {
            l["message"] == "debug page refused: wrong bearer token"
        })
        .await;
    assert_eq!(refused["path"], "/debug/syncz");
    assert!(
        refused["peer"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{OTHER_HOST}:")),
        "{refused}"
    );
}

#[tokio::test]
async fn without_a_token_file_only_loopback_reads_even_on_a_dual_stack_socket() {
    let Some(ns) = Netns::create() else { return };
    // `[::]` takes IPv4 too: its peers are IPv4-mapped (`::ffff:127.0.0.1`).
    let w = ns.server("[::]:0", &[]).await;
    let other = format!("{OTHER_HOST}:{}", port(w.http));
    let loopback = format!("127.0.0.1:{}", port(w.http));
    eventually("/ready from another host", || async {
        ns.request(&other, "/ready", None)
            .status
            .success()
            .then_some(())
    })
    .await;
    let out = ns.request(&loopback, "/debug/syncz", None);
    assert!(out.status.success(), "{}", stderr(&out));
    for page in ["/debug/syncz", "/ui", "/ui/app.js"] {
        assert_forbidden(
            &ns.request(&other, page, None),
            "answer only loopback peers; to let other hosts in, start the server with \
             --debug-token-file",
        );
    }
    let out = ns.request(&loopback, "/ui", None);
    assert!(stdout(&out).contains("/ui/app.js"), "{}", stderr(&out));
}

#[test]
fn an_unusable_token_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let missing = dir.path().join("missing");
    for (file, says) in [(&empty, "is empty"), (&missing, "cannot read")] {
        let out = Command::new(path())
            .arg("discovery")
            .args(crate::support::binary::LOOPBACK)
            .arg("--debug-token-file")
            .arg(file)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(
            err.contains("--debug-token-file")
                && err.contains(says)
                && err.contains(&*file.to_string_lossy()),
            "{err}"
        );
    }
}

/// istiod's debug paths that have a page here answer as that page; the others stay 404.
#[tokio::test]
async fn istiod_s_debug_paths_answer_as_the_pages_they_name() {
    let w = Wayfinder::start(&[]).await;
    w.ready().await;
    let node = sidecar("10.1.13.1", "default");
    let id = node.id.clone();
    let mut ads = Ads::connect(w.grpc, node).await;
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    ads.recv_type(TypeUrl::Cluster).await;

    let proxies = |page: serde_json::Value| -> Vec<serde_json::Value> {
        let list = page.as_array().cloned().unwrap_or_default();
        list.iter().map(|c| c["proxy"].clone()).collect()
    };
    let syncz = proxies(w.json("/debug/syncz").await);
    assert_eq!(syncz, [serde_json::Value::from(id)]);
    for alias in ["/debug/adsz", "/debug/connections"] {
        assert_eq!(proxies(w.json(alias).await), syncz, "{alias}");
    }
    let endpointz = w.json("/debug/endpointz").await;
    assert_eq!(
        endpointz.as_array().map(Vec::len),
        Some(4),
        "bookinfo: {endpointz}"
    );
    for alias in ["/debug/instancesz", "/debug/endpointShardz"] {
        assert_eq!(w.json(alias).await, endpointz, "{alias}");
    }
    let one = "?svc=reviews.default.svc.cluster.local";
    assert_eq!(
        w.json(&format!("/debug/instancesz{one}")).await,
        w.json(&format!("/debug/endpointz{one}")).await
    );
    let list = w.json("/debug/list").await;
    assert_eq!(list, w.json("/debug").await);
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"] == "/debug/adsz" && p["what"] == "istiod's name for /debug/syncz"),
        "{list}"
    );
    for unknown in [
        "/debug/cachez",
        "/debug/sidecarz",
        "/debug/pprof/",
        "/debug/nothing",
    ] {
        assert_eq!(w.get(unknown).await.0, 404, "{unknown}");
    }
}
