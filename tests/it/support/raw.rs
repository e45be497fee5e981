//! A raw HTTP/2 ADS client on the `h2` crate, for what well-behaved clients never send:
//! garbage, compressed and oversized messages, requests that stop halfway, many streams.

use std::net::SocketAddr;

use bytes::Bytes;
use h2::RecvStream;
use h2::client::{ResponseFuture, SendRequest};
use prost::Message;
use tokio::net::TcpStream;

use super::DEADLINE;

/// The state-of-the-world ADS method.
pub(crate) const SOTW: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";

/// One HTTP/2 connection to the ADS port.
pub(crate) struct RawConn {
    send: SendRequest<Bytes>,
    /// The connection's own address, as the server sees it.
    pub(crate) local: SocketAddr,
    /// What the server allows (`SETTINGS_MAX_CONCURRENT_STREAMS`), once its settings came.
    pub(crate) max_streams: usize,
}

impl RawConn {
    /// Connects and completes the HTTP/2 handshake, including the server's settings.
    pub(crate) async fn connect(addr: SocketAddr) -> Self {
        Self::connect_with(addr, &h2::client::Builder::new()).await
    }

    /// A connection that reads `window` bytes of each stream's responses, then stops: it
    /// never gives the server more flow-control window, though it still answers pings. A
    /// client that stopped reading, as the server sees it.
    pub(crate) async fn connect_unread(addr: SocketAddr, window: u32) -> Self {
        let mut builder = h2::client::Builder::new();
        builder
            .initial_window_size(window)
            .initial_connection_window_size(64 << 20);
        Self::connect_with(addr, &builder).await
    }

    async fn connect_with(addr: SocketAddr, builder: &h2::client::Builder) -> Self {
        let tcp = TcpStream::connect(addr)
            .await
            .expect("connect to the ADS port");
        let local = tcp.local_addr().expect("a local address");
        let (send, connection) = builder.handshake(tcp).await.expect("an HTTP/2 handshake");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        // Until the server's SETTINGS arrive, h2 assumes no stream limit.
        let max_streams = super::eventually("the server's HTTP/2 settings", || async {
            let n = send.current_max_send_streams();
            (n < usize::MAX).then_some(n)
        })
        .await;
        Self {
            send,
            local,
            max_streams,
        }
    }

    /// True once the server closed the connection (or sent `GOAWAY`).
    pub(crate) async fn is_closed(&self) -> bool {
        self.send.clone().ready().await.is_err()
    }

    /// Opens an ADS stream (headers only).
    pub(crate) async fn stream(&mut self) -> RawStream {
        let request = http::Request::post(SOTW)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("a request");
        let mut send = self.send.clone().ready().await.expect("a stream slot");
        let (response, body) = send.send_request(request, false).expect("a stream");
        RawStream { body, response }
    }
}

/// One ADS stream on a [`RawConn`].
pub(crate) struct RawStream {
    body: h2::SendStream<Bytes>,
    response: ResponseFuture,
}

/// How a stream ended: its `grpc-status` and `grpc-message`.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl RawStream {
    /// Sends `bytes` as the flow-control windows allow; returns false if the stream was
    /// reset or ended before all of them went.
    pub(crate) async fn send(&mut self, mut bytes: Bytes) -> bool {
        while !bytes.is_empty() {
            self.body.reserve_capacity(bytes.len());
            let granted = match std::future::poll_fn(|cx| self.body.poll_capacity(cx)).await {
                Some(Ok(n)) if n > 0 => n,
                Some(Ok(_)) => continue,
                _ => return false,
            };
            let chunk = bytes.split_to(granted.min(bytes.len()));
            if self.body.send_data(chunk, false).is_err() {
                return false;
            }
        }
        true
    }

    /// Waits for the server to end the stream, and returns its status.
    pub(crate) async fn ended(self) -> Ended {
        tokio::time::timeout(DEADLINE, self.read_status())
            .await
            .expect("the server ends the stream")
    }

    async fn read_status(self) -> Ended {
        let response = self.response.await.expect("response headers");
        let (head, mut body) = response.into_parts();
        if let Some(ended) = status_of(&head.headers) {
            return ended; // a trailers-only answer
        }
        drain(&mut body).await;
        let trailers = body.trailers().await.ok().flatten().unwrap_or_default();
        status_of(&trailers).unwrap_or(Ended {
            code: -1,
            message: "no grpc-status".into(),
        })
    }
}

async fn drain(body: &mut RecvStream) {
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
    }
}

fn status_of(headers: &http::HeaderMap) -> Option<Ended> {
    let code = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let message = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default();
    Some(Ended { code, message })
}

/// gRPC percent-encodes `grpc-message`.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A gRPC frame: compression flag, the declared length, then `payload` (which may be
/// shorter or longer than declared).
pub(crate) fn frame(compressed: bool, declared: u32, payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(u8::from(compressed));
    out.extend_from_slice(&declared.to_be_bytes());
    out.extend_from_slice(payload);
    Bytes::from(out)
}

/// `message` framed as a gRPC message.
pub(crate) fn framed(message: &impl Message) -> Bytes {
    let payload = message.encode_to_vec();
    frame(false, payload.len() as u32, &payload)
}
