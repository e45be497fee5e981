//! A quick scale check: 20,000 EndpointSlices of 5 endpoints, listed in pages of 500.

use std::time::Instant;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::lists::all_pages;
use crate::{raw, slice};

#[tokio::test]
async fn scale_twenty_thousand_slices_paginated() {
    let fake = FakeApiServer::start().await;
    let objects: Vec<_> = (0..20_000)
        .map(|i| {
            let ns = format!("ns-{}", i % 50);
            slice(&ns, &format!("svc-{i}-x1"), &format!("svc-{i}"), 5)
        })
        .collect();
    let started = Instant::now();
    let rv = fake.apply_many(objects);
    let loaded = started.elapsed();
    let slices: Api<EndpointSlice> = Api::all(fake.client());
    let started = Instant::now();
    let (names, versions) = all_pages(&slices, ListParams::default().limit(500)).await;
    let listed = started.elapsed();
    assert_eq!(names.len(), 20_000);
    assert_eq!(versions.len(), 40);
    assert!(versions.iter().all(|v| *v == rv.to_string()));
    println!(
        "apply_many 20,000 EndpointSlices: {loaded:?}; typed list in pages of 500: {listed:?}"
    );
    let list = raw::get(
        &fake.url(),
        "/apis/discovery.k8s.io/v1/endpointslices?limit=1",
    )
    .await
    .json()
    .await;
    assert_eq!(
        list["items"][0]["endpoints"].as_array().map(Vec::len),
        Some(5)
    );
    assert!(list["metadata"]["continue"].is_string());
}
