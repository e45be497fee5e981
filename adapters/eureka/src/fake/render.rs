//! The fake's answers in Eureka's JSON shape, encoded with the configured [`Quirks`].

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::Quirks;
use super::state::{Record, State};

/// `GET /apps`: the whole registry.
pub(super) fn full(state: &State) -> String {
    let q = &state.quirks;
    let apps = state
        .apps
        .iter()
        .map(|(name, instances)| {
            let instances = instances
                .values()
                .map(|r| instance(r, "ADDED", q))
                .collect();
            application(name, instances, q)
        })
        .collect();
    document(state, hashcode(state), apps)
}

/// `GET /apps/delta`: the recently-changed queue, grouped by application in queue order, with
/// the hashcode of the whole registry (or a wrong one).
pub(super) fn delta(state: &mut State, wrong_hashcode: bool) -> String {
    state.expire();
    let q = &state.quirks;
    let mut apps = BTreeMap::<&str, Vec<Value>>::new();
    for change in &state.recent {
        apps.entry(&change.record.instance.app)
            .or_default()
            .push(instance(&change.record, change.action, q));
    }
    let apps = apps
        .into_iter()
        .map(|(name, instances)| application(name, instances, q))
        .collect();
    let mut hash = hashcode(state);
    if wrong_hashcode {
        hash.push_str("WRONG_1_");
    }
    document(state, hash, apps)
}

/// `GET /apps/{APP}`, or `None` for an unknown application.
pub(super) fn app(state: &State, name: &str) -> Option<String> {
    let instances = state.apps.get(name)?;
    let q = &state.quirks;
    let instances = instances
        .values()
        .map(|r| instance(r, "ADDED", q))
        .collect();
    Some(json!({ "application": application(name, instances, q) }).to_string())
}

/// Eureka's reconcile hashcode: instance counts per status, sorted by status.
fn hashcode(state: &State) -> String {
    let mut counts = BTreeMap::<&str, usize>::new();
    for record in state.apps.values().flat_map(BTreeMap::values) {
        *counts.entry(&record.instance.status).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(status, n)| format!("{status}_{n}_"))
        .collect()
}

fn document(state: &State, hashcode: String, apps: Vec<Value>) -> String {
    let application = list(apps, &state.quirks);
    json!({
        "applications": {
            "versions__delta": state.version.to_string(),
            "apps__hashcode": hashcode,
            "application": application,
        }
    })
    .to_string()
}

fn application(name: &str, instances: Vec<Value>, q: &Quirks) -> Value {
    json!({ "name": name, "instance": list(instances, q) })
}

/// A list, or its only element when the quirk says so.
fn list(mut items: Vec<Value>, q: &Quirks) -> Value {
    if q.one_element_as_object && items.len() == 1 {
        items.pop().unwrap_or(Value::Null)
    } else {
        Value::Array(items)
    }
}

fn instance(record: &Record, action: &str, q: &Quirks) -> Value {
    let i = &record.instance;
    let number = |n: u64| {
        if q.string_numbers {
            json!(n.to_string())
        } else {
            json!(n)
        }
    };
    let port = |p: Option<u16>, default: u16| {
        let enabled = if q.enabled_as_bool {
            json!(p.is_some())
        } else {
            json!(p.is_some().to_string())
        };
        json!({ "$": number(u64::from(p.unwrap_or(default))), "@enabled": enabled })
    };
    let metadata = if i.metadata.is_empty() && q.empty_map_class {
        json!({ "@class": "java.util.Collections$EmptyMap" })
    } else {
        json!(i.metadata)
    };
    let data_center = match &i.availability_zone {
        Some(zone) => json!({
            "@class": "com.netflix.appinfo.AmazonInfo",
            "name": "Amazon",
            "metadata": {
                "availability-zone": zone,
                "local-ipv4": i.ip_addr,
                "instance-id": format!("i-{}", i.instance_id),
            },
        }),
        None => json!({
            "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
            "name": "MyOwn",
        }),
    };
    let http_port = i.port.unwrap_or(8080);
    let home = format!("http://{}:{http_port}/", i.host_name);
    let mut out = json!({
        "instanceId": i.instance_id,
        "hostName": i.host_name,
        "app": i.app,
        "ipAddr": i.ip_addr,
        "status": i.status,
        "overriddenStatus": record.overridden_status,
        "port": port(i.port, 8080),
        "securePort": port(i.secure_port, 443),
        "countryId": number(1),
        "dataCenterInfo": data_center,
        "leaseInfo": {
            "renewalIntervalInSecs": number(30),
            "durationInSecs": number(90),
            "registrationTimestamp": number(record.registered_ms),
            "lastRenewalTimestamp": number(record.updated_ms),
            "evictionTimestamp": number(0),
            "serviceUpTimestamp": number(record.registered_ms),
        },
        "metadata": metadata,
        "homePageUrl": home,
        "statusPageUrl": format!("{home}actuator/info"),
        "healthCheckUrl": format!("{home}actuator/health"),
        "isCoordinatingDiscoveryServer": "false",
        "lastUpdatedTimestamp": record.updated_ms.to_string(),
        "lastDirtyTimestamp": record.updated_ms.to_string(),
        "actionType": action,
    });
    if let Some(obj) = out.as_object_mut() {
        if let Some(vip) = &i.vip_address {
            obj.insert("vipAddress".into(), json!(vip));
            obj.insert("secureVipAddress".into(), json!(vip));
        }
        if q.no_instance_id {
            obj.remove("instanceId");
        }
    }
    out
}
