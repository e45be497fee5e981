//! AuthorizationPolicy with real Envoy 1.40 under the real agent: the two captured pods of
//! `workload_mtls` (pod A's application as `sleep`, pod B's HTTP service `reviews` and a TCP
//! service `echo-tcp`, namespace `STRICT`), and a mesh client with another identity (`other`)
//! asking pod B directly over mTLS. An ALLOW of `sleep` on `/api/*` (and on the TCP port),
//! and a DENY of `DELETE`, which wins over that ALLOW.

use crate::support::eventually;
use crate::support::fixtures::write;
use crate::tools::tools;
use crate::workload_mtls::{Mesh, SLEEP, mtls_request, request, request_with};

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
