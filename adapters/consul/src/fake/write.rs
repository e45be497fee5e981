//! `PUT /v1/catalog/register` and `PUT /v1/catalog/deregister`, Consul's catalog writes, mapped
//! onto the same state changes as [`FakeConsul::register`](super::FakeConsul::register) and
//! [`FakeConsul::deregister`](super::FakeConsul::deregister). They answer `true`, need the
//! token when ACLs are on, and no fault applies to them; without a leader they answer 500
//! `No cluster leader`, as a write needs one. Each one that changes something takes one raft
//! index.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State as With};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::dc::{NodeSpec, ServiceSpec};
use super::http::check_acl;
use super::params::Query;
use super::reply::{no_dc, no_leader, text};
use super::state::Shared;

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct RegisterBody {
    datacenter: String,
    node: String,
    address: String,
    service: Option<ServiceBody>,
    check: Option<CheckBody>,
    checks: Option<Vec<CheckBody>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ServiceBody {
    #[serde(rename = "ID")]
    id: String,
    service: String,
    tags: Option<Vec<String>>,
    address: String,
    meta: Option<BTreeMap<String, String>>,
    port: u16,
    weights: Option<WeightsBody>,
    kind: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct WeightsBody {
    passing: u32,
    warning: u32,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct CheckBody {
    #[serde(rename = "CheckID")]
    check_id: String,
    status: String,
    #[serde(rename = "ServiceID")]
    service_id: String,
}

impl CheckBody {
    /// The status, `critical` when not given (as Consul's catalog does).
    fn status(&self) -> String {
        if self.status.is_empty() {
            "critical".to_owned()
        } else {
            self.status.clone()
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct DeregisterBody {
    datacenter: String,
    node: String,
    #[serde(rename = "ServiceID")]
    service_id: String,
    #[serde(rename = "CheckID")]
    check_id: String,
}

/// `PUT /v1/catalog/register`: a node, optionally a service on it, and checks. The node's
/// `serfHealth` check sets the node status; a check with a `ServiceID` sets that instance's
/// service check; other node checks are ignored.
pub(super) async fn register(
    With(shared): With<Arc<Shared>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (q, body) = match parse::<RegisterBody>(raw.as_deref(), &body) {
        Ok(parsed) => parsed,
        Err(reason) => return text(StatusCode::BAD_REQUEST, &reason),
    };
    let mut st = shared.lock();
    if let Some(denied) = check_acl(&st, q.token.as_deref(), &headers) {
        return denied;
    }
    if st.leader_lost.is_some() {
        return no_leader();
    }
    let dc = pick_dc(&body.datacenter, q.dc.as_deref());
    if !st.has_dc(dc) {
        return no_dc();
    }
    if body.node.is_empty() || body.address.is_empty() {
        return text(StatusCode::BAD_REQUEST, "Must provide node and address");
    }
    let checks: Vec<CheckBody> = body
        .check
        .into_iter()
        .chain(body.checks.into_iter().flatten())
        .collect();
    let service = match body.service {
        Some(s) if s.service.is_empty() => {
            return text(StatusCode::BAD_REQUEST, "Must provide service name with ID");
        }
        Some(s) => Some(service_spec(s, &checks)),
        None => None,
    };
    let registering = service.as_ref().map(|s| s.id.as_str());
    let dcm = st.dc_mut(dc);
    // Checks on services already on the node; validated before anything changes.
    let mut updates = Vec::new();
    for c in checks.iter().filter(|c| !c.service_id.is_empty()) {
        if Some(c.service_id.as_str()) == registering {
            continue;
        }
        let found = dcm.services_on(&body.node, &c.service_id);
        if found.is_empty() {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Missing service registration",
            );
        }
        for name in found {
            updates.push((name, c.service_id.clone(), c.status()));
        }
    }
    let status = checks
        .iter()
        .rfind(|c| c.service_id.is_empty() && c.check_id == "serfHealth")
        .map(CheckBody::status);
    let idx = st.next_index();
    let dcm = st.dc_mut(dc);
    let node = NodeSpec {
        name: body.node.clone(),
        address: body.address,
        status,
    };
    dcm.upsert_node(idx, node);
    if let Some(spec) = service {
        dcm.upsert_service(idx, &body.node, spec);
    }
    for (name, id, status) in updates {
        dcm.set_check(idx, &name, &id, &status);
    }
    json_true()
}

fn service_spec(s: ServiceBody, checks: &[CheckBody]) -> ServiceSpec {
    let id = if s.id.is_empty() {
        s.service.clone()
    } else {
        s.id
    };
    let check = checks
        .iter()
        .rfind(|c| c.service_id == id)
        .map(CheckBody::status);
    ServiceSpec {
        service: s.service,
        id,
        address: s.address,
        port: s.port,
        tags: s.tags.unwrap_or_default(),
        meta: s.meta.unwrap_or_default(),
        weights: s.weights.map_or((1, 1), |w| (w.passing, w.warning)),
        kind: s.kind,
        check,
    }
}

/// `PUT /v1/catalog/deregister`: with `ServiceID` one instance of the node, with neither
/// `ServiceID` nor `CheckID` the node and everything on it; a `CheckID` alone changes nothing
/// here. Removing what is not there is no error, as in Consul.
pub(super) async fn deregister(
    With(shared): With<Arc<Shared>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (q, body) = match parse::<DeregisterBody>(raw.as_deref(), &body) {
        Ok(parsed) => parsed,
        Err(reason) => return text(StatusCode::BAD_REQUEST, &reason),
    };
    let mut st = shared.lock();
    if let Some(denied) = check_acl(&st, q.token.as_deref(), &headers) {
        return denied;
    }
    if st.leader_lost.is_some() {
        return no_leader();
    }
    let dc = pick_dc(&body.datacenter, q.dc.as_deref());
    if !st.has_dc(dc) {
        return no_dc();
    }
    if body.node.is_empty() {
        return text(StatusCode::BAD_REQUEST, "Must provide node");
    }
    let idx = st.raft + 1;
    let dcm = st.dc_mut(dc);
    let changed = if !body.service_id.is_empty() {
        let mut removed = false;
        for name in dcm.services_on(&body.node, &body.service_id) {
            removed |= dcm.remove_service(idx, &name, &body.service_id);
        }
        removed
    } else if body.check_id.is_empty() {
        dcm.remove_node(idx, &body.node)
    } else {
        false
    };
    if changed {
        st.raft = idx;
    }
    json_true()
}

fn pick_dc<'a>(body: &'a str, query: Option<&'a str>) -> &'a str {
    if body.is_empty() {
        query.unwrap_or("")
    } else {
        body
    }
}

/// The query and the JSON body; `Err` holds the 400 body.
fn parse<T: DeserializeOwned>(raw: Option<&str>, body: &[u8]) -> Result<(Query, T), String> {
    let q = Query::parse(raw)?;
    let body = serde_json::from_slice(body).map_err(|e| format!("Request decode failed: {e}"))?;
    Ok((q, body))
}

fn json_true() -> Response {
    let mut response = Response::new(Body::from("true"));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
