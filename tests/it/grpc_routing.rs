//! Proxyless gRPC routing with real clients (Python grpcio, Node grpc-js-xds): a
//! VirtualService from `--config-dir` whose header match and weighted split pick between the
//! DestinationRule subsets of two `grpc_backend.py` backends, `a` (`version: v1`) and `b`
//! (`version: v2`), in one ServiceEntry.
//!
//! gRPC's `weighted_target` policy picks a cluster at random per RPC, so shares are checked
//! with bounds no honest run crosses: with 500 calls at p = 0.8 the standard deviation of the
//! share is 1.8 %, and ±8 % is more than 4σ (a chance below 1 in 10,000 per check).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use serde_json::Value;

use crate::grpc::{Client, backend, call, until};
use crate::support::binary::Wayfinder;
use crate::support::fixtures::write;
use crate::tools::{Tools, tools};

const HOST: &str = "echo.default.svc.cluster.local";
const NODE_ID: &str = "grpc-routing-client";
/// Calls per measured batch.
const BATCH: u32 = 500;
const CANARY: [(&str, &str); 1] = [("x-canary", "yes")];

#[tokio::test]
async fn python_grpcio_weighted_split_and_header_match() {
    let Some(tools) = tools() else { return };
    split_and_match(&tools, Client::Python).await;
}

#[tokio::test]
async fn node_grpc_js_xds_weighted_split_and_header_match() {
    let Some(tools) = tools() else { return };
    split_and_match(&tools, Client::Node).await;
}

/// An 80/20 split and a canary header to v2; the split rewritten to 20/80 flips the shares.
async fn split_and_match(tools: &Tools, kind: Client) {
    let (_a, port_a) = backend(tools, "a").await;
    let (_b, port_b) = backend(tools, "b").await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "echo.yaml",
        &entry(&[(port_a, "v1"), (port_b, "v2")]),
    );
    write(dir.path(), "dr.yaml", &rule());
    write(dir.path(), "vs.yaml", &routes(80, 20));
    // An empty File registry instead of the default Mock one and its bookinfo.
    let empty = tempfile::tempdir().unwrap();
    let (e, d) = (empty.path().display(), dir.path().display());
    let flags =
        format!("--registries=File --file-registry={e} --config-dir={d} --debounce-after=10ms");
    let w = Wayfinder::start(&flags.split(' ').collect::<Vec<_>>()).await;
    w.ready().await;
    let target = format!("xds:///{HOST}:7070");
    let mut client = kind.spawn(tools, &target, &w.grpc.to_string(), NODE_ID);

    // The configuration is complete before the first answer, so the first calls are routed.
    let (ok, answer) = call(&mut client, BATCH, &[]).await;
    let share = share_of_a(&ok, &answer, BATCH, &w).await;
    eprintln!("grpc routing ({kind:?}): a answered {share:.3} of {BATCH} calls at 80/20");
    assert_share(share, 0.72..=0.88, &answer, &w).await;

    let (ok, answer) = call(&mut client, 50, &CANARY).await;
    let all_b = BTreeMap::from([("b".to_string(), 50)]);
    assert_eq!(ok, all_b, "x-canary: yes goes to v2: {answer}");

    // 20/80: batches of 100 until a is the minority (at p = 0.8 a batch of 100 has a share
    // of a below 0.5 with a chance of about 1e-10, at p = 0.2 above it about 1e-10), then a
    // measured batch.
    write(dir.path(), "vs.yaml", &routes(20, 80));
    until(&mut client, "the split to flip to 20/80", 100, &[], |ok| {
        ok.get("a").copied().unwrap_or(0) < 50
    })
    .await;
    let (ok, answer) = call(&mut client, BATCH, &[]).await;
    let share = share_of_a(&ok, &answer, BATCH, &w).await;
    eprintln!("grpc routing ({kind:?}): a answered {share:.3} of {BATCH} calls at 20/80");
    assert_share(share, 0.12..=0.28, &answer, &w).await;

    let (ok, answer) = call(&mut client, 50, &CANARY).await;
    assert_eq!(ok, all_b, "the header match still wins: {answer}");
    assert_no_nack(&w).await;
    client.quit().await;
}

/// The share of calls `a` answered, after checking that every one of `n` calls was answered
/// by `a` or `b`.
async fn share_of_a(ok: &BTreeMap<String, u64>, answer: &Value, n: u32, w: &Wayfinder) -> f64 {
    let (a, b) = (ok.get("a").copied(), ok.get("b").copied());
    let answered = a.unwrap_or(0) + b.unwrap_or(0);
    if answered != u64::from(n) || ok.len() > 2 {
        panic!(
            "every call answered by a or b: {answer}\n{}",
            state(w).await
        );
    }
    a.unwrap_or(0) as f64 / f64::from(n)
}

async fn assert_share(share: f64, bounds: RangeInclusive<f64>, answer: &Value, w: &Wayfinder) {
    if !bounds.contains(&share) {
        panic!(
            "share of a {share:.3} outside {bounds:?}: {answer}\n{}",
            state(w).await
        );
    }
}

/// No type was NACKed by the client (a NACK is a defect in wayfinder).
async fn assert_no_nack(w: &Wayfinder) {
    let syncz = w.json("/debug/syncz").await;
    let conn = syncz
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["proxy"] == NODE_ID))
        .unwrap_or_else(|| panic!("no {NODE_ID} in {syncz}"));
    assert_eq!(conn["proxy_type"], "grpc", "{conn}");
    let types = conn["types"].as_object().unwrap();
    let nacked: Vec<_> = types
        .iter()
        .filter(|(_, t)| !t["last_nack"].is_null())
        .collect();
    assert!(nacked.is_empty(), "NACKed: {nacked:?}\n{}", state(w).await);
}

/// What wayfinder knows of the client, for failure messages.
async fn state(w: &Wayfinder) -> String {
    let syncz = w.get("/debug/syncz").await.1;
    let dump = w
        .get(&format!("/debug/config_dump?proxyID={NODE_ID}"))
        .await
        .1;
    format!("wayfinder's /debug/syncz: {syncz}\nits config_dump for {NODE_ID}: {dump}")
}

/// ServiceEntry `echo` with a gRPC port 7070 and one endpoint per `(port, version)` on
/// 127.0.0.1, labelled `version`.
fn entry(endpoints: &[(u16, &str)]) -> String {
    let mut text = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
         metadata: {{name: echo, namespace: default}}\nspec:\n  hosts: [{HOST}]\n  \
         location: MESH_INTERNAL\n  resolution: STATIC\n  \
         ports: [{{number: 7070, name: grpc, protocol: GRPC}}]\n  endpoints:\n"
    );
    for (port, version) in endpoints {
        text.push_str(&format!(
            "  - {{address: 127.0.0.1, ports: {{grpc: {port}}}, labels: {{version: {version}}}}}\n"
        ));
    }
    text
}

/// DestinationRule `echo` with subsets v1 and v2 by `version`.
fn rule() -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\n\
         metadata: {{name: echo, namespace: default}}\nspec:\n  host: {HOST}\n  subsets:\n  \
         - {{name: v1, labels: {{version: v1}}}}\n  - {{name: v2, labels: {{version: v2}}}}\n"
    )
}

/// VirtualService `echo`: `x-canary: yes` to v2, everything else split v1/v2 by weight.
fn routes(v1: u32, v2: u32) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\n\
         metadata: {{name: echo, namespace: default}}\nspec:\n  hosts: [{HOST}]\n  http:\n  \
         - match: [{{headers: {{x-canary: {{exact: \"yes\"}}}}}}]\n    \
         route: [{{destination: {{host: {HOST}, subset: v2}}}}]\n  \
         - route:\n    - destination: {{host: {HOST}, subset: v1}}\n      weight: {v1}\n    \
         - destination: {{host: {HOST}, subset: v2}}\n      weight: {v2}\n"
    )
}
