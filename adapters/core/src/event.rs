//! The closed vocabulary every source speaks, and its sync contract.

use std::fmt::Debug;
use std::sync::Arc;

use serde::Serialize;

use crate::endpoint::Endpoint;
use crate::refusal::Refusal;
use crate::service::{Service, ServiceKey};

/// What a source carries: a [`Registration`] (registries) or a configuration object
/// (`wayfinder-config`'s sources). Each item has a key that identifies it within its source;
/// a source holds at most one item per key, and [`Event::Remove`] names the key.
///
/// Items compare by content: the consumers of [`Event`]s tell an unchanged `Upsert` (rule 2)
/// by comparing it with what they hold.
pub trait Item: Clone + Debug + PartialEq + Send + Sync + 'static {
    /// What identifies an item within one source: a [`ServiceKey`] for registrations.
    type Key: Ord + Clone + Debug + Send + Sync + 'static;

    /// The item's key.
    fn key(&self) -> Self::Key;
}

/// A shared item is the item it shares: configuration objects travel as
/// `Arc<ConfigObject>`, so a source and the consumer hold one copy.
impl<T: Item> Item for Arc<T> {
    type Key = T::Key;

    fn key(&self) -> T::Key {
        T::key(self)
    }
}

/// A service together with the complete list of its endpoints in one registry.
///
/// Endpoints always travel with their service and always as the full list: there are no
/// per-endpoint events. A registry that learns of one endpoint change sends the whole list
/// again; the aggregate notices that only endpoints changed and treats it as the cheap kind of
/// change. This is Istio's `EDSUpdate(shard, host, endpoints)` contract, which also carries the
/// full list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Registration {
    /// The service definition.
    pub service: Arc<Service>,
    /// Every endpoint of the service in this registry, possibly none.
    pub endpoints: Arc<[Endpoint]>,
}

impl Registration {
    /// Wraps a service and its endpoints.
    pub fn new(service: Service, endpoints: Vec<Endpoint>) -> Self {
        Self {
            service: Arc::new(service),
            endpoints: endpoints.into(),
        }
    }

    /// The key of the service.
    pub fn key(&self) -> ServiceKey {
        self.service.key()
    }

    /// The same registration with endpoints in canonical order (by address, then ports,
    /// cluster and network), so that two reports that differ only in order compare equal.
    /// Registries such as Consul return instances in no particular order.
    pub fn normalized(self) -> Self {
        let sorted = self
            .endpoints
            .windows(2)
            .all(|w| endpoint_order(&w[0], &w[1]).is_le());
        if sorted {
            return self;
        }
        let mut endpoints = self.endpoints.to_vec();
        endpoints.sort_by(endpoint_order);
        Self {
            service: self.service,
            endpoints: endpoints.into(),
        }
    }
}

impl Item for Registration {
    type Key = ServiceKey;

    fn key(&self) -> ServiceKey {
        self.service.key()
    }
}

/// By address, then ports and cluster; then network, which tells apart endpoints known only
/// by their network (no address).
fn endpoint_order(a: &Endpoint, b: &Endpoint) -> std::cmp::Ordering {
    (&a.address, &a.ports, &a.cluster_id, &a.network).cmp(&(
        &b.address,
        &b.ports,
        &b.cluster_id,
        &b.network,
    ))
}

/// What a source reports: for a registry (`Event`, `T` = [`Registration`]) its services, for a
/// configuration source (`wayfinder_config::ConfigEvent`) its configuration objects.
///
/// # Contract
///
/// Every source's stream follows these rules, whatever it carries; the conformance kit
/// (`testkit`) checks them. "Item" below is one registration (a service with all its
/// endpoints) or one configuration object.
///
/// 1. **The first item is a `Reset`** (or an error, if the source cannot be read at all yet).
///    A `Reset` replaces everything this source contributed before, atomically, and marks the
///    source synced. Adapters also send a `Reset` after they re-list (a Kubernetes watch
///    expired, a Consul catalog index went backwards), so consumers never diff by hand.
/// 2. **`Upsert` carries the complete new state of one item**: for a registry, a service's
///    definition and all its endpoints. Sending the same `Upsert` twice is harmless; consumers
///    treat it as a no-op.
/// 3. **`Remove` deletes one item** (for a registry, a service and its endpoints) from this
///    source's contribution; removing an unknown key is harmless.
/// 4. **Order is the source's order.** Events of one source are applied in the order sent;
///    nothing is promised about order across sources.
/// 5. **Freshness.** When an event arrives, the source's state is *at least* as new as the
///    event says, and may be newer: a consumer may see a later state before the event that
///    announces it.
/// 6. **Errors are items, not the end.** A failure (a malformed file, an unreachable server) is
///    an `Err` item in the stream; the adapter keeps going and its last good state stays in
///    force until a later event replaces it. The stream ends only when it is asked to shut down.
/// 7. **Health follows the last item.** A source counts as degraded from an error item until
///    its next `Ok` item. A source that works again without anything having changed sends
///    `Recovered`, so consumers learn of the recovery without a spurious change.
/// 8. **A `Batch` is one change.** A source that learns of many items' changes at once (a
///    file of 100,000 ServiceEntries added) sends them as one `Batch` rather than one event per
///    item: its `removes` apply as `Remove`s would, then its `upserts` as `Upsert`s would,
///    and consumers apply all of it before they publish, so no snapshot holds part of it. It
///    is also the cheap way: one item crosses the channel and wakes the consumer once.
/// 9. **`Refused` lists what the source refuses now.** A source that judges its input object
///    by object (the configuration sources) sends everything it refuses now (documents that do
///    not parse, objects that fail validation) as one list that replaces the one it sent
///    before; a `Reset` empties it. It is sent after the events of a change whenever the list
///    changed, and the error items of the refusals follow as usual. A refused object keeps its
///    last good version: a refusal never changes the source's items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<T: Item = Registration> {
    /// The complete state of the source, replacing all earlier state.
    Reset(Vec<T>),
    /// One item, new or changed; for a registry, a service with all its endpoints.
    Upsert(T),
    /// One item is gone.
    Remove(T::Key),
    /// Several items changed together (rule 8). A key appears at most once in each list.
    Batch {
        /// Items gone, applied first.
        removes: Vec<T::Key>,
        /// Items new or changed (a registry's services each with all its endpoints), applied
        /// after `removes`.
        upserts: Vec<T>,
    },
    /// Everything the source refuses now, replacing the list it sent before (rule 9).
    Refused(Vec<Refusal>),
    /// The source works again after errors and nothing changed meanwhile.
    Recovered,
}

impl<T: Item> Event<T> {
    /// The events that say `upserts` and `removes` happened: nothing, one `Upsert` or
    /// `Remove`, or one `Batch` for more.
    pub fn changes(upserts: Vec<T>, removes: Vec<T::Key>) -> Option<Self> {
        match (upserts.len(), removes.len()) {
            (0, 0) => None,
            (1, 0) => upserts.into_iter().next().map(Self::Upsert),
            (0, 1) => removes.into_iter().next().map(Self::Remove),
            _ => Some(Self::Batch { removes, upserts }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_one_event_whatever_their_number() {
        let reg = |host: &str| Registration::new(Service::new(host, "default"), Vec::new());
        let key = |host: &str| ServiceKey::new("default", host);
        assert_eq!(Event::<Registration>::changes(Vec::new(), Vec::new()), None);
        assert_eq!(
            Event::changes(vec![reg("a")], Vec::new()),
            Some(Event::Upsert(reg("a")))
        );
        assert_eq!(
            Event::<Registration>::changes(Vec::new(), vec![key("b")]),
            Some(Event::Remove(key("b")))
        );
        assert_eq!(
            Event::changes(vec![reg("a")], vec![key("b")]),
            Some(Event::Batch {
                removes: vec![key("b")],
                upserts: vec![reg("a")],
            })
        );
    }

    #[test]
    fn normalized_orders_endpoints_so_reports_compare_equal() {
        let svc = Service::new("a.example.com", "default");
        let a = Registration::new(
            svc.clone(),
            vec![Endpoint::new("10.0.0.2"), Endpoint::new("10.0.0.1")],
        );
        let b = Registration::new(
            svc,
            vec![Endpoint::new("10.0.0.1"), Endpoint::new("10.0.0.2")],
        );
        assert_ne!(a, b);
        assert_eq!(a.normalized(), b.normalized());
    }
}
