//! `/ui` in headless Chromium (Debian's `/usr/bin/chromium`), driven by Playwright
//! (`playwright-core`, from `tests/clients/package.json`) through `tests/clients/ui.js`.
//!
//! The server runs the demo registry (Mock, bookinfo) with a File registry and a
//! configuration directory holding one refused object; a raw ADS client is a connected
//! proxy. The page must show the registries, services, the proxy's CDS `SYNCED`, the refused
//! object and a push chart; then the File registry's file turns bad and its row must say
//! "degraded" in the degraded colour. Screenshots go to the test's temporary directory and
//! are checked in `ui.js` (valid PNGs of the viewport's or the row's size; the degraded
//! colour in the degraded row's shot and not in the healthy one's).
//!
//! `ui.js` finds `playwright-core` through `NODE_PATH`: the inherited `NODE_PATH` first
//! (a developer's own install), then `.tools/node/node_modules` (`scripts/install-test-tools`).
//! Without node, Chromium or Playwright the test skips with a notice, and fails under
//! `WAYFINDER_REQUIRE_TOOLS=1`, as the other real-client tests do. To look at the
//! screenshots, set `WAYFINDER_UI_SHOTS` to a directory outside the repository: the test
//! copies them there.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use wayfinder::xds::TypeUrl;

use crate::debug_access::{Netns, OTHER_HOST, port};
use crate::support::ads::{Ads, sidecar};
use crate::support::binary::Wayfinder;
use crate::support::fixtures::{service_entry, write};
use crate::tools;

/// Debian's Chromium.
const CHROMIUM: &str = "/usr/bin/chromium";

/// `--degraded` in `src/debug/ui/app.css`, the colour of a degraded registry's row.
const DEGRADED_RGB: [u8; 3] = [0xc6, 0x28, 0x28];

/// How long one phase of the browser may take (Chromium's start included).
const PHASE: Duration = Duration::from_secs(90);

/// What the browser test needs: node, `NODE_PATH` holding playwright-core, the driver script.
struct Browser {
    node: PathBuf,
    node_path: std::ffi::OsString,
    script: PathBuf,
}

/// The browser's tools, or `None` after a notice when they are missing and not required.
fn browser() -> Option<Browser> {
    let tools = tools::tools()?;
    let mut dirs: Vec<PathBuf> = std::env::var_os("NODE_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(tools.node_modules.clone());
    let playwright = dirs
        .iter()
        .any(|d| d.join("playwright-core/package.json").is_file());
    let mut missing = Vec::new();
    if !Path::new(CHROMIUM).is_file() {
        missing.push(format!(
            "{CHROMIUM} (Debian's chromium: apt-get install chromium)"
        ));
    }
    if !playwright {
        missing.push(format!(
            "playwright-core in NODE_PATH or {}",
            tools.node_modules.display()
        ));
    }
    if !missing.is_empty() {
        let why = missing.join("; ");
        if tools::required() {
            panic!(
                "{}=1 but the UI test's browser is missing: {why}. Run scripts/install-test-tools.",
                tools::REQUIRE_ENV
            );
        }
        static NOTICE: std::sync::Once = std::sync::Once::new();
        NOTICE.call_once(|| {
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: the /ui browser tests need {why} (scripts/install-test-tools)"
            );
        });
        return None;
    }
    Some(Browser {
        node: tools.node.clone(),
        node_path: std::env::join_paths(dirs).expect("NODE_PATH entries without separators"),
        script: tools.clients.join("ui.js"),
    })
}

/// A ServiceEntry that the File registry refuses (a port that is not a number).
const BROKEN: &str = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
     metadata: {name: echo, namespace: default}\nspec:\n  hosts: [echo.example.com]\n  \
     ports: [{number: eighty, name: http}]\n";

/// A VirtualService that `--config-dir` refuses (a weight that is not a number).
const REFUSED: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\n\
     metadata: {name: bad, namespace: default}\nspec:\n  hosts: [reviews]\n  \
     http: [{route: [{destination: {host: reviews}, weight: eighty}]}]\n";

#[tokio::test]
async fn the_web_view_shows_the_mesh_and_a_registry_turning_degraded() {
    let Some(browser) = browser() else { return };
    let [r, g, b] = DEGRADED_RGB;
    let css = include_str!("../../src/debug/ui/app.css");
    let declared = format!("--degraded: #{r:02x}{g:02x}{b:02x};");
    assert!(
        css.contains(&declared),
        "app.css no longer declares {declared}"
    );
    let dir = tempfile::tempdir().unwrap();
    let (files, config, shots) = (
        dir.path().join("files"),
        dir.path().join("config"),
        dir.path().join("shots"),
    );
    for d in [&files, &config, &shots] {
        std::fs::create_dir(d).unwrap();
    }
    let echo = service_entry(
        "echo",
        "echo.example.com",
        ("http", 80, "HTTP"),
        &[8081, 8082],
    );
    write(&files, "echo.yaml", &echo);
    write(&config, "bad.yaml", REFUSED);
    let w = Wayfinder::with_files_and("Mock,", &files, &["--config-dir", config.to_str().unwrap()])
        .await;
    w.ready().await;

    // A proxy: CDS and LDS answered and acknowledged, then a push a new snapshot causes
    // (the chart's bars are such pushes' time from publication).
    let node = sidecar("10.1.13.1", "default");
    let proxy = node.id.clone();
    let mut ads = Ads::connect(w.grpc, node).await;
    for t in [TypeUrl::Cluster, TypeUrl::Listener] {
        ads.subscribe(t, &[]).await;
        let r = ads.recv_type(t).await;
        ads.ack(&r, &[]).await;
    }
    let other = service_entry("other", "other.example.com", ("http", 81, "HTTP"), &[8083]);
    write(&files, "other.yaml", &other);
    loop {
        let r = ads.recv().await;
        ads.ack(&r, &[]).await;
        if r.type_url == TypeUrl::Cluster.as_str() {
            break;
        }
    }

    let opts = json!({
        "url": format!("http://{}/ui", w.http),
        "out": shots,
        "chromium": CHROMIUM,
        "registries": ["Mock", "File", "Config"],
        "services": [
            "default/productpage.default.svc.cluster.local",
            "default/details.default.svc.cluster.local",
            "default/ratings.default.svc.cluster.local",
            "default/reviews.default.svc.cluster.local",
            "default/echo.example.com",
            "default/other.example.com",
        ],
        "proxy": proxy,
        "refused": "VirtualService/default/bad",
        "degrade": "File",
        "degraded_rgb": DEGRADED_RGB,
    });
    let mut driver = Driver::spawn(Command::new(&browser.node), &browser, &opts);
    let before = driver.phase("before").await;
    let counts = &before["counts"];
    assert!(counts["registries"].as_u64() >= Some(4), "{before}"); // + AutoRegistration
    assert_eq!(counts["proxies"], 1, "{before}");
    for name in ["mesh.png", "healthy-row.png"] {
        assert!(shots.join(name).is_file(), "{name} in {}", shots.display());
    }

    write(&files, "echo.yaml", BROKEN);
    driver.go_on().await;
    let after = driver.phase("after").await;
    let error = after["error"].as_str().unwrap();
    assert!(error.contains("echo.yaml"), "the row's last error: {after}");
    driver.finish().await;
    for name in ["degraded.png", "degraded-row.png"] {
        assert!(shots.join(name).is_file(), "{name} in {}", shots.display());
    }
    if let Some(keep) = std::env::var_os("WAYFINDER_UI_SHOTS") {
        // For a person to look at: copies outside the repository, where they ask.
        for name in ["mesh.png", "degraded.png", "degraded-row.png"] {
            std::fs::copy(shots.join(name), Path::new(&keep).join(name)).unwrap();
        }
    }
}

/// From another host (a network namespace's veth address, as in `debug_access`) with
/// `--debug-token-file`: the page asks for the token on the pages' 403, refuses a wrong one
/// (which the server logs as a wrong bearer token: the page sent it as one), works once the
/// right one is typed, and in a new tab with `#token=` in the address, which it removes.
#[tokio::test]
async fn from_another_host_the_page_asks_for_the_token_and_keeps_it_out_of_the_address() {
    let Some(browser) = browser() else { return };
    let Some(ns) = Netns::create() else { return };
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let token = "ui-test-token_0123456789";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let w = ns
        .server(
            "0.0.0.0:0",
            &["--debug-token-file", token_file.to_str().unwrap()],
        )
        .await;
    let opts = json!({
        "url": format!("http://{OTHER_HOST}:{}/ui", port(w.http)),
        "out": dir.path(),
        "chromium": CHROMIUM,
        "token": token,
    });
    let command = Command::from(ns.command(&browser.node));
    let mut driver = Driver::spawn(command, &browser, &opts);
    let seen = driver.phase("token").await;
    assert!(
        seen["asked"]
            .as_str()
            .is_some_and(|a| a.contains("Authorization: Bearer")),
        "{seen}"
    );
    driver.finish().await;
    w.wait_log("the wrong token's warning", |l| {
        l["message"] == "debug page refused: wrong bearer token"
    })
    .await;
    assert!(dir.path().join("token.png").is_file());
}

/// `ui.js` running: its JSON lines, one per phase.
struct Driver {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stderr: tokio::process::ChildStderr,
}

impl Driver {
    /// Runs `ui.js OPTS` with `command` (node, perhaps under a wrapper that execs it).
    fn spawn(mut command: Command, browser: &Browser, opts: &Value) -> Self {
        let mut child = command
            .arg(&browser.script)
            .arg(opts.to_string())
            .env("NODE_PATH", &browser.node_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start node");
        Self {
            stdin: child.stdin.take().unwrap(),
            lines: BufReader::new(child.stdout.take().unwrap()).lines(),
            stderr: child.stderr.take().unwrap(),
            child,
        }
    }

    /// The line of phase `name`; fails with the script's stderr if it ended instead.
    async fn phase(&mut self, name: &str) -> Value {
        let line = match tokio::time::timeout(PHASE, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            other => {
                let mut err = String::new();
                let _ = tokio::time::timeout(PHASE, self.stderr.read_to_string(&mut err)).await;
                panic!("ui.js ended or hung before phase {name} ({other:?}):\n{err}");
            }
        };
        let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(value["phase"], name, "{value}");
        value
    }

    /// Tells the script to go on to its next phase.
    async fn go_on(&mut self) {
        self.stdin.write_all(b"go on\n").await.unwrap();
    }

    /// Waits for the script to exit, which must be with success.
    async fn finish(mut self) {
        let status = tokio::time::timeout(PHASE, self.child.wait())
            .await
            .expect("ui.js to exit")
            .unwrap();
        assert!(status.success(), "ui.js: {status}");
    }
}
