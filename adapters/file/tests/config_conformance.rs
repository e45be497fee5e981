//! The conformance kit over the `--config-dir` source: the same suite the registries run, with
//! each fixture a DestinationRule in a file of its own.

// Helpers here are test code too (see clippy.toml): a panic is a failure with a backtrace.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tempfile::TempDir;
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec, DestinationRule, Subset};
use wayfinder_file::ConfigDir;
use wayfinder_registry::Source;
use wayfinder_registry::testkit::{self, Fixture, Harness};

/// Writes a file the way editors save: a hidden temporary file renamed over the target.
fn save(path: &Path, text: &str) {
    let name = path.file_name().unwrap().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// The fixture's annotations: its port and endpoints, which a DestinationRule does not hold,
/// so that every change the suite makes to a fixture changes its object.
fn annotations(f: &Fixture) -> BTreeMap<String, String> {
    let endpoints: Vec<String> = f.endpoints.iter().map(ToString::to_string).collect();
    BTreeMap::from([
        ("fixture/port".to_string(), f.port.to_string()),
        ("fixture/endpoints".to_string(), endpoints.join(",")),
    ])
}

/// A fixture as a DestinationRule for its service, with a subset for its version.
fn rule_yaml(f: &Fixture) -> String {
    let annotations: String = annotations(f)
        .iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {name}\n  namespace: default\n  annotations:\n{annotations}spec:\n  host: {name}.example.com\n  subsets:\n  - name: {version}\n    labels: {{version: {version}}}\n",
        name = f.name,
        version = f.version,
    )
}

/// A temporary directory with one DestinationRule file per fixture.
#[derive(Default)]
struct ConfigHarness {
    dir: Option<TempDir>,
    fixtures: BTreeMap<String, Fixture>,
    corrupted: Option<String>,
}

impl ConfigHarness {
    fn path(&self, name: &str) -> PathBuf {
        self.dir
            .as_ref()
            .unwrap()
            .path()
            .join(format!("{name}.yaml"))
    }
}

impl Harness for ConfigHarness {
    type Item = Arc<ConfigObject>;

    /// Where an object was read is not part of it: the expected object has no origin.
    fn canonical(object: Arc<ConfigObject>) -> Arc<ConfigObject> {
        let mut object = ConfigObject::clone(&object);
        object.meta.origin = "".into();
        Arc::new(object)
    }

    async fn start(&mut self, initial: &[Fixture]) -> Box<dyn Source<Arc<ConfigObject>>> {
        self.dir = Some(tempfile::tempdir().unwrap());
        self.fixtures.clear();
        for f in initial {
            self.put(f).await;
        }
        let dir = self.dir.as_ref().unwrap().path().to_path_buf();
        Box::new(ConfigDir::new(vec![dir]).unwrap())
    }

    async fn put(&mut self, fixture: &Fixture) {
        save(&self.path(&fixture.name), &rule_yaml(fixture));
        self.fixtures.insert(fixture.name.clone(), fixture.clone());
    }

    async fn delete(&mut self, fixture: &Fixture) {
        fs::remove_file(self.path(&fixture.name)).unwrap();
        self.fixtures.remove(&fixture.name);
    }

    fn expected(&self, f: &Fixture) -> Arc<ConfigObject> {
        let subset = Subset {
            name: f.version.clone(),
            labels: BTreeMap::from([("version".to_string(), f.version.clone())]),
            traffic_policy: None,
        };
        Arc::new(ConfigObject {
            meta: ConfigMeta {
                name: f.name.as_str().into(),
                namespace: "default".into(),
                annotations: annotations(f),
                ..ConfigMeta::default()
            },
            spec: ConfigSpec::DestinationRule(Box::new(DestinationRule {
                host: format!("{}.example.com", f.name),
                subsets: vec![subset],
                ..DestinationRule::default()
            })),
        })
    }

    /// A file that does not parse in place of a fixture's: its object keeps its last good
    /// version.
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
            Some(f) => save(&self.path(&name), &rule_yaml(f)),
            None => fs::remove_file(self.path(&name)).unwrap(),
        }
    }
}

#[tokio::test]
async fn conforms_to_the_source_contract() {
    testkit::run_all(&mut ConfigHarness::default()).await;
}
