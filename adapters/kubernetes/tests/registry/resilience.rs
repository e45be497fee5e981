//! API server trouble: an expired resourceVersion, a restart, errors, and a cluster that stays
//! away longer than its grace period. No endpoint is dropped until the grace period runs out.

use std::time::Duration;

use wayfinder_kubernetes::Config;
use wayfinder_kubernetes::fake::{FakeApiServer, Fault};
use wayfinder_kubernetes::fixtures::{address_slice, service};
use wayfinder_registry::{Event, RegistryError};

use crate::support::{Watch, watch};

fn slice(n: u8) -> serde_json::Value {
    let ips: Vec<String> = (1..=n).map(|i| format!("10.1.0.{i}")).collect();
    address_slice("shop", "web", ("http", 8080), &ips)
}

async fn cluster(config: Config) -> (FakeApiServer, Watch) {
    let fake = FakeApiServer::start().await;
    fake.apply(service("shop", "web", "10.96.0.10", &[("http", 80, 8080)]));
    fake.apply(service("shop", "db", "10.96.0.11", &[("tcp", 5432, 5432)]));
    fake.apply(slice(2));
    let mut watch = watch(&fake, config);
    assert_eq!(watch.reset().await.len(), 2);
    (fake, watch)
}

/// Reads items until an Ok one, asserting every error names the cluster.
async fn next_event(watch: &mut Watch) -> (Event, Vec<RegistryError>) {
    let (event, errors) = watch.next_ok().await;
    for err in &errors {
        assert!(
            err.origin().starts_with("cluster east: list/watch "),
            "{err}"
        );
    }
    (event, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_with_expired_resource_version_relists_and_sends_only_what_changed() {
    let (fake, mut watch) = cluster(Config::default()).await;
    fake.until_watching("endpointslices", 1).await;
    fake.stop().await;
    // While the API server is away the deployment scales, and etcd compacts.
    fake.apply(slice(3));
    fake.compact();
    fake.restart().await;
    let (event, _) = next_event(&mut watch).await;
    let event = match event {
        Event::Recovered => next_event(&mut watch).await.0,
        event => event,
    };
    let Event::Upsert(reg) = event else {
        panic!("expected web's Upsert, got {event:?}")
    };
    assert_eq!(&*reg.service.hostname, "web.shop.svc.cluster.local");
    assert_eq!(reg.endpoints.len(), 3);
    assert!(
        fake.counts().gone > 0,
        "the watch resumed from an expired resourceVersion"
    );
    // A later change flows as usual, and nothing (db's Remove, a Reset) came before it.
    fake.apply(slice(4));
    loop {
        match next_event(&mut watch).await.0 {
            Event::Recovered => continue,
            Event::Upsert(reg) => {
                assert_eq!(reg.endpoints.len(), 4);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_items_and_recovery_sends_recovered() {
    let (fake, mut watch) = cluster(Config::default()).await;
    fake.until_watching("services", 1).await;
    fake.set_fault(Fault::Status(500));
    fake.cut_watches();
    let err = watch.next().await.expect_err("an error item");
    assert!(err.to_string().contains("HTTP 500"), "{err}");
    assert!(
        err.origin().starts_with("cluster east: list/watch"),
        "{err}"
    );
    fake.set_fault(Fault::None);
    let (event, _) = next_event(&mut watch).await;
    assert_eq!(event, Event::Recovered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_away_longer_than_its_grace_period_loses_its_endpoints_then_regains_them() {
    let config = Config {
        grace_period: Duration::from_secs(2),
        ..Config::default()
    };
    let (fake, mut watch) = cluster(config).await;
    fake.until_watching("services", 1).await;
    fake.stop().await;
    let (event, errors) = next_event(&mut watch).await;
    assert!(!errors.is_empty(), "errors came first");
    let Event::Reset(regs) = event else {
        panic!("expected the endpoints withdrawn, got {event:?}")
    };
    assert_eq!(regs.len(), 2, "services stay");
    assert!(regs.iter().all(|r| r.endpoints.is_empty()), "{regs:?}");
    fake.restart().await;
    let (event, _) = next_event(&mut watch).await;
    let Event::Reset(regs) = event else {
        panic!("expected everything back, got {event:?}")
    };
    let web = regs
        .iter()
        .find(|r| r.service.hostname.starts_with("web."))
        .unwrap();
    assert_eq!(web.endpoints.len(), 2);
}
