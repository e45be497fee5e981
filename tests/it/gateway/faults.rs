//! Faults, timeouts and retries through the Envoy gateway of `gateway.rs`.

use std::time::{Duration, Instant};

use super::{Mesh, REVIEWS, Spec, count, routes, to, virtual_service};
use crate::support::eventually;
use crate::tools::tools;

/// Hosts of the two-hop timeout test: the first hop, the gateway itself as a service, and the
/// second hop.
const FRONT: &str = "front.example.com";
const LOOP: &str = "gateway-loop.example.com";
const DELAYED: &str = "delayed.example.com";

#[tokio::test]
async fn fault_abort_and_delay_with_timeout() {
    let Some(tools) = tools() else { return };
    // Envoy starts a route's timeout when the request reaches the router filter, after the
    // fault filter: an injected delay longer than the timeout still answers 200 (so Envoy
    // 1.40 does with a static configuration too). The timeout shows with a slow backend, and
    // with a delay on a second hop in `fault_delay_behind_a_shorter_timeout_returns_504`.
    let http = format!(
        "  - match: [{{uri: {{prefix: /abort}}}}]\n    \
         fault: {{abort: {{httpStatus: 418, percentage: {{value: 100}}}}}}\n    route: {v1}\n  \
         - match: [{{uri: {{prefix: /delay}}}}]\n    \
         fault: {{delay: {{fixedDelay: 1s, percentage: {{value: 100}}}}}}\n    \
         timeout: 0.5s\n    route: {v1}\n  \
         - match: [{{uri: {{prefix: /slow}}}}]\n    timeout: 0.5s\n    route: {slow}\n  \
         - route: {v1}\n",
        v1 = to("v1"),
        slow = to("slow"),
    );
    let backends: [Spec; 2] = [
        (REVIEWS, "v1", &[]),
        (REVIEWS, "slow", &["--delay-ms", "2000"]),
    ];
    let m = Mesh::start(&tools, &backends, &["v1", "slow"], &http).await;
    m.wait_for("/", &[], "v1").await;
    let t = m.tally(10, 1, "/abort", &[]).await;
    assert_eq!(t.keys().map(|k| k.0).collect::<Vec<_>>(), [418], "{t:?}");
    assert_eq!(m.get("/delay", &[]).await, (200, "v1".to_string()));
    let delays = m.delays_injected().await;
    assert_eq!(delays, 1, "Envoy's fault filter delayed the /delay request");
    let (status, body) = m.get("/slow", &[]).await;
    assert_eq!(status, 504, "the slow backend times out: {body}");
    m.assert_nothing_rejected().await;
}

/// Istio's "request timeouts" task in two hops through the same gateway: `front.example.com`
/// (timeout 0.5 s) goes to the gateway itself as service `gateway-loop.example.com`, with the
/// authority rewritten to `delayed.example.com`, whose route delays 2 s before v1. The delay
/// on the second pass outlasts the first pass's timeout: 504.
#[tokio::test]
async fn fault_delay_behind_a_shorter_timeout_returns_504() {
    let Some(tools) = tools() else { return };
    let backends: [Spec; 1] = [(REVIEWS, "v1", &[])];
    let to_v1 = format!("  - route: {}\n", to("v1"));
    let m = Mesh::start(&tools, &backends, &["v1"], &to_v1).await;
    let p = m.port;
    m.write("loop-entry.yaml", &loop_entry(p));
    let delayed = format!(
        "  - fault: {{delay: {{fixedDelay: 2s, percentage: {{value: 100}}}}}}\n    route: {}\n",
        to("v1")
    );
    m.write(
        "delayed-vs.yaml",
        &virtual_service("delayed", DELAYED, &delayed),
    );
    let front = format!(
        "  - timeout: 0.5s\n    rewrite: {{authority: {DELAYED}}}\n    \
         route: [{{destination: {{host: {LOOP}, port: {{number: {p}}}}}}}]\n"
    );
    m.write("front-vs.yaml", &virtual_service("front", FRONT, &front));

    // Directly, the delayed host answers, late.
    m.wait_for_answer(DELAYED, "/", &[], (200, "v1")).await;
    let started = Instant::now();
    assert_eq!(m.get_host(DELAYED, "/", &[]).await, (200, "v1".into()));
    let took = started.elapsed();
    eprintln!("gateway: {DELAYED} answered directly after {took:?}");
    // Envoy's timers fire to the millisecond, a little early by this clock.
    assert!(
        took >= Duration::from_millis(1900),
        "delayed 2 s, took {took:?}"
    );

    // Through the loop, the first pass times out.
    let timeout = (504, "upstream request timeout");
    m.wait_for_answer(FRONT, "/", &[], timeout).await;
    let before = m.delays_injected().await;
    let mut took = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let answer = m.get_host(FRONT, "/", &[]).await;
        took.push(started.elapsed());
        assert_eq!((answer.0, answer.1.as_str()), timeout);
    }
    eprintln!("gateway: 504 through the loop after {took:?}");
    let bounds = Duration::from_millis(450)..Duration::from_millis(1500);
    assert!(
        took.iter().all(|t| bounds.contains(t)),
        "the 0.5 s timeout answered after {took:?}"
    );
    let delays = m.delays_injected().await - before;
    assert_eq!(delays, 3, "each second pass was delayed");
    let timeouts = format!("cluster.outbound|{p}||{LOOP}.upstream_rq_timeout");
    assert!(m.envoy.stat(&timeouts).await >= 4, "{timeouts}");
    m.assert_nothing_rejected().await;
}

#[tokio::test]
async fn retries_hide_a_flaky_backend() {
    let Some(tools) = tools() else { return };
    let with = |retries: &str| format!("  - retries: {retries}\n    route: {}\n", to("flaky"));
    let backends: [Spec; 1] = [(REVIEWS, "flaky", &["--fail-every", "2"])];
    let http = with("{attempts: 3, retryOn: 5xx}");
    let m = Mesh::start(&tools, &backends, &["flaky"], &http).await;
    m.wait_for("/", &[], "flaky").await;
    let t = m.tally(100, 1, "/", &[]).await;
    assert_eq!(
        count(&t, 200, "flaky"),
        100,
        "retries hide every 503: {t:?}"
    );

    m.write("vs.yaml", &routes(&with("{attempts: 0}")));
    eventually("a 503 once retries are off", || async {
        (m.get("/", &[]).await.0 == 503).then_some(())
    })
    .await;
    let t = m.tally(100, 1, "/", &[]).await;
    let (ok, failed) = (count(&t, 200, "flaky"), count(&t, 503, "flaky"));
    assert_eq!(ok + failed, 100, "{t:?}");
    assert!(failed > 0, "without retries the backend's 503s show: {t:?}");
    m.assert_nothing_rejected().await;
}

/// ServiceEntry `gateway-loop` for `gateway-loop.example.com`: the gateway's own listener.
fn loop_entry(port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
         metadata: {{name: gateway-loop, namespace: default}}\nspec:\n  hosts: [{LOOP}]\n  \
         location: MESH_INTERNAL\n  resolution: STATIC\n  \
         ports: [{{number: {port}, name: http, protocol: HTTP}}]\n  \
         endpoints: [{{address: 127.0.0.1}}]\n"
    )
}
