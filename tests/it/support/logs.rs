//! A child's JSON log lines, collected as they come, for tests that wait on them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::Notify;

use super::DEADLINE;

/// Every line a child wrote to one stream, parsed as JSON where it is (a string otherwise).
#[derive(Clone, Default)]
pub(crate) struct Logs {
    lines: Arc<Mutex<Vec<Value>>>,
    raw: Arc<Mutex<Vec<String>>>,
    logged: Arc<Notify>,
    /// The stream ended: the child exited (and every process that shared the stream).
    ended: Arc<AtomicBool>,
}

impl Logs {
    /// Collects `stream` until it ends.
    pub(crate) fn collect(stream: impl AsyncRead + Unpin + Send + 'static) -> Self {
        let logs = Self::default();
        let sink = logs.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let value = serde_json::from_str(&line).unwrap_or(Value::String(line.clone()));
                sink.raw.lock().unwrap().push(line);
                sink.lines.lock().unwrap().push(value);
                sink.logged.notify_waiters();
            }
            sink.ended.store(true, Ordering::SeqCst);
            sink.logged.notify_waiters();
        });
        logs
    }

    /// Waits until the stream ended, so that every line the child wrote is here: a child's
    /// exit is seen before the reader has read what it wrote last.
    pub(crate) async fn until_end(&self) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let notified = self.logged.notified();
            if self.ended.load(Ordering::SeqCst) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("the log stream did not end within {DEADLINE:?}");
            }
        }
    }

    /// Waits for a line matching `pred` (logged at any time since start).
    pub(crate) async fn wait(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_n(what, 1, pred).await.swap_remove(0)
    }

    /// Waits until `n` lines match `pred`; returns them all.
    pub(crate) async fn wait_n(
        &self,
        what: &str,
        n: usize,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let notified = self.logged.notified();
            let found = self.matching(&pred);
            if found.len() >= n {
                return found;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                // The guard is dropped before the panic: a poisoned lock would make the
                // destructors that read the logs (an agent's) panic again and abort.
                let tail: Vec<String> = {
                    let logs = self.lines.lock().unwrap();
                    logs.iter().rev().take(20).map(|l| l.to_string()).collect()
                };
                panic!(
                    "no {n} log lines for {what} within {DEADLINE:?}; last lines:\n{}",
                    tail.join("\n")
                );
            }
        }
    }

    /// Every line so far that matches `pred`.
    pub(crate) fn matching(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let logs = self.lines.lock().unwrap();
        logs.iter().filter(|l| pred(l)).cloned().collect()
    }

    /// Every line so far, as written.
    pub(crate) fn raw(&self) -> Vec<String> {
        self.raw.lock().unwrap().clone()
    }
}
