//! Watches: a chunked stream of newline-delimited JSON events read from the history.
//!
//! A watch keeps a cursor (the resourceVersion it has sent everything up to) and reads the
//! kind's history after it whenever a write wakes it; the history itself is the buffer, so a
//! slow watcher never holds up writers and never loses events. Synthetic `ADDED` events come
//! first when the watch starts from "now" (no `resourceVersion`, or `"0"`). A watch from a
//! compacted resourceVersion, or one that falls behind a compaction, gets an `ERROR` event
//! with a 410 `Expired` Status and ends, as real servers answer watches.
//!
//! With a label or field selector, an object that stops matching is sent as `DELETED` and one
//! that starts matching as `ADDED` (the real server's filtered watch does the same).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures::stream;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::kinds::{KINDS, Kind};
use super::selector::Filter;
use super::state::{OpenWatch, Shared};
use super::status::ApiError;
use super::store::{Change, ChangeType, Stored};

/// How long a watch with no `timeoutSeconds` lasts (the real server picks 30 to 60 minutes).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// Events read from the history per lock, and initial events per chunk.
const BATCH: usize = 512;

/// Where a watch starts.
#[derive(Debug)]
pub(super) enum Start {
    /// At the current state: synthetic `ADDED` for every object (unless `initial` is false),
    /// then, if `end_mark`, a bookmark marking the end of the initial events.
    Now { initial: bool, end_mark: bool },
    /// After this resourceVersion: every change since, then live ones.
    After(u64),
}

/// What a watch request asks for.
#[derive(Debug)]
pub(super) struct Spec {
    /// Storage slot of the kind.
    pub(super) slot: usize,
    /// Version requested.
    pub(super) version: &'static str,
    /// Namespace, labels and fields.
    pub(super) filter: Filter,
    /// Where it starts.
    pub(super) start: Start,
    /// `allowWatchBookmarks`.
    pub(super) bookmarks: bool,
    /// `timeoutSeconds`.
    pub(super) timeout: Option<Duration>,
}

/// Opens a watch; the answer streams until a timeout, a cut, an error event or the client.
pub(super) fn open(shared: &Arc<Shared>, spec: Spec) -> Response {
    let kind = &KINDS[spec.slot];
    let mut watch = {
        let st = shared.lock();
        let timeout = spec.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let timeout = st.watch_cap.map_or(timeout, |cap| cap.min(timeout));
        let bookmark = spec.bookmarks.then(|| {
            let mut every =
                tokio::time::interval_at(Instant::now() + st.bookmark_every, st.bookmark_every);
            every.set_missed_tick_behavior(MissedTickBehavior::Delay);
            every
        });
        Watch {
            kind,
            api_version: kind.api_version(spec.version),
            slot: spec.slot,
            cursor: st.rv,
            initial: Vec::new().into_iter(),
            end_mark: false,
            deadline: Instant::now() + timeout,
            bookmark,
            written: shared.written(),
            cuts: shared.cuts(),
            done: false,
            gone: None,
            shared: shared.clone(),
            _open: shared.open_watch(kind.plural),
            filter: spec.filter,
        }
    };
    match spec.start {
        Start::Now { initial, end_mark } => {
            let st = shared.lock();
            watch.cursor = st.rv;
            if initial {
                let objects = &st.stores[spec.slot].objects;
                let selected: Vec<Stored> = objects
                    .iter()
                    .filter(|(key, stored)| watch.filter.matches(key, stored))
                    .map(|(_, stored)| stored.clone())
                    .collect();
                watch.initial = selected.into_iter();
            }
            watch.end_mark = end_mark;
        }
        Start::After(rv) => {
            watch.cursor = rv;
            let compacted = shared.lock().stores[spec.slot].compacted;
            if rv < compacted {
                watch.gone = Some((rv, compacted));
            }
        }
    }
    let chunks = stream::unfold(watch, |mut watch| async move {
        let chunk = watch.next_chunk().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(chunk), watch))
    });
    let mut response = Response::new(Body::from_stream(chunks));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

struct Watch {
    shared: Arc<Shared>,
    kind: &'static Kind,
    api_version: String,
    slot: usize,
    filter: Filter,
    /// Everything up to here has been sent.
    cursor: u64,
    initial: std::vec::IntoIter<Stored>,
    end_mark: bool,
    /// `(requested, compacted)`: send a 410 and end.
    gone: Option<(u64, u64)>,
    deadline: Instant,
    bookmark: Option<Interval>,
    written: watch::Receiver<u64>,
    cuts: watch::Receiver<u64>,
    done: bool,
    _open: OpenWatch,
}

impl Watch {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        if let Some((requested, compacted)) = self.gone.take() {
            return Some(self.gone_line(requested, compacted));
        }
        let mut out = Vec::new();
        let initial: Vec<Stored> = self.initial.by_ref().take(BATCH).collect();
        for stored in &initial {
            self.event(&mut out, "ADDED", stored);
        }
        if !out.is_empty() {
            return Some(Bytes::from(out));
        }
        if std::mem::take(&mut self.end_mark) {
            return Some(self.bookmark_line(true));
        }
        loop {
            self.written.borrow_and_update();
            let changes = {
                let st = self.shared.lock();
                st.stores[self.slot]
                    .changes_after(self.cursor, BATCH)
                    .inspect(|changes| {
                        if changes.is_empty() {
                            self.cursor = st.rv;
                        }
                    })
            };
            let changes = match changes {
                Ok(changes) => changes,
                Err(compacted) => return Some(self.gone_line(self.cursor, compacted)),
            };
            if let Some(last) = changes.last() {
                self.cursor = last.rv;
                for change in &changes {
                    self.change(&mut out, change);
                }
                if !out.is_empty() {
                    return Some(Bytes::from(out));
                }
                continue;
            }
            tokio::select! {
                biased;
                _ = self.cuts.changed() => return self.end(),
                () = tokio::time::sleep_until(self.deadline) => return self.end(),
                changed = self.written.changed() => {
                    if changed.is_err() {
                        return self.end();
                    }
                }
                () = tick(&mut self.bookmark) => return Some(self.bookmark_line(false)),
            }
        }
    }

    /// The `ERROR` event of a watch whose start is compacted away; the watch ends after it.
    fn gone_line(&mut self, requested: u64, compacted: u64) -> Bytes {
        self.done = true;
        self.shared.lock().counts.gone += 1;
        let status = ApiError::too_old(requested, compacted).to_status();
        Bytes::from(json!({ "type": "ERROR", "object": status }).to_string() + "\n")
    }

    fn end(&mut self) -> Option<Bytes> {
        self.done = true;
        None
    }

    /// Appends the events a change makes for this watch's filter.
    fn change(&self, out: &mut Vec<u8>, change: &Change) {
        let key = &change.key;
        let was = change
            .prev
            .as_ref()
            .is_some_and(|p| self.filter.matches(key, p));
        let is = change.kind != ChangeType::Deleted && self.filter.matches(key, &change.object);
        let kind = match (change.kind, was, is) {
            (ChangeType::Deleted, true, _) | (ChangeType::Modified, true, false) => {
                ChangeType::Deleted
            }
            (ChangeType::Added | ChangeType::Modified, false, true) => ChangeType::Added,
            (ChangeType::Modified, true, true) => ChangeType::Modified,
            _ => return,
        };
        self.event(out, kind.as_str(), &change.object);
    }

    fn event(&self, out: &mut Vec<u8>, kind: &str, object: &Stored) {
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"object\":");
        object.write_typed(&self.api_version, self.kind.kind, out);
        out.extend_from_slice(b"}\n");
    }

    fn bookmark_line(&self, initial_end: bool) -> Bytes {
        let mut metadata = json!({ "resourceVersion": self.cursor.to_string() });
        if initial_end {
            metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let object = json!({
            "kind": self.kind.kind,
            "apiVersion": self.api_version,
            "metadata": metadata,
        });
        Bytes::from(json!({ "type": "BOOKMARK", "object": object }).to_string() + "\n")
    }
}

/// The next bookmark tick; never without bookmarks.
async fn tick(bookmark: &mut Option<Interval>) {
    match bookmark {
        Some(every) => {
            every.tick().await;
        }
        None => std::future::pending().await,
    }
}
