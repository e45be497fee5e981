//! The config source end to end: a temporary directory, a `ConfigDir` over it, and its stream
//! as files are added, edited, broken, fixed and deleted. Every wait has a deadline; nothing
//! sleeps to synchronize.

// Helpers here are test code too (see clippy.toml): a panic is a failure with a backtrace.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use wayfinder_config::{ConfigEvent, ConfigKey, ConfigObject, ConfigSpec, ConfigStream, Kind};
use wayfinder_file::{BuildError, ConfigDir};
use wayfinder_registry::{CancellationToken, RegistryError, Source};

const DEADLINE: Duration = Duration::from_secs(10);

/// Writes a file the way editors save: a hidden temporary file renamed over the target.
fn save(path: &Path, text: &str) {
    let name = path.file_name().unwrap().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn vs(name: &str, host: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\nspec:\n  hosts: [{host}]\n  http:\n  - route:\n    - destination: {{host: {host}}}\n      weight: 100\n"
    )
}

const DR: &str = "apiVersion: networking.istio.io/v1beta1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: shop}\nspec:\n  host: reviews\n  subsets: [{name: v1, labels: {version: v1}}]\n";

const GATEWAY: &str = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: ingress}\nspec:\n  selector: {istio: ingressgateway}\n  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]\n";

const SIDECAR: &str = "apiVersion: networking.istio.io/v1alpha3\nkind: Sidecar\nmetadata: {name: default, namespace: shop}\nspec:\n  egress: [{hosts: ['./*', 'istio-system/*']}]\n";

fn watch(dir: &Path) -> (ConfigStream, CancellationToken) {
    let source = ConfigDir::new(vec![dir.to_path_buf()]).unwrap();
    assert_eq!(source.id().as_str(), "config-dir");
    let shutdown = CancellationToken::new();
    (Box::new(source).watch(shutdown.clone()), shutdown)
}

async fn next(stream: &mut ConfigStream) -> Result<ConfigEvent, RegistryError> {
    match tokio::time::timeout(DEADLINE, stream.next()).await {
        Ok(Some(item)) => item,
        Ok(None) => panic!("the stream ended"),
        Err(_) => panic!("no item within {DEADLINE:?}"),
    }
}

async fn reset(stream: &mut ConfigStream) -> BTreeMap<ConfigKey, Arc<ConfigObject>> {
    match next(stream).await {
        Ok(ConfigEvent::Reset(objects)) => objects.into_iter().map(|o| (o.key(), o)).collect(),
        other => panic!("expected a Reset, got {other:?}"),
    }
}

async fn upsert(stream: &mut ConfigStream) -> Arc<ConfigObject> {
    match next(stream).await {
        Ok(ConfigEvent::Upsert(object)) => object,
        other => panic!("expected an Upsert, got {other:?}"),
    }
}

/// The next item, a refused list: the `(document, name)` of each entry.
async fn refused(stream: &mut ConfigStream) -> Vec<(Option<usize>, Option<String>)> {
    match next(stream).await {
        Ok(ConfigEvent::Refused(list)) => list
            .iter()
            .map(|r| (r.document, r.name.as_deref().map(str::to_string)))
            .collect(),
        other => panic!("expected a refused list, got {other:?}"),
    }
}

fn named(document: usize, name: &str) -> (Option<usize>, Option<String>) {
    (Some(document), Some(name.to_string()))
}

fn key(kind: Kind, namespace: &str, name: &str) -> ConfigKey {
    ConfigKey {
        kind,
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn vs_key(name: &str) -> ConfigKey {
    key(Kind::VirtualService, "default", name)
}

fn hosts(object: &ConfigObject) -> Vec<String> {
    match &object.spec {
        ConfigSpec::VirtualService(vs) => vs.hosts.clone(),
        other => panic!("not a VirtualService: {other:?}"),
    }
}

/// Adds a VirtualService in a file of its own and waits for it: proof that nothing else was
/// queued before it.
async fn sentinel(dir: &Path, stream: &mut ConfigStream) {
    save(&dir.join("sentinel.yaml"), &vs("sentinel", "sentinel"));
    assert_eq!(upsert(stream).await.key(), vs_key("sentinel"));
}

#[tokio::test]
async fn four_kinds_in_two_files_then_an_edit_and_a_deletion() {
    let dir = tempfile::tempdir().unwrap();
    save(
        &dir.path().join("routes.yaml"),
        &format!("{}---\n{DR}", vs("reviews", "reviews")),
    );
    save(
        &dir.path().join("edge.yaml"),
        &format!(
            "apiVersion: v1\nkind: List\nitems:\n- {}\n- {}",
            indent(GATEWAY),
            indent(SIDECAR)
        ),
    );
    let (mut stream, _shutdown) = watch(dir.path());
    let state = reset(&mut stream).await;
    let keys: Vec<&ConfigKey> = state.keys().collect();
    assert_eq!(
        keys,
        vec![
            &vs_key("reviews"),
            &key(Kind::DestinationRule, "shop", "reviews"),
            &key(Kind::Gateway, "default", "ingress"),
            &key(Kind::Sidecar, "shop", "default"),
        ]
    );
    let origin = &state[&key(Kind::DestinationRule, "shop", "reviews")]
        .meta
        .origin;
    assert!(
        origin.ends_with("routes.yaml: document 2 (line 12)"),
        "{origin}"
    );

    // One object edited: exactly one Upsert.
    save(
        &dir.path().join("routes.yaml"),
        &format!("{}---\n{DR}", vs("reviews", "ratings")),
    );
    let edited = upsert(&mut stream).await;
    assert_eq!(
        (edited.key(), hosts(&edited)),
        (vs_key("reviews"), vec!["ratings".into()])
    );
    sentinel(dir.path(), &mut stream).await;

    // A file deleted: its objects removed.
    fs::remove_file(dir.path().join("edge.yaml")).unwrap();
    let mut removed = Vec::new();
    for _ in 0..2 {
        match next(&mut stream).await {
            Ok(ConfigEvent::Remove(key)) => removed.push(key),
            other => panic!("expected a Remove, got {other:?}"),
        }
    }
    removed.sort();
    assert_eq!(
        removed,
        vec![
            key(Kind::Gateway, "default", "ingress"),
            key(Kind::Sidecar, "shop", "default")
        ]
    );
}

/// A top-level object as a list item: its lines indented under `- `.
fn indent(object: &str) -> String {
    object.trim_end().replace('\n', "\n  ") + "\n"
}

#[tokio::test]
async fn a_document_that_stops_parsing_costs_only_its_object_until_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vs.yaml");
    let good = format!("{}---\n{}", vs("one", "one"), vs("two", "two"));
    save(&path, &good);
    let (mut stream, _shutdown) = watch(dir.path());
    assert_eq!(reset(&mut stream).await.len(), 2);

    // A wrong type in the second document: `one` changes, `two` keeps its last good version,
    // and the refusal says where.
    let broken = format!(
        "{}---\n{}",
        vs("one", "uno"),
        vs("two", "two").replace("weight: 100", "weight: \"heavy\"")
    );
    save(&path, &broken);
    let one = upsert(&mut stream).await;
    assert_eq!(hosts(&one), vec!["uno"]);
    assert_eq!(refused(&mut stream).await, vec![named(2, "two")]);
    match next(&mut stream).await {
        Err(RegistryError::Malformed { origin, detail }) => {
            let line = broken.lines().position(|l| l.contains("heavy")).unwrap() + 1;
            assert_eq!(
                origin,
                format!("{}: document 2 (line {line})", path.display())
            );
            assert!(detail.contains("i32"), "{detail}");
        }
        other => panic!("expected a Malformed error, got {other:?}"),
    }

    // Fixed as `two` was: nothing changed but the refused list, now empty.
    save(&path, &broken.replace("\"heavy\"", "100"));
    assert_eq!(refused(&mut stream).await, vec![]);
    sentinel(dir.path(), &mut stream).await;
}

#[tokio::test]
async fn unknown_kinds_are_skipped_without_an_error_item() {
    let dir = tempfile::tempdir().unwrap();
    let (mut stream, _shutdown) = watch(dir.path());
    assert!(reset(&mut stream).await.is_empty());
    let others = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}\n---\napiVersion: networking.istio.io/v1\nkind: EnvoyFilter\nmetadata: {name: ef}\nspec: {}\n---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se}\nspec: {hosts: [se.example.com]}\n";
    save(&dir.path().join("others.yaml"), others);
    sentinel(dir.path(), &mut stream).await;
}

#[tokio::test]
async fn a_duplicate_key_is_an_error_and_the_first_object_wins() {
    let dir = tempfile::tempdir().unwrap();
    save(&dir.path().join("a.yaml"), &vs("dup", "first"));
    let (mut stream, _shutdown) = watch(dir.path());
    assert_eq!(reset(&mut stream).await.len(), 1);

    let second = dir.path().join("b.yaml");
    save(&second, &vs("dup", "second"));
    assert_eq!(refused(&mut stream).await, vec![named(1, "dup")]);
    match next(&mut stream).await {
        Err(RegistryError::Invalid { origin, detail }) => {
            assert_eq!(origin, format!("{}: document 1 (line 1)", second.display()));
            let first = dir.path().join("a.yaml");
            assert_eq!(
                detail,
                format!(
                    "duplicate VirtualService default/dup, first defined at {}: document 1 (line 1)",
                    first.display()
                )
            );
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }

    // The first goes away: the second takes over, and the source is healthy again.
    fs::remove_file(dir.path().join("a.yaml")).unwrap();
    let dup = upsert(&mut stream).await;
    assert_eq!(hosts(&dup), vec!["second"]);
    assert_eq!(refused(&mut stream).await, vec![]);
    sentinel(dir.path(), &mut stream).await;
}

#[tokio::test]
async fn files_broken_at_start_are_reported_after_the_reset() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = r#"{"apiVersion": "networking.istio.io/v1", "kind": "Gateway", "metadata": {"name": "gw"},
 "spec": {"servers": [{"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": ["*"]}]}}"#;
    save(&dir.path().join("good.json"), gateway);
    save(&dir.path().join("bad.yaml"), "kind: [unclosed\n");
    let (mut stream, _shutdown) = watch(dir.path());
    assert_eq!(reset(&mut stream).await.len(), 1);
    assert_eq!(refused(&mut stream).await, vec![(Some(1), None)]);
    let err = next(&mut stream).await.unwrap_err();
    assert!(err.origin().contains("bad.yaml: document 1"), "{err}");
}

#[tokio::test]
async fn an_object_the_validator_rejects_keeps_its_last_good_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vs.yaml");
    save(
        &path,
        &format!("{}---\n{}", vs("one", "one"), vs("two", "two")),
    );
    let (mut stream, _shutdown) = watch(dir.path());
    assert_eq!(reset(&mut stream).await.len(), 2);

    // `one` changes and `two` gets a weight out of range: `one` is sent, `two` is reported
    // with its file, document and field, and stays as it was.
    let broken = format!(
        "{}---\n{}",
        vs("one", "uno"),
        vs("two", "dos").replace("weight: 100", "weight: 250")
    );
    save(&path, &broken);
    let one = upsert(&mut stream).await;
    assert_eq!(
        (one.key(), hosts(&one)),
        (vs_key("one"), vec!["uno".into()])
    );
    assert_eq!(refused(&mut stream).await, vec![named(2, "two")]);
    match next(&mut stream).await {
        Err(RegistryError::Invalid { origin, detail }) => {
            assert_eq!(origin, format!("{}: document 2 (line 12)", path.display()));
            assert!(
                detail.starts_with(
                    "VirtualService default/two: spec.http[0].route[0].weight: weight 250"
                ),
                "{detail}"
            );
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }

    // Fixed: the fixed version is sent, and nothing after it but the sentinel.
    save(&path, &broken.replace("weight: 250", "weight: 100"));
    let two = upsert(&mut stream).await;
    assert_eq!(
        (two.key(), hosts(&two)),
        (vs_key("two"), vec!["dos".into()])
    );
    assert_eq!(refused(&mut stream).await, vec![]);
    sentinel(dir.path(), &mut stream).await;

    // Broken again and then deleted from the file: removed, and healthy again.
    save(&path, &broken);
    assert_eq!(refused(&mut stream).await, vec![named(2, "two")]);
    assert!(next(&mut stream).await.is_err());
    save(&path, &vs("one", "uno"));
    assert_eq!(
        next(&mut stream).await,
        Ok(ConfigEvent::Remove(vs_key("two")))
    );
    assert_eq!(refused(&mut stream).await, vec![]);
    save(
        &path,
        &vs("one", "uno").replace("weight: 100", "weight: 50"),
    );
    // A warning (a lone destination's weight has no effect) does not reject the object.
    let warned = upsert(&mut stream).await;
    assert_eq!(warned.key(), vs_key("one"));
}

#[tokio::test]
async fn a_peer_authentication_is_read_and_one_with_ports_but_no_selector_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mtls.yaml");
    let good = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\n\
                metadata: {name: finance, namespace: foo}\nspec:\n  \
                selector: {matchLabels: {app: finance}}\n  mtls: {mode: STRICT}\n  \
                portLevelMtls:\n    8080: {mode: DISABLE}\n";
    let bad = "apiVersion: security.istio.io/v1beta1\nkind: PeerAuthentication\n\
               metadata: {name: default, namespace: foo}\nspec:\n  \
               portLevelMtls: {8080: {mode: DISABLE}}\n";
    save(&path, &format!("{good}---\n{bad}"));
    let (mut stream, _shutdown) = watch(dir.path());
    let objects = reset(&mut stream).await;
    let finance = &objects[&key(Kind::PeerAuthentication, "foo", "finance")];
    assert!(
        matches!(&finance.spec, ConfigSpec::PeerAuthentication(pa) if pa.port_level_mtls.len() == 1),
        "{finance:?}"
    );
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert_eq!(refused(&mut stream).await, vec![named(2, "default")]);
    match next(&mut stream).await {
        Err(RegistryError::Invalid { origin, detail }) => {
            assert_eq!(origin, format!("{}: document 2 (line 10)", path.display()));
            assert!(
                detail.starts_with(
                    "PeerAuthentication foo/default: spec.portLevelMtls: requires a selector"
                ),
                "{detail}"
            );
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }
}

#[tokio::test]
async fn the_stream_ends_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (mut stream, shutdown) = watch(dir.path());
    assert!(reset(&mut stream).await.is_empty());
    shutdown.cancel();
    let end = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[test]
fn new_refuses_paths_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let err = ConfigDir::new(vec![dir.path().join("missing")]).unwrap_err();
    assert!(matches!(err, BuildError::Inaccessible { .. }), "{err:?}");
    let err = ConfigDir::new(Vec::new()).unwrap_err();
    assert!(matches!(err, BuildError::NoPaths), "{err:?}");
}
