//! The last phase, and the machine's own yardstick: every client leaves and the server's
//! memory is read after it has had time to give back what they used; and how fast this
//! machine copies memory, to compare the server's CPU per byte sent with.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::load::memory;

/// What the leave phase measured.
pub(crate) struct Left {
    /// Seconds from the clients' cancellation until the server counted none (`pilot_xds`).
    pub(crate) gone_after_s: f64,
    /// Server RSS `settle` after that.
    pub(crate) rss_mib: f64,
}

/// Waits until the server reports no connected clients, then `settle` more, and reads its RSS.
pub(crate) async fn leave(monitoring: SocketAddr, pid: u32, settle: Duration) -> Left {
    let started = Instant::now();
    while connected(monitoring).await != Some(0) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "clients still connected 120 s after they were told to leave"
        );
        // Polling a gauge: a condition, checked often.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone_after_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(settle).await;
    Left {
        gone_after_s,
        rss_mib: memory(pid).0,
    }
}

/// The `pilot_xds` gauge (connected xDS clients), from the monitoring port.
async fn connected(monitoring: SocketAddr) -> Option<u64> {
    let mut conn = TcpStream::connect(monitoring).await.ok()?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: wayfinder\r\n\r\n")
        .await
        .ok()?;
    let mut text = String::new();
    conn.read_to_string(&mut text).await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("pilot_xds "))
        .and_then(|v| v.trim().parse().ok())
}

/// This machine's memory-copy rate in bytes per second: the best of five copies of 256 MiB
/// (larger than any cache), after one to fault the pages in.
pub(crate) fn memcpy_rate() -> f64 {
    const SIZE: usize = 256 << 20;
    let from = vec![1u8; SIZE];
    let mut to = vec![0u8; SIZE];
    to.copy_from_slice(&from);
    let best = (0..5)
        .map(|_| {
            let started = Instant::now();
            to.copy_from_slice(std::hint::black_box(&from));
            std::hint::black_box(&to);
            started.elapsed()
        })
        .min()
        .unwrap_or(Duration::MAX);
    SIZE as f64 / best.as_secs_f64()
}
