//! Changes as sources deliver them: the forwarder's `Settled`, and one change of several
//! items (registry or configuration) is one snapshot.

use super::*;

/// What the forwarder sent, in words.
fn describe(input: Input) -> String {
    match input {
        Input::Item(i, Received::Registry(Ok(_))) => format!("item {i}"),
        Input::Item(i, Received::Registry(Err(_))) => format!("error {i}"),
        Input::Item(_, Received::Config(_)) => "config".into(),
        Input::Settled(origin) => format!("settled {origin:?}"),
        Input::Ended(origin, _) => format!("ended {origin:?}"),
    }
}

/// The next `n` inputs, described. Fails (at once, in paused time) if they do not come.
async fn received(rx: &mut mpsc::Receiver<Input>, n: usize) -> Vec<String> {
    let mut seen = Vec::new();
    for _ in 0..n {
        let next = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
        let input = next.unwrap_or_else(|_| panic!("{} came, then nothing: {seen:?}", seen.len()));
        seen.push(describe(input.expect("the channel is open")));
    }
    seen
}

/// Forwards `stream` as registry 3's into a channel the test reads.
fn forward_registry<S>(stream: S) -> mpsc::Receiver<Input>
where
    S: Stream<Item = Result<Event, RegistryError>> + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(forward::<Registration, _>(3, move || stream, tx));
    rx
}

#[tokio::test(start_paused = true)]
async fn the_forwarder_says_settled_when_its_source_has_nothing_more_ready() {
    let (source, tx) = batches::<Event>("A");
    let mut rx = forward_registry(Box::pin(source.items()));
    tx.unbounded_send(vec![
        Event::Reset(vec![reg("a", &[])]),
        Event::Upsert(reg("b", &[])),
        Event::Remove(key("a")),
    ])
    .unwrap();
    assert_eq!(
        received(&mut rx, 4).await,
        ["item 3", "item 3", "item 3", "settled Registry(3)"],
        "items ready together are one change"
    );
    tx.unbounded_send(vec![Event::Remove(key("b"))]).unwrap();
    assert_eq!(
        received(&mut rx, 2).await,
        ["item 3", "settled Registry(3)"]
    );
    drop(tx);
    assert_eq!(received(&mut rx, 1).await, ["ended Registry(3)"]);
    assert!(rx.recv().await.is_none(), "nothing after the end");
}

#[tokio::test(start_paused = true)]
async fn a_change_longer_than_the_task_budget_is_still_one_change() {
    // Tokio resources report "not ready" to a task that used up its cooperative budget (128
    // operations per poll); the forwarder must not take that for the end of a change.
    let (tx, mut items) = mpsc::unbounded_channel();
    for i in 0..500 {
        tx.send(Ok(Event::Upsert(reg(&format!("s{i}"), &[]))))
            .unwrap();
    }
    let stream = futures::stream::poll_fn(move |cx| items.poll_recv(cx));
    let mut rx = forward_registry(stream);
    let seen = received(&mut rx, 501).await;
    assert!(seen[..500].iter().all(|s| s == "item 3"), "{seen:?}");
    assert_eq!(seen[500], "settled Registry(3)");
    drop(tx);
    assert_eq!(received(&mut rx, 1).await, ["ended Registry(3)"]);
}

#[tokio::test(start_paused = true)]
async fn a_registry_change_of_several_items_is_one_snapshot() {
    let (registry, tx) = batches::<Event>("A");
    tx.unbounded_send(vec![Event::Reset(vec![reg("s0", &["10.0.0.1"])])])
        .unwrap();
    let (handle, _stop) =
        start_with_settings(vec![Box::new(registry)], settings_with(true), |_| {});
    handle.ready().await;
    // Each round replaces one service by another in one change of two items. A leading edge
    // that did not wait for the source to settle would publish the upsert alone, in about
    // half of the rounds.
    for round in 1..=20u64 {
        let t0 = Instant::now();
        let (old, new) = (format!("s{}", round - 1), format!("s{round}"));
        tx.unbounded_send(vec![
            Event::Upsert(reg(&new, &["10.0.0.1"])),
            Event::Remove(key(&old)),
        ])
        .unwrap();
        let snap = next_version(&handle, round).await;
        assert_eq!(t0.elapsed(), Duration::ZERO, "round {round}: at once");
        assert_eq!(snap.version, round + 1, "round {round}: one snapshot");
        let names: Vec<&str> = snap.services.keys().map(|k| &*k.hostname).collect();
        let want = format!("{new}.default.svc.cluster.local");
        assert_eq!(names, [want.as_str()], "round {round}: both items");
        // Quiet again (and no second snapshot for the same change).
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(handle.snapshot().version, round + 1, "round {round}");
    }
}

fn rule(name: &str, host: &str) -> Arc<ConfigObject> {
    Arc::new(ConfigObject {
        meta: ConfigMeta {
            name: name.into(),
            namespace: "default".into(),
            origin: format!("test: {name}").into(),
            ..ConfigMeta::default()
        },
        spec: ConfigSpec::DestinationRule(Box::new(DestinationRule {
            host: host.into(),
            ..DestinationRule::default()
        })),
    })
}

/// Each DestinationRule's name and host, in name order.
fn rules_of(snapshot: &Snapshot) -> Vec<(String, String)> {
    let rules = snapshot.config.destination_rules();
    rules
        .map(|(meta, rule)| (meta.name.to_string(), rule.host.clone()))
        .collect()
}

fn rules(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(name, host)| (name.to_string(), host.to_string()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_config_edit_of_several_items_is_one_snapshot() {
    let (a, _) = memory("A", &[reg("a", &["10.0.0.1"])]).await;
    let (source, tx) = batches::<ConfigEvent>("config-dir");
    let all = ["r1", "r2", "r3"].map(|name| rule(name, "a"));
    tx.unbounded_send(vec![ConfigEvent::Reset(all.to_vec())])
        .unwrap();
    let (handle, _stop) = start_with_settings(vec![a], settings_with(true), |agg| {
        agg.add_config_source(Box::new(source));
    });
    handle.ready().await;
    assert_eq!(rules_of(&handle.snapshot()).len(), 3);
    let remove = |name: &str| ConfigEvent::Remove(rule(name, "a").key());
    // Each round saves a file that held three rules with one of them changed and the others
    // gone (an Upsert and two Removes, ready together), then restores it. A leading edge that
    // did not wait for the source to settle would publish the Upsert alone, in about half of
    // the rounds.
    for round in 1..=10u64 {
        let host = format!("host-{round}");
        let t0 = Instant::now();
        tx.unbounded_send(vec![
            ConfigEvent::Upsert(rule("r1", &host)),
            remove("r2"),
            remove("r3"),
        ])
        .unwrap();
        let snap = next_version(&handle, 2 * round - 1).await;
        assert_eq!(t0.elapsed(), Duration::ZERO, "round {round}: at once");
        assert_eq!(snap.version, 2 * round, "round {round}: one snapshot");
        assert_eq!(rules_of(&snap), rules(&[("r1", &host)]), "round {round}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(handle.snapshot().version, 2 * round, "round {round}");

        let restore = all[1..].iter().cloned().map(ConfigEvent::Upsert).collect();
        tx.unbounded_send(restore).unwrap();
        let snap = next_version(&handle, 2 * round).await;
        let want = rules(&[("r1", &host), ("r2", "a"), ("r3", "a")]);
        assert_eq!(rules_of(&snap), want, "round {round}: both upserts");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(handle.snapshot().version, 2 * round + 1, "round {round}");
    }
}
