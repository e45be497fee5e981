//! A raw state-of-the-world ADS client on envoy-types' generated tonic client.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::Channel;
use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::pb::discovery::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use wayfinder::xds::pb::discovery::{DiscoveryRequest, DiscoveryResponse};
use wayfinder::xds::pb::protobuf::{Struct, Value, value::Kind};
use wayfinder::xds::pb::rpc;

use super::DEADLINE;

/// One ADS stream.
pub(crate) struct Ads {
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
    node: Option<Node>,
}

/// A sidecar node in `namespace` at `ip`, in Istio's id format.
pub(crate) fn sidecar(ip: &str, namespace: &str) -> Node {
    Node {
        id: format!("sidecar~{ip}~test-{ip}.{namespace}~{namespace}.svc.cluster.local"),
        ..Default::default()
    }
}

/// [`sidecar`] with the node metadata `name: value` (a string).
pub(crate) fn sidecar_with(ip: &str, namespace: &str, name: &str, value: &str) -> Node {
    Node {
        metadata: Some(Struct {
            fields: [(
                name.to_string(),
                Value {
                    kind: Some(Kind::StringValue(value.into())),
                },
            )]
            .into(),
        }),
        ..sidecar(ip, namespace)
    }
}

/// A proxyless gRPC node.
pub(crate) fn grpc(id: &str) -> Node {
    Node {
        id: id.into(),
        user_agent_name: "gRPC test client".into(),
        metadata: Some(Struct {
            fields: [(
                "NAMESPACE".to_string(),
                Value {
                    kind: Some(Kind::StringValue("default".into())),
                },
            )]
            .into(),
        }),
        ..Default::default()
    }
}

impl Ads {
    /// Opens a stream. The node goes out with the first request, as real clients send it.
    pub(crate) async fn connect(addr: SocketAddr, node: Node) -> Self {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .expect("a URL")
            .connect()
            .await
            .expect("connect to the ADS server");
        Self::open(channel, node).await.expect("open an ADS stream")
    }

    /// Opens a stream on an existing channel (which connects again if its connection closed).
    pub(crate) async fn open(channel: Channel, node: Node) -> Result<Self, tonic::Status> {
        let mut client = AggregatedDiscoveryServiceClient::new(channel);
        let (tx, rx) = mpsc::channel(16);
        let response = client
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await?;
        Ok(Self {
            tx,
            rx: response.into_inner(),
            node: Some(node),
        })
    }

    /// The next response or the status that ended the stream, without a deadline's panic.
    pub(crate) async fn next(&mut self) -> Result<Option<DiscoveryResponse>, tonic::Status> {
        match tokio::time::timeout(DEADLINE, self.rx.message()).await {
            Ok(next) => next,
            Err(_) => panic!("no response within {DEADLINE:?}"),
        }
    }

    /// The same stream, but its first request will carry no node (a protocol error).
    pub(crate) fn without_node(mut self) -> Self {
        self.node = None;
        self
    }

    /// Sends a request (with the node, if it is the first).
    pub(crate) async fn send(&mut self, mut req: DiscoveryRequest) {
        if let Some(node) = self.node.take() {
            req.node = Some(node);
        }
        self.tx.send(req).await.expect("the stream is open");
    }

    /// Sends a first request for `t`, ignoring a stream the server already ended (read the
    /// status with `next`).
    pub(crate) async fn try_subscribe(&mut self, t: TypeUrl) {
        let mut req = request(t, &[], "", "");
        req.node = self.node.take();
        let _ = self.tx.send(req).await;
    }

    /// Asks for `names` of a type (empty: wildcard), as a fresh request without a nonce.
    pub(crate) async fn subscribe(&mut self, t: TypeUrl, names: &[&str]) {
        self.send(request(t, names, "", "")).await;
    }

    /// Changes the subscription of a type, echoing `after`'s version and nonce.
    pub(crate) async fn resubscribe(&mut self, after: &DiscoveryResponse, names: &[&str]) {
        let t = TypeUrl::parse(&after.type_url).expect("a served type");
        self.send(request(t, names, &after.version_info, &after.nonce))
            .await;
    }

    /// Acknowledges a response, keeping the subscription `names`.
    pub(crate) async fn ack(&mut self, r: &DiscoveryResponse, names: &[&str]) {
        self.resubscribe(r, names).await;
    }

    /// Rejects a response, keeping the subscription `names`.
    pub(crate) async fn nack(&mut self, r: &DiscoveryResponse, names: &[&str], last_good: &str) {
        let t = TypeUrl::parse(&r.type_url).expect("a served type");
        let mut req = request(t, names, last_good, &r.nonce);
        req.error_detail = Some(rpc::Status {
            code: 3,
            message: "rejected by test".into(),
            details: vec![],
        });
        self.send(req).await;
    }

    /// The next response; fails after the deadline or if the stream ends.
    pub(crate) async fn recv(&mut self) -> DiscoveryResponse {
        match tokio::time::timeout(DEADLINE, self.rx.message()).await {
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => panic!("the server closed the stream"),
            Ok(Err(status)) => panic!("the stream failed: {status}"),
            Err(_) => panic!("no response within {DEADLINE:?}"),
        }
    }

    /// The next response, which must be of type `t`.
    pub(crate) async fn recv_type(&mut self, t: TypeUrl) -> DiscoveryResponse {
        let r = self.recv().await;
        assert_eq!(
            r.type_url,
            t.as_str(),
            "expected a {t} response, got {}",
            names_of(&r).join(", ")
        );
        r
    }

    /// The status the server ended the stream with.
    pub(crate) async fn recv_error(&mut self) -> tonic::Status {
        match tokio::time::timeout(DEADLINE, self.rx.message()).await {
            Ok(Err(status)) => status,
            Ok(Ok(r)) => panic!("expected the stream to fail, got {r:?}"),
            Err(_) => panic!("no error within {DEADLINE:?}"),
        }
    }

    /// Proves the server sent nothing since the last `recv`: subscribes to the not yet used
    /// type `probe` (whose first request is always answered) and checks that its answer is the
    /// next thing on the stream. Requests on one stream are handled in order, so anything the
    /// server sent before the probe's answer would arrive first.
    pub(crate) async fn assert_silent(&mut self, probe: TypeUrl) {
        self.subscribe(probe, &[]).await;
        let r = self.recv().await;
        assert_eq!(
            r.type_url,
            probe.as_str(),
            "unexpected response before the probe: {} {:?}",
            r.type_url,
            names_of(&r)
        );
    }
}

/// A request.
pub(crate) fn request(t: TypeUrl, names: &[&str], version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        type_url: t.as_str().into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        version_info: version.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// The names of a response's resources, in order.
pub(crate) fn names_of(r: &DiscoveryResponse) -> Vec<String> {
    r.resources.iter().map(name_of).collect()
}

/// A resource's name, decoded from its `Any`.
pub(crate) fn name_of(any: &wayfinder::xds::pb::protobuf::Any) -> String {
    use wayfinder::xds::pb::{
        cluster::Cluster, endpoint::ClusterLoadAssignment, listener::Listener,
        route::RouteConfiguration, tls::Secret,
    };
    let bytes = any.value.as_slice();
    match TypeUrl::parse(&any.type_url) {
        Some(TypeUrl::Cluster) => Cluster::decode(bytes).map(|c| c.name),
        Some(TypeUrl::Endpoint) => ClusterLoadAssignment::decode(bytes).map(|c| c.cluster_name),
        Some(TypeUrl::Listener) => Listener::decode(bytes).map(|l| l.name),
        Some(TypeUrl::Route) => RouteConfiguration::decode(bytes).map(|r| r.name),
        Some(TypeUrl::Secret) => Secret::decode(bytes).map(|s| s.name),
        // Istio's message carries no name.
        Some(TypeUrl::ProxyConfig) => return "<ProxyConfig>".to_string(),
        None => return format!("<{}>", any.type_url),
    }
    .unwrap_or_else(|e| format!("<undecodable: {e}>"))
}

/// Resources of a response by name, decoded as `M`.
pub(crate) fn decode_all<M: Message + Default>(r: &DiscoveryResponse) -> BTreeMap<String, M> {
    r.resources
        .iter()
        .map(|any| {
            (
                name_of(any),
                M::decode(any.value.as_slice()).expect("decodes"),
            )
        })
        .collect()
}
