//! A 60 s API server outage, through the binary: the registry shows degraded and keeps
//! serving every endpoint; meanwhile the deployment scales and etcd compacts, so the watches
//! come back to an expired resourceVersion; after the restart the adapter relists and the
//! server serves the current state, with no endpoint dropped at any point.

use std::time::Duration;

use wayfinder_kubernetes::fake::FakeApiServer;

use crate::support::eventually;

const WEB: &str = "web.default.svc.cluster.local";
const OUTAGE: Duration = Duration::from_secs(60);

fn served(n: u8) -> Vec<String> {
    (1..=n).map(|i| format!("10.1.0.{i}:9080")).collect()
}

#[tokio::test]
async fn a_minute_without_the_api_server_drops_nothing_and_ends_in_the_current_state() {
    let fake = FakeApiServer::start().await;
    super::web(&fake, 1, 2);
    let dir = tempfile::tempdir().unwrap();
    let w = super::start(&fake, dir.path(), &["--ready-requires-healthy"]).await;
    w.ready().await;
    assert_eq!(w.endpoints(WEB).await, served(2));
    fake.until_watching("endpointslices", 1).await;

    fake.stop().await;
    let status = w.wait_health("Kubernetes", "degraded").await;
    assert!(
        status["last_error"]
            .to_string()
            .contains("cluster Kubernetes: list/watch"),
        "{status}"
    );
    let (code, body) = w.get("/ready").await;
    assert_eq!(code, 503, "{body}");
    // The outage lasts a minute (well inside the default 5 min grace period); every endpoint
    // is served all along. Polled every 5 s: the outage's length is what is tested here.
    fake.apply(super::web_slice(1, 3));
    fake.compact();
    let until = tokio::time::Instant::now() + OUTAGE;
    while tokio::time::Instant::now() < until {
        assert_eq!(
            w.endpoints(WEB).await,
            served(2),
            "an endpoint was dropped during the outage"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    assert_eq!(w.registry_status("Kubernetes").await["health"], "degraded");

    fake.restart().await;
    eventually("the scaled deployment after the restart", || async {
        (w.endpoints(WEB).await == served(3)).then_some(())
    })
    .await;
    w.wait_health("Kubernetes", "healthy").await;
    eventually("/ready to answer 200 again", || async {
        (w.get("/ready").await.0 == 200).then_some(())
    })
    .await;
    assert!(
        fake.counts().gone > 0,
        "the watches came back to an expired resourceVersion"
    );
}
