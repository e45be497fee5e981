//! One datacenter's catalog: nodes, service instances, and the indexes blocking queries wait on.
//! The writes are in `catalog.rs`.

use std::collections::{BTreeMap, BTreeSet};

use tokio::sync::watch;

/// A datacenter.
#[derive(Debug)]
pub(super) struct Dc {
    /// Raft index of the last change to the services table.
    pub(super) table_index: u64,
    /// Woken on every change of `table_index`.
    pub(super) table_tx: watch::Sender<()>,
    /// Every service ever seen, with or without instances, by name.
    pub(super) services: BTreeMap<String, Svc>,
    /// Nodes by name.
    pub(super) nodes: BTreeMap<String, Node>,
}

/// A service: its instances and its index.
#[derive(Debug)]
pub(super) struct Svc {
    /// Raft index of the last change to its instances, their checks or their nodes.
    pub(super) index: u64,
    /// Woken on every change of `index`.
    pub(super) tx: watch::Sender<()>,
    /// Instances by service ID.
    pub(super) instances: BTreeMap<String, Inst>,
    /// Tag → number of instances that carry it (the union `/v1/catalog/services` lists).
    pub(super) tags: BTreeMap<String, usize>,
}

/// A node and its `serfHealth` check.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) id: String,
    pub(super) address: String,
    pub(super) status: String,
    pub(super) create_index: u64,
    pub(super) modify_index: u64,
    pub(super) check_create: u64,
    pub(super) check_modify: u64,
    /// `(service ID, service name)` of the instances on this node.
    pub(super) services: BTreeSet<(String, String)>,
}

/// A service instance and its service check.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Inst {
    pub(super) node: String,
    pub(super) address: String,
    pub(super) port: u16,
    pub(super) tags: Vec<String>,
    pub(super) meta: BTreeMap<String, String>,
    pub(super) weights: (u32, u32),
    /// Consul's service kind (`connect-proxy`, …); `""` for a typical service.
    pub(super) kind: String,
    /// Status of the service check; `None`: the instance has no service check.
    pub(super) check: Option<String>,
    /// Maintenance mode (an extra critical check).
    pub(super) maintenance: bool,
    pub(super) create_index: u64,
    pub(super) modify_index: u64,
    pub(super) check_create: u64,
    pub(super) check_modify: u64,
}

/// What a registration says about a node.
pub(super) struct NodeSpec {
    pub(super) name: String,
    pub(super) address: String,
    /// `serfHealth` status; `None` keeps the current one (`passing` for a new node).
    pub(super) status: Option<String>,
}

/// What a registration says about a service instance.
pub(super) struct ServiceSpec {
    pub(super) service: String,
    pub(super) id: String,
    pub(super) address: String,
    pub(super) port: u16,
    pub(super) tags: Vec<String>,
    pub(super) meta: BTreeMap<String, String>,
    pub(super) weights: (u32, u32),
    pub(super) kind: String,
    /// Service check status; `None` keeps the current check (none for a new instance).
    pub(super) check: Option<String>,
}

impl Inst {
    /// Whether the service fields (not the checks, not the indexes) are the same.
    pub(super) fn same_service(&self, other: &Inst) -> bool {
        (&self.node, &self.address, self.port, &self.tags)
            == (&other.node, &other.address, other.port, &other.tags)
            && (&self.meta, self.weights, &self.kind) == (&other.meta, other.weights, &other.kind)
    }
}

impl Dc {
    pub(super) fn new(index: u64) -> Dc {
        Dc {
            table_index: index,
            table_tx: watch::channel(()).0,
            services: BTreeMap::new(),
            nodes: BTreeMap::new(),
        }
    }

    /// The index of `/v1/health/service/<service>`: the service's, or for a service never seen
    /// the services table's.
    pub(super) fn service_index(&self, service: &str) -> u64 {
        self.services
            .get(service)
            .map_or(self.table_index, |s| s.index)
    }

    /// A receiver woken when the index of `service` may have changed.
    pub(super) fn service_watch(&self, service: &str) -> watch::Receiver<()> {
        match self.services.get(service) {
            Some(svc) => svc.tx.subscribe(),
            None => self.table_tx.subscribe(),
        }
    }

    pub(super) fn touch_table(&mut self, idx: u64) {
        self.table_index = idx;
        self.table_tx.send_replace(());
    }

    pub(super) fn touch_service(&mut self, service: &str, idx: u64) {
        if let Some(svc) = self.services.get_mut(service) {
            svc.index = idx;
            svc.tx.send_replace(());
        }
    }

    /// Names of the services with an instance of this ID on this node.
    pub(super) fn services_on(&self, node: &str, id: &str) -> Vec<String> {
        let Some(node) = self.nodes.get(node) else {
            return Vec::new();
        };
        let from = (id.to_owned(), String::new());
        let on = node.services.range(from..).take_while(|(i, _)| i == id);
        on.map(|(_, service)| service.clone()).collect()
    }

    /// Lowers every index above `index` to it (a snapshot restore).
    pub(super) fn restore(&mut self, index: u64) {
        self.table_index = self.table_index.min(index);
        for svc in self.services.values_mut() {
            svc.index = svc.index.min(index);
            for inst in svc.instances.values_mut() {
                for i in [
                    &mut inst.create_index,
                    &mut inst.modify_index,
                    &mut inst.check_create,
                    &mut inst.check_modify,
                ] {
                    *i = (*i).min(index);
                }
            }
        }
        for node in self.nodes.values_mut() {
            for i in [
                &mut node.create_index,
                &mut node.modify_index,
                &mut node.check_create,
                &mut node.check_modify,
            ] {
                *i = (*i).min(index);
            }
        }
    }
}

/// A UUID-shaped node ID derived from the node name (the same for the same name).
pub(super) fn node_uuid(name: &str) -> String {
    use std::hash::{Hash, Hasher};
    let hash = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, name).hash(&mut h);
        h.finish()
    };
    let (a, b) = (hash(1), hash(2));
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}
