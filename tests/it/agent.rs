//! `wayfinder agent proxy` with real Envoy 1.40, each test in a network namespace of its own
//! (as a pod is), so Envoy and the agent use their default ports: the agent starts Envoy,
//! Envoy gets its configuration from `wayfinder discovery`, a certificate change
//! hot-restarts it without failing a request, a crash restarts it after a backoff, an Envoy
//! that always fails makes the agent give up, and SIGTERM drains and leaves nothing behind.

use std::net::SocketAddr;
use std::time::Duration;

use rustix::process::Signal;

use crate::gateway::{backend_in, entry, gateway, virtual_service};
use crate::support::agent::{Agent, RequestLoop, STATUS, answers, is_envoy, kill};
use crate::support::binary::Wayfinder;
use crate::support::eventually;
use crate::support::fixtures::write;
use crate::support::netns::Netns;
use crate::tools::tools;

pub(crate) const REVIEWS: &str = "reviews.default.svc.cluster.local";

/// The environment of the ingress gateway pod `ingress` in `default`.
const GATEWAY_POD: [(&str, &str); 4] = [
    ("INSTANCE_IP", "127.0.0.1"),
    ("POD_NAME", "ingress"),
    ("POD_NAMESPACE", "default"),
    ("ISTIO_METAJSON_LABELS", r#"{"istio": "ingressgateway"}"#),
];

/// `wayfinder discovery` in `netns` with the File registry over an empty directory, the
/// configuration in `config`, and `extra` flags.
pub(crate) async fn server(
    netns: &Netns,
    empty: &std::path::Path,
    config: &std::path::Path,
    extra: &[&str],
) -> Wayfinder {
    let wrapper = netns.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let (e, c) = (empty.display(), config.display());
    let flags =
        format!("--registries=File --file-registry={e} --config-dir={c} --debounce-after=10ms");
    let mut flags: Vec<&str> = flags.split(' ').collect();
    flags.extend_from_slice(extra);
    Wayfinder::start_under(&wrapper, &flags).await
}

/// A backend answering `v1` in `netns`, and in `config` a gateway on port 8080 that routes
/// to it as `reviews`.
pub(crate) async fn gateway_to_reviews(
    netns: &Netns,
    tools: &crate::tools::Tools,
    config: &std::path::Path,
) -> tokio::process::Child {
    let (backend, port) = backend_in(netns.command(&tools.python), tools, "v1", &[]).await;
    write(config, "entry.yaml", &entry(REVIEWS, &[(port, "v1")]));
    write(config, "gateway.yaml", &gateway(8080));
    write(
        config,
        "vs.yaml",
        &virtual_service(
            "reviews",
            REVIEWS,
            &format!("  - route: [{{destination: {{host: {REVIEWS}}}}}]\n"),
        ),
    );
    backend
}

/// A network namespace with `wayfinder discovery` (the File registry over an empty
/// directory, `--config-dir` `config`) and, in `config`, a gateway on port 8080 routing
/// `reviews` to a backend: what a gateway's agent (`agent`) connects to.
pub(crate) struct GatewaySetup {
    pub(crate) netns: Netns,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) config: std::path::PathBuf,
    /// The agent's `--certs-dir`.
    pub(crate) certs: std::path::PathBuf,
    pub(crate) w: Wayfinder,
    _backend: tokio::process::Child,
}

impl GatewaySetup {
    pub(crate) async fn start(tools: &crate::tools::Tools) -> Self {
        let netns = Netns::new();
        let dir = tempfile::tempdir().unwrap();
        let (config, empty, certs) = (
            dir.path().join("config"),
            dir.path().join("empty"),
            dir.path().join("certs"),
        );
        for d in [&config, &empty, &certs] {
            std::fs::create_dir_all(d).unwrap();
        }
        let backend = gateway_to_reviews(&netns, tools, &config).await;
        let w = server(&netns, &empty, &config, &[]).await;
        Self {
            netns,
            dir,
            config,
            certs,
            w,
            _backend: backend,
        }
    }

    /// The gateway pod's agent (`GATEWAY_POD`) with Envoy, the server's plaintext ADS
    /// address and `extra` flags; returns once its status port listens.
    pub(crate) async fn agent(&self, tools: &crate::tools::Tools, extra: &[&str]) -> Agent {
        let (envoy, discovery) = (tools.envoy.display().to_string(), self.w.grpc.to_string());
        let certs = self.certs.display().to_string();
        let mut args = vec![
            "--binary-path",
            &envoy,
            "--discovery-address",
            &discovery,
            "--certs-dir",
            &certs,
        ];
        args.extend_from_slice(extra);
        Agent::start(&self.netns, self.dir.path(), "router", &args, &GATEWAY_POD).await
    }
}

#[tokio::test]
async fn agent_runs_a_gateway_that_hot_restarts_on_a_certificate_change_without_failing_requests_and_drains_on_sigterm()
 {
    let Some(tools) = tools() else { return };
    let setup = GatewaySetup::start(&tools).await;
    let (netns, w, certs) = (&setup.netns, &setup.w, &setup.certs);
    let mut agent = setup
        .agent(
            &tools,
            &["--drain-duration", "1s", "--parent-shutdown-duration", "3s"],
        )
        .await;

    // Start: Envoy runs as epoch 0, gets its configuration, and the status port says ready.
    agent.ready(netns).await;
    let admin0 = agent.admin(0).await;
    let (_, info) = netns.get(admin0, "/server_info").await;
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["state"], "LIVE");
    assert_eq!(
        info["node"]["id"],
        "router~127.0.0.1~ingress.default~default.svc.cluster.local"
    );
    assert_eq!(info["command_line_options"]["restart_epoch"], 0);
    let bootstrap = std::fs::read_to_string(agent.config_path.join("envoy-rev0.json")).unwrap();
    let bootstrap: serde_json::Value = serde_json::from_str(&bootstrap).unwrap();
    let xds = &bootstrap["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"]
        [0]["endpoint"]["address"]["socket_address"];
    assert_eq!(xds["port_value"], w.grpc.port(), "{bootstrap}");

    // Traffic through the gateway's listener reaches the backend.
    let listener: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    answers(netns, listener, REVIEWS, "v1").await;

    // A request loop runs through the hot restart.
    let requests = RequestLoop::start(netns, listener, REVIEWS, "v1");

    // A certificate change: epoch 1 starts, takes over, and epoch 0 exits by itself.
    write(certs, "cert-chain.pem", "a certificate\n");
    let admin1 = agent.admin(1).await;
    eventually("epoch 1 to be LIVE", || async {
        let (_, info) = netns.get(admin1, "/server_info").await;
        let info: serde_json::Value = serde_json::from_str(&info).ok()?;
        (info["state"] == "LIVE" && info["command_line_options"]["restart_epoch"] == 1)
            .then_some(())
    })
    .await;
    agent
        .wait_for("Envoy handed over to a newer epoch and exited", 1)
        .await;
    assert!(
        !agent.config_path.join("envoy-rev0.json").exists(),
        "epoch 0's file stays"
    );
    let (ok, failed) = requests.stop().await;
    eprintln!(
        "agent: {ok} requests through the hot restart, {} failed",
        failed.len()
    );
    assert!(ok > 0);
    assert!(
        failed.is_empty(),
        "requests failed during the hot restart: {failed:?}"
    );
    assert_eq!(
        agent.envoys().iter().map(|e| e.0).collect::<Vec<_>>(),
        [0, 1]
    );

    // SIGTERM: drain, exit 0, no Envoy and no epoch file left.
    let status = agent.terminate().await;
    assert!(status.success(), "the agent exited with {status}");
    agent.wait_for("draining Envoy's listeners", 1).await;
    for (epoch, pid) in agent.envoys() {
        assert!(!is_envoy(pid), "Envoy epoch {epoch} (pid {pid}) still runs");
    }
    let left: Vec<_> = std::fs::read_dir(&agent.config_path)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "files left in the config path: {left:?}");
}

#[tokio::test]
async fn a_killed_envoy_over_delta_xds_is_started_again_from_epoch_0_after_a_backoff() {
    let Some(tools) = tools() else { return };
    let netns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let w = server(&netns, &empty, &empty, &[]).await;
    let envoy = tools.envoy.display().to_string();
    let discovery = w.grpc.to_string();
    let certs = dir.path().join("certs").display().to_string();
    // The application's probes, as Istio's injector rewrites them to the agent: one to a
    // running application, one to a port nothing listens on.
    let (_app, app_port) = backend_in(netns.command(&tools.python), &tools, "app", &[]).await;
    let probers = format!(
        r#"{{"/app-health/app/readyz": {{"httpGet": {{"path": "/ready", "port": {app_port}}}}},
            "/app-health/app/livez": {{"tcpSocket": {{"port": 1}}, "timeoutSeconds": 1}}}}"#
    );
    let agent = Agent::start(
        &netns,
        dir.path(),
        "sidecar",
        &[
            "--binary-path",
            &envoy,
            "--discovery-address",
            &discovery,
            "--certs-dir",
            &certs,
            "--xds-delta",
        ],
        &[
            ("INSTANCE_IP", "10.1.1.5"),
            ("POD_NAME", "app-1"),
            ("POD_NAMESPACE", "default"),
            ("ISTIO_KUBE_APP_PROBERS", &probers),
        ],
    )
    .await;
    agent.ready(&netns).await;
    let status: SocketAddr = STATUS.parse().unwrap();
    assert_eq!(netns.get(status, "/app-health/app/readyz").await.0, 200);
    assert_eq!(netns.get(status, "/app-health/app/livez").await.0, 500);
    assert_eq!(netns.get(status, "/app-health/other/readyz").await.0, 404);
    let (code, stats) = netns.get(status, "/stats/prometheus").await;
    assert_eq!(code, 200);
    assert!(
        stats.contains("envoy_cluster_manager_cds_update_success"),
        "{stats}"
    );
    w.wait_log("Envoy's delta xDS stream", |l| {
        l["message"] == "xDS stream opened" && l["variant"] == "delta"
    })
    .await;
    let (epoch, first) = agent.envoys()[0];
    assert_eq!(epoch, 0);

    kill(first, Signal::KILL).unwrap();
    let restart = agent.wait_for("restarting Envoy from epoch 0", 1).await;
    assert_eq!(restart[0]["restart"], 1);
    assert_eq!(restart[0]["delay_ms"], 200);
    let started = agent.wait_for("started Envoy", 2).await;
    assert_eq!(started[1]["epoch"], 0);
    assert_ne!(started[1]["pid"], started[0]["pid"]);
    agent.ready(&netns).await;
}

#[tokio::test]
async fn an_envoy_that_always_fails_makes_the_agent_exit_non_zero_after_ten_restarts() {
    let netns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    let launches = dir.path().join("launches");
    let binary = dir.path().join("failing-envoy");
    write(
        dir.path(),
        "failing-envoy",
        &format!(
            "#!/bin/sh\necho \"$(date +%s.%N) $*\" >> {}\nexit 1\n",
            launches.display()
        ),
    );
    std::fs::set_permissions(&binary, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let binary = binary.display().to_string();
    let mut agent = Agent::start(
        &netns,
        dir.path(),
        "sidecar",
        &[
            "--binary-path",
            &binary,
            "--service-registry",
            "Mock",
            "--discovery-address",
            "127.0.0.1:15010",
        ],
        &[("INSTANCE_IP", "127.0.0.1")],
    )
    .await;
    // 200 ms·(2¹⁰ − 1) of backoff in all: about three and a half minutes.
    let status = tokio::time::timeout(Duration::from_secs(600), agent.wait())
        .await
        .expect("the agent to give up");
    assert!(!status.success(), "the agent exited with {status}");
    // Its last lines ("giving up") may still be in the pipe when its exit is seen.
    agent.logs.until_end().await;

    let text = std::fs::read_to_string(&launches).unwrap();
    let starts: Vec<f64> = text
        .lines()
        .filter(|l| l.contains("--restart-epoch 0"))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(starts.len(), 11, "launches:\n{text}");
    let delays: Vec<u64> = agent
        .logs
        .matching(|l| l["message"] == "restarting Envoy from epoch 0")
        .iter()
        .map(|l| l["delay_ms"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (0..10).map(|n| 200 << n).collect();
    assert_eq!(delays, expected);
    // Each launch came at least its backoff after the one before.
    for (n, pair) in starts.windows(2).enumerate() {
        let gap = pair[1] - pair[0];
        assert!(
            gap * 1000.0 >= expected[n] as f64 - 1.0,
            "launch {} came {gap:.3} s after the one before",
            n + 2
        );
    }
    assert_eq!(
        agent
            .logs
            .matching(|l| l["message"]
                .as_str()
                .is_some_and(|m| m.contains("giving up")))
            .len(),
        1
    );
}

#[tokio::test]
async fn an_agent_refuses_bad_metadata_and_probes_naming_the_variable() {
    let netns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    for (var, value, expected) in [
        (
            "ISTIO_METAJSON_LABELS",
            "{not json",
            "ISTIO_METAJSON_LABELS is not JSON",
        ),
        (
            "ISTIO_KUBE_APP_PROBERS",
            r#"{"/app-health/a/readyz": {}}"#,
            "exactly one of httpGet and tcpSocket",
        ),
        (
            "INSTANCE_IP",
            "ten",
            "INSTANCE_IP \"ten\" is not an IP address",
        ),
    ] {
        let output = netns
            .command(crate::support::binary::path())
            .args([
                "agent",
                "proxy",
                "sidecar",
                "--service-registry",
                "Mock",
                "--config-path",
            ])
            .arg(dir.path())
            .env(var, value)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(stderr.contains(expected), "{var}: {stderr}");
    }
}
