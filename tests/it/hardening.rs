//! Hostile clients against the binary, with a raw HTTP/2 client: requests the server must
//! refuse (each with its status, a metric and one WARN line naming the peer), memory that
//! must stay within the request budget however many streams ask, sockets that must be closed
//! when idle, and descriptors that must not run out for `/ready` and file changes.

use bytes::Bytes;
use serde_json::Value;
use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::pb::discovery::DiscoveryRequest;
use wayfinder::xds::pb::endpoint::ClusterLoadAssignment;

use crate::support::ads::{Ads, decode_all, request, sidecar};
use crate::support::binary::Wayfinder;
use crate::support::fixtures::{service_entry, write};
use crate::support::raw::{Ended, RawConn, frame, framed};
use crate::support::{DEADLINE, eventually};

/// gRPC status codes.
const INVALID_ARGUMENT: i32 = 3;
const RESOURCE_EXHAUSTED: i32 = 8;
const UNIMPLEMENTED: i32 = 12;

/// Waits for the WARN line refusing a stream from `peer` whose reason contains `why`.
async fn refusal_line(w: &Wayfinder, peer: &str, why: &str) -> Value {
    w.wait_log(&format!("a refusal from {peer} for {why:?}"), |l| {
        l["level"] == "WARN"
            && l["message"] == "refusing an xDS stream"
            && l["peer"] == peer
            && l["reason"].as_str().is_some_and(|r| r.contains(why))
    })
    .await
}

/// Waits until `wayfinder_xds_request_budget_bytes` shows at least `bytes` held.
async fn budget_in_use(w: &Wayfinder, bytes: u64) {
    eventually(
        &format!("{bytes} bytes of the request budget held"),
        || async {
            let held = w.metric("wayfinder_xds_request_budget_bytes").await?;
            (held >= bytes).then_some(())
        },
    )
    .await;
}

fn assert_status(ended: &Ended, code: i32, why: &str) {
    assert_eq!(ended.code, code, "{ended:?}");
    assert!(ended.message.contains(why), "{ended:?} should say {why:?}");
}

#[tokio::test]
async fn garbage_compressed_oversized_and_over_budget_requests_get_their_status_and_a_warn_line() {
    // Requests' bytes may hold half the budget: 1 MiB.
    let w = Wayfinder::start(&[
        "--max-request-budget",
        "2MiB",
        "--max-request-bytes",
        "768KiB",
    ])
    .await;
    w.ready().await;
    let mut conn = RawConn::connect(w.grpc).await;
    assert_eq!(
        conn.max_streams, 16,
        "--max-streams-per-connection's default"
    );
    let peer = conn.local.to_string();
    // Field 4 (type_url) holding two bytes that are not UTF-8.
    let not_utf8 = frame(false, 4, &[0x22, 0x02, 0xff, 0xfe]);
    let forged = "sidecar~not-an-ip~x\nFORGED level=ERROR \u{1b}[31mred~d";
    let bad_node = framed(&DiscoveryRequest {
        node: Some(Node {
            id: forged.into(),
            ..Node::default()
        }),
        type_url: TypeUrl::Cluster.as_str().into(),
        ..DiscoveryRequest::default()
    });
    let cases: [(&str, Bytes, i32, &str); 5] = [
        (
            "garbage",
            frame(false, 3, &[0xff, 0xff, 0xff]),
            INVALID_ARGUMENT,
            "malformed request",
        ),
        ("not UTF-8", not_utf8, INVALID_ARGUMENT, "malformed request"),
        (
            "compressed",
            frame(true, 2, &[0x22, 0x00]),
            UNIMPLEMENTED,
            "compressed requests are not supported",
        ),
        (
            "oversized",
            frame(false, 1 << 20, &[]),
            RESOURCE_EXHAUSTED,
            "--max-request-bytes",
        ),
        (
            "bad node id",
            bad_node,
            INVALID_ARGUMENT,
            "is not an IP address",
        ),
    ];
    for (case, bytes, code, why) in cases {
        let mut stream = conn.stream().await;
        stream.send(bytes).await;
        let ended = stream.ended().await;
        assert_eq!(ended.code, code, "{case}: {ended:?}");
        assert!(ended.message.contains(why), "{case}: {ended:?}");
        refusal_line(&w, &peer, why).await;
    }
    // The forged node id is one JSON value of one line, cut and never a line of its own.
    let line = refusal_line(&w, &peer, "is not an IP address").await;
    assert_eq!(line["node"], forged);
    assert!(
        w.logs_matching(|l| l.as_str().is_some_and(|s| s.contains("FORGED")))
            .is_empty(),
        "no log line is the node id's second line"
    );

    // Over budget: one stream holds 700 KiB of the 1 MiB for requests' bytes while it is
    // being sent; another
    // that needs 500 KiB waits up to a second, then is refused.
    let mut holder = conn.stream().await;
    assert!(holder.send(frame(false, 700 << 10, &[0; 1024])).await);
    budget_in_use(&w, 700 << 10).await;
    let mut late = conn.stream().await;
    late.send(frame(false, 500 << 10, &[])).await;
    assert_status(
        &late.ended().await,
        RESOURCE_EXHAUSTED,
        "--max-request-budget",
    );
    refusal_line(&w, &peer, "--max-request-budget").await;
    let (_, metrics) = crate::support::binary::get(w.monitoring, "/metrics").await;
    for (reason, n) in [
        ("malformed", 2),
        ("compressed", 1),
        ("size", 1),
        ("node", 1),
        ("budget", 1),
    ] {
        let sample = format!("wayfinder_xds_refused_streams_total{{reason=\"{reason}\"}} {n}");
        assert!(metrics.contains(&sample), "{sample} in\n{metrics}");
    }
    drop(holder);
}

#[tokio::test]
async fn a_request_that_stops_halfway_or_never_comes_is_refused_and_gives_its_budget_back() {
    let w = Wayfinder::start(&[
        "--max-request-budget",
        "2MiB",
        "--connection-idle-timeout",
        "3s",
    ])
    .await;
    w.ready().await;
    let mut conn = RawConn::connect(w.grpc).await;
    let peer = conn.local.to_string();
    // Declares 900 KiB, sends 1 KiB of it, and stops.
    let mut stalled = conn.stream().await;
    assert!(stalled.send(frame(false, 900 << 10, &[0; 1024])).await);
    // Opens a stream and sends nothing.
    let silent = conn.stream().await;
    assert_status(
        &stalled.ended().await,
        RESOURCE_EXHAUSTED,
        "did not arrive whole",
    );
    assert_status(
        &silent.ended().await,
        RESOURCE_EXHAUSTED,
        "no request within",
    );
    refusal_line(&w, &peer, "did not arrive whole").await;
    refusal_line(&w, &peer, "no request within").await;
    // The stalled request's 900 KiB are back: a well-behaved client is served.
    let mut ads = Ads::connect(w.grpc, sidecar("10.0.0.9", "default")).await;
    ads.send(request(TypeUrl::Cluster, &[], "", "")).await;
    assert!(!ads.recv_type(TypeUrl::Cluster).await.resources.is_empty());
}

/// The attack, with today's limits: 100 streams each declaring the largest request
/// (then 4 MiB − 1 byte instead of 16 MiB − 1) and sending all but its last byte, over 20
/// connections from one address. The server's RSS must stay within the request budget plus
/// what each connection's HTTP/2 window lets a client send unread: SECURITY.md's 128 MB.
#[tokio::test]
async fn many_streams_and_connections_from_one_peer_stay_within_the_request_budget() {
    const CONNECTIONS: usize = 20;
    const STREAMS: usize = 5;
    const DECLARED: usize = (4 << 20) - 1;
    // Long enough for the streams that get room to send everything but their last byte,
    // however busy the machine: they hold their bytes until the end of the test.
    let w = Wayfinder::start(&["--connection-idle-timeout", "60s"]).await;
    w.ready().await;
    let (before, _) = w.memory_kib();
    let (sent_tx, mut sent_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = tokio::task::JoinSet::new();
    let mut conns = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut conn = RawConn::connect(w.grpc).await;
        for _ in 0..STREAMS {
            let mut stream = conn.stream().await;
            let sent_tx = sent_tx.clone();
            tasks.spawn(async move {
                let mut all = true;
                all &= stream.send(frame(false, DECLARED as u32, &[])).await;
                let chunk = Bytes::from(vec![7u8; 64 << 10]);
                let mut left = DECLARED - 1;
                while all && left > 0 {
                    let n = left.min(chunk.len());
                    all &= stream.send(chunk.slice(..n)).await;
                    left -= n;
                }
                let _ = sent_tx.send(all);
                drop(sent_tx);
                stream
            });
        }
        conns.push(conn);
    }
    drop(sent_tx);
    // At most 8 streams fit the 32 MiB of the budget that requests' bytes may hold (the other
    // half is for what decoding allocates) and send all but their last byte; every other one
    // is refused while it waits for room.
    let mut whole = 0;
    for _ in 0..CONNECTIONS * STREAMS {
        let all = tokio::time::timeout(DEADLINE, sent_rx.recv())
            .await
            .expect("every stream sends or is refused")
            .expect("a report");
        whole += usize::from(all);
    }
    let (during, peak) = w.memory_kib();
    // For BENCHMARKS.md: `cargo test --test it hardening::many -- --nocapture`.
    eprintln!(
        "RSS before {before} KiB, after {during} KiB, peak {peak} KiB; {whole} streams read whole but one byte"
    );
    assert!(
        (1..=8).contains(&whole),
        "{whole} streams held 4 MiB each of the budget's 32 MiB for bytes"
    );
    let grown_mib = peak.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 128,
        "RSS {before} KiB before, {during} KiB during, peak {peak} KiB: grew {grown_mib} MiB"
    );
    let refused = w.logs_matching(|l| {
        l["message"] == "refusing an xDS stream"
            && l["reason"]
                .as_str()
                .is_some_and(|r| r.contains("--max-request-budget"))
    });
    assert!(
        refused.len() >= CONNECTIONS * STREAMS - 8,
        "{}",
        refused.len()
    );
    tasks.abort_all();
}

#[tokio::test]
async fn idle_sockets_are_closed_on_every_port() {
    let w = Wayfinder::start(&[
        "--connection-idle-timeout",
        "1s",
        "--http-header-read-timeout",
        "1s",
    ])
    .await;
    w.ready().await;
    for (port, addr) in [
        ("grpc", w.grpc),
        ("http", w.http),
        ("monitoring", w.monitoring),
    ] {
        let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut buf = [0u8; 256];
        // The server may answer (an HTTP/2 SETTINGS frame, an HTTP 408) before it closes.
        let closed = tokio::time::timeout(DEADLINE, async {
            loop {
                match tokio::io::AsyncReadExt::read(&mut socket, &mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the {port} port keeps an idle socket open");
    }
    // A connection whose only stream ended is idle too.
    let mut conn = RawConn::connect(w.grpc).await;
    let mut stream = conn.stream().await;
    stream.send(frame(true, 0, &[])).await;
    stream.ended().await;
    eventually("the connection to close after its last stream", || async {
        conn.is_closed().await.then_some(())
    })
    .await;
}

/// The descriptor limit lowered to 256 for the server: ADS connections take what the
/// reserve leaves, the rest wait in the backlog, and `/ready`, `/metrics` and a File-registry
/// change still work.
#[tokio::test]
async fn with_descriptors_exhausted_ready_answers_and_a_file_change_is_served() {
    const HOST: &str = "echo.default.svc.cluster.local";
    const CLUSTER: &str = "outbound|8080||echo.default.svc.cluster.local";
    let echo = |ports: &[u16]| service_entry("echo", HOST, ("http", 8080, "HTTP"), ports);
    let dir = tempfile::tempdir().expect("a temporary directory");
    write(dir.path(), "echo.yaml", &echo(&[9001]));
    let files = dir.path().to_str().expect("a UTF-8 path");
    let w = Wayfinder::start_under(
        &["prlimit", "--nofile=256:256", "--"],
        &[
            "--registries",
            "File",
            "--file-registry",
            files,
            "--debounce-after",
            "10ms",
            "--connection-idle-timeout",
            "10m",
        ],
    )
    .await;
    w.ready().await;
    w.wait_log("the descriptor limit", |l| {
        l["message"] == "open descriptor limit" && l["limit"] == 256
    })
    .await;
    let mut ads = Ads::connect(w.grpc, sidecar("10.0.0.9", "default")).await;
    ads.subscribe(TypeUrl::Endpoint, &[CLUSTER]).await;
    let first = ads.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(endpoints(&first), 1);
    ads.ack(&first, &[CLUSTER]).await;

    // More idle connections than the server has descriptors: the reserve leaves 192 to the
    // two ADS ports (plaintext and secure), 96 each; 96 take the plaintext port's slots, the
    // rest wait in the listen backlog.
    let mut sockets = Vec::new();
    for _ in 0..300 {
        let socket = tokio::net::TcpStream::connect(w.grpc).await;
        sockets.push(socket.expect("a connection, accepted or in the backlog"));
    }
    w.wait_log("the ADS port at its limit", |l| {
        l["level"] == "WARN" && l["listener"] == "grpc" && l["max"] == 96
    })
    .await;
    assert_eq!(w.get("/ready").await.0, 200);
    let (status, _) = crate::support::binary::get(w.monitoring, "/metrics").await;
    assert_eq!(status, 200);
    write(dir.path(), "echo.yaml", &echo(&[9001, 9002]));
    let changed = ads.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(endpoints(&changed), 2, "the change reached the proxy");
    assert!(
        w.logs_matching(|l| l.to_string().contains("Too many open files"))
            .is_empty(),
        "no file read failed for lack of descriptors"
    );
    drop(sockets);
}

/// Endpoints in an EDS response.
fn endpoints(r: &wayfinder::xds::pb::discovery::DiscoveryResponse) -> usize {
    decode_all::<ClusterLoadAssignment>(r)
        .values()
        .flat_map(|c| &c.endpoints)
        .map(|l| l.lb_endpoints.len())
        .sum()
}

#[tokio::test]
async fn a_peer_that_stops_answering_pings_is_dropped() {
    let w = Wayfinder::start(&["--keepalive-interval", "1s", "--keepalive-timeout", "1s"]).await;
    w.ready().await;
    let tcp = tokio::net::TcpStream::connect(w.grpc)
        .await
        .expect("connect");
    let peer = tcp.local_addr().expect("a local address").to_string();
    let (send, mut connection) = h2::client::handshake(tcp).await.expect("a handshake");
    // Drive the connection (which answers pings) until the stream is served...
    let served = async {
        let mut send = send.ready().await.expect("ready");
        let request = http::Request::post(crate::support::raw::SOTW)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("a request");
        let (response, mut body) = send.send_request(request, false).expect("a stream");
        let mut ask = request_for(TypeUrl::Cluster);
        ask.node = Some(sidecar("10.0.0.7", "default"));
        body.send_data(framed(&ask), false).expect("sent");
        let response = response.await.expect("response headers");
        (response, body)
    };
    let (_response, _body) = tokio::select! {
        served = served => served,
        _ = &mut connection => panic!("the connection ended before the stream was served"),
    };
    w.wait_log("the stream opened", |l| {
        l["message"] == "xDS stream opened" && l["peer"] == peer
    })
    .await;
    // ...then stop polling it: pings go unanswered, and the server drops the connection.
    w.wait_log("the stream closed with the dead connection", |l| {
        l["message"] == "xDS stream closed" && l["peer"] == peer
    })
    .await;
    drop(connection);
}

fn request_for(t: TypeUrl) -> DiscoveryRequest {
    request(t, &[], "", "")
}
