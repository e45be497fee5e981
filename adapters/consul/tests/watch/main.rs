//! The Consul registry against the in-process Consul: what one change costs, outages,
//! malformed answers, index resets, ACLs, datacenters and polling; outages that leave the
//! blocking queries parked (`liveness`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod liveness;

use std::time::Duration;

use futures::StreamExt;
use wayfinder_consul::fake::{FakeConsul, Fault, Instance};
use wayfinder_consul::{Config, Datacenters};
use wayfinder_registry::{
    CancellationToken, Event, EventStream, Health, RegistryError, RegistryId, Source,
};

const DEADLINE: Duration = Duration::from_secs(30);

struct Watch {
    stream: EventStream,
    shutdown: CancellationToken,
}

impl Watch {
    fn start(config: Config) -> Self {
        let shutdown = CancellationToken::new();
        let registry = Box::new(config.build(RegistryId::new("Consul")).unwrap());
        let stream = registry.watch(shutdown.clone());
        Self { stream, shutdown }
    }

    async fn next(&mut self) -> Result<Event, RegistryError> {
        match tokio::time::timeout(DEADLINE, self.stream.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => panic!("the stream ended"),
            Err(_) => panic!("no item within {DEADLINE:?}"),
        }
    }

    async fn reset(&mut self) -> Vec<wayfinder_registry::Registration> {
        match self.next().await {
            Ok(Event::Reset(regs)) => regs,
            other => panic!("expected the first Reset, got {other:?}"),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn config(fake: &FakeConsul) -> Config {
    Config {
        addr: fake.url(),
        ..Config::default()
    }
}

fn upserted(item: Result<Event, RegistryError>) -> wayfinder_registry::Registration {
    match item {
        Ok(Event::Upsert(reg)) => reg,
        other => panic!("expected an Upsert, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_one_of_a_thousand_services_reads_and_updates_only_that_service() {
    let fake = FakeConsul::start().await.unwrap();
    let mut instances = Vec::new();
    for s in 0..1000 {
        for i in 0..10 {
            let ip = format!("10.{}.{}.{}", s / 256, s % 256, i + 1);
            instances.push(Instance::new(
                &format!("svc-{s:04}"),
                &format!("i{i}"),
                &ip,
                8080,
            ));
        }
    }
    fake.register_many(instances);
    let mut watch = Watch::start(config(&fake));
    let regs = watch.reset().await;
    assert_eq!(regs.len(), 1000);
    assert!(regs.iter().all(|r| r.endpoints.len() == 10));
    let before = fake.counts();
    assert_eq!(before.health_total(), 1000, "one read per service to sync");

    // A check turns critical: one service's health changes, the catalog does not.
    fake.set_check_status("dc1", "svc-0417", "i3", "critical");
    let reg = upserted(watch.next().await);
    assert_eq!(&*reg.service.hostname, "svc-0417.service.consul");
    let sick: Vec<&str> = reg
        .endpoints
        .iter()
        .filter(|e| e.health == Health::Unhealthy)
        .map(|e| &*e.address)
        .collect();
    assert_eq!(sick, ["10.1.161.4"]);
    let after = fake.counts();
    assert_eq!(after.health["svc-0417"], before.health["svc-0417"] + 1);
    assert_eq!(
        after.health_total(),
        before.health_total() + 1,
        "no other service was read"
    );
    assert_eq!(after.catalog_services, before.catalog_services);

    // An instance re-registered at a new address also wakes the catalog watch (Consul's
    // services table moved), which reads the name list once and re-reads no service.
    fake.register(Instance::new("svc-0002", "i0", "10.200.0.1", 8080));
    let reg = upserted(watch.next().await);
    assert_eq!(&*reg.service.hostname, "svc-0002.service.consul");
    assert!(reg.endpoints.iter().any(|e| &*e.address == "10.200.0.1"));
    // A sentinel change: the next item is its Upsert, so nothing else was sent in between.
    fake.set_check_status("dc1", "svc-0999", "i0", "critical");
    let reg = upserted(watch.next().await);
    assert_eq!(&*reg.service.hostname, "svc-0999.service.consul");
    let last = fake.counts();
    assert_eq!(last.health_total(), before.health_total() + 3);
    assert!(last.catalog_services <= before.catalog_services + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_keeps_the_state_shows_degraded_and_recovers_without_changes() {
    let fake = FakeConsul::start().await.unwrap();
    for s in ["alpha", "beta"] {
        fake.register(Instance::new(s, "i0", "10.0.0.1", 80));
    }
    let mut watch = Watch::start(Config {
        wait: Duration::from_secs(1),
        ..config(&fake)
    });
    assert_eq!(watch.reset().await.len(), 2);

    fake.set_fault(Fault::Status(500));
    let err = watch.next().await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Unavailable { origin, detail }
            if origin.starts_with(&format!("GET {}/v1/", fake.url())) && detail.starts_with("HTTP 500")),
        "{err}"
    );
    fake.set_fault(Fault::Hang);
    loop {
        match watch.next().await {
            Err(RegistryError::Unavailable { detail, .. })
                if detail.contains("no answer in time") =>
            {
                break;
            }
            Err(_) => {}
            other => panic!("nothing but errors while Consul hangs, got {other:?}"),
        }
    }
    fake.set_fault(Fault::None);
    loop {
        match watch.next().await {
            Ok(Event::Recovered) => break,
            Err(_) => {}
            other => panic!("the state did not change, so only Recovered may come, got {other:?}"),
        }
    }
    // And it still follows changes.
    fake.register(Instance::new("alpha", "i1", "10.0.0.2", 80));
    assert_eq!(upserted(watch.next().await).endpoints.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_answers_name_the_request_and_keep_the_last_good_state() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(Instance::new("alpha", "i0", "10.0.0.1", 80));
    fake.register(Instance::new("beta", "i0", "10.0.0.2", 80));
    let mut watch = Watch::start(config(&fake));
    watch.reset().await;
    let origin = format!("GET {}/v1/health/service/alpha", fake.url());
    let bodies = [
        ("[{\"Node\": {\"Address\": \"10.0.", "EOF while parsing"),
        (
            "[{\"Node\": {\"Node\": \"n\", \"Address\": \"10.0.0.1\"}, \"Service\": {\"ID\": \"a\", \"Service\": \"alpha\", \"Port\": \"eighty\"}}]",
            "invalid type",
        ),
        ("{\"Service\": []}", "invalid type"),
        ("[{}]", "missing field `Node`"),
    ];
    for (i, (body, says)) in bodies.into_iter().enumerate() {
        fake.set_service_fault("alpha", Fault::Malformed(body.into()));
        // A change wakes the blocked watch, which then reads the bad answer.
        let ip = format!("10.0.1.{}", i + 1);
        fake.register(Instance::new("alpha", &format!("x{i}"), &ip, 80));
        match watch.next().await {
            Err(RegistryError::Malformed { origin: o, detail }) => {
                assert_eq!(o, origin);
                assert!(detail.contains(says), "{detail}");
            }
            other => panic!("expected a Malformed error, got {other:?}"),
        }
    }
    fake.set_service_fault("alpha", Fault::None);
    // An instance registered with a DNS name cannot be served: it is reported and left out,
    // the rest of alpha is served.
    fake.register(Instance::new("alpha", "dns", "db.internal", 80));
    let mut saw_invalid = false;
    loop {
        match watch.next().await {
            Err(RegistryError::Invalid { origin: o, detail }) => {
                assert_eq!(o, origin);
                assert!(
                    detail.contains("\"db.internal\" is not an IP address"),
                    "{detail}"
                );
                saw_invalid = true;
            }
            Ok(Event::Upsert(reg)) => {
                assert_eq!(&*reg.service.hostname, "alpha.service.consul");
                // i0 and x0..x3, registered while the answers were bad; never the DNS one.
                assert!(reg.endpoints.iter().all(|e| &*e.address != "db.internal"));
                if saw_invalid {
                    break;
                }
            }
            other => panic!("expected alpha's Upsert and an Invalid error, got {other:?}"),
        }
        if saw_invalid {
            break;
        }
    }
    // beta was never touched, and alpha still follows changes.
    fake.register(Instance::new("alpha", "x10", "10.0.2.1", 80));
    loop {
        match watch.next().await {
            Ok(Event::Upsert(reg)) => {
                assert_eq!(&*reg.service.hostname, "alpha.service.consul");
                if reg.endpoints.iter().any(|e| &*e.address == "10.0.2.1") {
                    break;
                }
            }
            Err(RegistryError::Invalid { .. }) => {}
            other => panic!("expected alpha's Upsert, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_that_goes_backwards_restarts_the_watch_without_spurious_events() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(Instance::new("alpha", "i0", "10.0.0.1", 80));
    let mut watch = Watch::start(config(&fake));
    watch.reset().await;
    // Both watches (catalog and alpha) block on index 11 before the restore.
    fake.until_waiting(2).await;
    fake.restore_snapshot(2);
    fake.register(Instance::new("alpha", "i1", "10.0.0.2", 80));
    let reg = upserted(watch.next().await);
    assert_eq!(reg.endpoints.len(), 2);
    assert!(fake.index() < 10, "the fake's index went backwards");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acl_token_is_sent_and_a_refusal_is_explained() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(Instance::new("alpha", "i0", "10.0.0.1", 80));
    fake.require_token(Some("s3cret"));
    let mut without = Watch::start(config(&fake));
    let err = without.next().await.unwrap_err().to_string();
    assert!(
        err.contains("HTTP 403") && err.contains("CONSUL_HTTP_TOKEN"),
        "{err}"
    );
    let mut with = Watch::start(Config {
        token: Some("s3cret".into()),
        ..config(&fake)
    });
    assert_eq!(with.reset().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_datacenter_contributes_endpoints_with_its_locality() {
    let fake = FakeConsul::start_with_datacenters(&["dc1", "dc2"])
        .await
        .unwrap();
    fake.register(Instance::new("web", "a", "10.0.0.1", 80));
    fake.register(Instance::new("web", "b", "10.1.0.1", 80).in_datacenter("dc2"));
    fake.register(Instance::new("db", "c", "10.1.0.2", 5432).in_datacenter("dc2"));
    let mut watch = Watch::start(Config {
        datacenters: Datacenters::All,
        ..config(&fake)
    });
    let regs = watch.reset().await;
    let web = regs
        .iter()
        .find(|r| &*r.service.hostname == "web.service.consul")
        .unwrap();
    let regions: Vec<&str> = web.endpoints.iter().map(|e| &*e.locality.region).collect();
    assert_eq!(regions, ["dc1", "dc2"]);
    assert_eq!(regs.len(), 2);
    let mut local = Watch::start(config(&fake));
    assert_eq!(
        local.reset().await.len(),
        1,
        "by default only the local datacenter"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_mode_follows_changes() {
    let fake = FakeConsul::start().await.unwrap();
    fake.register(Instance::new("alpha", "i0", "10.0.0.1", 80));
    let mut watch = Watch::start(Config {
        interval: Duration::from_millis(50),
        ..config(&fake)
    });
    watch.reset().await;
    fake.register(Instance::new("beta", "i0", "10.0.0.2", 80));
    let reg = upserted(watch.next().await);
    assert_eq!(&*reg.service.hostname, "beta.service.consul");
}

/// An answer larger than `max_answer_bytes` is refused from its length, nothing more of it
/// read, and the service keeps its last good state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_size_limit_is_refused_and_the_last_good_state_stays() {
    let fake = FakeConsul::start().await.expect("the fake starts");
    fake.register(Instance::new("alpha", "i0", "10.0.0.1", 80));
    let mut watch = Watch::start(Config {
        max_answer_bytes: 64 << 10,
        ..config(&fake)
    });
    let reset = watch.reset().await;
    assert_eq!(reset.len(), 1);
    fake.set_service_fault("alpha", Fault::Malformed(" ".repeat(1 << 20)));
    fake.register(Instance::new("alpha", "i1", "10.0.0.2", 80));
    match watch.next().await {
        Err(RegistryError::Unavailable { origin, detail }) => {
            assert!(origin.contains("/v1/health/service/alpha"), "{origin}");
            assert!(
                detail.contains("larger than 65536 bytes (--max-registry-answer-bytes)"),
                "{detail}"
            );
        }
        other => panic!("expected the answer refused, got {other:?}"),
    }
    fake.set_service_fault("alpha", Fault::None);
    fake.register(Instance::new("alpha", "i2", "10.0.0.3", 80));
    let reg = loop {
        match watch.next().await {
            Ok(Event::Upsert(reg)) => break reg,
            Ok(_) | Err(_) => continue,
        }
    };
    assert_eq!(reg.endpoints.len(), 3, "served again once the answer fits");
}
