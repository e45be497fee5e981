//! Lists: typed decoding, pagination, resourceVersions and selectors.

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::raw;
use crate::{node, pod, service, slice, virtual_service};

/// Lists every page of `api` with `limit`; returns the names and the resourceVersion of each page.
pub(crate) async fn all_pages<K>(api: &Api<K>, lp: ListParams) -> (Vec<String>, Vec<String>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let (mut names, mut versions) = (Vec::new(), Vec::new());
    let mut lp = lp;
    loop {
        let page = api.list(&lp).await.unwrap();
        versions.push(page.metadata.resource_version.clone().unwrap());
        names.extend(page.items.iter().map(|o| o.meta().name.clone().unwrap()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return (names, versions),
        }
    }
}

#[tokio::test]
async fn typed_lists_decode_and_paginate_at_one_resource_version() {
    let fake = FakeApiServer::start().await;
    fake.apply_many([
        service("a", "s1", &[]),
        service("a", "s2", &[]),
        service("b", "s3", &[]),
        service("b", "s4", &[]),
        service("c", "s5", &[]),
        pod("a", "p1", "n1"),
        node("n1"),
        node("n2"),
        slice("a", "s1-abc", "s1", 3),
    ]);
    let client = fake.client();
    let services: Api<Service> = Api::all(client.clone());
    let (names, versions) = all_pages(&services, ListParams::default().limit(2)).await;
    assert_eq!(names, ["s1", "s2", "s3", "s4", "s5"]);
    assert_eq!(versions.len(), 3);
    assert!(versions.iter().all(|v| *v == versions[0]), "{versions:?}");

    // A write between pages does not show in later pages of the same list.
    let first = services
        .list(&ListParams::default().limit(2))
        .await
        .unwrap();
    fake.delete("v1", "Service", Some("c"), "s5");
    fake.apply(service("c", "s6", &[]));
    let token = first.metadata.continue_.unwrap();
    let (rest, _) = all_pages(
        &services,
        ListParams::default().limit(2).continue_token(&token),
    )
    .await;
    assert_eq!(rest, ["s3", "s4", "s5"]);
    let (now, _) = all_pages(&services, ListParams::default()).await;
    assert_eq!(now, ["s1", "s2", "s3", "s4", "s6"]);

    let in_a: Api<Service> = Api::namespaced(client.clone(), "a");
    assert_eq!(
        in_a.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );
    let pods: Api<Pod> = Api::all(client.clone());
    let p = &pods.list(&ListParams::default()).await.unwrap().items[0];
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    assert_eq!(
        p.status.as_ref().unwrap().pod_ip.as_deref(),
        Some("10.1.0.1")
    );
    let nodes: Api<Node> = Api::all(client.clone());
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    let slices: Api<EndpointSlice> = Api::namespaced(client, "a");
    let s = &slices.list(&ListParams::default()).await.unwrap().items[0];
    assert_eq!(s.endpoints.len(), 3);
    assert!(s.metadata.uid.is_some() && s.metadata.creation_timestamp.is_some());
    assert!(
        s.metadata
            .managed_fields
            .as_ref()
            .is_some_and(|m| !m.is_empty())
    );
}

#[tokio::test]
async fn list_items_of_built_in_kinds_have_no_kind_but_crd_items_do() {
    let fake = FakeApiServer::start().await;
    fake.apply(service("a", "s1", &[]));
    fake.apply(virtual_service("a", "vs1", "h"));
    let list = raw::get(&fake.url(), "/api/v1/services").await.json().await;
    assert_eq!(list["kind"], "ServiceList");
    assert_eq!(list["apiVersion"], "v1");
    assert!(list["items"][0].get("kind").is_none() && list["items"][0].get("apiVersion").is_none());
    let vs = raw::get(
        &fake.url(),
        "/apis/networking.istio.io/v1beta1/namespaces/a/virtualservices",
    )
    .await
    .json()
    .await;
    assert_eq!(vs["kind"], "VirtualServiceList");
    assert_eq!(vs["items"][0]["apiVersion"], "networking.istio.io/v1beta1");
    assert_eq!(vs["items"][0]["kind"], "VirtualService");
    let one = raw::get(&fake.url(), "/api/v1/namespaces/a/services/s1")
        .await
        .json()
        .await;
    assert_eq!(
        (one["apiVersion"].as_str(), one["kind"].as_str()),
        (Some("v1"), Some("Service"))
    );
}

#[tokio::test]
async fn resource_versions_exact_not_older_than_and_expired() {
    let fake = FakeApiServer::start().await;
    let rv1 = fake.apply(service("a", "s1", &[]));
    fake.apply(service("a", "s2", &[]));
    let services: Api<Service> = Api::all(fake.client());
    let exact = ListParams::default()
        .at(&rv1.to_string())
        .matching(kube::api::VersionMatch::Exact);
    let old = services.list(&exact).await.unwrap();
    assert_eq!(old.items.len(), 1);
    assert_eq!(old.metadata.resource_version, Some(rv1.to_string()));
    let newer = ListParams::default()
        .at(&rv1.to_string())
        .matching(kube::api::VersionMatch::NotOlderThan);
    assert_eq!(services.list(&newer).await.unwrap().items.len(), 2);

    let first = services
        .list(&ListParams::default().limit(1))
        .await
        .unwrap();
    // Compaction keeps the version it happens at readable: write once more first.
    fake.apply(service("a", "s3", &[]));
    fake.compact();
    let err = services.list(&exact).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 410 && s.reason == "Expired"),
        "{err:?}"
    );
    let token = first.metadata.continue_.unwrap();
    let err = services
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 410),
        "{err:?}"
    );
    assert_eq!(fake.counts().gone, 2);
    assert_eq!(fake.counts().lists["services"], 5);
}

#[tokio::test]
async fn label_and_field_selectors() {
    let fake = FakeApiServer::start().await;
    fake.apply_many([
        service("a", "web", &[("app", "web"), ("tier", "front")]),
        service("a", "api", &[("app", "api"), ("tier", "back")]),
        service("b", "db", &[("app", "db")]),
    ]);
    let services: Api<Service> = Api::all(fake.client());
    let names = |lp: ListParams| {
        let services = services.clone();
        async move {
            let list = services.list(&lp).await.unwrap();
            list.items
                .into_iter()
                .map(|s| s.metadata.name.unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        names(ListParams::default().labels("app=web")).await,
        ["web"]
    );
    assert_eq!(
        names(ListParams::default().labels("app==api")).await,
        ["api"]
    );
    assert_eq!(
        names(ListParams::default().labels("app!=web")).await,
        ["api", "db"]
    );
    assert_eq!(
        names(ListParams::default().labels("tier")).await,
        ["api", "web"]
    );
    assert_eq!(names(ListParams::default().labels("!tier")).await, ["db"]);
    assert_eq!(
        names(ListParams::default().labels("app in (web,db),tier")).await,
        ["web"]
    );
    assert_eq!(
        names(ListParams::default().labels("app notin (web)")).await,
        ["api", "db"]
    );
    assert_eq!(
        names(ListParams::default().fields("metadata.name=db")).await,
        ["db"]
    );
    assert_eq!(
        names(ListParams::default().fields("metadata.namespace!=a")).await,
        ["db"]
    );
    let err = services
        .list(&ListParams::default().fields("spec.foo=x"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400),
        "{err:?}"
    );
}
