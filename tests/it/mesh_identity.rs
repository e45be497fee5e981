//! The agent's workload certificate with real Envoy 1.40, in a network namespace of the
//! test's own: `--control-plane-auth-policy MUTUAL_TLS` makes the agent obtain a certificate
//! from the server's CA with a bootstrap token, serve it to Envoy over SDS, and Envoy speak
//! xDS to the secure port with it; the certificate rotates under a request loop without an
//! Envoy restart; a bad token gets no certificate, and a certificate of another namespace no
//! configuration.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

use crate::agent::{REVIEWS, gateway_to_reviews};
use crate::gateway::gateway;
use crate::support::agent::{Agent, RequestLoop, answers, mutual_tls, syncz_connection};
use crate::support::binary::Wayfinder;
use crate::support::eventually;
use crate::support::fixtures::write;
use crate::support::netns::Netns;
use crate::tools::tools;

/// Bootstrap tokens: the gateway's, and one for another namespace.
const TOKENS: &str = "ingress-token-0000001 default ingress\nother-ns-token-000001 a web\n";

/// `wayfinder discovery` in `netns` with the configuration in `config` and the bootstrap
/// tokens of [`TOKENS`] (written to `dir/tokens`), and the harness's secure port.
async fn server(netns: &Netns, dir: &Path, config: &Path) -> Wayfinder {
    write(dir, "tokens", TOKENS);
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let tokens = format!("--bootstrap-tokens={}", dir.join("tokens").display());
    crate::agent::server(netns, &empty, config, &[&tokens]).await
}

/// The ingress gateway pod `ingress` in `namespace`, service account `ingress`.
fn gateway_pod(namespace: &str) -> [(&str, &str); 5] {
    [
        ("INSTANCE_IP", "127.0.0.1"),
        ("POD_NAME", "ingress"),
        ("POD_NAMESPACE", namespace),
        ("SERVICE_ACCOUNT", "ingress"),
        ("ISTIO_METAJSON_LABELS", r#"{"istio": "ingressgateway"}"#),
    ]
}

/// The serial numbers and SPIFFE ids of the workload certificates Envoy holds (admin
/// `/certs`).
pub(crate) async fn envoy_certificates(netns: &Netns, admin: SocketAddr) -> Vec<(String, String)> {
    let (_, certs) = netns.get(admin, "/certs").await;
    let certs: Value = serde_json::from_str(&certs).unwrap_or_default();
    certs["certificates"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["cert_chain"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| {
            let uri = c["subject_alt_names"]
                .as_array()?
                .iter()
                .find_map(|san| san["uri"].as_str())?
                .to_string();
            Some((c["serial_number"].as_str()?.to_string(), uri))
        })
        .collect()
}

/// Every regular file under `dir` whose content mentions a private key.
fn files_with_keys(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            found.extend(files_with_keys(&path));
        } else if kind.is_file()
            && std::fs::read(&path)
                .map(|b| String::from_utf8_lossy(&b).contains("PRIVATE KEY"))
                .unwrap_or(false)
        {
            found.push(path.display().to_string());
        }
    }
    found
}

#[tokio::test]
async fn a_gateway_s_agent_gets_its_certificate_speaks_mutual_tls_xds_and_rotates_it_without_a_restart()
 {
    let Some(tools) = tools() else { return };
    let netns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let _backend = gateway_to_reviews(&netns, &tools, &config).await;
    write(dir.path(), "token", "ingress-token-0000001\n");
    let w = server(&netns, dir.path(), &config).await;

    // The agent's working directory: its SDS socket is made there.
    let pod = dir.path().join("pod");
    std::fs::create_dir_all(&pod).unwrap();
    let envoy = tools.envoy.display().to_string();
    let mut args = mutual_tls(&w, "--bootstrap-token-file", &dir.path().join("token")).await;
    args.extend(
        [
            "--binary-path",
            &envoy,
            "--secret-ttl",
            "30s",
            "--drain-duration",
            "1s",
        ]
        .map(String::from),
    );
    let mut agent = Agent::start(
        &netns,
        &pod,
        "router",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &gateway_pod("default"),
    )
    .await;

    // Envoy runs with the certificate for the token's identity, got over SDS, and its xDS
    // stream on the secure port is served as that identity.
    agent.ready(&netns).await;
    let admin = agent.admin(0).await;
    let spiffe = "spiffe://cluster.local/ns/default/sa/ingress";
    let first = envoy_certificates(&netns, admin).await;
    assert!(
        first.iter().any(|(_, uri)| uri == spiffe),
        "Envoy's certificates: {first:?}"
    );
    let conn = syncz_connection(&netns, w.http, "router~").await;
    assert_eq!(conn["identity"], spiffe, "{conn}");
    assert!(conn["certificate_expiry"].is_string(), "{conn}");

    // The key is in no file and in no page: Envoy's config dump has the secret, redacted.
    assert_eq!(files_with_keys(dir.path()), Vec::<String>::new());
    let (_, dump) = netns
        .get(admin, "/config_dump?resource=dynamic_active_secrets")
        .await;
    assert!(
        dump.contains("\"default\"") && dump.contains("\"ROOTCA\""),
        "{dump}"
    );
    assert!(!dump.contains("PRIVATE KEY") && !dump.contains("LS0tLS1CRUdJTiBQUklWQVRF"));

    // Traffic through the gateway reaches the backend.
    let listener: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    answers(&netns, listener, REVIEWS, "v1").await;

    // Rotation: a 30 s certificate is renewed at 15–24 s, during a request loop, and Envoy
    // takes the new one over SDS without a restart.
    let requests = RequestLoop::start(&netns, listener, REVIEWS, "v1");
    let renewed = agent
        .logs
        .wait("the renewed certificate", |l| {
            l["message"] == "obtained the workload certificate" && l["serial"] == 2
        })
        .await;
    assert_eq!(renewed["identity"], spiffe);
    let rotated = eventually("Envoy to hold the renewed certificate", || async {
        let now = envoy_certificates(&netns, admin).await;
        (!now.is_empty() && now.iter().all(|c| !first.contains(c))).then_some(now)
    })
    .await;
    assert!(rotated.iter().any(|(_, uri)| uri == spiffe), "{rotated:?}");
    let (ok, failed) = requests.stop().await;
    eprintln!(
        "mesh identity: {ok} requests through the rotation, {} failed",
        failed.len()
    );
    assert!(ok > 0);
    assert!(
        failed.is_empty(),
        "requests failed during the rotation: {failed:?}"
    );
    let envoys = agent.envoys();
    assert_eq!(envoys.len(), 1, "Envoy was restarted: {envoys:?}");
    let (_, info) = netns.get(admin, "/server_info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["state"], "LIVE");
    assert_eq!(info["command_line_options"]["restart_epoch"], 0);

    // The SDS socket is Istio's path under the agent's directory, its own user's only, and
    // goes with the agent.
    let socket = pod.join("var/run/secrets/workload-spiffe-uds/socket");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", socket.display());
    let status = agent.terminate().await;
    assert!(status.success(), "the agent exited with {status}");
    assert!(!socket.exists(), "the SDS socket stays after the agent");
}

#[tokio::test]
async fn a_bad_token_gets_no_certificate_and_a_certificate_of_another_namespace_no_configuration() {
    let Some(tools) = tools() else { return };
    let netns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    write(&config, "gateway.yaml", &gateway(8080));
    write(dir.path(), "bad", "not-a-known-token-01\n");
    write(dir.path(), "other", "other-ns-token-000001\n");
    let w = server(&netns, dir.path(), &config).await;
    let envoy = tools.envoy.display().to_string();
    let args = |token: &str, status: &str| {
        let w = &w;
        let envoy = envoy.clone();
        let (token, status) = (dir.path().join(token), status.to_string());
        async move {
            let mut args = mutual_tls(w, "--bootstrap-token-file", &token).await;
            args.extend([
                "--binary-path".into(),
                envoy,
                "--status-port".into(),
                status,
                "--proxy-admin-port".into(),
                "0".into(),
            ]);
            args
        }
    };

    // A token the server does not know: the CA refuses, and the agent says so and retries.
    let bad = dir.path().join("bad-pod");
    std::fs::create_dir_all(&bad).unwrap();
    let bad_args = args("bad", "15020").await;
    let refused = Agent::start(
        &netns,
        &bad,
        "router",
        &bad_args.iter().map(String::as_str).collect::<Vec<_>>(),
        &gateway_pod("default"),
    )
    .await;
    let warning = refused
        .wait_for("could not obtain the workload certificate", 1)
        .await;
    let error = warning[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("Unauthenticated"), "{warning:?}");
    assert!(
        refused.envoys().is_empty(),
        "Envoy started without a certificate"
    );
    drop(refused);

    // A certificate for namespace `a` on a node that claims `default`: the secure port
    // refuses the stream with PERMISSION_DENIED, and Envoy gets nothing.
    let other = dir.path().join("other-pod");
    std::fs::create_dir_all(&other).unwrap();
    let other_args = args("other", "15021").await;
    let _agent = Agent::start_at(
        &netns,
        &other,
        "router",
        "127.0.0.1:15021",
        &other_args.iter().map(String::as_str).collect::<Vec<_>>(),
        &gateway_pod("default"),
    )
    .await;
    let refusal = w
        .wait_log("the secure port to refuse the gateway's stream", |l| {
            l["message"] == "refusing an xDS stream"
                && l["node"].as_str().is_some_and(|n| n.starts_with("router~"))
        })
        .await;
    let reason = refusal["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("spiffe://cluster.local/ns/a/sa/web"),
        "{refusal}"
    );
    let (_, syncz) = netns.get(w.http, "/debug/syncz").await;
    assert!(
        !syncz.contains("router~"),
        "the gateway was served: {syncz}"
    );
}
