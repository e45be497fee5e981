//! Watches: the kube watcher's whole cycle, replay, 410 and relist, bookmarks, timeouts,
//! cuts and selector transitions.

use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::mpsc;
use wayfinder_kubernetes::fake::{FakeApiServer, Fault};

use crate::{guard, raw, service, slice};

type Item = Result<Event<EndpointSlice>, watcher::Error>;

/// A kube watcher driven by a task of its own (it only watches while polled), its items
/// forwarded to a channel.
struct Events(mpsc::UnboundedReceiver<Item>);

impl Events {
    fn spawn(events: impl Stream<Item = Item> + Send + 'static) -> Events {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(item) = events.next().await {
                if tx.send(item).is_err() {
                    break;
                }
            }
        });
        Events(rx)
    }
}

fn slices(fake: &FakeApiServer) -> Events {
    let api: Api<EndpointSlice> = Api::all(fake.client());
    Events::spawn(watcher::watcher(api, watcher::Config::default()))
}

async fn next(events: &mut Events) -> Item {
    guard(events.0.recv()).await.expect("watcher ended")
}

fn name(s: &EndpointSlice) -> String {
    s.metadata.name.clone().unwrap()
}

/// Reads events up to and including the next `InitDone`; returns the names listed.
async fn until_init_done(events: &mut Events) -> Vec<String> {
    let mut names = Vec::new();
    loop {
        match next(events).await.unwrap() {
            Event::Init => names.clear(),
            Event::InitApply(s) => names.push(name(&s)),
            Event::InitDone => return names,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn kube_watcher_lists_then_follows_applies_and_deletes() {
    let fake = FakeApiServer::start().await;
    fake.apply(slice("a", "s1-x", "s1", 2));
    let mut events = slices(&fake);
    assert_eq!(until_init_done(&mut events).await, ["s1-x"]);
    guard(fake.until_watching("endpointslices", 1)).await;

    fake.apply(slice("b", "s2-x", "s2", 1));
    match next(&mut events).await.unwrap() {
        Event::Apply(s) => assert_eq!((name(&s), s.endpoints.len()), ("s2-x".to_owned(), 1)),
        other => panic!("unexpected {other:?}"),
    }
    assert!(fake.delete("discovery.k8s.io/v1", "EndpointSlice", Some("a"), "s1-x"));
    match next(&mut events).await.unwrap() {
        Event::Delete(s) => assert_eq!(name(&s), "s1-x"),
        other => panic!("unexpected {other:?}"),
    }
    let counts = fake.counts();
    assert_eq!(
        (
            counts.lists["endpointslices"],
            counts.watches["endpointslices"]
        ),
        (1, 1)
    );
}

#[tokio::test]
async fn watch_from_compacted_version_is_gone_and_the_watcher_relists() {
    let fake = FakeApiServer::start().await;
    let old = fake.apply(slice("a", "s1-x", "s1", 1));
    fake.apply(slice("a", "s2-x", "s2", 1));

    // Replay from a version still in history, then 410 once compacted.
    let path = format!(
        "/apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion={old}&timeoutSeconds=1"
    );
    let mut replay = raw::get(&fake.url(), &path).await;
    let event = guard(replay.next_json_line()).await.unwrap();
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("s2-x"))
    );
    assert_eq!(event["object"]["kind"], "EndpointSlice");
    fake.compact();
    let mut gone = raw::get(&fake.url(), &path).await;
    assert_eq!(gone.status, 200);
    let event = guard(gone.next_json_line()).await.unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(
        (
            event["object"]["code"].as_u64(),
            event["object"]["reason"].as_str()
        ),
        (Some(410), Some("Expired"))
    );
    assert!(
        event["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("too old resource version: {old} ("))
    );
    assert!(guard(gone.next_json_line()).await.is_none());

    // The kube watcher: held while it re-watches, changes meanwhile, compaction, then 410.
    let mut events = slices(&fake);
    assert_eq!(until_init_done(&mut events).await, ["s1-x", "s2-x"]);
    guard(fake.until_watching("endpointslices", 1)).await;
    fake.set_fault(Fault::Hang);
    fake.cut_watches();
    fake.apply(slice("b", "s3-x", "s3", 1));
    fake.delete("discovery.k8s.io/v1", "EndpointSlice", Some("a"), "s1-x");
    fake.compact();
    fake.set_fault(Fault::None);
    match next(&mut events).await {
        Err(watcher::Error::WatchError(status)) => assert_eq!(status.code, 410),
        other => panic!("expected the 410, got {other:?}"),
    }
    assert_eq!(until_init_done(&mut events).await, ["s2-x", "s3-x"]);
    assert!(fake.counts().gone >= 2);
}

#[tokio::test]
async fn bookmarks_and_timeout_end_a_raw_watch() {
    let fake = FakeApiServer::start().await;
    fake.set_bookmark_interval(Duration::from_millis(50));
    let rv = fake.apply(service("a", "s1", &[]));
    let started = Instant::now();
    let path = format!(
        "/api/v1/services?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=1"
    );
    let mut watch = raw::get(&fake.url(), &path).await;
    assert_eq!(watch.status, 200);
    assert_eq!(watch.header("content-type"), Some("application/json"));
    assert_eq!(watch.header("transfer-encoding"), Some("chunked"));
    let bookmark = guard(watch.next_json_line()).await.unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "Service");
    assert_eq!(bookmark["object"]["apiVersion"], "v1");
    assert_eq!(
        bookmark["object"]["metadata"]["resourceVersion"],
        rv.to_string()
    );
    let rv2 = fake.apply(service("a", "s2", &[]));
    let mut saw_added = false;
    while let Some(event) = guard(watch.next_json_line()).await {
        match event["type"].as_str() {
            Some("ADDED") => saw_added = true,
            Some("BOOKMARK") if saw_added => {
                assert_eq!(
                    event["object"]["metadata"]["resourceVersion"],
                    rv2.to_string()
                );
            }
            _ => {}
        }
    }
    assert!(saw_added);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    // The server-side cap ends watches sooner.
    fake.set_watch_timeout(Some(Duration::from_millis(100)));
    let started = Instant::now();
    let mut capped = raw::get(&fake.url(), "/api/v1/services?watch=true&timeoutSeconds=60").await;
    let mut added = 0;
    while let Some(event) = guard(capped.next_json_line()).await {
        assert_eq!(event["type"], "ADDED");
        added += 1;
    }
    assert_eq!(added, 2);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn cut_watches_end_streams_and_the_kube_watcher_resumes_silently() {
    let fake = FakeApiServer::start().await;
    let mut events = slices(&fake);
    assert!(until_init_done(&mut events).await.is_empty());
    guard(fake.until_watching("endpointslices", 1)).await;
    fake.cut_watches();
    guard(fake.until_watching("endpointslices", 1)).await;
    fake.apply(slice("a", "s1-x", "s1", 1));
    match next(&mut events).await.unwrap() {
        Event::Apply(s) => assert_eq!(name(&s), "s1-x"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(fake.counts().lists["endpointslices"], 1);
    assert!(fake.counts().watches["endpointslices"] >= 2);
}

#[tokio::test]
async fn selector_watch_sees_objects_leave_and_enter() {
    let fake = FakeApiServer::start().await;
    let rv = fake.apply(service("a", "s1", &[("app", "web")]));
    let path = format!(
        "/api/v1/namespaces/a/services?watch=true&labelSelector=app%3Dweb&resourceVersion={rv}"
    );
    let mut watch = raw::get(&fake.url(), &path).await;
    guard(fake.until_watching("services", 1)).await;
    fake.apply(service("a", "s1", &[("app", "db")]));
    fake.apply(service("b", "s9", &[("app", "web")]));
    fake.apply(service("a", "s1", &[("app", "web")]));
    let kinds = |e: &Value| {
        (
            e["type"].as_str().unwrap().to_owned(),
            e["object"]["metadata"]["name"].as_str().unwrap().to_owned(),
        )
    };
    let first = kinds(&guard(watch.next_json_line()).await.unwrap());
    let second = kinds(&guard(watch.next_json_line()).await.unwrap());
    assert_eq!(first, ("DELETED".to_owned(), "s1".to_owned()));
    assert_eq!(second, ("ADDED".to_owned(), "s1".to_owned()));
}

#[tokio::test]
async fn streaming_list_sends_initial_events_then_the_end_bookmark() {
    let fake = FakeApiServer::start().await;
    fake.apply(slice("a", "s1-x", "s1", 1));
    let api: Api<EndpointSlice> = Api::all(fake.client());
    let streaming = watcher::Config::default().streaming_lists();
    let mut events = Events::spawn(watcher::watcher(api, streaming));
    assert_eq!(until_init_done(&mut events).await, ["s1-x"]);
    assert_eq!(fake.counts().lists.get("endpointslices"), None);
}
