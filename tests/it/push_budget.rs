//! The push budget (issue 13): clients that stop reading hold at most `--max-push-budget` of
//! the server's memory between them, their connections are closed after
//! `--push-send-timeout`, and a client that reads still gets its whole configuration. A
//! memory bound read from `/proc` and the budget's own gauge; the only waits are for
//! conditions.

use wayfinder::xds::TypeUrl;

use crate::memory::{SERVICES, connected, full_mesh_sidecar, mesh};
use crate::support::ads::{request, sidecar};
use crate::support::binary::Wayfinder;
use crate::support::eventually;
use crate::support::raw::{RawConn, framed};

/// Connections that stop reading, each with as many streams as the server allows (16).
const CONNECTIONS: usize = 10;
/// What each of their streams reads before it stops: eight chunks.
const WINDOW: u32 = 128 << 10;
/// The budget under test, and a copied chunk's size (`wire::CHUNK`).
const BUDGET: u64 = 1 << 20;
const CHUNK: u64 = 16 << 10;

/// `wayfinder_xds_push_budget_bytes`.
async fn push_budget_in_use(server: &Wayfinder) -> Option<u64> {
    server.metric("wayfinder_xds_push_budget_bytes").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_hold_no_more_than_the_push_budget_and_are_closed() {
    let dir = mesh();
    let server = Wayfinder::with_files_and(
        "",
        dir.path(),
        // Every stream pushes at once, rather than the throttle's 25.
        &[
            "--max-push-budget",
            "1MiB",
            "--push-send-timeout",
            "2s",
            "--push-throttle",
            "1000",
        ],
    )
    .await;
    // The snapshot's encoded resources are made for the first proxy that asks.
    let (first, bytes) = full_mesh_sidecar(&server, 0).await;
    drop(first);
    eventually("the first sidecar to leave", || async {
        (connected(&server).await? == 0).then_some(())
    })
    .await;
    let (before, _) = server.memory_kib();

    // Every stream asks for every load assignment (1,000 of 10 endpoints, copied: about
    // 400 KB), reads 128 KiB and stops.
    let names: Vec<String> = (0..SERVICES)
        .map(|s| format!("outbound|8080||svc-{s}.load.svc.cluster.local"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut conns = Vec::new();
    let mut streams = Vec::new();
    for c in 0..CONNECTIONS {
        let mut conn = RawConn::connect_unread(server.grpc, WINDOW).await;
        for s in 0..conn.max_streams {
            let mut stream = conn.stream().await;
            let mut ask = request(TypeUrl::Endpoint, &names, "", "");
            ask.node = Some(sidecar(&format!("10.201.{c}.{s}"), "load"));
            assert!(stream.send(framed(&ask)).await, "the request is sent");
            streams.push(stream);
        }
        conns.push(conn);
    }
    let stalled = streams.len() as u64;
    // Their responses fill the budget, and never more than it.
    eventually("the push budget to fill", || async {
        let held = push_budget_in_use(&server).await?;
        assert!(
            held <= BUDGET,
            "{held} bytes of a {BUDGET}-byte budget in use"
        );
        (held + CHUNK >= BUDGET).then_some(())
    })
    .await;
    let (during, peak) = server.memory_kib();

    // Each is closed after two seconds without progress, naming its peer.
    for conn in &conns {
        let peer = conn.local.to_string();
        server
            .wait_log(&format!("the stalled client {peer} refused"), |l| {
                l["message"] == "refusing an xDS stream"
                    && l["peer"] == peer
                    && l["reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("--push-send-timeout"))
            })
            .await;
        eventually(&format!("{peer}'s connection to close"), || async {
            conn.is_closed().await.then_some(())
        })
        .await;
    }
    // A client that reads gets the whole mesh, and the budget is whole again.
    let (_reader, got) = full_mesh_sidecar(&server, 1).await;
    assert_eq!(
        got, bytes,
        "the reading client's configuration is the first one's"
    );
    eventually("the budget to be given back", || async {
        (push_budget_in_use(&server).await? == 0).then_some(())
    })
    .await;

    // For BENCHMARKS.md: `cargo test --test it push_budget -- --nocapture`.
    // Without the budget (`--max-push-budget 64MiB`) these streams hold about 5 MiB of
    // chunks, and the assertion on the gauge above fails.
    eprintln!(
        "{stalled} streams that stopped reading: RSS {before} KiB before, {during} KiB with \
         them, peak {peak} KiB; budget {} KiB",
        BUDGET / 1024
    );
    drop(streams);
}
