//! The thread every file source reads on.
//!
//! The File registries and the config source read, parse and keep their objects on one
//! long-lived thread of the process, `file-reader`, for two reasons. Parsing a large file is
//! seconds of CPU that would otherwise hold one of the server's few runtime workers. And
//! glibc's malloc gives threads arenas of their own and returns to the system little of what
//! is freed in one: when a file of 75,000 VirtualServices was read on whichever worker polled
//! the stream (and by the File registry over `--config-dir` on another), adding it, removing
//! it and adding it again grew the server by the file's whole cost a second time (232 → 467
//! MiB, BENCHMARKS.md "Hardening (issue 12)"): the second reading ran on the other worker and
//! could not use what the first had freed. On one thread, each reading reuses the memory the
//! last one freed. Its blocking pool (file reads) is one long-lived thread for the same
//! reason.

use std::sync::OnceLock;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use wayfinder_registry::{CancellationToken, RegistryError};

/// Polls `stream` on the `file-reader` thread and returns a stream of its items, which ends
/// when `stream` does or `shutdown` is cancelled. `source` names the source in the error
/// yielded when the thread cannot be started (the stream then ends after it).
///
/// Items `stream` yields without waiting in between are handed over together and yielded
/// without waiting in between, so a consumer that treats them as one change (the aggregate)
/// still does.
pub(crate) fn on_reader<E: Send + 'static>(
    source: &str,
    stream: BoxStream<'static, Result<E, RegistryError>>,
    shutdown: CancellationToken,
) -> BoxStream<'static, Result<E, RegistryError>> {
    let reader = match reader() {
        Ok(reader) => reader,
        Err(err) => {
            let err = RegistryError::Unavailable {
                origin: format!("source {source}"),
                detail: format!("cannot start the file-reader thread: {err}"),
            };
            return futures::stream::iter([Err(err)]).boxed();
        }
    };
    // A few changes in flight at most; a change is one message whatever its size.
    let (tx, rx) = mpsc::channel(4);
    reader.spawn(pump(stream, tx, shutdown));
    stream_of(rx).flat_map(futures::stream::iter).boxed()
}

/// The `file-reader` thread's runtime, started on first use and kept for the life of the
/// process.
fn reader() -> Result<&'static Handle, &'static str> {
    static READER: OnceLock<Result<Handle, String>> = OnceLock::new();
    READER
        .get_or_init(|| start().map_err(|err| err.to_string()))
        .as_ref()
        .map_err(String::as_str)
}

fn start() -> std::io::Result<Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .thread_name("file-reader-io")
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("file-reader".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}

/// Sends every change of `stream` (an item and all those ready after it) as one message,
/// until `stream` ends, the receiver is gone or `shutdown` is cancelled.
async fn pump<T>(
    mut stream: BoxStream<'static, T>,
    tx: mpsc::Sender<Vec<T>>,
    shutdown: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            () = shutdown.cancelled() => return,
            () = tx.closed() => return,
            item = stream.next() => item,
        };
        let Some(first) = first else { return };
        let mut change = vec![first];
        // Outside the cooperative budget, which would make a ready item look pending.
        while let Some(Some(item)) = tokio::task::coop::unconstrained(stream.next()).now_or_never()
        {
            change.push(item);
        }
        if tx.send(change).await.is_err() {
            return;
        }
    }
}

/// The messages of `rx` as a stream.
fn stream_of<T: Send + 'static>(rx: mpsc::Receiver<T>) -> BoxStream<'static, T> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) }).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of what is sent on `rx`.
    fn unbounded<T: Send + 'static>(rx: mpsc::UnboundedReceiver<T>) -> BoxStream<'static, T> {
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) })
            .boxed()
    }

    #[tokio::test]
    async fn a_change_is_one_message() {
        let (items, rx) = mpsc::unbounded_channel();
        let (tx, mut changes) = mpsc::channel(4);
        let shutdown = CancellationToken::new();
        tokio::spawn(pump(unbounded(rx), tx, shutdown.clone()));
        for i in 0..3 {
            items.send(i).unwrap();
        }
        assert_eq!(changes.recv().await, Some(vec![0, 1, 2]));
        items.send(3).unwrap();
        assert_eq!(changes.recv().await, Some(vec![3]));
        shutdown.cancel();
        assert_eq!(changes.recv().await, None);
    }

    #[tokio::test]
    async fn items_arrive_from_the_reader_until_shutdown() {
        let (items, rx) = mpsc::unbounded_channel::<Result<u32, RegistryError>>();
        let shutdown = CancellationToken::new();
        let mut stream = on_reader("test", unbounded(rx), shutdown.clone());
        for i in 0..3 {
            items.send(Ok(i)).unwrap();
            assert_eq!(stream.next().await.map(Result::unwrap), Some(i));
        }
        shutdown.cancel();
        assert!(stream.next().await.is_none());
    }
}
