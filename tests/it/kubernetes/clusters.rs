//! Two clusters (`--kubeconfig east=… --kubeconfig west=…`): one hostname with the endpoints
//! of both, each keeping its cluster; a cluster away longer than `--cluster-grace-period`
//! loses its endpoints, and gets them back when it returns.

use wayfinder_kubernetes::fake::FakeApiServer;

use crate::support::binary::Wayfinder;
use crate::support::eventually;

const WEB: &str = "web.default.svc.cluster.local";

/// A cluster whose Service web has one endpoint, `10.<net>.0.1`.
async fn cluster(net: u8) -> FakeApiServer {
    let fake = FakeApiServer::start().await;
    super::web(&fake, net, 1);
    fake
}

/// `(cluster id, address)` of every endpoint of web.
async fn endpoints(w: &Wayfinder) -> Vec<(String, String)> {
    let z = w.json(&format!("/debug/endpointz?svc={WEB}")).await;
    let mut out: Vec<(String, String)> = z[0]["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let ep = &e["endpoint"];
            (
                ep["cluster_id"].as_str().unwrap_or_default().to_owned(),
                ep["address"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[tokio::test]
async fn one_hostname_across_two_clusters_and_a_cluster_that_goes_away() {
    let (east, west) = (cluster(1).await, cluster(2).await);
    let dir = tempfile::tempdir().unwrap();
    let east_arg = format!(
        "east={}",
        east.write_kubeconfig(dir.path(), "east").display()
    );
    let west_arg = format!(
        "west={}",
        west.write_kubeconfig(dir.path(), "west").display()
    );
    let w = Wayfinder::start(&[
        "--registries",
        "Kubernetes",
        "--kubeconfig",
        &east_arg,
        "--kubeconfig",
        &west_arg,
        "--cluster-grace-period",
        "2s",
        "--debounce-after",
        "10ms",
    ])
    .await;
    w.ready().await;
    for name in ["Kubernetes/east", "Kubernetes/west"] {
        assert_eq!(w.registry_status(name).await["services"], 1);
    }
    assert_eq!(
        endpoints(&w).await,
        pairs(&[("east", "10.1.0.1"), ("west", "10.2.0.1")])
    );

    // West goes away: served for the grace period, then its endpoints go; east's stay.
    west.stop().await;
    w.wait_health("Kubernetes/west", "degraded").await;
    eventually("west's endpoints to go after the grace period", || async {
        (endpoints(&w).await == pairs(&[("east", "10.1.0.1")])).then_some(())
    })
    .await;
    west.restart().await;
    eventually("west's endpoints to come back", || async {
        (endpoints(&w).await == pairs(&[("east", "10.1.0.1"), ("west", "10.2.0.1")])).then_some(())
    })
    .await;
    w.wait_health("Kubernetes/west", "healthy").await;
}
