//! The leader and the outages that leave parked blocking queries parked: `/v1/status/leader`,
//! `X-Consul-KnownLeader`, a lost leader, and faults of new requests only.

use serde_json::json;
use wayfinder_consul::fake::{FakeConsul, Fault};

use crate::*;

fn header<'a>(answer: &'a Answer, name: &str) -> &'a str {
    answer.headers[name].to_str().unwrap()
}

#[tokio::test]
async fn status_leader_names_the_leader_and_reads_say_they_know_it() {
    let fake = FakeConsul::start_with_datacenters(&["dc1", "dc2"])
        .await
        .unwrap();
    for path in ["/v1/status/leader", "/v1/status/leader?dc=dc2"] {
        let leader = get(&fake, path).await;
        assert_eq!(
            (leader.status, leader.json()),
            (200, json!("127.0.0.1:8300"))
        );
        assert!(
            !leader.headers.contains_key("x-consul-index"),
            "not a query"
        );
    }
    let unknown = get(&fake, "/v1/status/leader?dc=dc9").await;
    assert_eq!(
        (unknown.status, unknown.body.as_str()),
        (500, "No path to datacenter")
    );
    // ACLs do not cover the status endpoints.
    fake.require_token(Some("s3cret"));
    assert_eq!(get(&fake, "/v1/status/leader").await.status, 200);
    fake.require_token(None);

    let services = get(&fake, "/v1/catalog/services").await;
    assert_eq!(header(&services, "x-consul-knownleader"), "true");
    assert_eq!(header(&services, "x-consul-lastcontact"), "0");
    assert_eq!(fake.counts().status_leader, 4);
}

#[tokio::test]
async fn without_a_leader_parked_queries_wait_on_and_only_stale_reads_answer() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(web("w1", "10.0.0.1"));
    let n = fake.index();
    let parked = spawn_get(
        &fake,
        &format!("/v1/health/service/web?stale&index={n}&wait=5m"),
    );
    fake.until_waiting(1).await;

    fake.set_leader(false);
    let leader = get(&fake, "/v1/status/leader").await;
    assert_eq!((leader.status, leader.json()), (200, json!("")));
    let default = get(&fake, "/v1/health/service/web").await;
    assert_eq!(
        (default.status, default.body.as_str()),
        (500, "No cluster leader")
    );
    let stale = get(&fake, "/v1/health/service/web?stale").await;
    assert_eq!(stale.status, 200);
    assert_eq!(stale.json()[0]["Service"]["ID"], "w1");
    assert_eq!(header(&stale, "x-consul-knownleader"), "false");
    let contact: u64 = header(&stale, "x-consul-lastcontact").parse().unwrap();
    assert!(
        contact < 3_600_000,
        "milliseconds since the leader was lost"
    );
    let write = send(
        client()
            .put(format!("{}/v1/catalog/register", fake.url()))
            .json(&json!({"Node": "n9", "Address": "10.0.0.9"})),
    )
    .await;
    assert_eq!(
        (write.status, write.body.as_str()),
        (500, "No cluster leader")
    );
    assert_eq!(fake.waiting(), 1, "the parked query still waits");
    assert!(!parked.is_finished());

    fake.set_leader(true);
    assert_eq!(
        get(&fake, "/v1/status/leader").await.json(),
        json!("127.0.0.1:8300")
    );
    fake.register(web("w2", "10.0.0.2"));
    let answer = join(parked).await;
    assert_eq!(header(&answer, "x-consul-knownleader"), "true");
    assert_eq!(answer.json().as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_new_request_fault_fails_new_requests_and_leaves_parked_ones_parked() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(web("w1", "10.0.0.1"));
    let n = fake.index();
    let parked = spawn_get(&fake, &format!("/v1/health/service/web?index={n}&wait=5m"));
    fake.until_waiting(1).await;

    fake.set_new_request_fault(Fault::Status(500));
    for path in [
        "/v1/status/leader",
        "/v1/catalog/services",
        "/v1/catalog/datacenters",
        "/v1/health/service/web",
    ] {
        assert_eq!(get(&fake, path).await.status, 500, "{path}");
    }
    assert_eq!(fake.waiting(), 1);

    // A hang holds new requests; they stay held after it clears (lost in the partition).
    fake.set_new_request_fault(Fault::Hang);
    let lost = spawn_get(&fake, "/v1/status/leader");
    fake.until_waiting(2).await;
    fake.set_new_request_fault(Fault::None);
    assert_eq!(get(&fake, "/v1/status/leader").await.status, 200);
    assert_eq!(fake.waiting(), 2, "the parked query and the lost request");
    assert!(!lost.is_finished());
    lost.abort();

    // The parked query never saw the faults: a change answers it as usual.
    fake.register(web("w2", "10.0.0.2"));
    let answer = join(parked).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json().as_array().unwrap().len(), 2);
}
