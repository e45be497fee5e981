//! Memory that comes back: the server's RSS after many sidecars took the whole mesh and left
//! (issue 13). A memory bound, read from `/proc`; the only waits are for conditions.

use std::fmt::Write as _;

use tempfile::TempDir;
use wayfinder::xds::TypeUrl;

use crate::support::ads::{Ads, names_of, sidecar};
use crate::support::binary::Wayfinder;
#[cfg(feature = "jemalloc")]
use crate::support::eventually;
use crate::support::fixtures::write;

/// Services in the mesh, and endpoints each.
pub(crate) const SERVICES: usize = 1_000;
const ENDPOINTS: usize = 10;
/// Sidecars that connect at once, each taking every cluster and load assignment.
#[cfg(feature = "jemalloc")]
const SIDECARS: usize = 400;

/// One File-registry file of `SERVICES` ServiceEntries with `ENDPOINTS` addresses each.
pub(crate) fn mesh() -> TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut text = String::new();
    for s in 0..SERVICES {
        write!(
            text,
            "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  \
             name: svc-{s}\n  namespace: load\nspec:\n  hosts: [svc-{s}.load.svc.cluster.local]\n  \
             location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n  \
             - {{name: http, number: 8080, protocol: HTTP}}\n  endpoints:\n"
        )
        .unwrap();
        for e in 0..ENDPOINTS {
            writeln!(text, "  - {{address: 10.{}.{}.{e}}}", s / 256, s % 256).unwrap();
        }
    }
    write(dir.path(), "mesh.yaml", &text);
    dir
}

/// A sidecar that takes the whole mesh: every cluster, then every cluster's endpoints, each
/// acknowledged. Returns the connected stream and the bytes it received.
pub(crate) async fn full_mesh_sidecar(server: &Wayfinder, n: usize) -> (Ads, usize) {
    let ip = format!("10.200.{}.{}", n / 256, n % 256);
    let mut ads = Ads::connect(server.grpc, sidecar(&ip, "load")).await;
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    let clusters = ads.recv_type(TypeUrl::Cluster).await;
    ads.ack(&clusters, &[]).await;
    let names = names_of(&clusters);
    let names: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with("outbound|"))
        .collect();
    ads.subscribe(TypeUrl::Endpoint, &names).await;
    // Clusters may come again before the endpoints (a snapshot published meanwhile).
    let endpoints = loop {
        let r = ads.recv().await;
        if r.type_url == TypeUrl::Endpoint.as_str() {
            break r;
        }
        ads.ack(&r, &[]).await;
    };
    ads.ack(&endpoints, &names).await;
    assert_eq!(endpoints.resources.len(), SERVICES, "every load assignment");
    let bytes = [&clusters, &endpoints]
        .iter()
        .flat_map(|r| &r.resources)
        .map(|a| a.value.len())
        .sum();
    (ads, bytes)
}

/// The `pilot_xds` gauge: connected xDS clients.
pub(crate) async fn connected(server: &Wayfinder) -> Option<u64> {
    server.metric("pilot_xds").await
}

// Only with jemalloc, the binary's default allocator: this test is what showed that glibc's
// malloc (`--no-default-features`) keeps the memory (see the comment below), so that build
// cannot pass it.
#[cfg(feature = "jemalloc")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_returns_when_many_sidecars_leave() {
    let dir = mesh();
    let server = Wayfinder::with_files("", dir.path()).await;
    // One sidecar first: the snapshot's encoded resources are made for the first proxy that
    // asks and then shared; they belong to the mesh, not to the clients under test.
    let (first, bytes) = full_mesh_sidecar(&server, 0).await;
    drop(first);
    eventually("the first sidecar to leave", || async {
        (connected(&server).await? == 0).then_some(())
    })
    .await;
    let (before, _) = server.memory_kib();

    let sidecars =
        futures::future::join_all((1..=SIDECARS).map(|n| full_mesh_sidecar(&server, n))).await;
    let (with_sidecars, peak) = server.memory_kib();
    eprintln!(
        "{SIDECARS} sidecars of {bytes} bytes each: RSS {before} KiB before, {with_sidecars} KiB \
         with them, peak {peak} KiB"
    );
    // The run must cost more than the bound below allows, for its return to mean anything.
    assert!(
        peak > before + 10 * 1024,
        "{SIDECARS} full-mesh sidecars should cost more than 10 MiB at their peak: \
         {before} KiB before, peak {peak} KiB"
    );
    drop(sidecars);
    eventually("every sidecar to leave", || async {
        (connected(&server).await? == 0).then_some(())
    })
    .await;
    // Within 10% of before, as issue 13 asks. jemalloc returns freed pages over its decay time
    // (a second, .cargo/config.toml); the deadline is the suite's, far beyond it. With glibc's
    // malloc (`cargo test --no-default-features`) this fails: RSS stays where the clients
    // left it.
    let bound = before + before / 10;
    let what = format!("the server's RSS to come back under {bound} KiB (it was {before} KiB)");
    let after = eventually(&what, || async {
        let (now, _) = server.memory_kib();
        (now <= bound).then_some(now)
    })
    .await;
    eprintln!("after they left: RSS {after} KiB (bound {bound} KiB)");
}
