//! The adapter conformance suite, run against the in-process API server.

use std::collections::BTreeMap;

use wayfinder_kubernetes::fake::{FakeApiServer, Fault};
use wayfinder_kubernetes::fixtures::{SliceEndpoint, endpoint_slice, pod, service};
use wayfinder_kubernetes::{CLUSTER_LABEL, Config};
use wayfinder_registry::testkit::{Fixture, Harness, run_all};
use wayfinder_registry::{Endpoint, Port, Protocol, Registration, Service, Source};

use crate::support::registry;

#[derive(Default)]
struct Kube {
    fake: Option<FakeApiServer>,
    /// Pods created per fixture, to delete the ones a put drops.
    pods: BTreeMap<String, Vec<String>>,
}

/// A cluster IP per service name, stable across puts.
fn vip(name: &str) -> String {
    let n = name
        .bytes()
        .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)))
        % 250
        + 1;
    format!("10.96.0.{n}")
}

impl Kube {
    fn fake(&self) -> &FakeApiServer {
        self.fake.as_ref().unwrap()
    }
}

impl Harness for Kube {
    type Item = Registration;

    fn canonical(registration: Registration) -> Registration {
        registration.normalized()
    }

    async fn start(&mut self, initial: &[Fixture]) -> Box<dyn Source<Registration>> {
        self.fake = Some(FakeApiServer::start().await);
        self.pods.clear();
        for f in initial {
            self.put(f).await;
        }
        Box::new(registry(self.fake(), Config::default()))
    }

    async fn put(&mut self, f: &Fixture) {
        let fake = self.fake();
        let mut pods = Vec::new();
        let mut endpoints = Vec::new();
        for (i, ip) in f.endpoints.iter().enumerate() {
            let name = format!("{}-{i}", f.name);
            let ip = ip.to_string();
            fake.apply(pod(
                "default",
                &name,
                &ip,
                "",
                &[("version", &f.version)],
                "default",
            ));
            endpoints.push(SliceEndpoint {
                node: None,
                ..SliceEndpoint::new(&ip, &name, "")
            });
            pods.push(name);
        }
        let ports = [("tcp", f.port, f.port)];
        fake.apply(service("default", &f.name, &vip(&f.name), &ports));
        let slice = endpoint_slice("default", &f.name, &f.name, &[("tcp", f.port)], &endpoints);
        fake.apply(slice);
        for old in self
            .pods
            .insert(f.name.clone(), pods.clone())
            .unwrap_or_default()
        {
            if !pods.contains(&old) {
                self.fake().delete("v1", "Pod", Some("default"), &old);
            }
        }
    }

    async fn delete(&mut self, f: &Fixture) {
        let fake = self.fake();
        fake.delete("v1", "Service", Some("default"), &f.name);
        fake.delete(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            Some("default"),
            &f.name,
        );
        for pod in self.pods.remove(&f.name).unwrap_or_default() {
            self.fake().delete("v1", "Pod", Some("default"), &pod);
        }
    }

    fn expected(&self, f: &Fixture) -> Registration {
        let mut service = Service::new(format!("{}.default.svc.cluster.local", f.name), "default");
        service.ports = vec![Port {
            target_port: Some(f.port),
            ..Port::new("tcp", f.port, Protocol::Tcp)
        }];
        service.addresses = vec![vip(&f.name).parse().unwrap()];
        service.labels.insert("app".into(), f.name.as_str().into());
        if !f.endpoints.is_empty() {
            service.service_accounts = vec!["spiffe://cluster.local/ns/default/sa/default".into()];
        }
        let endpoints = f.endpoints.iter().map(|ip| {
            let mut e = Endpoint::new(ip.to_string())
                .with_port("tcp", f.port)
                .with_label("version", &f.version)
                .with_label(CLUSTER_LABEL, "east");
            e.cluster_id = "east".into();
            e.service_account = Some("default".into());
            e
        });
        Registration::new(service, endpoints.collect()).normalized()
    }

    async fn corrupt(&mut self) -> bool {
        self.fake().set_fault(Fault::Status(500));
        self.fake().cut_watches();
        true
    }

    async fn repair(&mut self) {
        self.fake().set_fault(Fault::None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_registry_conforms() {
    run_all(&mut Kube::default()).await;
}
