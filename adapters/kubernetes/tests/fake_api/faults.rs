//! Faults and the server's lifecycle: status faults, hangs, stop and restart.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use wayfinder_kubernetes::fake::{FakeApiServer, Fault};

use crate::{client_without_retries, guard, raw, service};

#[tokio::test]
async fn status_fault_answers_every_request() {
    let fake = FakeApiServer::start().await;
    fake.set_fault(Fault::Status(503));
    let services: Api<Service> = Api::all(client_without_retries(&fake));
    match services.list(&ListParams::default()).await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (503, "ServiceUnavailable")),
        other => panic!("unexpected {other:?}"),
    }
    let version = raw::get(&fake.url(), "/version").await;
    assert_eq!(version.status, 503);
    assert_eq!(version.json().await["kind"], "Status");
    let watch = raw::get(&fake.url(), "/api/v1/services?watch=true").await;
    assert_eq!(watch.status, 503);
    fake.set_fault(Fault::Status(500));
    let err = services.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.reason == "InternalError"),
        "{err:?}"
    );
    fake.set_fault(Fault::None);
    assert!(services.list(&ListParams::default()).await.is_ok());
    assert_eq!(fake.counts().lists["services"], 3);
    assert_eq!(fake.counts().watches["services"], 1);
}

#[tokio::test]
async fn hang_holds_requests_until_cleared() {
    let fake = FakeApiServer::start().await;
    fake.apply(service("a", "s1", &[]));
    fake.set_fault(Fault::Hang);
    let services: Api<Service> = Api::all(fake.client());
    let held = tokio::spawn(async move {
        services
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len())
    });
    tokio::task::yield_now().await;
    assert!(!held.is_finished());
    fake.set_fault(Fault::None);
    assert_eq!(guard(held).await.unwrap().unwrap(), 1);
}

#[tokio::test]
async fn stop_refuses_connections_and_restart_serves_the_same_state() {
    let fake = FakeApiServer::start().await;
    let rv = fake.apply(service("a", "s1", &[]));
    let url = fake.url();
    let mut watch = raw::get(
        &url,
        &format!("/api/v1/services?watch=true&resourceVersion={rv}"),
    )
    .await;
    guard(fake.until_watching("services", 1)).await;
    fake.stop().await;
    assert!(guard(watch.next_json_line()).await.is_none());
    let addr = url.trim_start_matches("http://");
    let refused = tokio::net::TcpStream::connect(addr).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    let services: Api<Service> = Api::all(client_without_retries(&fake));
    assert!(services.list(&ListParams::default()).await.is_err());

    fake.apply(service("a", "s2", &[]));
    fake.restart().await;
    assert_eq!(fake.url(), url);
    let list = services.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    assert_eq!(
        list.metadata.resource_version,
        Some(fake.resource_version().to_string())
    );
    assert!(fake.resource_version() > rv);
}

#[tokio::test]
async fn dropping_the_fake_closes_its_port() {
    let fake = FakeApiServer::start().await;
    let addr = fake.url().trim_start_matches("http://").to_owned();
    let mut watch = raw::get(&fake.url(), "/api/v1/services?watch=true").await;
    guard(fake.until_watching("services", 1)).await;
    drop(fake);
    assert!(guard(watch.next_json_line()).await.is_none());
    let mut refused = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(&addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(refused);
}
