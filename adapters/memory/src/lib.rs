//! An in-memory registry: services and endpoints that a program sets through a handle.
//!
//! Use it to embed wayfinder in a program that knows its services itself, as the fake registry
//! in tests, and (through [`demo::bookinfo`]) as the built-in demo mesh the server runs with
//! no flags. Create one with [`MemoryRegistry::new`], keep the [`MemoryHandle`], give the
//! registry to the server, and change services through the handle; every change becomes an
//! event in the registry's stream.
//!
//! It depends on `wayfinder-registry` (the contract) alone among wayfinder's crates, and on
//! tokio and futures for the stream.

pub mod demo;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{Mutex, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use wayfinder_registry::{
    CancellationToken, Endpoint, Event, EventStream, Registration, RegistryError, RegistryId,
    Service, ServiceKey, Source,
};

/// How many events may wait for the consumer before a handle call waits in turn.
const QUEUE: usize = 1024;

/// A registry whose contents live in memory and change through a [`MemoryHandle`].
pub struct MemoryRegistry {
    id: RegistryId,
    handle: MemoryHandle,
}

/// Changes a [`MemoryRegistry`]. Cheap to clone; every clone changes the same registry.
///
/// Calls take effect in the order they are made and each one becomes one event (or none, when
/// it changes nothing). Calls wait only when the consumer is more than a thousand events behind.
#[derive(Clone, Default)]
pub struct MemoryHandle {
    inner: Arc<Mutex<Inner>>,
}

/// A handle call named a service the registry does not hold.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("no service {0} in the memory registry")]
pub struct UnknownService(pub ServiceKey);

#[derive(Default)]
struct Inner {
    services: BTreeMap<ServiceKey, Registration>,
    subscriber: Option<mpsc::Sender<Result<Event, RegistryError>>>,
}

impl MemoryRegistry {
    /// An empty registry named `id`, and the handle that changes it.
    pub fn new(id: impl Into<Arc<str>>) -> (Self, MemoryHandle) {
        let handle = MemoryHandle::default();
        (
            Self {
                id: RegistryId::new(id),
                handle: handle.clone(),
            },
            handle,
        )
    }
}

impl Source<Registration> for MemoryRegistry {
    fn id(&self) -> &RegistryId {
        &self.id
    }

    fn watch(self: Box<Self>, shutdown: CancellationToken) -> EventStream {
        let (tx, rx) = mpsc::channel(QUEUE);
        let inner = self.handle.inner.clone();
        // The Reset and the subscription are set up under one lock, so no change made through
        // the handle can fall between them.
        let start = async move {
            let mut inner = inner.lock().await;
            let all = inner.services.values().cloned().collect();
            // The channel is new and empty, so this cannot fail for lack of room.
            let _ = tx.try_send(Ok(Event::Reset(all)));
            inner.subscriber = Some(tx);
        };
        // The stream keeps the registry's contents alive, so it lasts until shutdown even when
        // every handle has been dropped (the contract: streams end only when asked to).
        let keep = self.handle.inner.clone();
        let events = ReceiverStream::new(rx)
            .map(move |item| {
                let _ = &keep;
                item
            })
            .take_until(shutdown.cancelled_owned());
        futures::stream::once(start)
            .filter_map(|()| async { None::<Result<Event, RegistryError>> })
            .chain(events)
            .boxed()
    }
}

impl MemoryHandle {
    /// Adds or replaces a service together with all its endpoints.
    pub async fn upsert(&self, registration: Registration) {
        let mut inner = self.inner.lock().await;
        let registration = registration.normalized();
        if inner.services.get(&registration.key()) == Some(&registration) {
            return;
        }
        inner
            .services
            .insert(registration.key(), registration.clone());
        inner.send(Ok(Event::Upsert(registration))).await;
    }

    /// Replaces everything the registry holds in one step: the consumer sees one `Reset`, so
    /// several services change in the same snapshot.
    pub async fn replace_all(&self, registrations: Vec<Registration>) {
        let mut inner = self.inner.lock().await;
        inner.services = registrations
            .into_iter()
            .map(|r| (r.key(), r.normalized()))
            .collect();
        let all = inner.services.values().cloned().collect();
        inner.send(Ok(Event::Reset(all))).await;
    }

    /// Adds or replaces a service definition, keeping the endpoints it already has.
    pub async fn upsert_service(&self, service: Service) {
        let endpoints = {
            let inner = self.inner.lock().await;
            inner
                .services
                .get(&service.key())
                .map(|r| r.endpoints.clone())
        };
        let endpoints = endpoints.unwrap_or_else(|| Arc::from(Vec::new()));
        self.upsert(Registration {
            service: Arc::new(service),
            endpoints,
        })
        .await;
    }

    /// Removes a service and its endpoints; removing an unknown service does nothing.
    pub async fn remove(&self, key: &ServiceKey) {
        let mut inner = self.inner.lock().await;
        if inner.services.remove(key).is_some() {
            inner.send(Ok(Event::Remove(key.clone()))).await;
        }
    }

    /// Replaces all endpoints of a service.
    pub async fn set_endpoints(
        &self,
        key: &ServiceKey,
        endpoints: Vec<Endpoint>,
    ) -> Result<(), UnknownService> {
        self.edit_endpoints(key, |eps| *eps = endpoints).await
    }

    /// Adds an endpoint to a service, replacing one with the same address.
    pub async fn add_endpoint(
        &self,
        key: &ServiceKey,
        endpoint: Endpoint,
    ) -> Result<(), UnknownService> {
        self.edit_endpoints(key, |eps| {
            eps.retain(|e| e.address != endpoint.address);
            eps.push(endpoint);
        })
        .await
    }

    /// Removes the endpoints of a service at `address`.
    pub async fn remove_endpoint(
        &self,
        key: &ServiceKey,
        address: &str,
    ) -> Result<(), UnknownService> {
        self.edit_endpoints(key, |eps| eps.retain(|e| &*e.address != address))
            .await
    }

    /// Sends an error item, as a real registry does when its source fails; the contents stay.
    pub async fn report_error(&self, error: RegistryError) {
        self.inner.lock().await.send(Err(error)).await;
    }

    /// Everything the registry holds now.
    pub async fn services(&self) -> Vec<Registration> {
        self.inner.lock().await.services.values().cloned().collect()
    }

    async fn edit_endpoints(
        &self,
        key: &ServiceKey,
        edit: impl FnOnce(&mut Vec<Endpoint>),
    ) -> Result<(), UnknownService> {
        let current = {
            let inner = self.inner.lock().await;
            inner
                .services
                .get(key)
                .cloned()
                .ok_or_else(|| UnknownService(key.clone()))?
        };
        let mut endpoints = current.endpoints.to_vec();
        edit(&mut endpoints);
        self.upsert(Registration {
            service: current.service,
            endpoints: endpoints.into(),
        })
        .await;
        Ok(())
    }
}

impl Inner {
    async fn send(&mut self, item: Result<Event, RegistryError>) {
        if let Some(tx) = &self.subscriber
            && tx.send(item).await.is_err()
        {
            // The consumer stopped watching; keep the contents for a later watch.
            self.subscriber = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wayfinder_registry::testkit::{self, Fixture, Harness};
    use wayfinder_registry::{Protocol, Resolution};

    #[derive(Default)]
    struct MemoryHarness {
        handle: MemoryHandle,
    }

    impl Harness for MemoryHarness {
        type Item = Registration;

        fn canonical(registration: Registration) -> Registration {
            registration.normalized()
        }

        async fn start(&mut self, initial: &[Fixture]) -> Box<dyn Source<Registration>> {
            let (registry, handle) = MemoryRegistry::new("Memory");
            self.handle = handle;
            for f in initial {
                self.put(f).await;
            }
            Box::new(registry)
        }

        async fn put(&mut self, fixture: &Fixture) {
            self.handle.upsert(self.expected(fixture)).await;
        }

        async fn delete(&mut self, fixture: &Fixture) {
            self.handle.remove(&self.expected(fixture).key()).await;
        }

        fn expected(&self, f: &Fixture) -> Registration {
            let mut svc = Service::new(format!("{}.default.svc.cluster.local", f.name), "default")
                .with_port("http", f.port, Protocol::Http);
            svc.resolution = Resolution::ClientSideLb;
            let eps = f
                .endpoints
                .iter()
                .map(|ip| Endpoint::new(ip.to_string()).with_label("version", &f.version))
                .collect();
            Registration::new(svc, eps)
        }
    }

    #[tokio::test]
    async fn conforms_to_the_registry_contract() {
        testkit::run_all(&mut MemoryHarness::default()).await;
    }

    #[tokio::test]
    async fn endpoint_edits_send_the_full_list() {
        let (registry, handle) = MemoryRegistry::new("Memory");
        let svc = Service::new("a.default.svc.cluster.local", "default");
        let key = svc.key();
        handle
            .upsert(Registration::new(svc, vec![Endpoint::new("10.0.0.1")]))
            .await;
        let mut stream = Box::new(registry).watch(CancellationToken::new());
        assert!(matches!(stream.next().await, Some(Ok(Event::Reset(r))) if r.len() == 1));

        handle
            .add_endpoint(&key, Endpoint::new("10.0.0.2"))
            .await
            .unwrap();
        let Some(Ok(Event::Upsert(reg))) = stream.next().await else {
            panic!("expected an upsert")
        };
        assert_eq!(reg.endpoints.len(), 2);

        handle.remove_endpoint(&key, "10.0.0.1").await.unwrap();
        let Some(Ok(Event::Upsert(reg))) = stream.next().await else {
            panic!("expected an upsert")
        };
        assert_eq!(&*reg.endpoints[0].address, "10.0.0.2");

        let missing = ServiceKey::new("default", "nope");
        assert_eq!(
            handle.set_endpoints(&missing, vec![]).await,
            Err(UnknownService(missing))
        );
    }
}
