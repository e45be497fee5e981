//! Writes to a datacenter's catalog. As in Consul's state store, a write that changes nothing
//! bumps no table or service index, a change to a node bumps the index of every service on it
//! (node fields are part of a health answer), and only changes to instances (not to checks)
//! bump the services table's index.

use std::collections::{BTreeMap, BTreeSet};

use tokio::sync::watch;

use super::dc::{Dc, Inst, Node, NodeSpec, ServiceSpec, Svc, node_uuid};

impl Dc {
    /// Adds or updates a node; a change bumps the index of every service on it.
    pub(super) fn upsert_node(&mut self, idx: u64, spec: NodeSpec) {
        let node = self.nodes.entry(spec.name.clone()).or_insert_with(|| Node {
            id: node_uuid(&spec.name),
            address: spec.address.clone(),
            status: spec.status.clone().unwrap_or_else(|| "passing".to_owned()),
            create_index: idx,
            modify_index: idx,
            check_create: idx,
            check_modify: idx,
            services: BTreeSet::new(),
        });
        let mut changed = false;
        if node.address != spec.address {
            node.address = spec.address;
            node.modify_index = idx;
            changed = true;
        }
        if let Some(status) = spec.status.filter(|s| *s != node.status) {
            node.status = status;
            node.check_modify = idx;
            changed = true;
        }
        if changed {
            let names: BTreeSet<String> = node.services.iter().map(|(_, s)| s.clone()).collect();
            for name in names {
                self.touch_service(&name, idx);
            }
        }
    }

    /// Adds or replaces the instance `(service, ID)` on a node that exists. (Consul keeps a
    /// service ID unique per node; the fake keys instances by service and ID, as its API.)
    pub(super) fn upsert_service(&mut self, idx: u64, node: &str, spec: ServiceSpec) {
        let svc = self
            .services
            .entry(spec.service.clone())
            .or_insert_with(|| Svc {
                index: idx,
                tx: watch::channel(()).0,
                instances: BTreeMap::new(),
                tags: BTreeMap::new(),
            });
        let old = svc.instances.get(&spec.id).cloned();
        let mut inst = Inst {
            node: node.to_owned(),
            address: spec.address,
            port: spec.port,
            tags: spec.tags,
            meta: spec.meta,
            weights: spec.weights,
            kind: spec.kind,
            check: old.as_ref().and_then(|o| o.check.clone()),
            maintenance: old.as_ref().is_some_and(|o| o.maintenance),
            create_index: old.as_ref().map_or(idx, |o| o.create_index),
            modify_index: old.as_ref().map_or(idx, |o| o.modify_index),
            check_create: old.as_ref().map_or(idx, |o| o.check_create),
            check_modify: old.as_ref().map_or(idx, |o| o.check_modify),
        };
        if let Some(status) = spec.check {
            set_status(&mut inst, idx, &status);
        }
        if old.as_ref() == Some(&inst) {
            return;
        }
        let moved = old.as_ref().map(|o| o.node.clone()).filter(|n| n != node);
        let fields_changed = old.as_ref().is_none_or(|o| !o.same_service(&inst));
        if let Some(o) = &old {
            if fields_changed {
                inst.modify_index = idx;
            }
            count_tags(&mut svc.tags, &o.tags, false);
        }
        count_tags(&mut svc.tags, &inst.tags, true);
        svc.instances.insert(spec.id.clone(), inst);
        let key = (spec.id, spec.service.clone());
        if let Some(old_node) = moved.and_then(|n| self.nodes.get_mut(&n)) {
            old_node.services.remove(&key);
        }
        if let Some(n) = self.nodes.get_mut(node) {
            n.services.insert(key);
        }
        self.touch_service(&spec.service, idx);
        if fields_changed {
            self.touch_table(idx);
        }
    }

    /// Removes an instance; false if there was none. The service keeps its index.
    pub(super) fn remove_service(&mut self, idx: u64, service: &str, id: &str) -> bool {
        let Some(svc) = self.services.get_mut(service) else {
            return false;
        };
        let Some(inst) = svc.instances.remove(id) else {
            return false;
        };
        count_tags(&mut svc.tags, &inst.tags, false);
        if let Some(node) = self.nodes.get_mut(&inst.node) {
            node.services.remove(&(id.to_owned(), service.to_owned()));
        }
        self.touch_service(service, idx);
        self.touch_table(idx);
        true
    }

    /// Removes a node and every instance on it; false if there was no such node.
    pub(super) fn remove_node(&mut self, idx: u64, name: &str) -> bool {
        let Some(node) = self.nodes.remove(name) else {
            return false;
        };
        for (id, service) in node.services {
            self.remove_service(idx, &service, &id);
        }
        true
    }

    /// Sets an instance's service-check status; false if nothing changed.
    pub(super) fn set_check(&mut self, idx: u64, service: &str, id: &str, status: &str) -> bool {
        let Some(inst) = self
            .services
            .get_mut(service)
            .and_then(|s| s.instances.get_mut(id))
        else {
            return false;
        };
        let before = inst.clone();
        set_status(inst, idx, status);
        if *inst == before {
            return false;
        }
        self.touch_service(service, idx);
        true
    }
}

/// Sets a service-check status; `maintenance` turns maintenance mode on instead.
fn set_status(inst: &mut Inst, idx: u64, status: &str) {
    if status == "maintenance" {
        if inst.check.is_none() {
            inst.check = Some("passing".to_owned());
            inst.check_create = idx;
            inst.check_modify = idx;
        }
        inst.maintenance = true;
        return;
    }
    inst.maintenance = false;
    if inst.check.as_deref() != Some(status) {
        if inst.check.is_none() {
            inst.check_create = idx;
        }
        inst.check = Some(status.to_owned());
        inst.check_modify = idx;
    }
}

fn count_tags(counts: &mut BTreeMap<String, usize>, tags: &[String], add: bool) {
    let mut distinct: Vec<&String> = tags.iter().collect();
    distinct.sort();
    distinct.dedup();
    for tag in distinct {
        if add {
            *counts.entry(tag.clone()).or_insert(0) += 1;
        } else if let Some(n) = counts.get_mut(tag) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(tag);
            }
        }
    }
}
