//! Real Envoy 1.40 as a sidecar over state-of-the-world and delta ADS, fed by the file
//! registry.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use tokio::process::{Child, Command};

use crate::support::binary::{Wayfinder, get};
use crate::support::eventually;
use crate::support::fixtures::{service_entry, write};
use crate::tools::{Tools, tools};

/// A running Envoy, killed by pid when dropped.
pub(crate) struct Envoy {
    child: Child,
    pub(crate) admin: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Envoy {
    /// Starts Envoy with an ADS bootstrap pointing at `ads`, node `id` and node metadata
    /// `metadata` (YAML flow mapping), admin on a loopback port it picks.
    pub(crate) async fn start(tools: &Tools, ads: SocketAddr, id: &str, metadata: &str) -> Self {
        Self::start_with(tools, ads, id, metadata, "GRPC").await
    }

    /// [`Envoy::start`] with an ADS `api_type`: `GRPC` (state of the world) or `DELTA_GRPC`.
    pub(crate) async fn start_with(
        tools: &Tools,
        ads: SocketAddr,
        id: &str,
        metadata: &str,
        api_type: &str,
    ) -> Self {
        Self::launch(tools, ads, id, metadata, "{}", api_type).await
    }

    /// [`Envoy::start`] for a node at `locality` (a YAML flow mapping of `region`, `zone`,
    /// `sub_zone`).
    pub(crate) async fn start_at(
        tools: &Tools,
        ads: SocketAddr,
        id: &str,
        metadata: &str,
        locality: &str,
    ) -> Self {
        Self::launch(tools, ads, id, metadata, locality, "GRPC").await
    }

    async fn launch(
        tools: &Tools,
        ads: SocketAddr,
        id: &str,
        metadata: &str,
        locality: &str,
        api_type: &str,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bootstrap = format!(
            r#"node: {{id: "{id}", cluster: test, metadata: {metadata}, locality: {locality}}}
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}
dynamic_resources:
  ads_config:
    api_type: {api_type}
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services: [{{envoy_grpc: {{cluster_name: xds_cluster}}}}]
  cds_config: {{ads: {{}}, resource_api_version: V3}}
  lds_config: {{ads: {{}}, resource_api_version: V3}}
static_resources:
  clusters:
  - name: xds_cluster
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds_cluster
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: {ip}, port_value: {port}}}}}}}}}]}}]
"#,
            ip = ads.ip(),
            port = ads.port(),
        );
        let config = dir.path().join("bootstrap.yaml");
        std::fs::write(&config, bootstrap).unwrap();
        let admin_file = dir.path().join("admin.txt");
        let child = Command::new(&tools.envoy)
            .arg("-c")
            .arg(&config)
            .arg("--admin-address-path")
            .arg(&admin_file)
            .args(["--use-dynamic-base-id", "--drain-time-s", "1", "-l", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start envoy");
        let admin = eventually("Envoy's admin address", || async {
            read_admin(&admin_file)
        })
        .await;
        Self {
            child,
            admin,
            _dir: dir,
        }
    }

    /// Every stat as text.
    pub(crate) async fn stats(&self) -> HashMap<String, String> {
        let (_, body) = get(self.admin, "/stats").await;
        body.lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect()
    }

    /// A numeric stat, 0 when absent.
    pub(crate) async fn stat(&self, name: &str) -> u64 {
        self.stats()
            .await
            .get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// The admin `/clusters` page.
    pub(crate) async fn clusters(&self) -> String {
        get(self.admin, "/clusters").await.1
    }

    /// Envoy's nonzero `*update_rejected` stats, sorted.
    pub(crate) async fn rejected(&self) -> Vec<(String, String)> {
        let stats = self.stats().await.into_iter();
        let mut out: Vec<_> = stats
            .filter(|(k, v)| k.ends_with("update_rejected") && v != "0")
            .collect();
        out.sort();
        out
    }

    pub(crate) async fn assert_nothing_rejected(&self) {
        let rejected = self.rejected().await;
        assert!(
            rejected.is_empty(),
            "Envoy rejected configuration: {rejected:?}"
        );
    }
}

fn read_admin(path: &Path) -> Option<SocketAddr> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Hosts of a cluster on Envoy's `/clusters` page (`ip:port`).
fn hosts(page: &str, cluster: &str) -> Vec<String> {
    let prefix = format!("{cluster}::");
    let mut out: Vec<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            rest.split_once("::cx_active")
                .map(|(host, _)| host.to_string())
        })
        .collect();
    out.sort();
    out
}

const ECHO: &str = "outbound|8080||echo.default.svc.cluster.local";

/// Node metadata of a sidecar on loopback: capture listeners on 127.0.0.1, on ports the OS
/// picks.
const SIDECAR: &str = "{WAYFINDER_LISTEN_ADDRESS: 127.0.0.1, PROXY_CONFIG: {proxyListenPort: 0, proxyInboundListenPort: 0}}";

/// The ServiceEntry file of `echo` (HTTP on 8080, `protocol`) with loopback endpoints on
/// `ports`.
fn echo(protocol: &str, ports: &[u16]) -> String {
    service_entry(
        "echo",
        "echo.default.svc.cluster.local",
        ("http", 8080, protocol),
        ports,
    )
}

#[tokio::test]
async fn envoy_sidecar_accepts_everything_and_follows_the_registry() {
    sidecar_follows_the_registry("GRPC").await;
}

#[tokio::test]
async fn envoy_sidecar_over_delta_xds_accepts_everything_and_follows_the_registry() {
    sidecar_follows_the_registry("DELTA_GRPC").await;
}

/// Envoy over ADS of `api_type`: every type accepted, endpoint changes followed, a changed
/// cluster warmed at once, every type acknowledged, nothing rejected.
async fn sidecar_follows_the_registry(api_type: &str) {
    let Some(tools) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "echo.yaml", &echo("HTTP", &[9001, 9002]));
    let w = Wayfinder::with_files("", dir.path()).await;
    let id = "sidecar~127.0.0.1~envoy-1.default~default.svc.cluster.local";
    let envoy = Envoy::start_with(&tools, w.grpc, id, SIDECAR, api_type).await;

    // Every type arrives and is accepted.
    eventually(
        "Envoy to accept clusters, endpoints, listeners and routes",
        || async {
            let s = envoy.stats().await;
            let ok = |k: &str| s.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) >= 1;
            (ok("cluster_manager.cds.update_success")
                && ok(&format!("cluster.{ECHO}.update_success"))
                && ok("listener_manager.lds.update_success")
                && ok("http.outbound_127.0.0.1_8080.rds.8080.update_success"))
            .then_some(())
        },
    )
    .await;
    assert_eq!(
        hosts(&envoy.clusters().await, ECHO),
        ["127.0.0.1:9001", "127.0.0.1:9002"]
    );

    // An endpoint change reaches Envoy.
    write(dir.path(), "echo.yaml", &echo("HTTP", &[9001, 9003]));
    eventually("the endpoint change in Envoy's /clusters", || async {
        (hosts(&envoy.clusters().await, ECHO) == ["127.0.0.1:9001", "127.0.0.1:9003"]).then_some(())
    })
    .await;

    // A cluster change: Envoy warms the changed cluster until its endpoints come again, and
    // holds the cluster ACK meanwhile. Without the re-sent endpoints it would wait for ever
    // (initial_fetch_timeout is 0); with them it is done at once.
    let before = envoy.stats().await["cluster_manager.cds.version_text"].clone();
    write(dir.path(), "echo.yaml", &echo("HTTP2", &[9001, 9003]));
    let received = eventually("the changed cluster in Envoy", || async {
        (envoy.stats().await["cluster_manager.cds.version_text"] != before).then(Instant::now)
    })
    .await;
    eventually(
        "warming to finish and every type to be acknowledged",
        || async {
            let warming = envoy.stat("cluster_manager.warming_clusters").await;
            (warming == 0 && all_acked(&w).await).then_some(())
        },
    )
    .await;
    let took = received.elapsed();
    eprintln!(
        "envoy ({api_type}): changed cluster warmed and acknowledged {took:?} after it arrived"
    );
    assert!(
        took.as_secs_f64() < 5.0,
        "warming took {took:?}: were the endpoints re-sent?"
    );

    envoy.assert_nothing_rejected().await;
}

#[tokio::test]
async fn envoy_over_delta_keeps_its_config_across_a_control_plane_restart_and_converges() {
    let Some(tools) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "echo.yaml", &echo("HTTP", &[9001, 9002]));
    let files = dir.path().to_str().unwrap();
    let args = [
        "--registries",
        "File",
        "--file-registry",
        files,
        "--debounce-after",
        "10ms",
    ];
    let w = Wayfinder::start(&args).await;
    let grpc = w.grpc.to_string();
    let id = "sidecar~127.0.0.1~envoy-2.default~default.svc.cluster.local";
    let envoy = Envoy::start_with(&tools, w.grpc, id, SIDECAR, "DELTA_GRPC").await;
    eventually("Envoy's endpoints", || async {
        (hosts(&envoy.clusters().await, ECHO) == ["127.0.0.1:9001", "127.0.0.1:9002"]).then_some(())
    })
    .await;

    assert_eq!(envoy.stat("control_plane.connected_state").await, 1);
    // The control plane goes away; Envoy keeps serving what it has.
    drop(w);
    eventually("Envoy to notice", || async {
        (envoy.stat("control_plane.connected_state").await == 0).then_some(())
    })
    .await;
    assert_eq!(
        hosts(&envoy.clusters().await, ECHO),
        ["127.0.0.1:9001", "127.0.0.1:9002"]
    );

    // Meanwhile an endpoint changes; a new server on the same address catches Envoy up.
    write(dir.path(), "echo.yaml", &echo("HTTP", &[9001, 9003]));
    let w = Wayfinder::start_at(&grpc, &args).await;
    eventually("Envoy to converge after reconnecting", || async {
        (hosts(&envoy.clusters().await, ECHO) == ["127.0.0.1:9001", "127.0.0.1:9003"]).then_some(())
    })
    .await;
    eventually("every type acknowledged, nothing warming", || async {
        let warming = envoy.stat("cluster_manager.warming_clusters").await;
        (warming == 0 && all_acked(&w).await).then_some(())
    })
    .await;
    w.wait_log("the reconnect's delta stream", |l| {
        l["message"] == "xDS stream opened" && l["variant"] == "delta"
    })
    .await;
    // Envoy came back holding its six clusters (initial_resource_versions). The sidecar at
    // 127.0.0.1 is itself an endpoint of echo, so it has an inbound cluster per endpoint port:
    // only 9002 → 9003 changed, so the first clusters response carries inbound|9003|| and
    // removes inbound|9002||; the four unchanged clusters are not sent again.
    let first_cds = w
        .wait_log("the first clusters push", |l| {
            l["message"] == "push" && l["t"] == "cds"
        })
        .await;
    assert_eq!(
        (&first_cds["resources"], &first_cds["removed"]),
        (&1.into(), &1.into()),
        "{first_cds}"
    );
    envoy.assert_nothing_rejected().await;
}

#[tokio::test]
async fn envoy_reconnects_when_its_connection_reaches_the_maximum_age_and_keeps_following() {
    let Some(tools) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "echo.yaml", &echo("HTTP", &[9001, 9002]));
    let files = dir.path().to_str().unwrap();
    let args = [
        "--registries",
        "File",
        "--file-registry",
        files,
        "--max-connection-age",
        "2s",
    ];
    let w = Wayfinder::start(&args).await;
    let id = "sidecar~127.0.0.1~envoy-3.default~default.svc.cluster.local";
    let envoy = Envoy::start(&tools, w.grpc, id, SIDECAR).await;
    eventually("Envoy's endpoints", || async {
        (hosts(&envoy.clusters().await, ECHO) == ["127.0.0.1:9001", "127.0.0.1:9002"]).then_some(())
    })
    .await;
    let first = w.json("/debug/syncz").await[0]["connection_id"].clone();

    // Its connection closes at ~2 s: Envoy opens a new stream (a new connection id) and is
    // brought up to date on it, twice, keeping its endpoints throughout.
    for round in 1..=2 {
        let before = w.json("/debug/syncz").await[0]["connection_id"].clone();
        eventually("Envoy on a new stream, every type acknowledged", || async {
            let now = w.json("/debug/syncz").await[0]["connection_id"].clone();
            (now.is_u64() && now != before && all_acked(&w).await).then_some(())
        })
        .await;
        assert_eq!(
            hosts(&envoy.clusters().await, ECHO),
            ["127.0.0.1:9001", "127.0.0.1:9002"],
            "round {round}"
        );
    }
    assert_ne!(w.json("/debug/syncz").await[0]["connection_id"], first);
    w.wait_log("the age closing a stream", |l| {
        l["message"] == "ending an xDS stream"
            && l["why"].as_str().is_some_and(|w| w.contains("maximum age"))
    })
    .await;

    // Still following the registry.
    write(dir.path(), "echo.yaml", &echo("HTTP", &[9001, 9003]));
    eventually("the endpoint change in Envoy's /clusters", || async {
        (hosts(&envoy.clusters().await, ECHO) == ["127.0.0.1:9001", "127.0.0.1:9003"]).then_some(())
    })
    .await;
    envoy.assert_nothing_rejected().await;
}

/// True when, per `/debug/syncz`, the one proxy acknowledged the latest version of every type.
async fn all_acked(w: &Wayfinder) -> bool {
    let syncz = w.json("/debug/syncz").await;
    let Some(types) = syncz[0]["types"].as_object() else {
        return false;
    };
    types.len() == 4
        && types
            .values()
            .all(|t| t["acked_version"] == t["sent_version"] && t["last_nack"].is_null())
}
