//! What a Sidecar sets of a proxy's inbound ports besides their endpoints:
//! - connection pools, as Istio's `InboundConnectionPoolForPort` picks them: an ingress
//!   listener's `connectionPool` for its port, else the Sidecar's `inboundConnectionPool`. The
//!   pool shapes the port's inbound cluster (its circuit breakers, connect timeout, keepalive
//!   and HTTP options) as a DestinationRule's shapes an outbound one, so the workload's side
//!   can refuse what it cannot take;
//! - an ingress listener's `tls`, which the port's chain terminates (see `inbound::listener`);
//! - an ingress listener's `captureMode: NONE`: the port's listener of its own
//!   ([`own_listener`]).
//!
//! All three are part of the inbound memo's key: pools and TLS as [`Keyed`] values, the
//! address to bind as text.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::Serialize;
use wayfinder_config::{ConnectionPoolSettings, Sidecar};

use super::Ports;
use crate::xds::generate::listener::tls_inspector;
use crate::xds::generate::proto::socket_address;
use crate::xds::names;
use crate::xds::pb::core::TrafficDirection;
use crate::xds::pb::listener::{FilterChain, Listener};

/// Settings in the inbound memo's key: compared, ordered and hashed by their JSON, since
/// configuration types (durations, lists) have no `Hash`.
#[derive(Clone, Debug)]
pub(in crate::xds::generate) struct Keyed<T> {
    pub(in crate::xds::generate) settings: Arc<T>,
    text: Arc<str>,
}

impl<T: Serialize + Clone> Keyed<T> {
    pub(in crate::xds::generate) fn new(settings: &T) -> Self {
        Self {
            text: serde_json::to_string(settings).unwrap_or_default().into(),
            settings: Arc::new(settings.clone()),
        }
    }
}

impl<T> PartialEq for Keyed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl<T> Eq for Keyed<T> {}

impl<T> Hash for Keyed<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl<T> PartialOrd for Keyed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Keyed<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

/// A port's connection pool.
pub(in crate::xds::generate) type Pool = Keyed<ConnectionPoolSettings>;

/// Gives each of `ports` the pool `sidecar` sets for it, if any.
pub(in crate::xds::generate) fn apply(ports: &mut Ports, sidecar: &Sidecar) {
    let whole = sidecar.inbound_connection_pool.as_deref().map(Keyed::new);
    for (number, port) in ports.iter_mut() {
        let own = sidecar.ingress.iter().find_map(|l| {
            let listener_port = l.port.as_ref()?.number;
            (listener_port == u32::from(*number))
                .then_some(l.connection_pool.as_ref())
                .flatten()
        });
        port.pool = own.map(Keyed::new).or_else(|| whole.clone());
    }
}

/// The listener of a port whose Sidecar ingress listener has `captureMode: NONE`:
/// `<address>_<port>`, binding that address and port itself, with the port's `chains`; a TLS
/// inspector where they tell TLS from plaintext (`inspects`), with `detection` as on
/// `virtualInbound`.
pub(in crate::xds::generate) fn own_listener(
    address: &str,
    port: u16,
    chains: Vec<FilterChain>,
    inspects: bool,
    detection: Option<std::time::Duration>,
) -> Listener {
    Listener {
        name: names::listener(address, port),
        address: socket_address(address, port),
        listener_filters: if inspects {
            vec![tls_inspector()]
        } else {
            Vec::new()
        },
        continue_on_listener_filters_timeout: inspects,
        listener_filters_timeout: detection
            .filter(|_| inspects)
            .map(crate::xds::generate::policy::duration),
        traffic_direction: TrafficDirection::Inbound as i32,
        filter_chains: chains,
        ..Default::default()
    }
}
