//! AuthorizationPolicy with real Envoy 1.40 under the real agent: the two captured pods of
//! `workload_mtls` (pod A's application as `sleep`, pod B's HTTP service `reviews` and a TCP
//! service `echo-tcp`, namespace `STRICT`), and a mesh client with another identity (`other`)
//! asking pod B directly over mTLS. An ALLOW of `sleep` on `/api/*` (and on the TCP port),
//! and a DENY of `DELETE`, which wins over that ALLOW. RequestAuthentication with keys the
//! control plane fetches from an issuer in pod A: a valid token passes, a forged one is
//! refused, none passes until an AuthorizationPolicy requires a request principal.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::eventually;
use crate::support::fixtures::write;
use crate::support::pods::{
    Mesh, SLEEP, mtls_request, request, request_with, request_with_headers,
};
use crate::tools::tools;

/// The ALLOW and DENY policies of pod B's workload (`app: reviews`): `sleep` may ask for
/// `/api/*` on the HTTP port and connect to the TCP port; nobody may `DELETE` on the HTTP
/// port (given, so that the rule does not deny every TCP connection as a method-only DENY
/// would).
fn policies(http_port: u16, tcp_port: u16) -> String {
    let sleep = SLEEP.trim_start_matches("spiffe://");
    format!(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n\
         metadata: {{name: allow-api, namespace: default}}\nspec:\n  \
         selector: {{matchLabels: {{app: reviews}}}}\n  rules:\n  \
         - from: [{{source: {{principals: [{sleep}]}}}}]\n    \
           to: [{{operation: {{paths: [/api/*]}}}}]\n  \
         - from: [{{source: {{principals: [{sleep}]}}}}]\n    \
           to: [{{operation: {{ports: ['{tcp_port}']}}}}]\n\
         ---\n\
         apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n\
         metadata: {{name: deny-delete, namespace: default}}\nspec:\n  \
         selector: {{matchLabels: {{app: reviews}}}}\n  action: DENY\n  \
         rules: [{{to: [{{operation: {{methods: [DELETE], ports: ['{http_port}']}}}}]}}]\n"
    )
}

const STRICT: &str = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\n\
                      metadata: {name: default, namespace: default}\nspec:\n  \
                      mtls: {mode: STRICT}\n";

/// Istio's SNI of a service port, which mesh clients send.
fn sni(port: u16, host: &str) -> String {
    format!("outbound_.{port}_._.{host}.default.svc.cluster.local")
}

#[tokio::test]
async fn policies_allow_by_identity_and_path_deny_over_allow_and_close_tcp_connections() {
    let Some(tools) = tools() else { return };
    let mesh = Mesh::start(tools, &[("peer.yaml", STRICT)]).await;
    let (_tcp_app, tcp_port) = mesh.tcp_service().await;
    write(&mesh.config, "authz.yaml", &policies(mesh.port, tcp_port));
    let _b = mesh.sidecar_b().await;
    let _a = mesh.sidecar_a().await;
    let (a, tools) = (&mesh.a, &mesh.tools);

    // Paths: `sleep` gets /api/x, and not /admin.
    let api = eventually("sleep's request to /api/x to be served", || async {
        let answer = request(a, tools, "nobody", "http://10.96.0.5/api/x").await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(api.contains(SLEEP), "{api}");
    // The server's config dump of pod B shows the filters, in Envoy's order.
    let node = "sidecar~10.1.1.6~pod-b.default~default.svc.cluster.local";
    let (status, dump) = a
        .get(
            mesh.server.http,
            &format!("/debug/config_dump?proxyID={node}"),
        )
        .await;
    assert_eq!(status, 200, "{dump}");
    let (deny, allow) = (
        dump.find("ns[default]-policy[deny-delete]-rule[0]"),
        dump.find("ns[default]-policy[allow-api]-rule[1]"),
    );
    assert!(deny.is_some() && allow.is_some() && deny < allow, "{dump}");
    let admin = request(a, tools, "nobody", "http://10.96.0.5/admin").await;
    assert!(admin.contains("HTTPError 403"), "{admin}");

    // DENY over ALLOW: DELETE /api/x is refused though the ALLOW covers it.
    let delete = request_with(a, tools, "nobody", "DELETE", "http://10.96.0.5/api/x").await;
    assert!(delete.contains("HTTPError 403"), "{delete}");

    // Another identity: a mesh client that is not `sleep` is refused /api/x, which `sleep`
    // itself, asking the same way, is served.
    let other = mesh.client_certificate("other-token-000000001").await;
    let sleep = mesh.client_certificate("pod-a-token-000000001").await;
    let b_http = ("10.1.1.6", mesh.port);
    let reviews = sni(80, "reviews");
    let answer = mtls_request(&mesh, &sleep, b_http, &reviews, "GET", "/api/x").await;
    assert!(answer.starts_with("200 pod-b "), "{answer}");
    let answer = mtls_request(&mesh, &other, b_http, &reviews, "GET", "/api/x").await;
    assert!(answer.starts_with("403 RBAC: access denied"), "{answer}");

    // TCP: `sleep` connects through its sidecar and is answered; `other`'s connection is
    // closed before the workload sees it, while `sleep`'s own, made the same way, is not.
    let tcp = eventually("sleep's TCP connection to be served", || async {
        let answer = request(a, tools, "nobody", "http://10.96.0.6:9000/").await;
        answer.starts_with("200 pod-b-tcp ").then_some(answer)
    })
    .await;
    assert!(tcp.ends_with(" -"), "no client identity over TCP: {tcp}");
    let b_tcp = ("10.1.1.6", tcp_port);
    let echo = sni(9000, "echo-tcp");
    let answer = mtls_request(&mesh, &sleep, b_tcp, &echo, "GET", "/").await;
    assert!(answer.starts_with("200 pod-b-tcp "), "{answer}");
    let answer = mtls_request(&mesh, &other, b_tcp, &echo, "GET", "/").await;
    assert!(answer.starts_with("failed:"), "{answer}");
}

/// The issuer of the test's tokens, its keys served from pod A (where the control plane runs
/// and fetches them) by a small Python server: the key pair, and the server.
struct Issuer {
    key: EcdsaKeyPair,
    jwks_uri: String,
    _server: tokio::process::Child,
}

const ISSUER: &str = "https://issuer.test";

impl Issuer {
    async fn start(mesh: &Mesh) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = key.public_key().as_ref();
        let jwks = format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"test","alg":"ES256","x":"{}","y":"{}"}}]}}"#,
            URL_SAFE_NO_PAD.encode(&point[1..33]),
            URL_SAFE_NO_PAD.encode(&point[33..65]),
        );
        let file = mesh.dir.path().join("jwks.json");
        std::fs::write(&file, jwks).unwrap();
        let script = "import http.server, sys\n\
                      body = open(sys.argv[1], 'rb').read()\n\
                      class H(http.server.BaseHTTPRequestHandler):\n    \
                          def do_GET(self):\n        \
                              self.send_response(200)\n        \
                              self.send_header('Content-Type', 'application/json')\n        \
                              self.send_header('Content-Length', str(len(body)))\n        \
                              self.end_headers()\n        \
                              self.wfile.write(body)\n    \
                          def log_message(self, *args):\n        \
                              pass\n\
                      s = http.server.HTTPServer(('127.0.0.1', 0), H)\n\
                      print(s.server_address[1], flush=True)\n\
                      s.serve_forever()";
        let mut server = mesh
            .a
            .command(&mesh.tools.python)
            .args(["-c", script])
            .arg(&file)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
        let port = lines
            .next_line()
            .await
            .unwrap()
            .expect("the JWKS server's port");
        Self {
            key,
            jwks_uri: format!("http://127.0.0.1:{port}/jwks"),
            _server: server,
        }
    }

    /// A token for `sub`, signed with the issuer's key (or, `forged`, with another one).
    fn token(&self, sub: &str, forged: bool) -> String {
        let rng = SystemRandom::new();
        let other;
        let key = if forged {
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
            other =
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                    .unwrap();
            &other
        } else {
            &self.key
        };
        let exp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3600;
        let head = URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256","typ":"JWT","kid":"test"}"#);
        let claims = format!(r#"{{"iss":"{ISSUER}","sub":"{sub}","exp":{exp}}}"#);
        let body = URL_SAFE_NO_PAD.encode(claims);
        let signed = format!("{head}.{body}");
        let signature = key.sign(&rng, signed.as_bytes()).unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }
}

#[tokio::test]
async fn request_authentication_refuses_bad_tokens_and_policies_can_require_one() {
    let Some(tools) = tools() else { return };
    let mesh = Mesh::start(tools, &[("peer.yaml", STRICT)]).await;
    let issuer = Issuer::start(&mesh).await;
    write(
        &mesh.config,
        "jwt.yaml",
        &format!(
            "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\n\
             metadata: {{name: jwt, namespace: default}}\nspec:\n  \
             selector: {{matchLabels: {{app: reviews}}}}\n  \
             jwtRules: [{{issuer: '{ISSUER}', jwksUri: '{}'}}]\n",
            issuer.jwks_uri
        ),
    );
    let _b = mesh.sidecar_b().await;
    let _a = mesh.sidecar_a().await;
    let (a, tools) = (&mesh.a, &mesh.tools);
    let ask = |token: Option<String>| async move {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| ("Authorization", b))
            .into_iter()
            .collect();
        request_with_headers(a, tools, "nobody", "GET", "http://10.96.0.5/", &headers).await
    };

    // The control plane fetched the keys, and pod B verifies tokens with them.
    let valid = issuer.token("alice", false);
    eventually("a valid token to be accepted", || {
        let valid = valid.clone();
        async move {
            let answer = ask(Some(valid)).await;
            answer.starts_with("200 pod-b ").then_some(())
        }
    })
    .await;
    let (_, configz) = a.get(mesh.server.http, "/debug/configz").await;
    let configz: serde_json::Value = serde_json::from_str(&configz).unwrap();
    assert_eq!(
        configz["jwks"][0]["uri"],
        issuer.jwks_uri.as_str(),
        "{configz}"
    );
    assert_eq!(configz["jwks"][0]["fetched"], true, "{configz}");
    // A forged signature is refused; no token at all passes.
    let forged = ask(Some(issuer.token("alice", true))).await;
    assert!(forged.contains("HTTPError 401"), "{forged}");
    let anonymous = ask(None).await;
    assert!(anonymous.starts_with("200 pod-b "), "{anonymous}");

    // A policy that requires a request principal: no token is now 403, alice's passes.
    write(
        &mesh.config,
        "require-jwt.yaml",
        &format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n\
             metadata: {{name: require-jwt, namespace: default}}\nspec:\n  \
             selector: {{matchLabels: {{app: reviews}}}}\n  \
             rules: [{{from: [{{source: {{requestPrincipals: ['{ISSUER}/*']}}}}]}}]\n"
        ),
    );
    eventually("a request without a token to be refused", || async {
        let answer = ask(None).await;
        answer.contains("HTTPError 403").then_some(())
    })
    .await;
    let answer = ask(Some(issuer.token("alice", false))).await;
    assert!(answer.starts_with("200 pod-b "), "{answer}");
}
