//! The framing against prost's own encoding, and requests as real bodies deliver them.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::Frame;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;
use tonic::body::Body;

use super::*;
use crate::xds::ads::limits::{BUDGET_WAIT, RequestBudget};
use crate::xds::pb::cluster::Cluster;
use crate::xds::pb::discovery::DiscoveryRequest;

fn resources() -> Vec<Arc<Resource>> {
    // One small resource (copied into the piece) and one large (shared).
    let small = Cluster {
        name: "small".into(),
        ..Default::default()
    };
    let large = Cluster {
        name: "large".into(),
        alt_stat_name: "x".repeat(4 * COPY_BELOW),
        ..Default::default()
    };
    vec![
        Arc::new(Resource::encode("small", &small)),
        Arc::new(Resource::encode("large", &large)),
    ]
}

#[test]
fn a_sotw_response_decodes_as_the_message_prost_would_write() {
    let response = SotwResponse {
        version_info: "v1".into(),
        resources: resources().into(),
        type_url: TypeUrl::Cluster,
        nonce: "7".into(),
        identifier: "wayfinder".into(),
    };
    let encoded = response.clone().encode();
    let len = encoded.len();
    let message = encoded.into_message();
    assert_eq!(len, message.len() + 5, "the length counts the prefix");
    let decoded = DiscoveryResponse::decode(&*message).expect("decodes");
    assert_eq!(decoded, response.to_proto());
}

#[test]
fn a_delta_response_decodes_as_the_message_prost_would_write() {
    let response = DeltaResponse {
        system_version_info: "0123".into(),
        resources: resources().into(),
        removed: vec!["gone".into()],
        type_url: TypeUrl::Cluster,
        nonce: "8".into(),
        identifier: "wayfinder".into(),
    };
    let decoded = DeltaDiscoveryResponse::decode(&*response.clone().encode().into_message())
        .expect("decodes");
    assert_eq!(decoded, response.to_proto());
}

/// A request body delivered in these chunks.
fn body(chunks: Vec<Vec<u8>>) -> Body {
    let frames = chunks
        .into_iter()
        .map(|c| Ok::<_, Status>(Frame::data(Bytes::from(c))));
    Body::new(http_body_util::StreamBody::new(futures::stream::iter(
        frames,
    )))
}

fn framed(message: &impl Message) -> Vec<u8> {
    let bytes = message.encode_to_vec();
    let mut out = vec![0];
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
    out
}

fn request(type_url: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        type_url: type_url.into(),
        ..Default::default()
    }
}

#[test]
fn a_sotw_request_hashes_its_names_and_reads_them_when_asked() {
    let names = ["outbound|80||a", "outbound|80||b"];
    let request = DiscoveryRequest {
        type_url: "t".into(),
        response_nonce: "3".into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    };
    let message = |r: &DiscoveryRequest| bytes::Bytes::from(r.encode_to_vec());
    let decoded = SotwRequest::from_message(message(&request)).expect("decodes");
    assert_eq!(decoded.request.type_url, "t");
    assert_eq!(decoded.request.response_nonce, "3");
    assert!(decoded.request.resource_names.is_empty());
    assert_eq!(decoded.names().expect("UTF-8"), names);
    assert_eq!(decoded, SotwRequest::from(request.clone()));
    let again = SotwRequest::from_message(message(&request)).expect("decodes");
    assert_eq!(again.names_hash(), decoded.names_hash());
    let reordered = DiscoveryRequest {
        resource_names: vec![names[1].into(), names[0].into()],
        ..request.clone()
    };
    assert_ne!(
        SotwRequest::from(reordered).names_hash(),
        decoded.names_hash()
    );
    let joined = DiscoveryRequest {
        resource_names: vec![format!("{}{}", names[0], names[1])],
        ..request.clone()
    };
    assert_ne!(SotwRequest::from(joined).names_hash(), decoded.names_hash());
    // Read from a buffer in two pieces that split a name, the names hash the same.
    let whole = request.encode_to_vec();
    let (head, tail) = whole.split_at(whole.len() - 3);
    let split = SotwRequest::decode(bytes::Buf::chain(head, tail)).expect("decodes");
    assert_eq!(split.names_hash(), decoded.names_hash());
    // A name longer than what is left is an error, not a panic.
    assert!(SotwRequest::from_message(bytes::Bytes::from_static(&[0x1a, 0x05, b'a'])).is_err());
    // Field 3 (resource_names), two bytes that are not UTF-8, as a client could send them.
    let bad = SotwRequest::from_message(bytes::Bytes::from_static(&[0x1a, 0x02, 0xff, 0xfe]))
        .expect("decodes");
    assert!(bad.names().expect_err("refused").contains("not UTF-8"));
}

fn limits(budget: usize) -> ReadLimits {
    ReadLimits {
        max_bytes: 1 << 20,
        max_names: 10,
        max_node_id: 16,
        max_node_metadata: 64,
        message_wait: std::time::Duration::from_secs(10),
        budget: RequestBudget::new(budget, Default::default()),
    }
}

fn reader(chunks: Vec<Vec<u8>>) -> Requests<SotwRequest> {
    Requests::new(body(chunks), limits(4 << 20))
}

#[tokio::test]
async fn requests_split_across_frames_or_sharing_one_are_read_whole() {
    let a = framed(&request("a"));
    let b = framed(&request("b"));
    let c = framed(&request("c"));
    // a and the first 3 bytes of b in one frame; the rest of b and all of c in the next.
    let mut first = a.clone();
    first.extend_from_slice(&b[..3]);
    let mut second = b[3..].to_vec();
    second.extend_from_slice(&c);
    let mut requests = reader(vec![first, second]);
    for expected in ["a", "b", "c"] {
        let got = requests.message().await.expect("valid").expect("a message");
        assert_eq!(got.request.type_url, expected);
    }
    assert!(requests.message().await.expect("clean end").is_none());
}

async fn refusal(chunks: Vec<Vec<u8>>) -> ReadError {
    reader(chunks).message().await.expect_err("refused")
}

#[tokio::test]
async fn a_compressed_truncated_or_malformed_request_is_a_clear_error() {
    let mut compressed = framed(&request("a"));
    compressed[0] = 1;
    let err = refusal(vec![compressed]).await;
    assert!(matches!(err, ReadError::Compressed), "{err}");
    assert!(err.to_string().contains("compressed"), "{err}");

    let whole = framed(&request("a"));
    let truncated = whole[..whole.len() - 1].to_vec();
    let err = refusal(vec![truncated]).await;
    assert!(err.to_string().contains("mid-message"), "{err}");

    let garbage = vec![0, 0, 0, 0, 2, 0xff, 0xff];
    let err = refusal(vec![garbage]).await;
    assert!(matches!(err, ReadError::Malformed(_)), "{err}");
    assert!(err.to_string().contains("malformed request"), "{err}");
}

#[tokio::test]
async fn limits_are_checked_before_anything_is_decoded_or_buffered() {
    // Declared larger than the limit: refused from the prefix, with nothing after it sent.
    let err = refusal(vec![vec![0, 0, 0x20, 0, 0]]).await;
    assert!(
        matches!(
            err,
            ReadError::TooLarge {
                len: 0x200000,
                max: 0x100000
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("--max-request-bytes"), "{err}");

    let many = DiscoveryRequest {
        resource_names: vec![String::new(); 11],
        ..request("t")
    };
    let err = refusal(vec![framed(&many)]).await;
    assert!(
        matches!(err, ReadError::TooManyNames { names: 11, max: 10 }),
        "{err}"
    );

    let long_id = DiscoveryRequest {
        node: Some(crate::xds::pb::core::Node {
            id: "x".repeat(17),
            ..Default::default()
        }),
        ..request("t")
    };
    let err = refusal(vec![framed(&long_id)]).await;
    assert!(
        matches!(err, ReadError::NodeId { len: 17, max: 16 }),
        "{err}"
    );

    let long_nonce = DiscoveryRequest {
        response_nonce: "n".repeat(2000),
        ..request("t")
    };
    let err = refusal(vec![framed(&long_nonce)]).await;
    assert!(
        err.to_string().contains("response_nonce of 2000 bytes"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_holds_its_bytes_of_the_budget_until_dropped() {
    let message = framed(&request("a"));
    let budget = limits(2000).budget;
    let mut requests = Requests::<SotwRequest>::new(
        body(vec![message.clone()]),
        ReadLimits {
            budget: budget.clone(),
            ..limits(0)
        },
    );
    let got = requests.message().await.expect("valid").expect("a message");
    assert!(budget.available() < 2000, "the request holds its bytes");
    // While it is held, a message needing more than what is left waits, then is refused.
    let big = DiscoveryRequest {
        // Just under half the budget: what requests' bytes may hold.
        type_url: "b".repeat(995),
        ..Default::default()
    };
    let mut other = Requests::<SotwRequest>::new(
        body(vec![framed(&big)]),
        ReadLimits {
            budget: budget.clone(),
            ..limits(0)
        },
    );
    let err = other.message().await.expect_err("no room");
    assert!(
        matches!(err, ReadError::Budget { budget: 2000, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("--max-request-budget"), "{err}");

    // A stream already served waits for room, however long, instead of being refused.
    let small = framed(&request("s"));
    let mut served = Requests::<SotwRequest>::new(
        body(vec![small, framed(&big)]),
        ReadLimits {
            budget: budget.clone(),
            ..limits(0)
        },
    );
    let first = served.message().await.expect("valid").expect("a message");
    drop(first);
    let second = tokio::spawn(async move { served.message().await.map(|m| m.is_some()) });
    tokio::time::sleep(BUDGET_WAIT * 10).await;
    assert!(!second.is_finished(), "it waits while the budget is full");
    drop(got);
    let second = second.await.expect("the task");
    assert!(matches!(second, Ok(true)), "{second:?}");
    assert_eq!(budget.available(), 2000, "given back once handled");
}

#[tokio::test(start_paused = true)]
async fn a_request_that_stops_halfway_is_refused_at_its_deadline_and_gives_back_its_bytes() {
    let whole = framed(&request("a"));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Status>>(1);
    let body = Body::new(http_body_util::StreamBody::new(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    let limits = limits(1000);
    let budget = limits.budget.clone();
    let mut requests = Requests::<SotwRequest>::new(body, limits);
    tx.send(Ok(Frame::data(Bytes::from(whole[..6].to_vec()))))
        .await
        .expect("sent");
    let err = requests.message().await.expect_err("too slow");
    assert!(matches!(err, ReadError::Slow(_)), "{err}");
    drop(requests);
    assert_eq!(budget.available(), 1000);
}

/// `n` clusters of about `size` encoded bytes each.
fn clusters(n: usize, size: usize) -> Vec<Arc<Resource>> {
    (0..n)
        .map(|i| {
            let c = Cluster {
                name: format!("c{i}"),
                alt_stat_name: "x".repeat(size.saturating_sub(16)),
                ..Default::default()
            };
            Arc::new(Resource::encode(format!("c{i}"), &c))
        })
        .collect()
}

#[test]
fn a_response_walking_the_snapshots_layers_writes_the_bytes_of_the_same_list() {
    use crate::xds::generate::{Layer, Picked, Resources};
    use crate::xds::resource::ResourceSet;

    // Two layers of small resources with large ones among them, so that chunks end both at
    // their size and at a shared piece, and walks resume within and across layers.
    let layer = |from: usize, to: usize| {
        let mut set = ResourceSet::new();
        for (i, r) in clusters(to, 400).into_iter().enumerate().skip(from) {
            let r = match i % 97 {
                0 => clusters(i + 1, 4 * COPY_BELOW).pop().expect("one"),
                _ => r,
            };
            set.insert(r.name.clone(), r);
        }
        Layer::new(set)
    };
    let all = Resources::of(vec![layer(0, 1500), layer(1500, 3000)]);
    let names: BTreeSet<Arc<str>> = all.iter().step_by(3).map(|r| r.name.clone()).collect();
    let lazy = [
        Picked::Every(all.clone()),
        Picked::Named(all.clone(), Arc::new(names)),
    ];
    for picked in lazy {
        let listed: Vec<Arc<Resource>> = picked.iter().cloned().collect();
        for delta in [false, true] {
            let (lazy, list) = match delta {
                false => {
                    let response = |resources| SotwResponse {
                        version_info: "v1".into(),
                        resources,
                        type_url: TypeUrl::Cluster,
                        nonce: "1".into(),
                        identifier: "wayfinder".into(),
                    };
                    (
                        response(picked.clone()).encode(),
                        response(listed.clone().into()).encode(),
                    )
                }
                true => {
                    let response = |resources| DeltaResponse {
                        system_version_info: "v1".into(),
                        resources,
                        removed: Vec::new(),
                        type_url: TypeUrl::Cluster,
                        nonce: "1".into(),
                        identifier: "wayfinder".into(),
                    };
                    (
                        response(picked.clone()).encode(),
                        response(listed.clone().into()).encode(),
                    )
                }
            };
            assert_eq!(lazy.len(), list.len());
            let (lazy, list) = (lazy.into_message(), list.into_message());
            assert_eq!(lazy.len(), list.len());
            assert!(lazy == list, "the same bytes (delta: {delta})");
        }
    }
}

#[tokio::test]
async fn a_response_body_copies_chunks_as_they_are_taken_within_the_push_budget() {
    use crate::xds::ads::wire::chunks::PushBudget;
    use http_body::Body as _;
    use http_body_util::BodyExt;
    use prometheus_client::metrics::gauge::Gauge;

    // 3,000 small resources (copied: about 1.2 MB) and a few large ones (shared), in a
    // sotw and a delta message; a budget of four chunks.
    let mut resources = clusters(3_000, 400);
    resources.splice(1000..1000, clusters(3, 4 * COPY_BELOW));
    let sotw = SotwResponse {
        version_info: "v1".into(),
        resources: resources.clone().into(),
        type_url: TypeUrl::Cluster,
        nonce: "1".into(),
        identifier: "wayfinder".into(),
    };
    let delta = DeltaResponse {
        system_version_info: "v2".into(),
        resources: resources.into(),
        removed: vec!["gone".into()],
        type_url: TypeUrl::Cluster,
        nonce: "2".into(),
        identifier: "wayfinder".into(),
    };
    let budget = PushBudget::new(4 * CHUNK, Gauge::default());
    let progress = Arc::new(Progress::default());
    let (tx, rx) = mpsc::channel(4);
    let (first_tx, mut first) = oneshot::channel();
    let (second_tx, second) = oneshot::channel();
    tx.send(Box::new(Ok(Outgoing {
        encoded: sotw.clone().encode(),
        delivered: Some(first_tx),
    })))
    .await
    .expect("queued");
    tx.send(Box::new(Ok(Outgoing {
        encoded: delta.clone().encode(),
        delivered: Some(second_tx),
    })))
    .await
    .expect("queued");
    drop(tx);
    let mut body = ResponseBody::new(rx, budget.for_stream(progress.clone()));

    // A connection that holds every frame it is given: the budget runs out after four
    // chunks, and the body waits.
    let mut held = Vec::new();
    let mut cx = Context::from_waker(std::task::Waker::noop());
    while let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) {
        let data = frame.expect("data").into_data().expect("a data frame");
        assert!(data.len() <= CHUNK, "{} bytes in one frame", data.len());
        held.push(data);
    }
    assert_eq!(budget.available(), 0, "the whole budget is in use");
    assert_eq!(progress.held(), 4 * CHUNK);
    assert!(
        first.try_recv().is_err(),
        "the first message is not out yet"
    );

    // A connection that writes each frame at once: every byte comes out, in order.
    let mut wire: Vec<u8> = held.iter().flat_map(|b| b.to_vec()).collect();
    drop(held);
    while let Some(frame) = body.frame().await {
        match frame.expect("no error").into_data() {
            Ok(data) => wire.extend_from_slice(&data),
            Err(trailers) => {
                let trailers = trailers.into_trailers().expect("trailers");
                assert_eq!(trailers["grpc-status"], "0");
            }
        }
    }
    assert_eq!(
        budget.available(),
        4 * CHUNK,
        "every chunk gave its room back"
    );
    first.await.expect("the first message was delivered");
    second.await.expect("the second message was delivered");
    let (a, b) = wire.split_at(sotw.clone().encode().len());
    assert_eq!(
        DiscoveryResponse::decode(&a[5..]).expect("decodes"),
        sotw.to_proto()
    );
    assert_eq!(
        DeltaDiscoveryResponse::decode(&b[5..]).expect("decodes"),
        delta.to_proto()
    );
}
