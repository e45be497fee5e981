//! The adapter without the network, for the fuzzer (`fuzz/` at the repository root; built
//! with the `fuzzing` feature only): Consul's answers go through the code that reads every
//! real answer (`client::read_answer`: body, `X-Consul-Index`, `X-Consul-KnownLeader`) and
//! the supervisor's bookkeeping (`State`: datacenters, catalogs, health entries mapped and
//! merged into registrations), in the order given. What the supervisor would send comes back:
//! events and error items.
//!
//! The watches running are tracked as the supervisor tracks its tasks, and a reply to a
//! question no running watch asks is dropped, as the supervisor drops the report of a stopped
//! watch. The HTTP client, the tasks and their timers are left out.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use wayfinder_registry::{Event, RegistryError};

use super::state::{Effects, State};
use super::{Dc, TaskKey, WatchKey};
use crate::api::{CatalogServices, HealthEntry};
use crate::client::{Answer, Leader, read_answer, status_detail};
use crate::convert::Mapping;

/// One answer of Consul to `GET /v1/{path}` (with `?dc=` when `dc` is set).
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    /// `catalog/datacenters`, `catalog/services` or `health/service/NAME`; other paths are
    /// ignored.
    pub path: &'a str,
    /// The datacenter asked (`None`: the agent's own).
    pub dc: Option<&'a str>,
    /// The HTTP status.
    pub status: u16,
    /// Header names and values as received; those HTTP would not carry are left out.
    pub headers: &'a [(&'a [u8], &'a [u8])],
    /// The body.
    pub body: &'a [u8],
}

/// Feeds `replies` to a fresh registry reading every datacenter (`--consul-datacenters '*'`)
/// with the default mapping, and returns what its stream would carry: the events of each
/// reply, and an error item for each failure and each instance or service refused.
pub fn replay(replies: &[Reply<'_>]) -> Vec<Result<Event, RegistryError>> {
    let mapping = Mapping {
        template: crate::DEFAULT_TEMPLATE.into(),
        warning_is_healthy: true,
    };
    let mut state = State::new(mapping);
    let mut running = BTreeSet::from([TaskKey::Datacenters]);
    let mut out = Vec::new();
    let mut started = false;
    for reply in replies {
        let Some(task) = task(reply) else { continue };
        if !running.contains(&task) {
            continue;
        }
        let mut invalid = Vec::new();
        let changed = match one(&mut state, task, reply, &mut invalid) {
            Ok(fx) => {
                running.retain(|t| !fx.stop.contains(t));
                running.extend(fx.start);
                fx.changed
            }
            Err(err) => {
                out.push(Err(err));
                continue;
            }
        };
        let events = state.recompute(changed, &mut invalid);
        if started {
            out.extend(events.into_iter().map(Ok));
        } else if state.synced() {
            started = true;
            out.push(Ok(Event::Reset(state.all())));
        }
        out.extend(invalid.into_iter().map(Err));
    }
    out
}

/// The watch that asks what `reply` answers; `None` for a path no watch asks.
fn task(reply: &Reply<'_>) -> Option<TaskKey> {
    let dc: Dc = reply.dc.map(Into::into);
    Some(match reply.path {
        "catalog/datacenters" => TaskKey::Datacenters,
        "catalog/services" => TaskKey::Catalog(dc),
        path => TaskKey::Health(WatchKey {
            dc,
            service: path.strip_prefix("health/service/")?.into(),
        }),
    })
}

/// Reads one reply as its watch would and applies it: what it changes.
fn one(
    state: &mut State,
    task: TaskKey,
    reply: &Reply<'_>,
    invalid: &mut Vec<RegistryError>,
) -> Result<Effects, RegistryError> {
    let origin = match reply.dc {
        Some(dc) => format!("GET http://consul/v1/{}?dc={dc}", reply.path),
        None => format!("GET http://consul/v1/{}", reply.path),
    };
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    if !status.is_success() {
        return Err(RegistryError::Unavailable {
            detail: status_detail(status, reply.body),
            origin,
        });
    }
    let headers = headers(reply.headers);
    Ok(match task {
        TaskKey::Datacenters => {
            let list: Answer<Vec<String>> = read(&origin, &headers, reply.body, invalid)?;
            state.set_datacenters(list.value.into_iter().map(|d| Some(d.into())).collect())
        }
        TaskKey::Catalog(dc) => {
            let names: Answer<CatalogServices> = read(&origin, &headers, reply.body, invalid)?;
            state.set_catalog(dc, names.value)
        }
        TaskKey::Health(key) => {
            let entries: Answer<Vec<HealthEntry>> = read(&origin, &headers, reply.body, invalid)?;
            state.set_service(key, &entries.value, &origin, invalid)
        }
        // The probe's answer is a string checked for emptiness: nothing to fuzz.
        TaskKey::Liveness(_) => Effects::default(),
    })
}

/// Reads an answer; an unknown leader is an error item, as the supervisor reports it.
fn read<T: serde::de::DeserializeOwned>(
    origin: &str,
    headers: &HeaderMap,
    body: &[u8],
    invalid: &mut Vec<RegistryError>,
) -> Result<Answer<T>, RegistryError> {
    let answer = read_answer::<T>(origin, headers, body)?;
    if let Leader::Unknown(err) = &answer.leader {
        invalid.push(err.clone());
    }
    Ok(answer)
}

fn headers(raw: &[(&[u8], &[u8])]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in raw {
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            map.append(name, value);
        }
    }
    map
}
