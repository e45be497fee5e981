//! The ADS server's limits, with raw clients: the new-stream rate limit, the maximum
//! connection age, and the push throttle against a client that does not read.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tonic::Code;
use tonic::transport::{Channel, Endpoint, Uri};
use wayfinder::xds::TypeUrl::Cluster as CDS;
use wayfinder::xds::ads::Limits;

use crate::support::ads::{Ads, sidecar};
use crate::support::binary::get;
use crate::support::fixtures::http;
use crate::support::inproc;

#[tokio::test]
async fn new_streams_beyond_the_rate_wait_then_are_refused_with_resource_exhausted() {
    // One a second, a burst of one: of three streams opened together, the first starts at
    // once, the second waits a second, and the third, two seconds away, is refused.
    let limits = Limits {
        new_streams_per_second: 1,
        ..Limits::default()
    };
    let srv = inproc::start_limited(vec![http("a", &["10.0.0.1"])], limits).await;
    let addr = srv.grpc;
    let open = |i: usize| async move {
        let mut ads = Ads::connect(addr, sidecar(&format!("10.9.0.{i}"), "default")).await;
        ads.try_subscribe(CDS).await;
        ads.next().await
    };
    let outcomes = futures::future::join_all((1..=3).map(open)).await;
    let served = outcomes.iter().filter(|o| matches!(o, Ok(Some(_)))).count();
    let refused: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert_eq!(served, 2, "{outcomes:?}");
    assert_eq!(refused.len(), 1, "{outcomes:?}");
    assert_eq!(refused[0].code(), Code::ResourceExhausted);
    assert!(
        refused[0]
            .message()
            .contains("--max-new-streams-per-second"),
        "{}",
        refused[0].message()
    );
    let (_, metrics) = get(srv.server.monitoring_addr, "/metrics").await;
    assert!(
        metrics.contains("wayfinder_xds_refused_streams_total{reason=\"rate\"} 1"),
        "{metrics}"
    );
}

/// A connector that counts the TCP connections a channel opens.
#[derive(Clone)]
struct Counting {
    opened: Arc<AtomicUsize>,
}

impl tower_service::Service<Uri> for Counting {
    type Response = TokioIo<TcpStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let opened = self.opened.clone();
        Box::pin(async move {
            let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
            let tcp = TcpStream::connect(authority).await?;
            opened.fetch_add(1, Ordering::SeqCst);
            Ok(TokioIo::new(tcp))
        })
    }
}

#[tokio::test]
async fn a_connection_at_its_age_ends_its_streams_and_clients_reconnect_on_a_new_one() {
    let limits = Limits {
        max_connection_age: Some(Duration::from_secs(2)),
        ..Limits::default()
    };
    let srv = inproc::start_limited(vec![http("a", &["10.0.0.1"])], limits).await;
    let opened = Arc::new(AtomicUsize::new(0));
    let channel: Channel = Endpoint::from_shared(format!("http://{}", srv.grpc))
        .unwrap()
        .connect_with_connector(Counting {
            opened: opened.clone(),
        })
        .await
        .unwrap();
    let node = sidecar("10.9.0.1", "default");
    let mut ads = Ads::open(channel.clone(), node.clone()).await.unwrap();
    ads.subscribe(CDS, &[]).await;
    let first = ads.recv_type(CDS).await;
    ads.ack(&first, &[]).await;
    let status = ads.recv_error().await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("maximum age"),
        "{}",
        status.message()
    );
    assert_eq!(opened.load(Ordering::SeqCst), 1);

    // A client opens its stream again, as gRPC clients and Envoy do after UNAVAILABLE; the
    // old connection refuses new streams (GOAWAY), so the channel connects anew. An attempt
    // that races the closing connection fails and is retried, as a client would.
    let mut again = None;
    for _ in 0..20 {
        if let Ok(mut ads) = Ads::open(channel.clone(), node.clone()).await {
            ads.subscribe(CDS, &[]).await;
            if let Ok(Some(r)) = ads.next().await {
                again = Some(r);
                break;
            }
        }
    }
    let again = again.expect("the client got its clusters again");
    assert_eq!(again.version_info, first.version_info);
    assert_eq!(
        opened.load(Ordering::SeqCst),
        2,
        "the stream came back on a new connection"
    );
}
