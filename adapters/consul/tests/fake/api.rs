//! Answer shapes, filters, datacenters, ACLs, faults, counts and writes.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wayfinder_consul::fake::{Counts, FakeConsul, Fault, Instance};

use crate::*;

#[tokio::test]
async fn health_entries_have_consuls_shape() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(web("web-1", "10.0.0.1").tag("v1").meta("version", "1"));
    let mut bare = web("web-2", "");
    bare.node = "a-node".into();
    bare.node_address = "10.0.0.9".into();
    fake.register(bare);

    let answer = get(&fake, "/v1/health/service/web").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.headers["content-type"], "application/json");
    assert_eq!(answer.headers["x-consul-knownleader"], "true");
    assert_eq!(answer.headers["x-consul-lastcontact"], "0");
    assert_eq!(answer.headers["x-consul-effective-consistency"], "leader");
    assert_eq!(answer.index, Some(fake.index()));
    let entries = answer.json();
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 2);

    // Sorted by node name: "a-node" before "node-10.0.0.1".
    let (bare, full) = (&entries[0], &entries[1]);
    assert_eq!(bare["Node"]["Node"], "a-node");
    assert_eq!(bare["Node"]["Address"], "10.0.0.9");
    assert_eq!(bare["Service"]["Address"], "");
    assert!(bare["Service"].get("TaggedAddresses").is_none());
    assert_eq!(bare["Service"]["Tags"], json!([]));
    assert_eq!(bare["Service"]["Meta"], json!({}));

    let node = &full["Node"];
    assert_eq!(node["Node"], "node-10.0.0.1");
    assert_eq!(node["Datacenter"], "dc1");
    assert_eq!(node["ID"].as_str().unwrap().len(), 36);
    assert_eq!(node["TaggedAddresses"]["lan_ipv4"], "10.0.0.1");
    assert_eq!(node["TaggedAddresses"]["wan"], "10.0.0.1");
    assert_eq!(node["Meta"], json!({ "consul-network-segment": "" }));
    let service = &full["Service"];
    assert_eq!(service["ID"], "web-1");
    assert_eq!(service["Service"], "web");
    assert_eq!(service["Tags"], json!(["v1"]));
    assert_eq!(service["Port"], 8080);
    assert_eq!(service["Meta"], json!({ "version": "1" }));
    assert_eq!(service["Weights"], json!({ "Passing": 1, "Warning": 1 }));
    let lan = json!({ "Address": "10.0.0.1", "Port": 8080 });
    assert_eq!(service["TaggedAddresses"]["lan_ipv4"], lan);
    assert_eq!(service["EnableTagOverride"], false);
    assert!(service.get("Kind").is_none());
    assert!(service["CreateIndex"].as_u64().unwrap() > 0);
    let checks = full["Checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2);
    assert_eq!(checks[0]["CheckID"], "serfHealth");
    assert_eq!(checks[0]["Status"], "passing");
    assert_eq!(checks[0]["ServiceID"], "");
    assert_eq!(checks[1]["CheckID"], "service:web-1");
    assert_eq!(checks[1]["Name"], "Service 'web' check");
    assert_eq!(checks[1]["ServiceName"], "web");
    assert_eq!(checks[1]["ServiceTags"], json!(["v1"]));
    assert_eq!(checks[1]["Type"], "ttl");

    let mut proxy = Instance::new("web-sidecar-proxy", "web-1-proxy", "10.0.0.1", 21000);
    proxy.kind = "connect-proxy".into();
    fake.register(proxy);
    let proxy = get(&fake, "/v1/health/service/web-sidecar-proxy")
        .await
        .json();
    assert_eq!(proxy[0]["Service"]["Kind"], "connect-proxy");

    // An unknown service is an empty list, not a 404, and still has an index.
    let none = get(&fake, "/v1/health/service/nope?stale").await;
    assert_eq!((none.status, none.json()), (200, json!([])));
    assert!(none.index.unwrap() >= 1);
    assert_eq!(none.headers["x-consul-effective-consistency"], "stale");
}

#[tokio::test]
async fn catalog_lists_consul_and_tag_unions() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register_many(vec![
        web("w1", "10.0.0.1").tag("v2").tag("v1"),
        web("w2", "10.0.0.2").tag("v1").tag("canary"),
        Instance::new("api", "a1", "10.0.0.3", 80),
    ]);
    let answer = get(&fake, "/v1/catalog/services").await;
    let expected = json!({ "consul": [], "web": ["canary", "v1", "v2"], "api": [] });
    assert_eq!(answer.json(), expected);

    fake.deregister("dc1", "web", "w2");
    let answer = get(&fake, "/v1/catalog/services").await;
    assert_eq!(answer.json()["web"], json!(["v1", "v2"]));
    assert!(fake.deregister("dc1", "web", "w1"));
    assert!(!fake.deregister("dc1", "web", "w1"));
    let answer = get(&fake, "/v1/catalog/services").await;
    assert_eq!(answer.json(), json!({ "consul": [], "api": [] }));
}

#[tokio::test]
async fn passing_and_tag_filters() {
    let fake = FakeConsul::start().await.unwrap();
    let mut down_node = web("w3", "10.0.0.3");
    down_node.node_status = "critical".into();
    let mut warning = web("w4", "10.0.0.4");
    warning.check_status = "warning".into();
    fake.register_many(vec![web("w1", "10.0.0.1").tag("v1"), web("w2", "10.0.0.2")]);
    fake.register_many(vec![down_node, warning]);
    fake.set_check_status("dc1", "web", "w2", "maintenance");

    let ids = |v: Value| -> Vec<String> {
        let entries = v.as_array().unwrap().iter();
        entries
            .map(|e| e["Service"]["ID"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = get(&fake, "/v1/health/service/web").await.json();
    assert_eq!(ids(all.clone()), ["w1", "w2", "w3", "w4"]);
    let maintenance = &all[1]["Checks"][2];
    assert_eq!(maintenance["CheckID"], "_service_maintenance:w2");
    assert_eq!(maintenance["Status"], "critical");
    assert_eq!(all[2]["Checks"][0]["Status"], "critical");
    for query in ["passing", "passing=true", "passing=1"] {
        let only = get(&fake, &format!("/v1/health/service/web?{query}")).await;
        assert_eq!(ids(only.json()), ["w1"], "{query}");
    }
    let not = get(&fake, "/v1/health/service/web?passing=false").await;
    assert_eq!(ids(not.json()).len(), 4);
    let bad = get(&fake, "/v1/health/service/web?passing=maybe").await;
    assert_eq!(
        (bad.status, bad.body.as_str()),
        (400, "Invalid value for ?passing")
    );
    let tagged = get(&fake, "/v1/health/service/web?tag=v1").await;
    assert_eq!(ids(tagged.json()), ["w1"]);
    let both = get(&fake, "/v1/health/service/web?tag=v1&tag=v2").await;
    assert_eq!(both.json(), json!([]));
}

#[tokio::test]
async fn datacenters_and_unknown_datacenters() {
    let fake = FakeConsul::start_with_datacenters(&["east", "west"])
        .await
        .unwrap();
    fake.register(web("w1", "10.0.0.1").in_datacenter("west"));
    let dcs = get(&fake, "/v1/catalog/datacenters").await;
    assert_eq!(dcs.json(), json!(["east", "west"]));
    assert_eq!(dcs.index, None);

    let local = get(&fake, "/v1/health/service/web").await;
    assert_eq!(local.json(), json!([]));
    let west = get(&fake, "/v1/health/service/web?dc=west").await.json();
    assert_eq!(west[0]["Node"]["Datacenter"], "west");
    for path in [
        "/v1/health/service/web?dc=north",
        "/v1/catalog/services?dc=north",
    ] {
        let answer = get(&fake, path).await;
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (500, "No path to datacenter")
        );
    }
    let bad = get(&fake, "/v1/catalog/services?index=x").await;
    assert_eq!((bad.status, bad.body.as_str()), (400, "Invalid index"));
    let bad = get(&fake, "/v1/catalog/services?index=1&wait=soon").await;
    assert_eq!((bad.status, bad.body.as_str()), (400, "Invalid wait time"));
}

#[tokio::test]
async fn acl_tokens() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(web("w1", "10.0.0.1"));
    fake.require_token(Some("s3cret"));
    let url = format!("{}/v1/health/service/web", fake.url());

    let missing = send(client().get(&url)).await;
    assert_eq!(
        (missing.status, missing.body.as_str()),
        (403, "Permission denied")
    );
    let wrong = send(client().get(&url).header("X-Consul-Token", "guess")).await;
    assert_eq!((wrong.status, wrong.body.as_str()), (403, "ACL not found"));
    let ok = [
        client().get(&url).header("X-Consul-Token", "s3cret"),
        client().get(&url).bearer_auth("s3cret"),
        client().get(format!("{url}?token=s3cret")),
    ];
    for request in ok {
        let answer = send(request).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.json()[0]["Service"]["ID"], "w1");
    }
    let catalog = get(&fake, "/v1/catalog/services").await;
    assert_eq!(catalog.status, 403);
    // Consul serves the datacenter list without a token.
    assert_eq!(get(&fake, "/v1/catalog/datacenters").await.status, 200);
    let body = json!({ "Node": "n1", "Address": "10.0.0.5" });
    let put = client().put(format!("{}/v1/catalog/register", fake.url()));
    assert_eq!(send(put.json(&body)).await.status, 403);

    fake.require_token(None);
    assert_eq!(send(client().get(&url)).await.status, 200);
}

#[tokio::test]
async fn faults() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(web("w1", "10.0.0.1"));
    let health = "/v1/health/service/web";

    fake.set_fault(Fault::Status(500));
    let answer = get(&fake, health).await;
    assert_eq!(answer.status, 500);
    assert_eq!(answer.body, "rpc error making call: No cluster leader");
    assert_eq!(answer.index, None);
    assert_eq!(get(&fake, "/v1/catalog/datacenters").await.status, 500);

    fake.set_fault(Fault::Malformed("[{\"Node\": ".into()));
    let answer = get(&fake, health).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "[{\"Node\": "));
    assert_eq!(answer.index, Some(fake.index()));

    fake.set_fault(Fault::MissingIndex);
    let answer = get(&fake, health).await;
    assert_eq!(answer.index, None);
    assert_eq!(answer.json()[0]["Service"]["ID"], "w1");

    fake.set_fault(Fault::IndexZero);
    assert_eq!(get(&fake, "/v1/catalog/services").await.index, Some(0));

    fake.set_fault(Fault::Slow(Duration::from_millis(150)));
    let start = Instant::now();
    assert_eq!(get(&fake, health).await.status, 200);
    assert!(start.elapsed() >= Duration::from_millis(150));

    fake.set_fault(Fault::Reset);
    let response = client()
        .get(format!("{}{health}", fake.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-consul-index"));
    assert!(response.bytes().await.is_err(), "the body breaks off");

    fake.set_fault(Fault::Hang);
    let hung = spawn_get(&fake, "/v1/catalog/services");
    fake.until_waiting(1).await;
    let before = fake.counts().catalog_services;
    fake.set_fault(Fault::None);
    let answer = join(hung).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["web"], json!([]));
    assert_eq!(fake.counts().catalog_services, before + 1);

    // A service's own fault touches that service's health reads only.
    fake.register(Instance::new("api", "a1", "10.0.0.2", 80));
    fake.set_service_fault("web", Fault::Status(429));
    assert_eq!(get(&fake, health).await.status, 429);
    assert_eq!(get(&fake, "/v1/health/service/api").await.status, 200);
    assert_eq!(get(&fake, "/v1/catalog/services").await.status, 200);
    fake.set_service_fault("web", Fault::None);
    assert_eq!(get(&fake, health).await.status, 200);
}

#[tokio::test]
async fn counts_answered_reads() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(web("w1", "10.0.0.1"));
    for path in [
        "/v1/catalog/services",
        "/v1/catalog/services?dc=nowhere",
        "/v1/catalog/datacenters",
        "/v1/health/service/web",
        "/v1/health/service/web?passing",
        "/v1/health/service/api",
    ] {
        get(&fake, path).await;
    }
    let n = fake.index();
    let blocked = spawn_get(&fake, &format!("/v1/health/service/web?index={n}"));
    fake.until_waiting(1).await;
    let expected = Counts {
        catalog_services: 2,
        datacenters: 1,
        status_leader: 0,
        health: [("api".to_owned(), 1), ("web".to_owned(), 2)].into(),
    };
    assert_eq!(fake.counts(), expected);
    assert_eq!(fake.counts().health_total(), 3);
    fake.register(web("w2", "10.0.0.2"));
    join(blocked).await;
    assert_eq!(fake.counts().health["web"], 3);
}

#[tokio::test]
async fn catalog_register_and_deregister_over_http() {
    let fake = FakeConsul::start().await.unwrap();
    let url = |path: &str| format!("{}{path}", fake.url());
    let body = json!({
        "Datacenter": "dc1",
        "Node": "ext-1",
        "Address": "10.9.0.1",
        "Service": {
            "ID": "pay-1", "Service": "pay", "Tags": ["v3"], "Address": "10.9.0.2",
            "Meta": { "protocol": "http" }, "Port": 9090,
            "Weights": { "Passing": 5, "Warning": 1 }
        },
        "Check": { "CheckID": "service:pay-1", "Status": "warning", "ServiceID": "pay-1" }
    });
    let before = fake.index();
    let answer = send(client().put(url("/v1/catalog/register")).json(&body)).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "true"));
    assert_eq!(fake.index(), before + 1);
    let entry = &get(&fake, "/v1/health/service/pay").await.json()[0];
    assert_eq!(entry["Node"]["Node"], "ext-1");
    assert_eq!(
        entry["Service"]["Weights"],
        json!({ "Passing": 5, "Warning": 1 })
    );
    assert_eq!(entry["Checks"][1]["Status"], "warning");

    // A second service on the node, then the node goes with everything on it.
    let mut second = body.clone();
    second["Service"]["ID"] = json!("pay-2");
    second["Check"] = Value::Null;
    send(client().put(url("/v1/catalog/register")).json(&second)).await;
    let entries = get(&fake, "/v1/health/service/pay").await.json();
    assert_eq!(entries.as_array().unwrap().len(), 2);
    assert_eq!(
        entries[1]["Checks"].as_array().unwrap().len(),
        1,
        "no service check"
    );
    // Checks alone: the node's serfHealth, and a check of a service already on the node.
    let checks = json!({
        "Node": "ext-1",
        "Address": "10.9.0.1",
        "Checks": [
            { "CheckID": "serfHealth", "Status": "critical" },
            { "CheckID": "service:pay-1", "ServiceID": "pay-1", "Status": "passing" }
        ]
    });
    send(client().put(url("/v1/catalog/register")).json(&checks)).await;
    let entries = get(&fake, "/v1/health/service/pay").await.json();
    assert_eq!(entries[0]["Checks"][0]["Status"], "critical");
    assert_eq!(entries[0]["Checks"][1]["Status"], "passing");
    let orphan = json!({
        "Node": "ext-1",
        "Address": "10.9.0.1",
        "Check": { "CheckID": "x", "ServiceID": "nope", "Status": "passing" }
    });
    let answer = send(client().put(url("/v1/catalog/register")).json(&orphan)).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (500, "Missing service registration")
    );

    let one = json!({ "Node": "ext-1", "ServiceID": "pay-1" });
    send(client().put(url("/v1/catalog/deregister")).json(&one)).await;
    let entries = get(&fake, "/v1/health/service/pay").await.json();
    assert_eq!(entries[0]["Service"]["ID"], "pay-2");
    let node = json!({ "Node": "ext-1" });
    let answer = send(client().put(url("/v1/catalog/deregister")).json(&node)).await;
    assert_eq!(answer.body, "true");
    assert_eq!(get(&fake, "/v1/health/service/pay").await.json(), json!([]));

    let bad = send(client().put(url("/v1/catalog/register")).body("{")).await;
    assert_eq!(bad.status, 400);
    let unknown = json!({ "Datacenter": "mars", "Node": "n", "Address": "10.0.0.1" });
    let answer = send(client().put(url("/v1/catalog/register")).json(&unknown)).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (500, "No path to datacenter")
    );
}

#[tokio::test]
async fn dropping_the_fake_ends_its_connections() {
    let fake = FakeConsul::start().await.unwrap();
    let url = format!("{}/v1/catalog/services", fake.url());
    let n = fake.index();
    let request = client().get(format!("{url}?index={n}"));
    let blocked = tokio::spawn(async move { request.send().await });
    fake.until_waiting(1).await;
    drop(fake);
    let result = tokio::time::timeout(GUARD, blocked).await.unwrap().unwrap();
    assert!(result.is_err(), "the blocked request fails: {result:?}");
    assert!(client().get(&url).send().await.is_err(), "nothing listens");
}

#[tokio::test]
async fn ten_thousand_instances_register_at_once() {
    let fake = FakeConsul::start().await.unwrap();
    let all: Vec<Instance> = (0..1000)
        .flat_map(|s| (0..10).map(move |i| (s, i)))
        .map(|(s, i)| {
            let ip = format!("10.{}.{}.{}", s / 256, s % 256, i + 1);
            Instance::new(&format!("svc-{s:04}"), &format!("i{i}"), &ip, 8080)
        })
        .collect();
    let before = fake.index();
    let start = Instant::now();
    fake.register_many(all);
    // About 0.1 s in a debug build; the bound only catches work growing with the square.
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(fake.index(), before + 1);
    let catalog = get(&fake, "/v1/catalog/services").await.json();
    assert_eq!(catalog.as_object().unwrap().len(), 1001);
    let one = get(&fake, "/v1/health/service/svc-0417").await;
    assert_eq!(one.json().as_array().unwrap().len(), 10);
    assert_eq!(one.index, Some(before + 1));
}
