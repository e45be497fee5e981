//! What the debug pages show of the ADS server: the connected streams and their per-type
//! state (`/debug/syncz`), what a proxy is served now and how that compares with what it
//! holds as far as its stream knows (`/debug/config_dump` and its `sync` section, which
//! `wayfinder proxy-status ID` prints), and the latest pushes (`/debug/push_status`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::held::Holding;
use super::state::now;
use super::status::TypeStatus;
use super::{AdsServer, lock};
use crate::xds::generate::Resources;
use crate::xds::proxy::Proxy;
use crate::xds::{PerType, TypeUrl, json};

/// How many names of each kind (missing, changed, removed) the sync section lists; the counts
/// are always whole.
const LISTED_NAMES: usize = 50;

/// How many pushes `/debug/push_status` keeps.
pub(super) const PUSH_LOG: usize = 256;

/// One response sent to a proxy, as `/debug/push_status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Push {
    /// Seconds since the Unix epoch.
    pub at: f64,
    /// The proxy's node id.
    pub proxy: String,
    /// `sotw` or `delta`.
    pub variant: &'static str,
    /// `cds`, `eds`, `lds` or `rds`.
    pub r#type: &'static str,
    /// Resources sent.
    pub resources: usize,
    /// Names removed (delta).
    pub removed: usize,
    /// Bytes of the encoded resources.
    pub bytes: usize,
    /// The response's version (state of the world) or system version (delta).
    pub version: String,
    /// Seconds from the snapshot's publication to this push, for pushes a new snapshot caused
    /// (`null` for answers to requests).
    pub after_publication: Option<f64>,
}

/// One connected stream, as `/debug/syncz` shows it.
#[derive(Debug)]
pub struct Connection {
    /// Unique per server.
    pub id: u64,
    /// The proxy.
    pub proxy: Arc<Proxy>,
    /// The address the stream's connection came from (`None` for streams served without
    /// wayfinder's accept loop, as in some tests).
    pub peer: Option<SocketAddr>,
    /// Seconds since the Unix epoch.
    pub connected_since: f64,
    /// Per-type protocol state, updated after every exchange.
    pub types: Mutex<PerType<TypeStatus>>,
}

impl AdsServer {
    /// `/debug/syncz`: every connected stream, in connection order, with its proxy and the
    /// state of each type (see `type_json`).
    pub fn syncz(&self) -> Value {
        let at = now();
        let conns = self.connections();
        let conns = conns.iter().map(|c| {
            let types = lock(&c.types).clone();
            let types: Map<String, Value> = types
                .iter()
                .map(|(t, s)| (t.short().to_string(), type_json(s, at)))
                .collect();
            let p = &c.proxy;
            json!({
                "proxy": p.id,
                "proxy_type": p.kind,
                "namespace": p.namespace,
                "cluster_id": p.cluster_id,
                "user_agent": p.user_agent,
                "version": p.version(),
                "identity": p.certificate.as_ref().map(|(id, _)| id),
                "certificate_expiry": p.certificate.as_ref().map(|(_, at)| at),
                "connection_id": c.id,
                "peer": c.peer,
                "connected_since": c.connected_since,
                "types": types,
            })
        });
        Value::Array(conns.collect())
    }

    /// What the most recently connected proxy with this id is served now, as JSON: each type's
    /// resources filtered by its subscription, and under `sync` each type's state (see
    /// `sync` in `ads/pages.rs`).
    pub fn config_dump(&self, proxy_id: &str) -> Option<Value> {
        let conn = self
            .connections()
            .into_iter()
            .rev()
            .find(|c| c.proxy.id == proxy_id)?;
        let snap = self.current();
        let types = lock(&conn.types).clone();
        let mut dump = json!({
            "proxy": conn.proxy.id,
            "kind": conn.proxy.kind,
            "snapshot_version": snap.model().version,
        });
        let at = now();
        let mut sync_section = Map::new();
        for (type_url, status) in types {
            let sub = &status.subscription;
            let all = snap.resources(&conn.proxy, type_url, &sub.names);
            let resources: Vec<Value> = all
                .iter()
                .filter(|r| sub.wants(&r.name))
                .map(|r| {
                    let mut value = json::any_to_json(&r.any());
                    json::redact(&mut value);
                    value
                })
                .collect();
            dump[type_name(type_url)] = Value::Array(resources);
            sync_section.insert(type_url.short().to_string(), sync(&status, &all, at));
        }
        dump["sync"] = Value::Object(sync_section);
        Some(dump)
    }
}

/// One type's state on a stream for debug pages: its protocol state (the fields of
/// [`TypeStatus`]), `status` ([`SyncState`](super::SyncState)) and `unacked_seconds` (since
/// the latest response, while it is not acknowledged), `now` being seconds since the Unix
/// epoch.
fn type_json(status: &TypeStatus, now: f64) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut value {
        fields.insert("status".into(), json!(status.sync()));
        fields.insert("unacked_seconds".into(), json!(status.unacked_for(now)));
    }
    value
}

/// One type's sync section: its state, and which of `all` (the resources of its type the
/// proxy should have now, unfiltered by its subscription) differ from what the proxy holds
/// as far as its stream knows: what the stream sent it. The server keeps no copy of what a
/// proxy acknowledged: once the latest response is acknowledged (`SYNCED`) what was sent is
/// what the proxy holds; before that (`STALE`) it is what the proxy will hold once it takes
/// the latest response; after a NACK the proxy still runs `acked_version`, and the server
/// cannot list how that differs.
pub(super) fn sync(status: &TypeStatus, all: &Resources, at: f64) -> Value {
    let (sub, held) = (&status.subscription, &status.held);
    let (mut missing, mut changed, mut removed) =
        (Names::default(), Names::default(), Names::default());
    for r in all.iter().filter(|r| sub.wants(&r.name)) {
        match held.get(&r.name, sub) {
            Holding::At(v) if v == r.version => {}
            Holding::Nothing => missing.add(&r.name),
            Holding::At(_) | Holding::Foreign => changed.add(&r.name),
        }
    }
    for name in held.names(sub) {
        if all.get(&name).is_none() {
            removed.add(&name);
        }
    }
    let mut value = type_json(status, at);
    if let Value::Object(fields) = &mut value {
        fields.remove("subscription");
        fields.insert("missing".into(), missing.json());
        fields.insert("changed".into(), changed.json());
        fields.insert("removed".into(), removed.json());
    }
    value
}

/// Names of one kind of difference: the first [`LISTED_NAMES`] in order, and their count.
#[derive(Default)]
struct Names {
    names: Vec<String>,
    count: usize,
}

impl Names {
    fn add(&mut self, name: &str) {
        if self.names.len() < LISTED_NAMES {
            self.names.push(name.to_string());
        }
        self.count += 1;
    }

    fn json(mut self) -> Value {
        self.names.sort();
        json!({"count": self.count, "names": self.names})
    }
}

fn type_name(t: TypeUrl) -> &'static str {
    match t {
        TypeUrl::Cluster => "clusters",
        TypeUrl::Endpoint => "endpoints",
        TypeUrl::Listener => "listeners",
        TypeUrl::Route => "routes",
        TypeUrl::Secret => "secrets",
        TypeUrl::ProxyConfig => "proxy_config",
    }
}
