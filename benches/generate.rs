//! Snapshot build and xDS generation at 1,000 services × 10 endpoints.
//!
//! `cargo bench --bench generate` runs it; figures are recorded in BENCHMARKS.md. CI only
//! builds it (`cargo bench --no-run`): timings on shared 2-core machines are for people to
//! read, not for tests to assert.

// The inputs are built here and valid by construction; a panic would be a bench bug.
#![allow(clippy::expect_used)]

use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;

use divan::Bencher;
use wayfinder::aggregate::snapshot_from;
use wayfinder::snapshot::Snapshot;
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::{Proxy, TypeUrl, XdsSnapshot};
use wayfinder_registry::{Endpoint, Locality, Protocol, Registration, RegistryId, Service};

fn main() {
    divan::main();
}

const SERVICES: usize = 1_000;
const ENDPOINTS: usize = 10;

/// `SERVICES` HTTP services with a VIP, each with `ENDPOINTS` endpoints over three zones.
fn mesh() -> Vec<(RegistryId, Vec<Registration>)> {
    let registrations = (0..SERVICES)
        .map(|i| {
            let mut svc = Service::new(
                format!("svc-{i}.ns-{}.svc.cluster.local", i % 10),
                format!("ns-{}", i % 10),
            )
            .with_port("http", 8080, Protocol::Http)
            .with_port("grpc", 9090, Protocol::Grpc);
            svc.addresses = vec![[10, 96, (i / 250) as u8, (i % 250) as u8].into()];
            let endpoints = (0..ENDPOINTS)
                .map(|j| {
                    let mut ep = Endpoint::new(format!("10.{}.{}.{}", i / 250, i % 250, j + 1))
                        .with_label("version", "v1");
                    ep.locality = Locality::parse(&format!("us-east1/zone-{}", j % 3));
                    ep
                })
                .collect();
            Registration::new(svc, endpoints)
        })
        .collect();
    vec![(RegistryId::new("Mock"), registrations)]
}

fn sidecar() -> Proxy {
    let node = Node {
        id: "sidecar~10.0.0.1~app.ns-0~ns-0.svc.cluster.local".into(),
        ..Default::default()
    };
    Proxy::from_node(&node, "cluster.local").expect("a valid node")
}

/// Every resource of every type for one sidecar, encoded; returns how many.
fn generate(model: Arc<Snapshot>, proxy: &Proxy) -> usize {
    let snap = XdsSnapshot::new(model, "cluster.local");
    let none = BTreeSet::new();
    TypeUrl::PUSH_ORDER
        .iter()
        .map(|t| snap.resources(proxy, *t, &none).len())
        .sum()
}

/// Merging and validating the registries' state into a snapshot.
#[divan::bench(sample_count = 20)]
fn snapshot_build(bencher: Bencher) {
    bencher
        .with_inputs(mesh)
        .bench_values(|sources| black_box(snapshot_from(sources).expect("valid")));
}

/// Generating and encoding everything one sidecar receives, from a built snapshot.
#[divan::bench(sample_count = 20)]
fn full_generation(bencher: Bencher) {
    let model = Arc::new(snapshot_from(mesh()).expect("valid"));
    let proxy = sidecar();
    bencher.bench(|| black_box(generate(model.clone(), &proxy)));
}

/// Both: what a registry change costs before the first sidecar's push can go out.
#[divan::bench(sample_count = 20)]
fn build_and_generate(bencher: Bencher) {
    let proxy = sidecar();
    bencher.with_inputs(mesh).bench_values(|sources| {
        let model = Arc::new(snapshot_from(sources).expect("valid"));
        black_box(generate(model, &proxy))
    });
}

/// A second sidecar of the same namespace, served from the shared caches.
#[divan::bench(sample_count = 20)]
fn second_sidecar(bencher: Bencher) {
    let model = Arc::new(snapshot_from(mesh()).expect("valid"));
    let snap = XdsSnapshot::new(model, "cluster.local");
    let none = BTreeSet::new();
    let proxy = sidecar();
    for t in TypeUrl::PUSH_ORDER {
        snap.resources(&proxy, t, &none);
    }
    bencher.bench(|| {
        TypeUrl::PUSH_ORDER
            .iter()
            .map(|t| black_box(snap.resources(&proxy, *t, &none).len()))
            .sum::<usize>()
    });
}
