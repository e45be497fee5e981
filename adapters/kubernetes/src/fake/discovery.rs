//! `/version` and the legacy discovery documents (`/api`, `/apis`, `/apis/{group}`,
//! `/api/v1`, `/apis/{group}/{version}`), built from the table of kinds.

use serde_json::{Value, json};

use super::kinds::{self, KINDS};

/// `GET /version`.
pub(super) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-wayfinder-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `GET /api` (`APIVersions`); `host` is the address clients reached the server at.
pub(super) fn api(host: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": host }],
    })
}

fn group(name: &str) -> Value {
    let versions: Vec<Value> = kinds::versions(name)
        .iter()
        .map(|v| json!({ "groupVersion": format!("{name}/{v}"), "version": v }))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({ "name": name, "versions": versions, "preferredVersion": preferred })
}

/// `GET /apis` (`APIGroupList`).
pub(super) fn apis() -> Value {
    let groups: Vec<Value> = kinds::groups().into_iter().map(group).collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `GET /apis/{group}` (`APIGroup`).
pub(super) fn api_group(name: &str) -> Value {
    let mut g = group(name);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    g
}

/// `GET /api/v1` or `/apis/{group}/{version}` (`APIResourceList`).
pub(super) fn resources(group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for kind in KINDS
        .iter()
        .filter(|k| k.group == group && k.version(version).is_some())
    {
        let mut verbs = vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        if kind.plural == "namespaces" {
            verbs.retain(|v| *v != "deletecollection");
        }
        let mut resource = json!({
            "name": kind.plural,
            "singularName": kind.singular,
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": verbs,
        });
        if !kind.short.is_empty() {
            resource["shortNames"] = json!(kind.short);
        }
        resources.push(resource);
        if kind.status {
            resources.push(json!({
                "name": format!("{}/status", kind.plural),
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}
