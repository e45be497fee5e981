//! The parts of Consul's HTTP API answers the adapter reads.
//!
//! Field names are Consul's (PascalCase). The fields every Consul version sends (the node's
//! name and address, the instance's id, name and port) are required, so an answer without
//! them is reported as malformed rather than read as an instance with no address; the rest
//! have defaults, so a field an older or newer Consul leaves out still parses. A field of the
//! wrong type is a parse error the adapter reports with the request. Only what the mapping needs is kept: the
//! rest of Consul's (large) answers is skipped by serde without being stored.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One entry of `GET /v1/health/service/:service`: an instance, its node and its checks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct HealthEntry {
    pub(crate) node: Node,
    pub(crate) service: AgentService,
    /// The node's checks (`serfHealth`) and the instance's own; `null` reads as none.
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) checks: Vec<Check>,
}

/// The node an instance runs on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Node {
    pub(crate) node: String,
    pub(crate) address: String,
    #[serde(default)]
    pub(crate) datacenter: String,
}

/// An instance as registered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct AgentService {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    pub(crate) service: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) tags: Vec<String>,
    #[serde(default)]
    pub(crate) address: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) meta: BTreeMap<String, String>,
    pub(crate) port: u16,
    #[serde(default)]
    pub(crate) weights: Option<Weights>,
    /// Consul Enterprise namespace; empty in the open-source edition.
    #[serde(default)]
    pub(crate) namespace: String,
    /// `connect-proxy`, `mesh-gateway`, …; empty for ordinary services.
    #[serde(default)]
    pub(crate) kind: String,
}

/// Load-balancing weights by health (`Weights` in the service definition).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Weights {
    pub(crate) passing: u32,
    pub(crate) warning: u32,
}

/// One health check's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct Check {
    #[serde(rename = "CheckID")]
    pub(crate) check_id: String,
    /// `passing`, `warning`, `critical` or `maintenance`.
    pub(crate) status: String,
}

/// `GET /v1/catalog/services`: service name to the union of its instances' tags.
pub(crate) type CatalogServices = BTreeMap<String, Option<Vec<String>>>;

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_real_consul_answer_and_skips_what_it_does_not_need() {
        // Shape of Consul 1.20's /v1/health/service/web (abridged from its API docs).
        let body = r#"[{
          "Node": {"ID": "40e4a748-2192-161a-0510-9bf59fe950b5", "Node": "foobar",
                   "Address": "10.1.10.12", "Datacenter": "dc1",
                   "TaggedAddresses": {"lan": "10.1.10.12", "wan": "10.1.10.12"},
                   "Meta": {"instance_type": "t2.medium"}, "CreateIndex": 1, "ModifyIndex": 2},
          "Service": {"ID": "redis", "Service": "redis", "Tags": ["primary"], "Address": "10.1.10.12",
                      "TaggedAddresses": {"lan": {"address": "10.1.10.12", "port": 8000}},
                      "Meta": {"redis_version": "4.0"}, "Port": 8000,
                      "Weights": {"Passing": 10, "Warning": 1}, "Namespace": "default",
                      "Proxy": {}, "Connect": {}},
          "Checks": [{"Node": "foobar", "CheckID": "service:redis", "Name": "Service 'redis' check",
                      "Status": "passing", "Notes": "", "Output": "", "ServiceID": "redis",
                      "ServiceName": "redis", "ServiceTags": ["primary"], "Namespace": "default"},
                     {"Node": "foobar", "CheckID": "serfHealth", "Name": "Serf Health Status",
                      "Status": "passing", "ServiceID": "", "ServiceName": "", "ServiceTags": []}]
        }]"#;
        let entries: Vec<HealthEntry> = serde_json::from_str(body).unwrap();
        let e = &entries[0];
        assert_eq!(e.node.address, "10.1.10.12");
        assert_eq!(e.service.port, 8000);
        assert_eq!(
            e.service.weights,
            Some(Weights {
                passing: 10,
                warning: 1
            })
        );
        assert_eq!(e.checks.len(), 2);
    }

    #[test]
    fn nulls_read_as_empty_and_wrong_types_fail() {
        let body = r#"[{"Node": {"Node": "n", "Address": "10.0.0.1"}, "Service": {"ID": "a1", "Service": "a", "Tags": null, "Meta": null, "Port": 80}, "Checks": null}]"#;
        let entries: Vec<HealthEntry> = serde_json::from_str(body).unwrap();
        assert!(entries[0].service.tags.is_empty() && entries[0].checks.is_empty());
        let wrong = r#"[{"Node": {"Node": "n", "Address": "10.0.0.1"}, "Service": {"ID": "a1", "Service": "a", "Port": "eighty"}}]"#;
        let err = serde_json::from_str::<Vec<HealthEntry>>(wrong).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
        let missing = serde_json::from_str::<Vec<HealthEntry>>("[{}]").unwrap_err();
        assert!(
            missing.to_string().contains("missing field `Node`"),
            "{missing}"
        );
    }
}
