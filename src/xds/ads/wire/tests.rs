//! The framing against prost's own encoding, and requests as real bodies deliver them.

use super::*;
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
        resources: resources(),
        type_url: TypeUrl::Cluster,
        nonce: "7".into(),
        identifier: "wayfinder".into(),
    };
    let encoded = response.encode();
    assert!(
        encoded.pieces.len() > 1,
        "the large resource is its own piece"
    );
    let decoded = DiscoveryResponse::decode(&*encoded.message()).expect("decodes");
    assert_eq!(decoded, response.to_proto());
    let all: Vec<u8> = encoded.pieces.iter().flat_map(|p| p.to_vec()).collect();
    assert_eq!(all[0], 0, "not compressed");
    let len = u32::from_be_bytes([all[1], all[2], all[3], all[4]]) as usize;
    assert_eq!(len, all.len() - 5, "the prefix gives the message length");
}

#[test]
fn a_delta_response_decodes_as_the_message_prost_would_write() {
    let response = DeltaResponse {
        system_version_info: "0123".into(),
        resources: resources(),
        removed: vec!["gone".into()],
        type_url: TypeUrl::Cluster,
        nonce: "8".into(),
        identifier: "wayfinder".into(),
    };
    let decoded = DeltaDiscoveryResponse::decode(&*response.encode().message()).expect("decodes");
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
    let mut requests = Requests::<SotwRequest>::new(body(vec![first, second]));
    for expected in ["a", "b", "c"] {
        let got = requests.message().await.expect("valid").expect("a message");
        assert_eq!(got.request.type_url, expected);
    }
    assert_eq!(requests.message().await.expect("clean end"), None);
}

#[tokio::test]
async fn a_compressed_truncated_or_malformed_request_is_a_clear_error() {
    let mut compressed = framed(&request("a"));
    compressed[0] = 1;
    let err = Requests::<SotwRequest>::new(body(vec![compressed]))
        .message()
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::Unimplemented);
    assert!(err.message().contains("compressed"), "{err}");

    let whole = framed(&request("a"));
    let truncated = whole[..whole.len() - 1].to_vec();
    let err = Requests::<SotwRequest>::new(body(vec![truncated]))
        .message()
        .await
        .expect_err("refused");
    assert!(err.message().contains("mid-message"), "{err}");

    let garbage = vec![0, 0, 0, 0, 2, 0xff, 0xff];
    let err = Requests::<SotwRequest>::new(body(vec![garbage]))
        .message()
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("malformed request"), "{err}");
}
