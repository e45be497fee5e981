//! The poll loop against the fake: deltas, reconciliation, fallbacks, failures and recovery.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::{Item, Watch, config, health, key};
use wayfinder_eureka::fake::{FakeEureka, Fault, Instance, Quirks};
use wayfinder_registry::{Event, Health, RegistryError};

/// A fake with PAYMENT (two instances) and BILLING (one).
async fn fake() -> FakeEureka {
    let fake = FakeEureka::start().await.unwrap();
    fake.register(Instance::new("payment", "p1", "10.0.0.1", 8080));
    fake.register(Instance::new("payment", "p2", "10.0.0.2", 8080));
    fake.register(Instance::new("billing", "b1", "10.0.1.1", 9090));
    fake
}

/// Registers a new application and returns the Upsert it must cause: proves that nothing else
/// came before it.
async fn sentinel(fake: &FakeEureka, watch: &mut Watch, name: &str) {
    fake.register(Instance::new(name, "s1", "10.9.9.9", 80));
    let reg = watch.upsert().await;
    assert_eq!(reg.key(), key(&format!("{name}.eureka")));
}

#[tokio::test]
async fn changes_arrive_as_deltas_for_the_changed_service_only() {
    let fake = fake().await;
    let mut watch = Watch::start(common::config(fake.url()));
    let regs = watch.reset().await;
    assert_eq!(regs.len(), 2);

    fake.set_status("payment", "p1", "DOWN");
    let reg = watch.upsert().await;
    assert_eq!(reg.key(), key("payment.eureka"));
    assert_eq!(
        health(&reg),
        [
            ("10.0.0.1".to_string(), Health::Unhealthy),
            ("10.0.0.2".to_string(), Health::Healthy)
        ]
    );
    sentinel(&fake, &mut watch, "sentinel").await;

    assert!(fake.deregister("billing", "b1"));
    assert!(matches!(watch.next().await, Ok(Event::Remove(k)) if k == key("billing.eureka")));
    sentinel(&fake, &mut watch, "sentinel2").await;

    let counts = fake.counts();
    assert_eq!(counts.full, 1, "every change was served by a delta");
    assert!(counts.delta >= 3, "{counts:?}");
    watch.stop().await;
}

#[tokio::test]
async fn a_wrong_hashcode_triggers_a_full_fetch_and_converges() {
    let fake = fake().await;
    let mut watch = Watch::start(config(fake.url()));
    watch.reset().await;
    fake.set_fault(Fault::WrongHashcode);
    fake.register(Instance::new("payment", "p3", "10.0.0.3", 8080));
    let reg = watch.upsert().await;
    assert_eq!(reg.endpoints.len(), 3);
    assert!(fake.counts().full >= 2, "{:?}", fake.counts());

    fake.set_fault(Fault::None);
    sentinel(&fake, &mut watch, "sentinel").await;
    let full = fake.counts().full;
    sentinel(&fake, &mut watch, "sentinel2").await;
    assert_eq!(
        fake.counts().full,
        full,
        "reconciled deltas need no full fetch"
    );
    watch.stop().await;
}

#[tokio::test]
async fn a_server_without_deltas_is_read_with_full_fetches() {
    let fake = fake().await;
    fake.set_fault(Fault::DeltaForbidden);
    let mut watch = Watch::start(config(fake.url()));
    watch.reset().await;
    fake.register(Instance::new("payment", "p3", "10.0.0.3", 8080));
    assert_eq!(watch.upsert().await.endpoints.len(), 3);
    let counts = fake.counts();
    assert!(counts.full >= 2 && counts.delta >= 1, "{counts:?}");
    watch.stop().await;
}

/// Items until `done` says so; every one must be an error (no change during an outage).
async fn errors_until(watch: &mut Watch, done: impl Fn(&RegistryError) -> bool) -> RegistryError {
    loop {
        match watch.next().await {
            Err(err) if done(&err) => return err,
            Err(_) => {}
            Ok(event) => panic!("only errors expected during an outage, got {event:?}"),
        }
    }
}

#[tokio::test]
async fn an_outage_is_reported_and_recovered_from_without_losing_state() {
    let fake = fake().await;
    let mut watch = Watch::start(config(fake.url()));
    watch.reset().await;
    let apps = format!("GET {}/apps", fake.url());

    fake.set_fault(Fault::Status(500));
    let err = errors_until(&mut watch, |_| true).await;
    assert!(
        matches!(&err, RegistryError::Unavailable { origin, detail }
            if origin.starts_with(&apps) && detail.contains("500")),
        "{err}"
    );
    fake.set_fault(Fault::Reset);
    let err = errors_until(&mut watch, |e| e.to_string().contains("reading the body")).await;
    assert!(err.origin().starts_with(&apps), "{err}");
    fake.set_fault(Fault::Hang);
    let err = errors_until(&mut watch, |e| e.to_string().contains("no answer within")).await;
    assert!(matches!(err, RegistryError::Unavailable { .. }), "{err}");

    fake.set_fault(Fault::None);
    loop {
        match watch.next().await {
            Ok(Event::Recovered) => break,
            Err(_) => {}
            other => panic!("expected Recovered after the outage, got {other:?}"),
        }
    }
    // Changes made during an outage count as the recovery.
    fake.set_fault(Fault::Status(503));
    errors_until(&mut watch, |_| true).await;
    fake.register(Instance::new("payment", "p3", "10.0.0.3", 8080));
    fake.set_fault(Fault::None);
    loop {
        match watch.next().await {
            Ok(Event::Upsert(reg)) => {
                assert_eq!(reg.endpoints.len(), 3);
                break;
            }
            Err(_) => {}
            other => panic!("expected the change after the outage, got {other:?}"),
        }
    }
    watch.stop().await;
}

#[tokio::test]
async fn malformed_answers_are_errors_naming_the_url_and_the_field() {
    let fake = fake().await;
    let mut watch = Watch::start(config(fake.url()));
    watch.reset().await;
    let apps = format!("GET {}/apps", fake.url());

    fake.set_fault(Fault::Malformed("{\"applications\": {".into()));
    let err = errors_until(&mut watch, |_| true).await;
    assert!(
        matches!(&err, RegistryError::Malformed { origin, detail }
            if origin.starts_with(&apps) && detail.contains("EOF") && detail.contains("line 1")),
        "{err}"
    );
    let wrong_type = r#"{"applications":{"apps__hashcode":"UP_1_","application":[{"name":"PAYMENT",
        "instance":[{"instanceId":"p1","ipAddr":"10.0.0.1","status":"UP","port":{"$":"abc","@enabled":"true"}}]}]}}"#;
    fake.set_fault(Fault::Malformed(wrong_type.into()));
    let err = errors_until(&mut watch, |e| e.to_string().contains("abc")).await;
    let detail = err.to_string();
    assert!(matches!(err, RegistryError::Malformed { .. }), "{detail}");
    assert!(
        detail
            .contains("applications.application[0].instance[0].port: invalid port number \"abc\"")
            && detail.contains("line 2 column"),
        "{detail}"
    );

    fake.set_fault(Fault::None);
    loop {
        match watch.next().await {
            Ok(Event::Recovered) => break,
            Err(_) => {}
            other => panic!("expected Recovered with the state unchanged, got {other:?}"),
        }
    }
    watch.stop().await;
}

#[tokio::test]
async fn the_first_sync_is_retried_until_it_succeeds() {
    let fake = fake().await;
    fake.set_fault(Fault::Status(503));
    let mut watch = Watch::start(config(fake.url()));
    let first: Item = watch.next().await;
    assert!(
        matches!(&first, Err(RegistryError::Unavailable { detail, .. }) if detail.contains("503")),
        "{first:?}"
    );
    fake.set_fault(Fault::None);
    loop {
        match watch.next().await {
            Ok(Event::Reset(regs)) => {
                assert_eq!(regs.len(), 2);
                break;
            }
            Err(_) => {}
            other => panic!("expected the first Reset, got {other:?}"),
        }
    }
    watch.stop().await;
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/eureka", listener.local_addr().unwrap());
    drop(listener);
    let mut watch = Watch::start(config(url.clone()));
    let err = watch.next().await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Unavailable { origin, .. } if *origin == format!("GET {url}/apps")),
        "{err}"
    );
    watch.stop().await;
}

#[tokio::test]
async fn shutdown_ends_the_stream_during_a_hung_request() {
    let fake = fake().await;
    fake.set_fault(Fault::Hang);
    let mut config = config(fake.url());
    config.timeout = Duration::from_secs(60);
    let mut watch = Watch::start(config);
    let pending = tokio::time::timeout(Duration::from_millis(200), watch.next()).await;
    assert!(pending.is_err(), "the request should hang");
    watch.stop().await;
}

#[tokio::test]
async fn quirky_encodings_map_like_plain_ones() {
    let fake = FakeEureka::start().await.unwrap();
    fake.register(Instance::new("payment", "p1", "10.0.0.1", 8080).secure_port(8443));
    fake.set_quirks(Quirks {
        one_element_as_object: true,
        string_numbers: true,
        enabled_as_bool: true,
        no_instance_id: true,
        empty_map_class: true,
    });
    let mut quirky = Watch::start(config(fake.url()));
    let quirky_regs = quirky.reset().await;
    fake.set_quirks(Quirks::default());
    let mut plain = Watch::start(config(fake.url()));
    assert_eq!(plain.reset().await, quirky_regs);
    let ports: Vec<_> = quirky_regs[0]
        .service
        .ports
        .iter()
        .map(|p| p.number)
        .collect();
    assert_eq!(ports, [8080, 8443]);
    quirky.stop().await;
    plain.stop().await;
}

#[tokio::test]
async fn invalid_instances_are_reported_once_and_again_after_changes() {
    let fake = fake().await;
    fake.register(
        Instance::new("broken", "x1", "10.0.2.1", 80).meta("wayfinder.io/hostname", "not a host"),
    );
    let mut watch = Watch::start(config(fake.url()));
    assert_eq!(watch.reset().await.len(), 2, "the rest is served");
    let err = watch.next().await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Invalid { detail, .. }
            if detail.contains("application BROKEN instance x1") && detail.contains("\"not a host\"")),
        "{err}"
    );
    // Unchanged polls repeat nothing: the next item is the sentinel's, then the problem again
    // (so the change does not read as a recovery).
    sentinel(&fake, &mut watch, "sentinel").await;
    assert!(matches!(
        watch.next().await,
        Err(RegistryError::Invalid { .. })
    ));
    assert!(fake.deregister("broken", "x1"));
    assert!(matches!(watch.next().await, Ok(Event::Recovered)));
    watch.stop().await;
}

#[tokio::test]
async fn an_answer_over_the_size_limit_is_refused_and_the_state_stays() {
    let fake = fake().await;
    let mut watch = Watch::start(wayfinder_eureka::Config {
        max_answer_bytes: 64 << 10,
        ..config(fake.url())
    });
    assert_eq!(watch.reset().await.len(), 2);
    fake.set_fault(Fault::Malformed(" ".repeat(1 << 20)));
    let err = errors_until(&mut watch, |_| true).await;
    assert!(
        matches!(&err, RegistryError::Unavailable { detail, .. }
            if detail.contains("larger than 65536 bytes (--max-registry-answer-bytes)")),
        "{err}"
    );
    fake.set_fault(Fault::None);
    let recovered = loop {
        match watch.next().await {
            Ok(event) => break event,
            Err(_) => continue,
        }
    };
    assert_eq!(recovered, Event::Recovered, "nothing changed meanwhile");
}
