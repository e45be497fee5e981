//! Blocking queries: who wakes, when, and index resets.

use std::time::{Duration, Instant};

use serde_json::json;
use wayfinder_consul::fake::{FakeConsul, Instance};

use crate::*;

#[tokio::test]
async fn blocking_query_waits_for_a_change_to_its_service() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(web("w1", "10.0.0.1"));
    let n = get(&fake, "/v1/health/service/web").await.index.unwrap();

    let blocked = spawn_get(&fake, &format!("/v1/health/service/web?index={n}&wait=5m"));
    fake.until_waiting(1).await;
    assert_eq!(
        fake.counts().health_total(),
        1,
        "a blocked request is not answered"
    );
    fake.register(web("w2", "10.0.0.2"));
    let answer = join(blocked).await;
    assert!(answer.index.unwrap() > n);
    assert_eq!(answer.json().as_array().unwrap().len(), 2);
    assert_eq!(fake.waiting(), 0);

    // A service never seen waits on the services table, and answers once it appears.
    let idx = get(&fake, "/v1/health/service/new").await.index.unwrap();
    let blocked = spawn_get(&fake, &format!("/v1/health/service/new?index={idx}"));
    fake.until_waiting(1).await;
    fake.register(Instance::new("new", "n1", "10.0.0.3", 80));
    let answer = join(blocked).await;
    assert_eq!(answer.json()[0]["Service"]["ID"], "n1");
}

#[tokio::test]
async fn a_change_elsewhere_does_not_answer_a_blocked_query() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(Instance::new("a", "a1", "10.0.0.1", 80));
    fake.register(Instance::new("b", "b1", "10.0.0.2", 80));
    let n = get(&fake, "/v1/health/service/a").await.index.unwrap();

    let start = Instant::now();
    let blocked = spawn_get(&fake, &format!("/v1/health/service/a?index={n}&wait=200ms"));
    fake.until_waiting(1).await;
    fake.register(Instance::new("b", "b2", "10.0.0.3", 80));
    let answer = join(blocked).await;
    assert_eq!(answer.index, Some(n), "a's index did not move");
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "answered before wait"
    );

    // The same for a service whose last instance went: it blocks instead of spinning.
    fake.deregister("dc1", "a", "a1");
    let gone = get(&fake, "/v1/health/service/a").await;
    assert_eq!(gone.json(), json!([]));
    let i = gone.index.unwrap();
    assert!(i > n);
    let start = Instant::now();
    let answer = get(&fake, &format!("/v1/health/service/a?index={i}&wait=200ms")).await;
    assert_eq!(answer.index, Some(i));
    assert!(start.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn many_blocked_queries_wake_only_for_their_service() {
    let fake = FakeConsul::start().await.unwrap();
    let all: Vec<Instance> = (0..100)
        .flat_map(|s| (0..10).map(move |i| (s, i)))
        .map(|(s, i)| Instance::new(&format!("s{s}"), &format!("i{i}"), "10.1.0.1", 80))
        .collect();
    fake.register_many(all);
    let n = fake.index();
    let tasks: Vec<_> = (0..100)
        .map(|s| spawn_get(&fake, &format!("/v1/health/service/s{s}?index={n}")))
        .collect();
    fake.until_waiting(100).await;
    fake.set_check_status("dc1", "s7", "i3", "critical");
    let mut tasks = tasks;
    let answer = join(tasks.remove(7)).await;
    assert_eq!(answer.index, Some(n + 1));
    let i3 = &answer.json()[3];
    assert_eq!(i3["Checks"][1]["Status"], "critical");
    assert_eq!(fake.waiting(), 99);
    fake.restore_snapshot(n - 1);
    for task in tasks {
        assert_eq!(join(task).await.index, Some(n - 1));
    }
}

#[tokio::test]
async fn check_changes_move_the_health_index_not_the_catalog_index() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(web("w1", "10.0.0.1"));
    fake.register(web("w2", "10.0.0.2"));
    let catalog = get(&fake, "/v1/catalog/services").await.index.unwrap();
    let health = get(&fake, "/v1/health/service/web").await.index.unwrap();

    fake.set_check_status("dc1", "web", "w1", "critical");
    let after = get(&fake, "/v1/health/service/web").await;
    assert!(after.index.unwrap() > health);
    assert_eq!(after.json()[0]["Checks"][1]["Status"], "critical");
    let path = format!("/v1/catalog/services?index={catalog}&wait=100ms");
    assert_eq!(get(&fake, &path).await.index, Some(catalog));

    // Setting the same status again changes nothing.
    let index = fake.index();
    fake.set_check_status("dc1", "web", "w1", "critical");
    assert_eq!(fake.index(), index);
}

#[tokio::test]
async fn snapshot_restore_moves_the_index_back() {
    let fake = FakeConsul::start().await.unwrap();
    for i in 0..5 {
        fake.register(web(&format!("w{i}"), "10.0.0.1"));
    }
    let n = get(&fake, "/v1/health/service/web").await.index.unwrap();
    let blocked = spawn_get(&fake, &format!("/v1/health/service/web?index={n}"));
    fake.until_waiting(1).await;
    fake.restore_snapshot(4);
    let answer = join(blocked).await;
    assert_eq!(answer.index, Some(4));
    assert_eq!(fake.index(), 4);
    assert_eq!(get(&fake, "/v1/catalog/services").await.index, Some(4));
    fake.register(web("w9", "10.0.0.9"));
    assert_eq!(fake.index(), 5);
}
