//! The seeds of the `ads` target, made from Envoy's message types: request streams as an Istio
//! sidecar, a gateway and a gRPC client send them to `mesh.yaml`'s services (initial requests
//! with the node, ACKs echoing the server's nonces, NACKs, subscription changes), whole and
//! in small DATA frames. Checked against `fuzz/corpus/ads/`; after changing them, write them
//! with `WAYFINDER_BLESS=1 cargo test -p wayfinder-fuzz --test ads_seeds`.

use std::collections::HashMap;
use std::path::Path;

use prost::Message;
use wayfinder::xds::pb::core::{Extension, Locality, Node};
use wayfinder::xds::pb::discovery::{DeltaDiscoveryRequest, DiscoveryRequest};
use wayfinder::xds::pb::protobuf::{Struct, Value, value::Kind};
use wayfinder::xds::pb::rpc::Status;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const REVIEWS: &str = "outbound|9080||reviews.default.svc.cluster.local";
const REVIEWS_V1: &str = "outbound|9080|v1|reviews.default.svc.cluster.local";

fn text(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn object(fields: &[(&str, Value)]) -> Struct {
    Struct {
        fields: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    }
}

/// A node as Istio's agent and Envoy fill it in.
fn node(id: &str, labels: &[(&str, &str)], user_agent: &str) -> Node {
    let labels: Vec<(&str, Value)> = labels.iter().map(|(k, v)| (*k, text(v))).collect();
    let metadata = object(&[
        ("ISTIO_VERSION", text("1.24.0")),
        ("CLUSTER_ID", text("Kubernetes")),
        ("NAMESPACE", text("default")),
        ("INTERCEPTION_MODE", text("REDIRECT")),
        ("MESH_ID", text("cluster.local")),
        (
            "LABELS",
            Value {
                kind: Some(Kind::StructValue(object(&labels))),
            },
        ),
        ("WAYFINDER_LISTEN_ADDRESS", text("127.0.0.1")),
    ]);
    Node {
        id: id.into(),
        cluster: "reviews.default".into(),
        metadata: Some(metadata),
        locality: Some(Locality {
            region: "us-east1".into(),
            zone: "us-east1-b".into(),
            ..Locality::default()
        }),
        user_agent_name: user_agent.into(),
        extensions: vec![
            Extension {
                name: "envoy.filters.http.router".into(),
                category: "envoy.filters.http".into(),
                type_urls: vec!["envoy.extensions.filters.http.router.v3.Router".into(),],
                ..Extension::default()
            };
            3
        ],
        client_features: vec![
            "envoy.lb.does_not_support_overprovisioning".into(),
            "envoy.lrs.supports_send_all_clusters".into(),
        ],
        ..Node::default()
    }
}

fn sidecar() -> Node {
    node(
        "sidecar~10.1.0.1~reviews-v1-7f9.default~default.svc.cluster.local",
        &[("app", "reviews"), ("version", "v1")],
        "envoy",
    )
}

fn sotw(t: &str, names: &[&str], version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        type_url: t.into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        version_info: version.into(),
        response_nonce: nonce.into(),
        ..DiscoveryRequest::default()
    }
}

fn with_node(mut r: DiscoveryRequest, node: Node) -> DiscoveryRequest {
    r.node = Some(node);
    r
}

/// A NACK of the response with `nonce`, keeping `last_good`.
fn nack(t: &str, names: &[&str], last_good: &str, nonce: &str) -> DiscoveryRequest {
    let mut r = sotw(t, names, last_good, nonce);
    r.error_detail = Some(Status {
        code: 13,
        message: "Error adding/updating listener(s) 0.0.0.0_9080: duplicate listener".into(),
        ..Status::default()
    });
    r
}

/// A seed: its file name, the size of its DATA frames (0: one frame) and its requests.
struct Seed {
    name: &'static str,
    chunk: u8,
    requests: Requests,
}

enum Requests {
    Sotw(Vec<DiscoveryRequest>),
    Delta(Vec<DeltaDiscoveryRequest>),
}

impl Seed {
    /// The method byte, the frame size byte, then each message after gRPC's prefix.
    fn bytes(&self) -> Vec<u8> {
        fn frame<M: Message>(out: &mut Vec<u8>, messages: &[M]) {
            for m in messages {
                let body = m.encode_to_vec();
                out.push(0);
                out.extend_from_slice(&(body.len() as u32).to_be_bytes());
                out.extend_from_slice(&body);
            }
        }
        let mut out = vec![
            u8::from(matches!(self.requests, Requests::Delta(_))),
            self.chunk,
        ];
        match &self.requests {
            Requests::Sotw(r) => frame(&mut out, r),
            Requests::Delta(r) => frame(&mut out, r),
        }
        out
    }

    /// Whether `bytes` hold the same requests (maps encode in any order, so bytes may differ).
    fn same_as(&self, bytes: &[u8]) -> bool {
        fn read<M: Message + Default>(mut body: &[u8]) -> Option<Vec<M>> {
            let mut out = Vec::new();
            while let [0, a, b, c, d, rest @ ..] = body {
                let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
                out.push(M::decode(rest.get(..len)?).ok()?);
                body = &rest[len..];
            }
            body.is_empty().then_some(out)
        }
        let [variant, chunk, body @ ..] = bytes else {
            return false;
        };
        *chunk == self.chunk
            && match &self.requests {
                Requests::Sotw(r) => *variant == 0 && read(body).as_ref() == Some(r),
                Requests::Delta(r) => *variant == 1 && read(body).as_ref() == Some(r),
            }
    }
}

fn sotw_seed(name: &'static str, chunk: u8, requests: Vec<DiscoveryRequest>) -> Seed {
    Seed {
        name,
        chunk,
        requests: Requests::Sotw(requests),
    }
}

fn delta_seed(name: &'static str, chunk: u8, requests: Vec<DeltaDiscoveryRequest>) -> Seed {
    Seed {
        name,
        chunk,
        requests: Requests::Delta(requests),
    }
}

/// A sidecar's state-of-the-world session: clusters, endpoints, listeners and routes, each
/// ACKed (the server numbers its nonces 1, 2, …), then a NACK and a new name.
fn sidecar_session() -> Vec<DiscoveryRequest> {
    vec![
        with_node(sotw(CDS, &[], "", ""), sidecar()),
        sotw(EDS, &[REVIEWS, REVIEWS_V1], "", ""),
        sotw(CDS, &[], "1", "1"),
        sotw(LDS, &[], "", ""),
        sotw(EDS, &[REVIEWS, REVIEWS_V1], "2", "2"),
        sotw(RDS, &["9080"], "", ""),
        nack(LDS, &[], "", "3"),
        sotw(RDS, &["9080", "7070"], "4", "4"),
    ]
}

fn seeds() -> Vec<Seed> {
    let router = node(
        "router~10.0.0.9~ingress-5d8.default~default.svc.cluster.local",
        &[("istio", "ingressgateway")],
        "envoy",
    );
    let grpc = node(
        "sidecar~10.1.1.9~client.default~default.svc.cluster.local",
        &[("app", "client")],
        "gRPC Go",
    );
    let gateway = vec![
        with_node(sotw(CDS, &[], "", ""), router),
        sotw(LDS, &[], "", ""),
        sotw(RDS, &["http.8080"], "", ""),
        sotw(CDS, &[], "1", "1"),
    ];
    let grpc_client = vec![
        with_node(
            sotw(LDS, &["echo.default.svc.cluster.local:7070"], "", ""),
            grpc,
        ),
        sotw(LDS, &["echo.default.svc.cluster.local:7070"], "1", "1"),
        sotw(RDS, &["echo.default.svc.cluster.local:7070"], "", ""),
        sotw(
            CDS,
            &["outbound|7070||echo.default.svc.cluster.local"],
            "",
            "",
        ),
        sotw(
            EDS,
            &["outbound|7070||echo.default.svc.cluster.local"],
            "",
            "",
        ),
    ];
    let delta = vec![
        DeltaDiscoveryRequest {
            node: Some(sidecar()),
            type_url: CDS.into(),
            ..DeltaDiscoveryRequest::default()
        },
        DeltaDiscoveryRequest {
            type_url: EDS.into(),
            resource_names_subscribe: vec![REVIEWS.into(), REVIEWS_V1.into()],
            initial_resource_versions: HashMap::from([(REVIEWS.into(), "abc".into())]),
            ..DeltaDiscoveryRequest::default()
        },
        DeltaDiscoveryRequest {
            type_url: CDS.into(),
            response_nonce: "1".into(),
            ..DeltaDiscoveryRequest::default()
        },
        DeltaDiscoveryRequest {
            type_url: EDS.into(),
            response_nonce: "2".into(),
            resource_names_unsubscribe: vec![REVIEWS_V1.into()],
            error_detail: Some(Status {
                code: 3,
                message: "rejected".into(),
                ..Status::default()
            }),
            ..DeltaDiscoveryRequest::default()
        },
        DeltaDiscoveryRequest {
            type_url: LDS.into(),
            resource_names_subscribe: vec!["*".into()],
            ..DeltaDiscoveryRequest::default()
        },
    ];
    vec![
        sotw_seed("sotw-sidecar-session", 0, sidecar_session()),
        sotw_seed(
            "sotw-sidecar-session-in-7-byte-frames",
            7,
            sidecar_session(),
        ),
        sotw_seed("sotw-gateway", 0, gateway),
        sotw_seed("sotw-grpc-client", 0, grpc_client),
        delta_seed("delta-sidecar-session", 0, delta.clone()),
        delta_seed("delta-sidecar-session-in-100-byte-frames", 100, delta),
        sotw_seed(
            "sotw-too-many-names",
            0,
            vec![with_node(
                DiscoveryRequest {
                    type_url: EDS.into(),
                    resource_names: (0..300).map(|i| format!("outbound|{i}||x")).collect(),
                    ..DiscoveryRequest::default()
                },
                sidecar(),
            )],
        ),
        sotw_seed(
            "sotw-first-request-without-node",
            0,
            vec![sotw(CDS, &[], "", "")],
        ),
    ]
}

#[test]
fn the_committed_ads_seeds_are_the_generated_ones() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/ads");
    let bless = std::env::var("WAYFINDER_BLESS").as_deref() == Ok("1");
    for seed in seeds() {
        let path = dir.join(seed.name);
        let committed = std::fs::read(&path);
        if bless {
            // Maps encode in any order: a seed that holds the same requests stays as it is.
            if !committed.is_ok_and(|bytes| seed.same_as(&bytes)) {
                std::fs::write(&path, seed.bytes())
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            continue;
        }
        let committed = committed
            .unwrap_or_else(|e| panic!("{}: {e}; write it with WAYFINDER_BLESS=1", path.display()));
        assert!(
            seed.same_as(&committed),
            "{} differs from its generator; write it with WAYFINDER_BLESS=1",
            path.display()
        );
    }
}
