//! A Sidecar's ingress listener under the real agent and real Envoy 1.40, in a network
//! namespace of its own: `captureMode: NONE` gives its port a listener of its own at `bind`
//! (nothing captures traffic here), and its `tls` is terminated there with a certificate
//! made in the test, the workload behind it answering plain HTTP on loopback.

use crate::agent::server;
use crate::gateway::backend_in;
use crate::support::agent::Agent;
use crate::support::eventually;
use crate::support::fixtures::write;
use crate::support::netns::Netns;
use crate::support::pki::Pki;
use crate::tools::{Tools, tools};

/// The certificate's name.
const HOST: &str = "web.example.com";

/// `python` in `netns` sending `GET /` to 127.0.0.1:9443 over TLS for `HOST`, trusting only
/// `ca` (with `plain`, without TLS): the status and body, or `failed: ERROR`.
async fn ask(netns: &Netns, tools: &Tools, ca: &str, plain: bool) -> String {
    let script = format!(
        "import socket, ssl\n\
         try:\n    \
             s = socket.create_connection(('127.0.0.1', 9443), timeout=5)\n    \
             if not {plain}:\n        \
                 s = ssl.create_default_context(cafile='{ca}').wrap_socket(s, server_hostname='{HOST}')\n    \
             s.sendall(b'GET / HTTP/1.1\\r\\nHost: {HOST}\\r\\nConnection: close\\r\\n\\r\\n')\n    \
             data = b''\n    \
             while True:\n        \
                 chunk = s.recv(65536)\n        \
                 if not chunk:\n            \
                     break\n        \
                 data += chunk\n    \
             if not data:\n        \
                 raise Exception('closed without an answer')\n    \
             head, _, body = data.partition(b'\\r\\n\\r\\n')\n    \
             print(head.split(b' ')[1].decode(), body.decode())\n\
         except Exception as e:\n    \
             print('failed:', repr(e))",
        plain = if plain { "True" } else { "False" },
    );
    let out = netns
        .command(&tools.python)
        .args(["-c", &script])
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn an_ingress_port_with_capture_mode_none_binds_its_own_listener_and_terminates_its_tls() {
    let Some(tools) = tools() else { return };
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
    let pki = Pki::new(HOST);
    write(&certs, "cert.pem", &pki.cert_pem);
    write(&certs, "key.pem", &pki.key_pem);
    write(&certs, "ca.pem", &pki.ca_pem);
    let (_app, port) = backend_in(netns.command(&tools.python), &tools, "web", &[]).await;
    let c = certs.display();
    write(
        &config,
        "sidecar.yaml",
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\n\
             metadata: {{name: default, namespace: default}}\nspec:\n  ingress:\n  \
             - port: {{number: 9443, protocol: HTTPS, name: https}}\n    \
               defaultEndpoint: 127.0.0.1:{port}\n    captureMode: NONE\n    \
               bind: 127.0.0.1\n    tls:\n      mode: SIMPLE\n      \
               serverCertificate: {c}/cert.pem\n      privateKey: {c}/key.pem\n  \
             egress:\n  - hosts: ['./*']\n"
        ),
    );
    let w = server(&netns, &empty, &config, &[]).await;
    let (envoy, discovery) = (tools.envoy.display().to_string(), w.grpc.to_string());
    let agent = Agent::start(
        &netns,
        dir.path(),
        "sidecar",
        &["--binary-path", &envoy, "--discovery-address", &discovery],
        &[
            ("INSTANCE_IP", "127.0.0.1"),
            ("POD_NAME", "web"),
            ("POD_NAMESPACE", "default"),
        ],
    )
    .await;
    agent.ready(&netns).await;

    // The port's own listener answers TLS with the workload's certificate, and the workload
    // (plain HTTP on loopback) answers behind it.
    let ca = certs.join("ca.pem").display().to_string();
    eventually("HTTPS through the ingress listener", || async {
        (ask(&netns, &tools, &ca, false).await == "200 web").then_some(())
    })
    .await;
    // Plaintext to the TLS port matches no chain: Envoy closes the connection.
    let plain = ask(&netns, &tools, &ca, true).await;
    assert!(plain.starts_with("failed:"), "{plain}");
}
