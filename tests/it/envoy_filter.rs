//! EnvoyFilter with real Envoy 1.40 under the real agent, in the two captured pods of
//! `workload_mtls`: a Lua filter inserted before the router of every sidecar's outbound side
//! (pod A's, asking) and another on the inbound side of the workloads labelled `app: reviews`
//! (pod B's, answering) each set a response header, which pod A's application sees. A change
//! to the filter reaches the same Envoy (no restart); a patch that cannot apply is reported on
//! `/debug/configz` with its filter, and what the proxies have keeps working.

use serde_json::Value;

use crate::support::eventually;
use crate::support::fixtures::write;
use crate::support::netns::Netns;
use crate::support::pods::Mesh;
use crate::tools::{Tools, tools};

/// An EnvoyFilter named `name` whose Lua filter, inserted before the router in `context`,
/// adds the response header `header: value`; `selector` is its workload selector (YAML).
fn lua(name: &str, context: &str, selector: &str, header: &str, value: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\n\
         metadata: {{name: {name}, namespace: default}}\nspec:\n{selector}  configPatches:\n  \
         - applyTo: HTTP_FILTER\n    match:\n      context: {context}\n      listener:\n        \
         filterChain:\n          filter:\n            \
         name: envoy.filters.network.http_connection_manager\n            \
         subFilter: {{name: envoy.filters.http.router}}\n    patch:\n      \
         operation: INSERT_BEFORE\n      value:\n        name: envoy.filters.http.lua\n        \
         typed_config:\n          \
         '@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n          \
         default_source_code:\n            inline_string: |\n              \
         function envoy_on_response(handle)\n                \
         handle:headers():add('{header}', '{value}')\n              end\n"
    )
}

/// The outbound filter of every sidecar of `default`, with the header value `value`.
fn outbound(value: &str) -> String {
    lua(
        "outbound-lua",
        "SIDECAR_OUTBOUND",
        "",
        "x-outbound-lua",
        value,
    )
}

/// Pod A's application asking the `reviews` service through its sidecar: the status and the
/// two headers the filters set (`-` for a missing one), or `failed: ERROR`.
async fn ask(a: &Netns, tools: &Tools) -> String {
    let script = "import urllib.request\n\
         try:\n    \
             r = urllib.request.urlopen('http://10.96.0.5/', timeout=5)\n    \
             h = r.headers\n    \
             print(r.status, h.get('x-outbound-lua', '-'), h.get('x-inbound-lua', '-'))\n\
         except Exception as e:\n    \
             print('failed:', repr(e))";
    let out = a
        .command("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&tools.python)
        .args(["-c", script])
        .env("no_proxy", "*")
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn lua_filters_set_response_headers_on_both_sides_and_follow_changes_without_a_restart() {
    let Some(tools) = tools() else { return };
    let inbound = lua(
        "inbound-lua",
        "SIDECAR_INBOUND",
        "  workloadSelector:\n    labels: {app: reviews}\n",
        "x-inbound-lua",
        "pod-b",
    );
    let mesh = Mesh::start(
        tools.clone(),
        &[
            ("outbound.yaml", &outbound("one")),
            ("inbound.yaml", &inbound),
        ],
    )
    .await;
    let _b = mesh.sidecar_b().await;
    let a = mesh.sidecar_a().await;
    let envoys = a.envoys();

    eventually("both filters' headers", || async {
        (ask(&mesh.a, &tools).await == "200 one pod-b").then_some(())
    })
    .await;

    // A new value reaches the same Envoy: the agent started no other.
    write(&mesh.config, "outbound.yaml", &outbound("two"));
    eventually("the changed header", || async {
        (ask(&mesh.a, &tools).await == "200 two pod-b").then_some(())
    })
    .await;
    assert_eq!(a.envoys(), envoys, "the same Envoy, not restarted");

    // A patch that cannot apply (a Lua config merged into the router's, another type) is
    // reported with its filter; the listeners stay as generated, with the other patches.
    let broken = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\n\
        metadata: {name: broken, namespace: default}\nspec:\n  configPatches:\n  \
        - applyTo: HTTP_FILTER\n    match:\n      context: SIDECAR_OUTBOUND\n      listener:\n        \
        filterChain:\n          filter:\n            \
        name: envoy.filters.network.http_connection_manager\n            \
        subFilter: {name: envoy.filters.http.router}\n    patch:\n      operation: MERGE\n      \
        value:\n        typed_config:\n          \
        '@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n          \
        default_source_code: {inline_string: 'x'}\n";
    write(&mesh.config, "broken.yaml", broken);
    let reported = eventually("the broken patch on /debug/configz", || async {
        let (_, body) = mesh.a.get(mesh.server.http, "/debug/configz").await;
        let z: Value = serde_json::from_str(&body).ok()?;
        let failures = z["envoy_filters"].as_array()?.clone();
        failures
            .iter()
            .any(|f| f["key"]["name"] == "broken")
            .then_some(failures)
    })
    .await;
    let message = reported
        .iter()
        .find(|f| f["key"]["name"] == "broken")
        .and_then(|f| f["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("cannot merge"), "{message}");
    assert_eq!(ask(&mesh.a, &tools).await, "200 two pod-b");

    // Envoy took every listener it was sent.
    let admin = a.admin(envoys[0].0).await;
    let (_, stats) = mesh
        .a
        .get(
            admin,
            "/stats?filter=^listener_manager.lds.update_rejected$",
        )
        .await;
    assert_eq!(stats.trim(), "listener_manager.lds.update_rejected: 0");
}
