//! A raw delta (incremental) ADS client on envoy-types' generated tonic client.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use wayfinder::xds::TypeUrl;
use wayfinder::xds::pb::core::Node;
use wayfinder::xds::pb::discovery::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use wayfinder::xds::pb::discovery::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
use wayfinder::xds::pb::rpc;

use super::DEADLINE;
use super::ads::name_of;

/// One delta ADS stream.
pub(crate) struct Delta {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
    node: Option<Node>,
}

impl Delta {
    /// Opens a stream; the node goes out with the first request.
    pub(crate) async fn connect(addr: SocketAddr, node: Node) -> Self {
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect to the ADS server");
        let (tx, rx) = mpsc::channel(16);
        let response = client
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("open a delta ADS stream");
        Self {
            tx,
            rx: response.into_inner(),
            node: Some(node),
        }
    }

    /// Sends a request (with the node, if it is the first).
    pub(crate) async fn send(&mut self, mut req: DeltaDiscoveryRequest) {
        if let Some(node) = self.node.take() {
            req.node = Some(node);
        }
        self.tx.send(req).await.expect("the stream is open");
    }

    /// Subscribes to and unsubscribes from names of a type, echoing `nonce`.
    pub(crate) async fn change(
        &mut self,
        t: TypeUrl,
        subscribe: &[&str],
        unsubscribe: &[&str],
        nonce: &str,
    ) {
        self.send(DeltaDiscoveryRequest {
            type_url: t.as_str().into(),
            resource_names_subscribe: subscribe.iter().map(|n| n.to_string()).collect(),
            resource_names_unsubscribe: unsubscribe.iter().map(|n| n.to_string()).collect(),
            response_nonce: nonce.into(),
            ..Default::default()
        })
        .await;
    }

    /// Acknowledges a response.
    pub(crate) async fn ack(&mut self, r: &DeltaDiscoveryResponse) {
        let t = TypeUrl::parse(&r.type_url).expect("a served type");
        self.change(t, &[], &[], &r.nonce).await;
    }

    /// Rejects a response.
    pub(crate) async fn nack(&mut self, r: &DeltaDiscoveryResponse) {
        self.send(DeltaDiscoveryRequest {
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            error_detail: Some(rpc::Status {
                code: 3,
                message: "rejected by test".into(),
                details: vec![],
            }),
            ..Default::default()
        })
        .await;
    }

    /// The next response; fails after the deadline or if the stream ends.
    pub(crate) async fn recv(&mut self) -> DeltaDiscoveryResponse {
        match tokio::time::timeout(DEADLINE, self.rx.message()).await {
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => panic!("the server closed the stream"),
            Ok(Err(status)) => panic!("the stream failed: {status}"),
            Err(_) => panic!("no response within {DEADLINE:?}"),
        }
    }

    /// The next response, which must be of type `t`.
    pub(crate) async fn recv_type(&mut self, t: TypeUrl) -> DeltaDiscoveryResponse {
        let r = self.recv().await;
        assert_eq!(
            r.type_url,
            t.as_str(),
            "expected {t}, got {:?}",
            summary(&r)
        );
        r
    }
}

/// A response as `(sent names → versions, removed names)`.
pub(crate) fn summary(r: &DeltaDiscoveryResponse) -> (BTreeMap<String, String>, Vec<String>) {
    let sent = r
        .resources
        .iter()
        .map(|res| {
            let any = res.resource.as_ref().expect("a resource body");
            assert_eq!(any.type_url, r.type_url, "an Any of another type");
            assert_eq!(
                name_of(any),
                res.name,
                "the resource's name is its content's"
            );
            (res.name.clone(), res.version.clone())
        })
        .collect();
    let mut removed = r.removed_resources.clone();
    removed.sort();
    (sent, removed)
}

/// The sent names of a response.
pub(crate) fn sent(r: &DeltaDiscoveryResponse) -> Vec<String> {
    summary(r).0.into_keys().collect()
}
