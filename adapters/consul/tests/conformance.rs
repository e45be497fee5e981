//! The adapter conformance suite, run against the in-process Consul.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use wayfinder_consul::fake::{FakeConsul, Fault, Instance};
use wayfinder_registry::testkit::{Fixture, Harness, run_all};
use wayfinder_registry::{
    Endpoint, Locality, Port, Protocol, Registration, RegistryId, Service, Source,
};

#[derive(Default)]
struct Consul {
    fake: Option<FakeConsul>,
    /// Instance ids registered per fixture name, to deregister the ones a put drops.
    ids: BTreeMap<String, Vec<String>>,
}

impl Consul {
    fn fake(&self) -> &FakeConsul {
        self.fake.as_ref().unwrap()
    }
}

impl Harness for Consul {
    type Item = Registration;

    fn canonical(registration: Registration) -> Registration {
        registration.normalized()
    }

    async fn start(&mut self, initial: &[Fixture]) -> Box<dyn Source<Registration>> {
        self.fake = Some(FakeConsul::start().await.unwrap());
        self.ids.clear();
        for f in initial {
            self.put(f).await;
        }
        let config = wayfinder_consul::Config {
            addr: self.fake().url(),
            // Short, so that a fault set while watches block is seen within the suite's deadline.
            wait: Duration::from_secs(1),
            ..Default::default()
        };
        Box::new(config.build(RegistryId::new("Consul")).unwrap())
    }

    async fn put(&mut self, f: &Fixture) {
        let mut ids = Vec::new();
        for (i, ip) in f.endpoints.iter().enumerate() {
            let id = format!("{}-{i}", f.name);
            self.fake().register(
                Instance::new(&f.name, &id, &ip.to_string(), f.port).meta("version", &f.version),
            );
            ids.push(id);
        }
        for old in self
            .ids
            .insert(f.name.clone(), ids.clone())
            .unwrap_or_default()
        {
            if !ids.contains(&old) {
                self.fake().deregister("dc1", &f.name, &old);
            }
        }
    }

    async fn delete(&mut self, f: &Fixture) {
        for id in self.ids.remove(&f.name).unwrap_or_default() {
            self.fake().deregister("dc1", &f.name, &id);
        }
    }

    fn expected(&self, f: &Fixture) -> Registration {
        let service = Service::new(format!("{}.service.consul", f.name), "default").with_port(
            "tcp",
            f.port,
            Protocol::Tcp,
        );
        assert_eq!(service.ports, [Port::new("tcp", f.port, Protocol::Tcp)]);
        let endpoints = f
            .endpoints
            .iter()
            .map(|ip| {
                let mut e = Endpoint::new(ip.to_string())
                    .with_port("tcp", f.port)
                    .with_label("version", &f.version);
                e.locality = Locality::parse("dc1");
                e.cluster_id = "dc1".into();
                e
            })
            .collect();
        Registration::new(service, endpoints)
    }

    async fn corrupt(&mut self) -> bool {
        self.fake()
            .set_fault(Fault::Malformed("[{\"Node\": {\"Address\": ".into()));
        true
    }

    async fn repair(&mut self) {
        self.fake().set_fault(Fault::None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_registry_conforms() {
    run_all(&mut Consul::default()).await;
}
