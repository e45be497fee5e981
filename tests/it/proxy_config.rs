//! ProxyConfig under the real agent and real Envoy 1.40: MeshConfig's `defaultConfig` and a
//! ProxyConfig object selecting one workload reach the agents over PCDS before they start
//! Envoy, which then runs with the served `concurrency` and has the served `proxyMetadata` in
//! its node metadata.

use serde_json::Value;

use crate::agent::server;
use crate::support::agent::Agent;
use crate::support::fixtures::write;
use crate::support::netns::Netns;
use crate::tools::tools;

/// What Envoy at `admin` says of itself: its concurrency and its node metadata `TEAM`.
async fn started_with(netns: &Netns, agent: &Agent) -> (Value, Value) {
    let admin = agent.admin(0).await;
    let (_, info) = netns.get(admin, "/server_info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    (
        info["command_line_options"]["concurrency"].clone(),
        info["node"]["metadata"]["TEAM"].clone(),
    )
}

#[tokio::test]
async fn agents_start_envoy_with_the_mesh_default_and_their_workload_s_proxy_config() {
    let Some(tools) = tools() else { return };
    let netns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    let (config, empty) = (dir.path().join("config"), dir.path().join("empty"));
    for d in [&config, &empty] {
        std::fs::create_dir_all(d).unwrap();
    }
    // Neither value is Envoy's default on this machine's cores, nor the other's.
    write(
        dir.path(),
        "mesh.yaml",
        "defaultConfig:\n  concurrency: 3\n  proxyMetadata: {ISTIO_META_TEAM: mesh}\n",
    );
    write(
        &config,
        "proxy-config.yaml",
        "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\n\
         metadata: {name: ingress, namespace: default}\n\
         spec:\n  selector: {matchLabels: {istio: ingressgateway}}\n  concurrency: 1\n  \
         environmentVariables: {ISTIO_META_TEAM: edge}\n",
    );
    let mesh = dir.path().join("mesh.yaml").display().to_string();
    let w = server(&netns, &empty, &config, &["--meshConfig", &mesh]).await;

    let envoy = tools.envoy.display().to_string();
    let discovery = w.grpc.to_string();
    let start = |name: &'static str, ports: [&'static str; 2], labels: &'static str| {
        let pod = dir.path().join(name);
        std::fs::create_dir_all(&pod).unwrap();
        let (netns, envoy, discovery) = (&netns, envoy.clone(), discovery.clone());
        async move {
            let status = format!("127.0.0.1:{}", ports[1]);
            Agent::start_at(
                netns,
                &pod,
                "router",
                &status,
                &[
                    "--binary-path",
                    &envoy,
                    "--discovery-address",
                    &discovery,
                    "--proxy-admin-port",
                    ports[0],
                    "--status-port",
                    ports[1],
                ],
                &[
                    ("INSTANCE_IP", "127.0.0.1"),
                    ("POD_NAME", name),
                    ("POD_NAMESPACE", "default"),
                    ("ISTIO_METAJSON_LABELS", labels),
                ],
            )
            .await
        }
    };
    let ingress = start(
        "ingress",
        ["15000", "15020"],
        r#"{"istio": "ingressgateway"}"#,
    )
    .await;
    let other = start("other", ["15100", "15120"], r#"{"app": "other"}"#).await;

    // The selected workload: its ProxyConfig over the mesh's default.
    assert_eq!(
        started_with(&netns, &ingress).await,
        (Value::from(1), Value::from("edge"))
    );
    // Any other: the mesh's default.
    assert_eq!(
        started_with(&netns, &other).await,
        (Value::from(3), Value::from("mesh"))
    );
}
