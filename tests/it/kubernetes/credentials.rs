//! A gateway's TLS credential from a Kubernetes Secret (`credentialName`), served by the
//! control plane over SDS on the gateway's ADS stream, as istiod serves it: real Envoy 1.40
//! under the agent, speaking xDS to the secure port with a certificate got by its
//! service-account token; the Secret, the Gateway and its routes in the (fake) API server,
//! which also answers whether the gateway's service account may read Secrets. The API server,
//! wayfinder, the backend and the gateway share a network namespace of the test's own.

use std::net::SocketAddr;

use base64::Engine;
use serde_json::{Value, json};
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::gateway::backend_in;
use crate::support::agent::{Agent, mutual_tls};
use crate::support::binary::Wayfinder;
use crate::support::netns::Netns;
use crate::support::pki::Pki;
use crate::support::{eventually, tls_provider};
use crate::tools::{Tools, tools};

/// The host the gateway serves, which the certificates name.
const HOST: &str = "www.example.com";
/// Where the gateway listens for it.
const LISTENER: &str = "127.0.0.1:8443";
/// The gateway's namespace and service account.
const NAMESPACE: &str = "shop";
/// Its service account's user name, as RBAC knows it.
const USER: &str = "system:serviceaccount:shop:ingress";

/// The mesh: a backend `web` behind a ServiceEntry, a Gateway whose HTTPS server takes its
/// certificate from the Secret `www-cert`, and a route to the backend.
fn mesh(fake: &FakeApiServer, backend: u16) {
    let istio = "networking.istio.io/v1";
    let meta = |name: &str| json!({"name": name, "namespace": NAMESPACE});
    fake.apply(json!({
        "apiVersion": istio, "kind": "ServiceEntry", "metadata": meta("web"),
        "spec": {"hosts": ["web.shop.svc.cluster.local"], "location": "MESH_INTERNAL",
                 "resolution": "STATIC",
                 "ports": [{"number": 80, "name": "http", "protocol": "HTTP"}],
                 "endpoints": [{"address": "127.0.0.1", "ports": {"http": backend}}]},
    }));
    fake.apply(json!({
        "apiVersion": istio, "kind": "Gateway", "metadata": meta("ingress"),
        "spec": {"selector": {"istio": "ingressgateway"},
                 "servers": [{"port": {"number": 8443, "name": "https", "protocol": "HTTPS"},
                              "hosts": [HOST],
                              "tls": {"mode": "SIMPLE", "credentialName": "www-cert"}}]},
    }));
    fake.apply(json!({
        "apiVersion": istio, "kind": "VirtualService", "metadata": meta("www"),
        "spec": {"hosts": [HOST], "gateways": ["ingress"],
                 "http": [{"route": [{"destination": {"host": "web.shop.svc.cluster.local",
                                                       "port": {"number": 80}}}]}]},
    }));
}

/// The Secret `www-cert` holding `pki`'s certificate and key, as `kubectl create secret tls`
/// writes it.
fn secret(pki: &Pki) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "www-cert", "namespace": NAMESPACE},
        "data": {"tls.crt": b64(&pki.cert_pem), "tls.key": b64(&pki.key_pem)},
    })
}

/// A gateway's world: the API server (where `ingress`, not always the gateway's account, may
/// read the Secrets of [`NAMESPACE`]), the backend, wayfinder and the gateway's agent with
/// Envoy, ready, all in one network namespace; the Secret holds [`Gateway::first`].
struct Gateway {
    netns: Netns,
    fake: FakeApiServer,
    w: Wayfinder,
    agent: Agent,
    first: Pki,
    _backend: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// The gateway runs as service account `account` of [`NAMESPACE`], whose token the API
    /// server knows.
    async fn start(tools: &Tools, account: &str) -> Self {
        tls_provider();
        let netns = Netns::new();
        let fake = super::fake_in(&netns).await;
        let (backend, port) = backend_in(netns.command(&tools.python), tools, "web", &[]).await;
        mesh(&fake, port);
        let first = Pki::new(HOST);
        fake.apply(secret(&first));
        // As a Role granting `list` on secrets, bound to the `ingress` account, would.
        fake.allow(USER, NAMESPACE, "list", "secrets");
        let dir = tempfile::tempdir().unwrap();
        let w = super::start_in(&netns, &fake, dir.path(), &[]).await;
        fake.add_token("ingress-token", NAMESPACE, account, &["istio-ca"]);
        let token = dir.path().join("istio-token");
        std::fs::write(&token, "ingress-token\n").unwrap();
        let envoy = tools.envoy.display().to_string();
        let mut args = mutual_tls(&w, "--token-file", &token).await;
        args.extend(["--binary-path", &envoy, "--drain-duration", "1s"].map(String::from));
        let pod = dir.path().join("pod");
        std::fs::create_dir_all(&pod).unwrap();
        let agent = Agent::start(
            &netns,
            &pod,
            "router",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            &[
                ("INSTANCE_IP", "127.0.0.1"),
                ("POD_NAME", "ingress"),
                ("POD_NAMESPACE", NAMESPACE),
                ("SERVICE_ACCOUNT", account),
                ("ISTIO_METAJSON_LABELS", r#"{"istio": "ingressgateway"}"#),
            ],
        )
        .await;
        agent.ready(&netns).await;
        Self {
            netns,
            fake,
            w,
            agent,
            first,
            _backend: backend,
            _dir: dir,
        }
    }

    /// A debug page of the server, as JSON.
    async fn page(&self, path: &str) -> Value {
        let (_, body) = self.netns.get(self.w.http, path).await;
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    }

    /// What the server serves the gateway now (`/debug/config_dump`).
    async fn config_dump(&self) -> Value {
        let syncz = self.page("/debug/syncz").await;
        let id = syncz[0]["proxy"].as_str().unwrap().to_string();
        self.page(&format!("/debug/config_dump?proxyID={id}")).await
    }
}

/// `https://HOST/` through the gateway from inside `netns`, trusting only `ca`: the status,
/// the body and the leaf certificate the gateway presented, or the error.
async fn https(netns: &Netns, ca: &str) -> Result<(u16, String, Vec<u8>), String> {
    let ca = reqwest::Certificate::from_pem(ca.as_bytes()).unwrap();
    let listener: SocketAddr = LISTENER.parse().unwrap();
    netns
        .block_on(move || async move {
            let client = reqwest::Client::builder()
                .no_proxy()
                .tls_certs_only([ca])
                .tls_info(true)
                .resolve(HOST, listener)
                .timeout(std::time::Duration::from_secs(5))
                .build()
                .map_err(|e| e.to_string())?;
            let response = client
                .get(format!("https://{HOST}:{}/", listener.port()))
                .send()
                .await
                .map_err(|e| format!("{e:?}"))?;
            let leaf = response
                .extensions()
                .get::<reqwest::tls::TlsInfo>()
                .and_then(|info| info.peer_certificate())
                .map(<[u8]>::to_vec)
                .unwrap_or_default();
            let status = response.status().as_u16();
            let body = response.text().await.map_err(|e| e.to_string())?;
            Ok((status, body, leaf))
        })
        .await
}

/// Waits until the gateway serves `pki`'s certificate, verified against its CA, and the
/// backend answers through it.
async fn serves(netns: &Netns, pki: &Pki, what: &str) {
    let want = pki.cert.to_vec();
    eventually(what, || async {
        match https(netns, &pki.ca_pem).await {
            Ok((200, body, leaf)) if leaf == want && body == "web" => Some(()),
            _ => None,
        }
    })
    .await;
}

#[tokio::test]
async fn a_gateway_serves_its_secret_s_certificate_and_the_rotated_one_without_a_restart() {
    let Some(tools) = tools() else { return };
    let g = Gateway::start(&tools, "ingress").await;
    let (netns, first) = (&g.netns, &g.first);

    // HTTPS with the Secret's certificate: the client trusts only its CA, and is shown it.
    serves(netns, first, "the Secret's certificate").await;
    assert!(g.fake.counts().access_reviews >= 1, "{:?}", g.fake.counts());

    // The Secret is rotated (a new key, from another CA): the gateway serves the new
    // certificate, and a client trusting only the old CA is refused.
    let second = Pki::new(HOST);
    g.fake.apply(secret(&second));
    serves(netns, &second, "the rotated certificate").await;
    let old = https(netns, &first.ca_pem).await;
    assert!(old.is_err(), "the old CA still verifies: {old:?}");

    // Without an Envoy restart: one epoch, never hot-restarted.
    let envoys = g.agent.envoys();
    assert_eq!(envoys.len(), 1, "Envoy was restarted: {envoys:?}");
    let (_, info) = netns.get(g.agent.admin(0).await, "/server_info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["command_line_options"]["restart_epoch"], 0);

    // The keys are in no log and no debug page: the server's config dump shows the secret
    // with its key redacted, and /debug/configz that the credential serves.
    let dump = g.config_dump().await;
    let secrets = dump["secrets"].as_array().expect("secrets in the dump");
    assert_eq!(secrets.len(), 1, "{dump}");
    assert_eq!(secrets[0]["name"], "kubernetes://www-cert");
    assert_eq!(
        secrets[0]["tls_certificate"]["private_key"]["inline_bytes"],
        "[redacted]"
    );
    let configz = g.page("/debug/configz").await;
    let credentials = &configz["credentials"];
    assert_eq!(
        credentials["referenced"][0]["secrets"][0],
        json!({"namespace": NAMESPACE, "serves": true}),
        "{credentials}"
    );
    assert_eq!(credentials["access"][0]["allowed"], true, "{credentials}");
    let key_text = |pki: &Pki| pki.key_pem.lines().nth(1).unwrap().to_string();
    let pages = format!("{dump}{configz}{}", g.w.raw_logs().join("\n"));
    for pki in [first, &second] {
        assert!(!pages.contains(&key_text(pki)), "a key in a page or a log");
    }
}

#[tokio::test]
async fn a_gateway_whose_service_account_may_not_read_secrets_gets_no_certificate() {
    let Some(tools) = tools() else { return };
    // Only the `ingress` account may read Secrets; this gateway runs as `other`.
    let g = Gateway::start(&tools, "other").await;
    let refused = eventually("the refusal", || async {
        let configz = g.page("/debug/configz").await;
        let access = configz["credentials"]["access"]
            .as_array()?
            .first()?
            .clone();
        (access["allowed"] == false).then_some(access)
    })
    .await;
    assert_eq!(refused["service_account"], "other", "{refused}");
    // The handshake finds no certificate to offer, and the gateway is served no secret.
    let answer = https(&g.netns, &g.first.ca_pem).await;
    assert!(answer.is_err(), "served without a credential: {answer:?}");
    let dump = g.config_dump().await;
    assert_eq!(dump["secrets"], json!([]), "{dump}");
}
