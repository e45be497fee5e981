//! The file registry end to end: the conformance kit over a temporary directory, and the
//! behaviour of its stream when files are edited, replaced, broken, deleted or lose their
//! directory. Every wait has a deadline; nothing sleeps to synchronize.

// Helpers here are test code too (see clippy.toml): a panic is a failure with a backtrace.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use tempfile::TempDir;
use wayfinder_file::{BuildError, Config};
use wayfinder_registry::testkit::{self, Fixture, Harness};
use wayfinder_registry::{
    CancellationToken, Endpoint, Event, EventStream, Protocol, Registration, RegistryError,
    RegistryId, Resolution, Service, ServiceKey, Source,
};

const DEADLINE: Duration = Duration::from_secs(10);

/// Writes a file the way editors save: a hidden temporary file renamed over the target.
fn save(path: &Path, text: &str) {
    let name = path.file_name().unwrap().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn fixture_yaml(f: &Fixture) -> String {
    let endpoints: String = f
        .endpoints
        .iter()
        .map(|ip| {
            format!(
                "  - address: {ip}\n    labels: {{version: {}}}\n",
                f.version
            )
        })
        .collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\nspec:\n  hosts: [{name}.example.com]\n  location: MESH_INTERNAL\n  ports:\n  - number: {port}\n    name: http\n  resolution: STATIC\n  endpoints:\n{endpoints}",
        name = f.name,
        port = f.port,
    )
}

/// A temporary directory with one ServiceEntry file per fixture.
#[derive(Default)]
struct FileHarness {
    dir: Option<TempDir>,
    fixtures: BTreeMap<String, Fixture>,
    corrupted: Option<String>,
}

impl FileHarness {
    fn path(&self, name: &str) -> PathBuf {
        self.dir
            .as_ref()
            .unwrap()
            .path()
            .join(format!("{name}.yaml"))
    }
}

impl Harness for FileHarness {
    type Item = Registration;

    fn canonical(registration: Registration) -> Registration {
        registration.normalized()
    }

    async fn start(&mut self, initial: &[Fixture]) -> Box<dyn Source<Registration>> {
        self.dir = Some(tempfile::tempdir().unwrap());
        self.fixtures.clear();
        for f in initial {
            self.put(f).await;
        }
        let config = Config {
            paths: vec![self.dir.as_ref().unwrap().path().to_path_buf()],
            ..Config::default()
        };
        Box::new(config.build(RegistryId::new("File")).unwrap())
    }

    async fn put(&mut self, fixture: &Fixture) {
        save(&self.path(&fixture.name), &fixture_yaml(fixture));
        self.fixtures.insert(fixture.name.clone(), fixture.clone());
    }

    async fn delete(&mut self, fixture: &Fixture) {
        fs::remove_file(self.path(&fixture.name)).unwrap();
        self.fixtures.remove(&fixture.name);
    }

    fn expected(&self, f: &Fixture) -> Registration {
        let mut svc = Service::new(format!("{}.example.com", f.name), "default").with_port(
            "http",
            f.port,
            Protocol::Http,
        );
        svc.resolution = Resolution::ClientSideLb;
        let eps = f
            .endpoints
            .iter()
            .map(|ip| Endpoint::new(ip.to_string()).with_label("version", &f.version))
            .collect();
        Registration::new(svc, eps)
    }

    async fn corrupt(&mut self) -> bool {
        let name = self
            .fixtures
            .keys()
            .next()
            .cloned()
            .unwrap_or_else(|| "broken".into());
        save(
            &self.path(&name),
            "apiVersion: networking.istio.io/v1\nkind: [unclosed\n",
        );
        self.corrupted = Some(name);
        true
    }

    async fn repair(&mut self) {
        let Some(name) = self.corrupted.take() else {
            return;
        };
        match self.fixtures.get(&name) {
            Some(f) => save(&self.path(&name), &fixture_yaml(f)),
            None => fs::remove_file(self.path(&name)).unwrap(),
        }
    }
}

#[tokio::test]
async fn conforms_to_the_registry_contract() {
    testkit::run_all(&mut FileHarness::default()).await;
}

/// A registry watching `paths`, and its stream.
fn watch(paths: Vec<PathBuf>) -> (EventStream, CancellationToken) {
    let config = Config {
        paths,
        ..Config::default()
    };
    let registry = config.build(RegistryId::new("File")).unwrap();
    let shutdown = CancellationToken::new();
    (Box::new(registry).watch(shutdown.clone()), shutdown)
}

async fn next(stream: &mut EventStream) -> Result<Event, RegistryError> {
    match tokio::time::timeout(DEADLINE, stream.next()).await {
        Ok(Some(item)) => item,
        Ok(None) => panic!("the stream ended"),
        Err(_) => panic!("no item within {DEADLINE:?}"),
    }
}

async fn reset(stream: &mut EventStream) -> BTreeMap<ServiceKey, Registration> {
    match next(stream).await {
        Ok(Event::Reset(regs)) => regs.into_iter().map(|r| (r.key(), r)).collect(),
        other => panic!("expected a Reset, got {other:?}"),
    }
}

async fn upsert(stream: &mut EventStream) -> Registration {
    match next(stream).await {
        Ok(Event::Upsert(reg)) => reg,
        other => panic!("expected an Upsert, got {other:?}"),
    }
}

fn key(name: &str) -> ServiceKey {
    ServiceKey::new("default", format!("{name}.example.com"))
}

fn addresses(reg: &Registration) -> Vec<&str> {
    reg.endpoints.iter().map(|e| &*e.address).collect()
}

#[tokio::test]
async fn editing_one_of_two_files_sends_only_its_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Fixture::new("a", 1, 1), Fixture::new("b", 2, 1));
    save(&dir.path().join("a.yaml"), &fixture_yaml(&a));
    save(&dir.path().join("b.yaml"), &fixture_yaml(&b));
    let (mut stream, _shutdown) = watch(vec![dir.path().into()]);
    assert_eq!(reset(&mut stream).await.len(), 2);

    let mut a2 = a.clone();
    a2.endpoints = vec!["10.1.0.7".parse().unwrap()];
    save(&dir.path().join("a.yaml"), &fixture_yaml(&a2));
    let reg = upsert(&mut stream).await;
    assert_eq!(reg.key(), key("a"));
    assert_eq!(addresses(&reg), vec!["10.1.0.7"]);

    // Nothing came for `b`: the next item is the sentinel's.
    let sentinel = Fixture::new("sentinel", 3, 1);
    save(&dir.path().join("sentinel.yaml"), &fixture_yaml(&sentinel));
    assert_eq!(upsert(&mut stream).await.key(), key("sentinel"));

    // Deleting a file removes its services.
    fs::remove_file(dir.path().join("b.yaml")).unwrap();
    match next(&mut stream).await {
        Ok(Event::Remove(removed)) => assert_eq!(removed, key("b")),
        other => panic!("expected a Remove, got {other:?}"),
    }
}

#[tokio::test]
async fn a_file_of_many_entries_comes_and_goes_as_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut stream, _shutdown) = watch(vec![dir.path().into()]);
    assert!(reset(&mut stream).await.is_empty());

    let fixtures: Vec<Fixture> = (1..=3)
        .map(|i| Fixture::new(&format!("s{i}"), i, 1))
        .collect();
    let text: Vec<String> = fixtures.iter().map(fixture_yaml).collect();
    save(&dir.path().join("many.yaml"), &text.join("---\n"));
    match next(&mut stream).await {
        Ok(Event::Batch { removes, upserts }) => {
            assert!(removes.is_empty(), "{removes:?}");
            let keys: Vec<ServiceKey> = upserts.iter().map(Registration::key).collect();
            assert_eq!(keys, [key("s1"), key("s2"), key("s3")]);
        }
        other => panic!("expected one Batch, got {other:?}"),
    }

    fs::remove_file(dir.path().join("many.yaml")).unwrap();
    match next(&mut stream).await {
        Ok(Event::Batch { removes, upserts }) => {
            assert!(upserts.is_empty(), "{upserts:?}");
            assert_eq!(removes, [key("s1"), key("s2"), key("s3")]);
        }
        other => panic!("expected one Batch, got {other:?}"),
    }
}

#[tokio::test]
async fn a_rename_over_save_and_a_malformed_edit_keep_the_last_good_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("svc.yaml");
    let svc = Fixture::new("svc", 1, 1);
    save(&path, &fixture_yaml(&svc));
    let (mut stream, _shutdown) = watch(vec![path.clone()]);
    assert_eq!(reset(&mut stream).await.len(), 1);

    // A broken third document costs only its own object: the second one is added.
    let broken = format!(
        "{}---\n{}---\nkind: ServiceEntry\napiVersion: networking.istio.io/v1\nmetadata: {{name: x}}\nspec:\n  hosts: [x.example.com]\n  bogus: 1\n",
        fixture_yaml(&svc),
        fixture_yaml(&Fixture::new("other", 2, 1)),
    );
    save(&path, &broken);
    let other = upsert(&mut stream).await;
    assert_eq!(&*other.service.hostname, "other.example.com");
    match next(&mut stream).await {
        Err(RegistryError::Invalid { origin, detail }) => {
            let lines: Vec<&str> = broken.lines().collect();
            let first_line = lines
                .iter()
                .rposition(|l| *l == "kind: ServiceEntry")
                .unwrap()
                + 1;
            assert_eq!(
                origin,
                format!("{}: document 3 (line {first_line})", path.display())
            );
            assert!(
                detail.contains("ServiceEntry default/x: spec.bogus: unknown field"),
                "{detail}"
            );
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }

    // Back to the first contents: the second object goes, and nothing is refused any more.
    save(&path, &fixture_yaml(&svc));
    match next(&mut stream).await {
        Ok(Event::Remove(removed)) => assert_eq!(&*removed.hostname, "other.example.com"),
        other => panic!("expected a Remove, got {other:?}"),
    }

    // A document that does not say which object it holds keeps every object of its file; a
    // fix that changes something is picked up.
    save(&path, "not: [valid");
    assert!(next(&mut stream).await.is_err());
    let mut fixed = svc.clone();
    fixed.version = "v2".into();
    save(&path, &fixture_yaml(&fixed));
    let reg = upsert(&mut stream).await;
    assert_eq!(
        reg.endpoints[0].labels.get("version").map(|v| &**v),
        Some("v2")
    );
}

#[tokio::test]
async fn files_broken_at_start_are_reported_after_the_reset() {
    let dir = tempfile::tempdir().unwrap();
    save(
        &dir.path().join("good.json"),
        r#"{"apiVersion": "networking.istio.io/v1beta1", "kind": "ServiceEntry", "metadata": {"name": "good"}, "spec": {"hosts": ["good.example.com"]}}"#,
    );
    save(
        &dir.path().join("bad.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: bad}\nspec: {hosts: [bad.example.com], addresses: [10.0.0.0/8], resolution: DNS}\n",
    );
    let (mut stream, _shutdown) = watch(vec![dir.path().into()]);
    let state = reset(&mut stream).await;
    assert_eq!(state.keys().collect::<Vec<_>>(), vec![&key("good")]);
    match next(&mut stream).await {
        Err(RegistryError::Invalid { origin, detail }) => {
            assert!(origin.contains("bad.yaml: document 1 (line 1)"), "{origin}");
            assert!(
                detail.contains("CIDR addresses are allowed only for NONE/STATIC resolution types"),
                "{detail}"
            );
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_file_that_stays_broken_is_reported_again_after_other_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Fixture::new("a", 1, 1), Fixture::new("b", 2, 1));
    save(&dir.path().join("a.yaml"), "kind: [broken\n");
    save(&dir.path().join("b.yaml"), &fixture_yaml(&b));
    let (mut stream, _shutdown) = watch(vec![dir.path().into()]);
    assert_eq!(reset(&mut stream).await.len(), 1);
    let first = next(&mut stream).await.unwrap_err();
    assert!(first.origin().contains("a.yaml"), "{first}");

    // A change elsewhere would read as a recovery: the outstanding error follows it.
    let mut b2 = b.clone();
    b2.version = "v2".into();
    save(&dir.path().join("b.yaml"), &fixture_yaml(&b2));
    assert_eq!(upsert(&mut stream).await.key(), key("b"));
    assert_eq!(next(&mut stream).await, Err(first));

    // Fixed: its service arrives and nothing else follows it but the sentinel.
    save(&dir.path().join("a.yaml"), &fixture_yaml(&a));
    assert_eq!(upsert(&mut stream).await.key(), key("a"));
    save(
        &dir.path().join("sentinel.yaml"),
        &fixture_yaml(&Fixture::new("sentinel", 3, 1)),
    );
    assert_eq!(upsert(&mut stream).await.key(), key("sentinel"));
}

const SELECTOR: &str = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: vm, namespace: apps}\nspec:\n  hosts: [vm.example.com]\n  ports: [{number: 80, name: http}]\n  resolution: STATIC\n  workloadSelector: {labels: {app: vm}}\n";

#[tokio::test]
async fn workload_entries_in_other_files_join_their_services() {
    let dir = tempfile::tempdir().unwrap();
    save(&dir.path().join("se.yaml"), SELECTOR);
    let (mut stream, _shutdown) = watch(vec![dir.path().into()]);
    let state = reset(&mut stream).await;
    let vm = ServiceKey::new("apps", "vm.example.com");
    assert!(state[&vm].endpoints.is_empty());

    let workloads = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: networking.istio.io/v1\n  kind: WorkloadEntry\n  metadata: {name: vm-1, namespace: apps}\n  spec: {address: 10.0.0.1, labels: {app: vm}}\n- apiVersion: networking.istio.io/v1\n  kind: WorkloadEntry\n  metadata: {name: vm-2, namespace: apps}\n  spec: {address: 10.0.0.2, labels: {app: other}}\n";
    save(&dir.path().join("we.yaml"), workloads);
    let reg = upsert(&mut stream).await;
    assert_eq!((reg.key(), addresses(&reg)), (vm.clone(), vec!["10.0.0.1"]));

    fs::remove_file(dir.path().join("we.yaml")).unwrap();
    let reg = upsert(&mut stream).await;
    assert_eq!((reg.key(), addresses(&reg)), (vm, vec![]));
}

#[tokio::test]
async fn a_vanished_directory_keeps_its_services_until_it_is_back() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("config");
    fs::create_dir(&root).unwrap();
    let a = Fixture::new("a", 1, 1);
    save(&root.join("a.yaml"), &fixture_yaml(&a));
    let (mut stream, _shutdown) = watch(vec![root.clone()]);
    assert_eq!(reset(&mut stream).await.len(), 1);

    fs::remove_dir_all(&root).unwrap();
    match next(&mut stream).await {
        Err(RegistryError::Unavailable { origin, .. }) => {
            assert_eq!(origin, root.display().to_string());
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }

    // Back with the same contents: nothing changed, the registry recovered.
    let staging = parent.path().join("staging");
    fs::create_dir(&staging).unwrap();
    save(&staging.join("a.yaml"), &fixture_yaml(&a));
    fs::rename(&staging, &root).unwrap();
    assert_eq!(next(&mut stream).await, Ok(Event::Recovered));

    save(
        &root.join("b.yaml"),
        &fixture_yaml(&Fixture::new("b", 2, 1)),
    );
    assert_eq!(upsert(&mut stream).await.key(), key("b"));
}

#[tokio::test]
async fn the_stream_ends_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (mut stream, shutdown) = watch(vec![dir.path().into()]);
    assert!(reset(&mut stream).await.is_empty());
    shutdown.cancel();
    let end = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[test]
fn build_refuses_paths_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let err = Config {
        paths: vec![missing.clone()],
        ..Config::default()
    }
    .build(RegistryId::new("File"))
    .unwrap_err();
    assert!(matches!(err, BuildError::Inaccessible { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&*missing.to_string_lossy()),
        "{err}"
    );

    let err = Config {
        paths: vec!["/dev/null".into()],
        ..Config::default()
    }
    .build(RegistryId::new("File"))
    .unwrap_err();
    assert_eq!(err.to_string(), "/dev/null: neither a file nor a directory");

    let err = Config::default()
        .build(RegistryId::new("File"))
        .unwrap_err();
    assert!(matches!(err, BuildError::NoPaths));
}

#[test]
fn config_rejects_unknown_fields() {
    let config: Config = serde_saphyr::from_str("paths: [/etc/wayfinder]\n").unwrap();
    assert_eq!(config.paths, vec![PathBuf::from("/etc/wayfinder")]);
    assert_eq!(
        config.max_file_bytes,
        wayfinder_file::DEFAULT_MAX_FILE_BYTES
    );
    let config: Config = serde_saphyr::from_str("paths: [a]\nmax_file_bytes: 1024\n").unwrap();
    assert_eq!(config.max_file_bytes, 1024);
    let err = serde_saphyr::from_str::<Config>("paths: []\npath: [x]\n").unwrap_err();
    assert!(err.to_string().contains("path"), "{err}");
}
