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
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: the /ui browser test needs {why} (scripts/install-test-tools)"
        );
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
            "default/reviews.default.svc.cluster.local",
            "default/echo.example.com",
            "default/other.example.com",
        ],
        "proxy": proxy,
        "refused": "VirtualService/default/bad",
        "degrade": "File",
        "degraded_rgb": DEGRADED_RGB,
    });
    let mut child = Command::new(&browser.node)
        .arg(&browser.script)
        .arg(opts.to_string())
        .env("NODE_PATH", &browser.node_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start node");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = child.stderr.take().unwrap();
    let mut phase = async |name: &str| -> Value {
        let line = tokio::time::timeout(PHASE, lines.next_line()).await;
        let line = match line {
            Ok(Ok(Some(line))) => line,
            other => {
                let mut err = String::new();
                let _ = tokio::time::timeout(PHASE, stderr.read_to_string(&mut err)).await;
                panic!("ui.js ended or hung before phase {name} ({other:?}):\n{err}");
            }
        };
        let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(value["phase"], name, "{value}");
        value
    };

    let before = phase("before").await;
    let counts = &before["counts"];
    assert!(counts["registries"].as_u64() >= Some(4), "{before}"); // + AutoRegistration
    assert_eq!(counts["proxies"], 1, "{before}");
    for name in ["mesh.png", "healthy-row.png"] {
        assert!(shots.join(name).is_file(), "{name} in {}", shots.display());
    }

    write(&files, "echo.yaml", BROKEN);
    stdin.write_all(b"degrade\n").await.unwrap();
    let after = phase("after").await;
    let error = after["error"].as_str().unwrap();
    assert!(error.contains("echo.yaml"), "the row's last error: {after}");
    let status = tokio::time::timeout(PHASE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "ui.js: {status}");
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
