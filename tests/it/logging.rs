//! Log lines through the binary: client text cannot forge a line in either format, istiod's
//! level flags, and a closed standard error.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::rpc;

use crate::support::DEADLINE;
use crate::support::ads::{Ads, grpc, request};
use crate::support::binary::{LOOPBACK, Wayfinder, path};

/// A node id that, written as it is, would end its line and start a forged one in red.
const FORGED_ID: &str =
    "evil\n2026-01-01T00:00:00.000000Z ERROR wayfinder::server: forged \x1b[31mred\x1b[0m";

/// `FORGED_ID` as the text format writes it.
const FORGED_ESCAPED: &str =
    r"evil\n2026-01-01T00:00:00.000000Z ERROR wayfinder::server: forged \u{1b}[31mred\u{1b}[0m";

/// `wayfinder discovery` on loopback with `args`, its standard error read line by line (as
/// bytes, so that nothing is lost to decoding). Killed by pid when dropped.
struct TextServer {
    child: Child,
    lines: mpsc::Receiver<Vec<u8>>,
    seen: Vec<Vec<u8>>,
}

impl TextServer {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(path())
            .arg("discovery")
            .args(LOOPBACK)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            loop {
                let mut line = Vec::new();
                match stderr.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line containing `text` and returns it.
    fn wait_for(&mut self, text: &str) -> String {
        if let Some(line) = self.seen.iter().find(|l| contains(l, text)) {
            return String::from_utf8_lossy(line).into_owned();
        }
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "no line with {text:?} within {DEADLINE:?}; seen: {:?}",
                    self.text()
                )
            });
            self.seen.push(line);
            let line = self.seen.last().unwrap();
            if contains(line, text) {
                return String::from_utf8_lossy(line).into_owned();
            }
        }
    }

    /// The address logged by the `listening` line of `listener`.
    fn bound(&mut self, listener: &str) -> SocketAddr {
        let line = self.wait_for(&format!("listening listener={listener} "));
        let addr = line.rsplit("address=").next().unwrap();
        addr.trim().parse().unwrap()
    }

    fn text(&self) -> String {
        self.seen
            .iter()
            .map(|l| String::from_utf8_lossy(l))
            .collect()
    }
}

impl Drop for TextServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn contains(line: &[u8], text: &str) -> bool {
    line.windows(text.len()).any(|w| w == text.as_bytes())
}

/// The keys of a JSON object, in order; fails on a repeated key or anything but an object.
fn unique_keys(line: &str) -> Vec<String> {
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys: Vec<String> = Vec::new();
            while let Some((key, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                if keys.contains(&key) {
                    return Err(serde::de::Error::custom(format!("key {key:?} twice")));
                }
                keys.push(key);
            }
            Ok(keys)
        }
    }
    let mut de = serde_json::Deserializer::from_str(line);
    de.deserialize_map(Keys)
        .unwrap_or_else(|e| panic!("not one JSON object with unique keys ({e}): {line}"))
}

#[tokio::test]
async fn a_forged_node_id_is_escaped_in_text_logs() {
    let mut server = TextServer::start(&["--log-level", "info"]);
    let addr = server.bound("grpc");
    let mut ads = Ads::connect(addr, grpc(FORGED_ID)).await;
    ads.subscribe(TypeUrl::Listener, &[]).await;
    ads.recv_type(TypeUrl::Listener).await;
    let opened = server.wait_for("xDS stream opened");
    assert!(
        opened.contains(&format!("proxy={FORGED_ESCAPED} ")),
        "{opened}"
    );
    assert!(
        opened.ends_with('\n') && opened.matches('\n').count() == 1,
        "{opened:?}"
    );
    for line in &server.seen {
        assert!(
            !line.contains(&0x1b),
            "a raw ESC in {:?}",
            String::from_utf8_lossy(line)
        );
        assert!(
            !line.starts_with(b"2026-01-01T00:00:00.000000Z"),
            "a forged line: {:?}",
            server.text()
        );
    }
}

#[tokio::test]
async fn client_text_is_one_json_value_and_keys_stay_unique() {
    let w = Wayfinder::start(&[]).await;
    w.ready().await;
    let mut ads = Ads::connect(w.grpc, grpc(FORGED_ID)).await;
    ads.subscribe(TypeUrl::Listener, &[]).await;
    let mut lds = ads.recv_type(TypeUrl::Listener).await;
    // Requests are answered in order: once a clusters request is answered, the listeners
    // response before it is the latest, and its nonce the one a NACK must name.
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    loop {
        let r = ads.recv().await;
        if r.type_url == TypeUrl::Cluster.as_str() {
            break;
        }
        lds = r;
    }
    // A NACK whose detail reads like the end of a JSON object and the start of another.
    let detail = "bad\"}\n{\"level\":\"ERROR\",\"message\":\"forged\x1b[2J\"}";
    let mut nack = request(TypeUrl::Listener, &[], "", &lds.nonce);
    nack.error_detail = Some(rpc::Status {
        code: 3,
        message: detail.into(),
        details: vec![],
    });
    ads.send(nack).await;
    let opened = w
        .wait_log("the stream's opening line", |l| {
            l["message"] == "xDS stream opened"
        })
        .await;
    assert_eq!(opened["proxy"], FORGED_ID, "{opened}");
    let rejected = w
        .wait_log("the NACK's line", |l| {
            l["message"] == "proxy rejected configuration (NACK)"
        })
        .await;
    assert!(
        rejected.as_object().unwrap().values().any(|v| v == detail),
        "the detail is one value: {rejected}"
    );
    for line in w.raw_logs() {
        let keys = unique_keys(&line);
        assert!(
            keys.iter()
                .all(|k| !k.contains("evil") && !k.contains("forged")),
            "client text became a key: {line}"
        );
        assert!(!line.contains('\x1b'), "a raw ESC in {line}");
    }
}

#[test]
fn an_invalid_level_is_refused_at_start_with_the_reason() {
    for (flag, value, reason) in [
        (
            "--log_output_level",
            "default:verbose",
            "\"verbose\" is not a level",
        ),
        ("--log-level", "loud", "\"loud\" is neither a level"),
        (
            "--log-level",
            "info,wayfinder=noisy",
            "\"noisy\" is not a level",
        ),
    ] {
        let out = Command::new(path())
            .arg("discovery")
            .args(LOOPBACK)
            .args([flag, value])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {value} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--log-level") && err.contains(value) && err.contains(reason),
            "{err}"
        );
    }
    for value in ["info,wayfinder=noisy", "default:verbose"] {
        let out = Command::new(path())
            .arg("discovery")
            .args(LOOPBACK)
            .env("RUST_LOG", value)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("invalid RUST_LOG {value:?}")),
            "{err}"
        );
    }
}

#[test]
fn istiod_s_default_info_logs_and_unknown_scopes_are_named() {
    let mut server = TextServer::start(&["--log_output_level", "default:info,authorization:debug"]);
    let warning = server.wait_for("istiod scope");
    assert!(warning.contains(" WARN "), "{warning}");
    assert!(
        warning.contains("\"authorization\" has no equivalent"),
        "{warning}"
    );
    server.bound("grpc");
    server.wait_for("sources synced; serving");
}

#[tokio::test]
async fn log_as_json_writes_json_lines() {
    let mut command = tokio::process::Command::new(path());
    command.arg("discovery").args(LOOPBACK).args([
        "--log_as_json",
        "--log_output_level",
        "default:info",
    ]);
    // `spawn` reads the listening lines as JSON objects: it returns only if they are.
    let w = Wayfinder::spawn(command).await;
    w.ready().await;
    for line in w.raw_logs() {
        let value: Value = serde_json::from_str(&line).unwrap();
        assert!(
            !matches!(value["level"].as_str(), Some("DEBUG" | "TRACE")),
            "default:info hides debug lines: {line}"
        );
    }
}

#[tokio::test]
async fn the_server_serves_and_stops_after_its_log_reader_went_away() {
    let mut child = Command::new(path())
        .arg("discovery")
        .args(LOOPBACK)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let guard = KillOnDrop(child.id());
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (mut line, mut grpc_addr) = (String::new(), None);
    while !line.contains("sources synced") {
        line.clear();
        assert_ne!(stderr.read_line(&mut line).unwrap(), 0, "the server exited");
        if let Some(addr) = line.split("listening listener=grpc address=").nth(1) {
            grpc_addr = Some(addr.trim().parse::<SocketAddr>().unwrap());
        }
    }
    // Nobody reads standard error any more: every later line fails with EPIPE. Writing the
    // failure to standard error panicked the task that logged: here the stream's.
    drop(stderr);
    let mut ads = Ads::connect(grpc_addr.unwrap(), grpc("after-the-reader")).await;
    ads.subscribe(TypeUrl::Listener, &[]).await;
    ads.recv_type(TypeUrl::Listener).await;
    // And the SIGTERM handler's "shutting down" line: the server never stopped. (The
    // handler is in place before the listening lines are written.)
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running {DEADLINE:?} after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    std::mem::forget(guard);
    assert!(status.success(), "{status}");
}

/// Kills a process by pid when a test fails before it stopped.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .status();
    }
}
