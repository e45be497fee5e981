//! Merging and publishing at the sizes where merge costs show: one service with 5,000
//! endpoints, and 5,000 services with one endpoint each.
//!
//! Every case but `merge_only` runs the aggregate's own path through [`Replay`]: the event
//! applied to its registry's store (validation, classification), then a publication (the
//! changed services merged again, the snapshot assembled and validated). `cargo bench --bench
//! merge` runs it; figures are recorded in BENCHMARKS.md. CI only builds it.

// The inputs are built here and valid by construction; a panic would be a bench bug.
#![allow(clippy::expect_used)]

use std::hint::black_box;

use divan::Bencher;
use wayfinder::aggregate::Replay;
use wayfinder::aggregate::merge::merge;
use wayfinder_registry::{Endpoint, Event, Locality, Protocol, Registration, RegistryId, Service};

fn main() {
    divan::main();
}

const ENDPOINTS: usize = 5_000;
const SERVICES: usize = 5_000;

fn service(i: usize) -> Service {
    let mut svc = Service::new(
        format!("svc-{i}.ns-{}.svc.cluster.local", i % 10),
        format!("ns-{}", i % 10),
    )
    .with_port("http", 8080, Protocol::Http)
    .with_port("grpc", 9090, Protocol::Grpc);
    svc.addresses = vec![[10, 96, (i / 250) as u8, (i % 250) as u8].into()];
    svc
}

/// The endpoint numbered `n`: a distinct address, a label and a zone, as a Kubernetes or
/// Consul registry reports them.
fn endpoint(n: usize) -> Endpoint {
    let mut ep = Endpoint::new(format!("10.{}.{}.{}", n >> 16, (n >> 8) & 255, n & 255))
        .with_label("version", "v1");
    ep.locality = Locality::parse(&format!("us-east1/zone-{}", n % 3));
    ep
}

/// Service `i` with the endpoints numbered `range`, in the canonical order the store keeps.
fn registration(i: usize, range: impl Iterator<Item = usize>) -> Registration {
    Registration::new(service(i), range.map(endpoint).collect()).normalized()
}

/// A replay of `registries` after each one's `Reset`, published.
fn synced(registries: Vec<(&str, Vec<Registration>)>) -> Replay {
    let ids = registries
        .iter()
        .map(|(id, _)| RegistryId::new(*id))
        .collect();
    let mut replay = Replay::new(ids);
    for (index, (_, registrations)) in registries.into_iter().enumerate() {
        let refused = replay.apply(index, Event::Reset(registrations));
        assert!(refused.is_empty(), "{refused:?}");
    }
    replay.publish();
    replay
}

/// Applies `before` and `after` in turn as `Upsert`s of registry `registry` and publishes
/// after each: one endpoint changing back and forth.
fn flip(bencher: Bencher, mut replay: Replay, registry: usize, states: [Registration; 2]) {
    let mut turn = 0;
    bencher.bench_local(|| {
        turn ^= 1;
        let refused = replay.apply(registry, Event::Upsert(states[turn].clone()));
        debug_assert!(refused.is_empty());
        black_box(replay.publish())
    });
}

/// One service, 5,000 endpoints.
mod one_service_5000_endpoints {
    use super::*;

    /// The first state: one `Reset`, published.
    #[divan::bench(sample_count = 20)]
    fn sync(bencher: Bencher) {
        bencher
            .with_inputs(|| {
                let replay = Replay::new(vec![RegistryId::new("Kubernetes")]);
                (replay, vec![registration(0, 0..ENDPOINTS)])
            })
            .bench_local_values(|(mut replay, registrations)| {
                replay.apply(0, Event::Reset(registrations));
                black_box(replay.publish())
            });
    }

    /// One endpoint of the 5,000 replaced by another, published: the incremental path.
    #[divan::bench(sample_count = 20)]
    fn endpoint_change(bencher: Bencher) {
        let replay = synced(vec![("Kubernetes", vec![registration(0, 0..ENDPOINTS)])]);
        let states = [
            registration(0, 0..ENDPOINTS),
            registration(0, 1..ENDPOINTS + 1),
        ];
        flip(bencher, replay, 0, states);
    }

    /// The same service from two registries that share 2,500 of their 5,000 endpoints (same
    /// address and ports, kept once); one endpoint of the second registry changes.
    #[divan::bench(sample_count = 20)]
    fn two_registries_endpoint_change(bencher: Bencher) {
        let half = ENDPOINTS / 2;
        let replay = synced(vec![
            ("Kubernetes", vec![registration(0, 0..ENDPOINTS)]),
            ("Consul", vec![registration(0, half..ENDPOINTS + half)]),
        ]);
        let states = [
            registration(0, half..ENDPOINTS + half),
            registration(0, half + 1..ENDPOINTS + half + 1),
        ];
        flip(bencher, replay, 1, states);
    }

    /// `merge` alone for the two registries above: 10,000 endpoints, 2,500 duplicates.
    #[divan::bench(sample_count = 20)]
    fn merge_only(bencher: Bencher) {
        let half = ENDPOINTS / 2;
        let (first, second) = (RegistryId::new("Kubernetes"), RegistryId::new("Consul"));
        let a = registration(0, 0..ENDPOINTS);
        let b = registration(0, half..ENDPOINTS + half);
        let key = a.key();
        bencher.bench(|| black_box(merge(&key, &[(&first, &a), (&second, &b)])));
    }
}

/// 5,000 services, one endpoint each.
mod services_5000_one_endpoint {
    use super::*;

    fn mesh() -> Vec<Registration> {
        (0..SERVICES).map(|i| registration(i, i..i + 1)).collect()
    }

    /// The first state: one `Reset` of 5,000 services, published.
    #[divan::bench(sample_count = 20)]
    fn sync(bencher: Bencher) {
        bencher
            .with_inputs(|| (Replay::new(vec![RegistryId::new("Kubernetes")]), mesh()))
            .bench_local_values(|(mut replay, registrations)| {
                replay.apply(0, Event::Reset(registrations));
                black_box(replay.publish())
            });
    }

    /// One service's endpoint replaced by another, published.
    #[divan::bench(sample_count = 20)]
    fn endpoint_change(bencher: Bencher) {
        let replay = synced(vec![("Kubernetes", mesh())]);
        let states = [
            registration(0, 0..1),
            registration(0, SERVICES..SERVICES + 1),
        ];
        flip(bencher, replay, 0, states);
    }
}
