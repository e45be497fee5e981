//! The adapter conformance kit over the registry of ServiceEntry objects, each fixture one
//! entry with inline endpoints, applied to a fresh fake API server.

use serde_json::{Value, json};
use wayfinder_kubernetes::config_source::IstioConfig;
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_registry::testkit::{Fixture, Harness, run_all};
use wayfinder_registry::{
    Endpoint, Protocol, Registration, Registry, RegistryId, Resolution, Service,
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
    async fn start(&mut self, initial: &[Fixture]) -> Box<dyn Registry> {
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
