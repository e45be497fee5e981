//! The fake's REST API as a Eureka client uses it, and what the adapter makes of it.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::{Watch, config, health, key};
use reqwest::StatusCode;
use serde_json::{Value, json};
use wayfinder_eureka::fake::{FakeEureka, Instance};
use wayfinder_registry::{Event, Health};

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let response = http
        .get(url)
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{url}");
    response.json().await.unwrap()
}

#[tokio::test]
async fn registers_over_http_and_serves_eureka_json() {
    let fake = FakeEureka::start().await.unwrap();
    let http = client();
    let base = fake.url();
    let instance = json!({"instance": {
        "instanceId": "10.0.0.5:payment:8080", "hostName": "p1", "app": "PAYMENT",
        "ipAddr": "10.0.0.5", "status": "UP", "port": {"$": 8080, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"}, "vipAddress": "payment",
        "dataCenterInfo": {"@class": "com.netflix.appinfo.AmazonInfo", "name": "Amazon",
            "metadata": {"availability-zone": "eu-west-1a"}},
        "metadata": {"version": "v1"}
    }});
    let response = http
        .post(format!("{base}/apps/payment"))
        .json(&instance)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);

    let apps = get_json(&http, &format!("{base}/apps")).await;
    let apps = &apps["applications"];
    assert_eq!(apps["apps__hashcode"], "UP_1_");
    assert_eq!(apps["versions__delta"], "1");
    let got = &apps["application"][0]["instance"][0];
    assert_eq!(apps["application"][0]["name"], "PAYMENT");
    assert_eq!(got["port"], json!({"$": 8080, "@enabled": "true"}));
    assert_eq!(got["securePort"]["@enabled"], "false");
    assert_eq!(got["overriddenStatus"], "UNKNOWN");
    assert_eq!(
        got["dataCenterInfo"]["metadata"]["availability-zone"],
        "eu-west-1a"
    );
    assert_eq!(got["metadata"], json!({"version": "v1"}));
    assert_eq!(got["actionType"], "ADDED");

    let app = get_json(&http, &format!("{base}/apps/PAYMENT")).await;
    assert_eq!(app["application"]["instance"][0]["ipAddr"], "10.0.0.5");
    let delta = get_json(&http, &format!("{base}/apps/delta")).await;
    assert_eq!(
        delta["applications"]["application"][0]["instance"][0]["actionType"],
        "ADDED"
    );

    // Real Eureka answers XML without the header; the fake refuses.
    let xml = http.get(format!("{base}/apps")).send().await.unwrap();
    assert_eq!(xml.status(), StatusCode::NOT_ACCEPTABLE);
    let unknown = http
        .get(format!("{base}/apps/NOPE"))
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn out_of_service_and_deregistration_reach_the_adapter() {
    let fake = FakeEureka::start().await.unwrap();
    fake.register(Instance::new("payment", "p1", "10.0.0.1", 8080));
    fake.register(Instance::new("payment", "p2", "10.0.0.2", 8080));
    let http = client();
    let base = fake.url();
    let mut watch = Watch::start(config(base.clone()));
    watch.reset().await;

    let status = |id: &str| format!("{base}/apps/PAYMENT/{id}/status?value=OUT_OF_SERVICE");
    let put = http.put(status("p1")).send().await.unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    assert_eq!(
        http.put(status("nope")).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    let reg = watch.upsert().await;
    assert_eq!(
        health(&reg),
        [
            ("10.0.0.1".to_string(), Health::Unhealthy),
            ("10.0.0.2".to_string(), Health::Healthy)
        ]
    );
    let apps = get_json(&http, &format!("{base}/apps")).await;
    assert_eq!(
        apps["applications"]["apps__hashcode"],
        "OUT_OF_SERVICE_1_UP_1_"
    );

    let heartbeat = http
        .put(format!("{base}/apps/PAYMENT/p1"))
        .send()
        .await
        .unwrap();
    assert_eq!(heartbeat.status(), StatusCode::OK);
    for id in ["p1", "p2"] {
        let deleted = http
            .delete(format!("{base}/apps/PAYMENT/{id}"))
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), StatusCode::OK);
    }
    let again = http
        .delete(format!("{base}/apps/PAYMENT/p1"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
    // Both deletions may arrive in one delta or in two.
    loop {
        match watch.next().await {
            Ok(Event::Remove(k)) => {
                assert_eq!(k, key("payment.eureka"));
                break;
            }
            Ok(Event::Upsert(reg)) => assert_eq!(reg.endpoints.len(), 1),
            other => panic!("expected the service to go, got {other:?}"),
        }
    }
    watch.stop().await;
}
