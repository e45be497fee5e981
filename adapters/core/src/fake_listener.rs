//! A TCP listener for the in-process fakes of registries' servers (feature `fake-listener`),
//! whose connections all close when the fake stops or is dropped.
//!
//! `axum::serve` runs each connection in a task of its own, so aborting the accept loop alone
//! would leave kept-alive connections answering. Each connection here watches a stop flag:
//! once it is set, reads see end-of-file and writes fail, and hyper closes the connection.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Accepts connections that stop when `stop` becomes true or its sender goes: serve an axum
/// router on it with `axum::serve`.
pub struct StopListener {
    inner: TcpListener,
    stop: watch::Receiver<bool>,
}

impl StopListener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener, stop: watch::Receiver<bool>) -> StopListener {
        StopListener { inner, stop }
    }
}

impl Listener for StopListener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((io, addr)) => {
                    let _ = io.set_nodelay(true);
                    let mut stop = self.stop.clone();
                    let stopped = Box::pin(async move {
                        let _ = stop.wait_for(|s| *s).await;
                    });
                    let conn = Conn {
                        io,
                        stopped,
                        done: false,
                    };
                    return (conn, addr);
                }
                Err(error) => {
                    // Out of file descriptors or the like: back off instead of spinning.
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that ends when the fake stops.
pub struct Conn {
    io: TcpStream,
    stopped: Pin<Box<dyn Future<Output = ()> + Send>>,
    done: bool,
}

impl Conn {
    fn is_stopped(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.done && self.stopped.as_mut().poll(cx).is_ready() {
            self.done = true;
        }
        self.done
    }
}

fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "fake server stopped")
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.is_stopped(cx) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.is_stopped(cx) {
            return Poll::Ready(Err(stopped()));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.is_stopped(cx) {
            return Poll::Ready(Err(stopped()));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
