//! `wayfinder proxy-status` (the binary) against real Envoy 1.40 run by the agent as an
//! ingress gateway: every type `SYNCED`; `STALE (Ns)` while Envoy is stopped (SIGSTOP) and a
//! push waits for its acknowledgement, then `SYNCED` again once it runs; the text of a NACK
//! (a Lua filter that does not compile, which validation cannot see); a replica that cannot
//! be reached reported on standard error while the others are printed; and one proxy, by
//! Istio's `POD.NAMESPACE` or its node id, compared type by type with what it should have.

use std::collections::BTreeMap;

use rustix::process::Signal;
use serde_json::Value;

use crate::agent::{GatewaySetup, REVIEWS};
use crate::gateway::virtual_service;
use crate::support::agent::kill;
use crate::support::binary::{self, Wayfinder};
use crate::support::eventually;
use crate::support::fixtures::write;
use crate::support::netns::Netns;
use crate::tools::tools;

/// The gateway's node id, as the agent makes it from `GATEWAY_POD`.
const NODE: &str = "router~127.0.0.1~ingress.default~default.svc.cluster.local";

/// `wayfinder proxy-status ARGS` in `netns`: exit code, standard output, standard error.
async fn proxy_status(netns: &Netns, args: &[&str]) -> (i32, String, String) {
    let out = netns
        .command(binary::path())
        .arg("proxy-status")
        .args(args)
        .output()
        .await
        .expect("run wayfinder proxy-status");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// The gateway's row of the table, by column, from the replica `w`.
async fn row(netns: &Netns, w: &Wayfinder) -> Option<BTreeMap<String, String>> {
    let addr = w.http.to_string();
    let (code, out, err) = proxy_status(netns, &["--addr", &addr]).await;
    assert_eq!(code, 0, "{out}{err}");
    parse(&out)
        .into_iter()
        .find(|r| r["NAME"] == "ingress.default")
}

/// The table's rows, each by column (cells are three spaces apart at least; none holds three).
fn parse(table: &str) -> Vec<BTreeMap<String, String>> {
    let split = |line: &str| -> Vec<String> {
        line.split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut lines = table.lines();
    let header = lines.next().map(split).unwrap_or_default();
    lines
        .map(|l| header.iter().cloned().zip(split(l)).collect())
        .collect()
}

/// The four type columns of a row.
fn types(row: &BTreeMap<String, String>) -> [&str; 4] {
    ["CDS", "LDS", "EDS", "RDS"].map(|t| row[t].as_str())
}

/// An EnvoyFilter that inserts, before the gateway's router, a Lua filter whose code does not
/// compile: valid to every check wayfinder makes, refused by Envoy when it loads the listener.
const BAD_LUA: &str = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\n\
    metadata: {name: bad-lua, namespace: default}\nspec:\n  configPatches:\n  \
    - applyTo: HTTP_FILTER\n    match:\n      context: GATEWAY\n      listener:\n        \
    filterChain:\n          filter:\n            \
    name: envoy.filters.network.http_connection_manager\n            \
    subFilter: {name: envoy.filters.http.router}\n    patch:\n      \
    operation: INSERT_BEFORE\n      value:\n        name: envoy.filters.http.lua\n        \
    typed_config:\n          \
    '@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n          \
    default_source_code: {inline_string: 'function envoy_on_response(handle) this is not lua'}\n";

#[tokio::test]
async fn proxy_status_shows_synced_then_stale_while_envoy_is_stopped_then_the_nack_text() {
    let Some(tools) = tools() else { return };
    let setup = GatewaySetup::start(&tools).await;
    let (netns, w, config) = (&setup.netns, &setup.w, &setup.config);
    let agent = setup.agent(&tools, &[]).await;
    agent.ready(netns).await;

    // Every type acknowledged: SYNCED, with Envoy's version, no identity (plaintext port).
    let synced = eventually("CDS, LDS, EDS and RDS SYNCED", || async {
        let row = row(netns, w).await?;
        (types(&row) == ["SYNCED"; 4]).then_some(row)
    })
    .await;
    assert!(synced["VERSION"].starts_with("envoy/1.40"), "{synced:?}");
    assert_eq!(synced["ISTIOD"], w.http.to_string());
    assert_eq!(synced["IDENTITY"], "-");
    assert_eq!(synced["NACK"], "-");
    for query in ["ingress.default", NODE] {
        let (code, out, err) = proxy_status(netns, &[query, "--addr", &w.http.to_string()]).await;
        assert_eq!(code, 0, "{out}{err}");
        for t in ["Clusters", "Listeners", "Endpoints", "Routes"] {
            assert!(out.contains(&format!("{t} Match (SYNCED)")), "{out}");
        }
    }

    // A replica that cannot be reached: named on standard error, exit 1, the others printed.
    let (code, out, err) = proxy_status(
        netns,
        &["--addr", &w.http.to_string(), "--addr", "127.0.0.1:1"],
    )
    .await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("replica 127.0.0.1:1"), "{err}");
    assert!(
        parse(&out).iter().any(|r| r["NAME"] == "ingress.default"),
        "{out}"
    );
    let (code, _, err) =
        proxy_status(netns, &["nobody.default", "--addr", &w.http.to_string()]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no proxy \"nobody.default\""), "{err}");

    // Envoy stopped: a route change is sent and waits for its acknowledgement.
    let pid = agent.envoys()[0].1;
    kill(pid, Signal::STOP).unwrap();
    let routes = format!(
        "  - match: [{{uri: {{prefix: /stopped}}}}]\n    route: [{{destination: {{host: {REVIEWS}}}}}]\n  \
         - route: [{{destination: {{host: {REVIEWS}}}}}]\n"
    );
    write(
        config,
        "vs.yaml",
        &virtual_service("reviews", REVIEWS, &routes),
    );
    let stale = eventually("RDS STALE while Envoy is stopped", || async {
        let row = row(netns, w).await?;
        row["RDS"].starts_with("STALE (").then_some(row)
    })
    .await;
    assert!(stale["RDS"].ends_with("s)"), "{stale:?}");
    let (_, out, _) =
        proxy_status(netns, &["ingress.default", "--addr", &w.http.to_string()]).await;
    assert!(out.contains("Routes Don't Match (STALE ("), "{out}");
    assert!(out.contains("sent, not acknowledged"), "{out}");
    kill(pid, Signal::CONT).unwrap();
    eventually("SYNCED again once Envoy runs", || async {
        let row = row(netns, w).await?;
        (types(&row) == ["SYNCED"; 4]).then_some(())
    })
    .await;

    // A listener Envoy refuses: LDS NACKED, with the text Envoy sent.
    write(config, "bad-lua.yaml", BAD_LUA);
    let nacked = eventually("LDS NACKED", || async {
        let row = row(netns, w).await?;
        (row["LDS"] == "NACKED").then_some(row)
    })
    .await;
    let (_, syncz) = netns.get(w.http, "/debug/syncz").await;
    let syncz: Value = serde_json::from_str(&syncz).unwrap();
    let message = syncz[0]["types"]["lds"]["last_nack"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("script load error"), "{message}");
    let first_line = message.lines().next().unwrap();
    assert!(
        nacked["NACK"].starts_with(&format!("LDS: {first_line}")),
        "{nacked:?}\n{message}"
    );
    let (_, out, _) =
        proxy_status(netns, &["ingress.default", "--addr", &w.http.to_string()]).await;
    assert!(out.contains("Listeners Don't Match (NACKED)"), "{out}");
    assert!(out.contains(&format!("rejected: {first_line}")), "{out}");
}
