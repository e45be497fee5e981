//! The registry contract (`wayfinder_registry::testkit`) against the fake Eureka server.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::time::Duration;

use wayfinder_eureka::Config;
use wayfinder_eureka::fake::{FakeEureka, Fault, Instance};
use wayfinder_registry::testkit::{self, Fixture, Harness};
use wayfinder_registry::{
    Endpoint, Protocol, Registration, RegistryId, Resolution, Service, Source,
};

/// Each fixture is an application named after it, one instance per endpoint.
#[derive(Default)]
struct EurekaHarness {
    fake: Option<FakeEureka>,
    /// Instance ids registered per fixture name.
    registered: HashMap<String, Vec<String>>,
}

impl EurekaHarness {
    fn fake(&self) -> &FakeEureka {
        self.fake.as_ref().expect("started")
    }
}

impl Harness for EurekaHarness {
    type Item = Registration;

    fn canonical(registration: Registration) -> Registration {
        registration.normalized()
    }

    async fn start(&mut self, initial: &[Fixture]) -> Box<dyn Source<Registration>> {
        self.fake = Some(FakeEureka::start().await.unwrap());
        self.registered.clear();
        for fixture in initial {
            self.put(fixture).await;
        }
        let config = Config {
            url: self.fake().url(),
            interval: Duration::from_millis(50),
            timeout: Duration::from_secs(2),
            ..Config::default()
        };
        Box::new(config.build(RegistryId::new("Eureka")).unwrap())
    }

    async fn put(&mut self, f: &Fixture) {
        let mut ids = Vec::new();
        for ip in &f.endpoints {
            let id = format!("{ip}:{}:{}", f.name, f.port);
            let instance =
                Instance::new(&f.name, &id, &ip.to_string(), f.port).meta("version", &f.version);
            self.fake().register(instance);
            ids.push(id);
        }
        for old in self.registered.remove(&f.name).unwrap_or_default() {
            if !ids.contains(&old) {
                self.fake().deregister(&f.name, &old);
            }
        }
        self.registered.insert(f.name.clone(), ids);
    }

    async fn delete(&mut self, f: &Fixture) {
        for id in self.registered.remove(&f.name).unwrap_or_default() {
            self.fake().deregister(&f.name, &id);
        }
    }

    fn expected(&self, f: &Fixture) -> Registration {
        let mut svc = Service::new(format!("{}.eureka", f.name), "default").with_port(
            "http",
            f.port,
            Protocol::Http,
        );
        svc.resolution = Resolution::ClientSideLb;
        let endpoints = f
            .endpoints
            .iter()
            .map(|ip| {
                Endpoint::new(ip.to_string())
                    .with_port("http", f.port)
                    .with_label("version", &f.version)
            })
            .collect();
        Registration::new(svc, endpoints)
    }

    async fn corrupt(&mut self) -> bool {
        self.fake()
            .set_fault(Fault::Malformed("{\"applications\": {".into()));
        true
    }

    async fn repair(&mut self) {
        self.fake().set_fault(Fault::None);
    }
}

#[tokio::test]
async fn conforms_to_the_registry_contract() {
    testkit::run_all(&mut EurekaHarness::default()).await;
}
