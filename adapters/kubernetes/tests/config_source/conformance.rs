//! The adapter conformance kit over both sources of Istio objects, each on a fresh fake API
//! server: the registry of ServiceEntry objects (each fixture one entry with inline
//! endpoints) and the configuration source (each fixture a DestinationRule).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec, DestinationRule, Subset};
use wayfinder_kubernetes::config_source::IstioConfig;
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_registry::testkit::{Fixture, Harness, run_all};
use wayfinder_registry::{
    Endpoint, Protocol, Registration, RegistryId, Resolution, Service, Source,
};

use crate::support::CLUSTER;

#[derive(Default)]
struct Entries {
    fake: Option<FakeApiServer>,
}

impl Entries {
    fn fake(&self) -> &FakeApiServer {
        self.fake.as_ref().unwrap()
    }
}

/// A fixture as a ServiceEntry, the way the File registry's test writes it in a file.
fn service_entry(f: &Fixture) -> Value {
    let endpoints: Vec<Value> = f
        .endpoints
        .iter()
        .map(|ip| json!({"address": ip.to_string(), "labels": {"version": f.version}}))
        .collect();
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "ServiceEntry",
        "metadata": {"name": f.name, "namespace": "default"},
        "spec": {
            "hosts": [format!("{}.example.com", f.name)],
            "location": "MESH_INTERNAL",
            "ports": [{"number": f.port, "name": "http"}],
            "resolution": "STATIC",
            "endpoints": endpoints,
        },
    })
}

impl Harness for Entries {
    type Item = Registration;

    fn canonical(registration: Registration) -> Registration {
        registration.normalized()
    }

    async fn start(&mut self, initial: &[Fixture]) -> Box<dyn Source<Registration>> {
        self.fake = Some(FakeApiServer::start().await);
        for f in initial {
            self.put(f).await;
        }
        let config = IstioConfig::new(self.fake().client(), None, CLUSTER);
        Box::new(config.entries(RegistryId::new("Kubernetes")))
    }

    async fn put(&mut self, f: &Fixture) {
        self.fake().apply(service_entry(f));
    }

    async fn delete(&mut self, f: &Fixture) {
        self.fake().delete(
            "networking.istio.io/v1",
            "ServiceEntry",
            Some("default"),
            &f.name,
        );
    }

    fn expected(&self, f: &Fixture) -> Registration {
        let mut service = Service::new(format!("{}.example.com", f.name), "default").with_port(
            "http",
            f.port,
            Protocol::Http,
        );
        service.resolution = Resolution::ClientSideLb;
        let endpoints = f
            .endpoints
            .iter()
            .map(|ip| Endpoint::new(ip.to_string()).with_label("version", &f.version))
            .collect();
        Registration::new(service, endpoints)
    }

    /// An entry the registry refuses (a port numbered 0).
    async fn corrupt(&mut self) -> bool {
        let mut broken = service_entry(&Fixture::new("broken", 9, 1));
        broken["spec"]["ports"][0]["number"] = json!(0);
        self.fake().apply(broken);
        true
    }

    async fn repair(&mut self) {
        self.fake().delete(
            "networking.istio.io/v1",
            "ServiceEntry",
            Some("default"),
            "broken",
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_entries_conform_to_the_registry_contract() {
    run_all(&mut Entries::default()).await;
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
fn destination_rule(f: &Fixture) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": f.name, "namespace": "default", "annotations": annotations(f)},
        "spec": {
            "host": format!("{}.example.com", f.name),
            "subsets": [{"name": f.version, "labels": {"version": f.version}}],
        },
    })
}

/// The configuration source over a fresh fake API server, each fixture a DestinationRule.
#[derive(Default)]
struct Rules {
    fake: Option<FakeApiServer>,
}

impl Rules {
    fn fake(&self) -> &FakeApiServer {
        self.fake.as_ref().unwrap()
    }
}

impl Harness for Rules {
    type Item = Arc<ConfigObject>;

    /// Where an object was read is not part of it: the expected object has no origin.
    fn canonical(object: Arc<ConfigObject>) -> Arc<ConfigObject> {
        let mut object = ConfigObject::clone(&object);
        object.meta.origin = "".into();
        Arc::new(object)
    }

    async fn start(&mut self, initial: &[Fixture]) -> Box<dyn Source<Arc<ConfigObject>>> {
        self.fake = Some(FakeApiServer::start().await);
        for f in initial {
            self.put(f).await;
        }
        Box::new(IstioConfig::new(self.fake().client(), None, CLUSTER).config_source())
    }

    async fn put(&mut self, f: &Fixture) {
        self.fake().apply(destination_rule(f));
    }

    async fn delete(&mut self, f: &Fixture) {
        self.fake().delete(
            "networking.istio.io/v1",
            "DestinationRule",
            Some("default"),
            &f.name,
        );
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

    /// A rule the source refuses (no host).
    async fn corrupt(&mut self) -> bool {
        let mut broken = destination_rule(&Fixture::new("broken", 9, 1));
        broken["spec"]["host"] = json!("");
        self.fake().apply(broken);
        true
    }

    async fn repair(&mut self) {
        self.fake().delete(
            "networking.istio.io/v1",
            "DestinationRule",
            Some("default"),
            "broken",
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destination_rules_conform_to_the_source_contract() {
    run_all(&mut Rules::default()).await;
}
