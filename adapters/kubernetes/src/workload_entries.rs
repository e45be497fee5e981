//! WorkloadEntries written for auto-registered VMs, as istiod's WorkloadEntry controller
//! writes them, so that every replica serves them (each reads them back through
//! `--config-source k8s`).
//!
//! An entry carries Istio's annotations: `istio.io/autoRegistrationGroup` (set by the caller),
//! `istio.io/workloadController` (the replica holding the proxy's connection),
//! `istio.io/connectedAt`, and `istio.io/disconnectedAt` once its last connection to that
//! replica ended. A replica removes an entry only while it is still the controller and the
//! entry is still disconnected (the delete is conditional on the version it read), so a proxy
//! that reconnected to another replica keeps its entry. Health is the `Healthy` condition of
//! the entry's status.
//!
//! A replica that stops (or crashes) during the grace period leaves entries behind. The
//! leader ([`crate::leader`]) removes them ([`WorkloadEntries::clean_up`], Istio's periodic
//! WorkloadEntry cleanup): an auto-registered entry disconnected for longer than the grace
//! period, or connected for longer than a connection may live (`--max-connection-age` and its
//! 10% spread, plus the grace period: a live proxy reconnects within it and its replica
//! registers it again, which renews `istio.io/connectedAt`, so an older one has lost its
//! replica without a word).
//!
//! Permissions: `create`, `get`, `patch` and `delete` on `workloadentries` (and `list` for the
//! leader's cleanup, in every namespace watched), and `patch` on `workloadentries/status`, in the
//! namespaces of the groups.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions,
};
use serde_json::{Value, json};

const CONTROLLER: &str = "istio.io/workloadController";
const CONNECTED_AT: &str = "istio.io/connectedAt";
const DISCONNECTED_AT: &str = "istio.io/disconnectedAt";
const GROUP: &str = "istio.io/autoRegistrationGroup";

/// Writes auto-registered WorkloadEntries to a cluster; see the module docs.
#[derive(Clone)]
pub struct WorkloadEntries {
    client: kube::Client,
    /// This replica's name, in `istio.io/workloadController`.
    controller: String,
    /// The one namespace the leader's cleanup looks in (the config source's), or all.
    namespace: Option<String>,
}

impl std::fmt::Debug for WorkloadEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadEntries")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

fn resource() -> ApiResource {
    ApiResource {
        group: "networking.istio.io".into(),
        version: "v1".into(),
        api_version: "networking.istio.io/v1".into(),
        kind: "WorkloadEntry".into(),
        plural: "workloadentries".into(),
    }
}

/// Now, as Kubernetes writes times (RFC 3339, whole seconds, UTC).
fn now() -> String {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

impl WorkloadEntries {
    /// Writes through `client` as the replica `controller`.
    pub fn new(client: kube::Client, controller: &str) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            namespace: None,
        }
    }

    /// Cleans up only in `namespace` (the one the config source watches), or in all.
    pub fn cleaning_in(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &resource())
    }

    /// Creates the entry `object` (a `WorkloadEntry`, without status), or takes it over if
    /// it exists: its spec and labels become `object`'s, this replica its controller, and it
    /// is connected again.
    pub async fn register(&self, object: &Value) -> Result<(), kube::Error> {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let mut object = object.clone();
        let annotations = &mut object["metadata"]["annotations"];
        annotations[CONTROLLER] = json!(self.controller);
        annotations[CONNECTED_AT] = json!(now());
        let api = self.api(namespace);
        let dynamic: DynamicObject =
            serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &dynamic).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                // A merge patch: `null` removes the disconnection mark.
                let mut patch = json!({
                    "metadata": {
                        "labels": object["metadata"]["labels"],
                        "annotations": object["metadata"]["annotations"],
                    },
                    "spec": object["spec"],
                });
                patch["metadata"]["annotations"][DISCONNECTED_AT] = Value::Null;
                api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            Err(e) => Err(e),
        }
    }

    /// Marks the entry disconnected, if this replica is its controller.
    pub async fn disconnected(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        let api = self.api(namespace);
        let Some(current) = api.get_opt(name).await? else {
            return Ok(());
        };
        if current
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONTROLLER))
            != Some(&self.controller)
        {
            return Ok(());
        }
        let patch = json!({"metadata": {"annotations": {DISCONNECTED_AT: now()}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    /// Deletes the entry if this replica is still its controller and it is still
    /// disconnected; true when it deleted it.
    pub async fn remove(&self, namespace: &str, name: &str) -> Result<bool, kube::Error> {
        let api = self.api(namespace);
        let Some(current) = api.get_opt(name).await? else {
            return Ok(false);
        };
        let annotations = current.metadata.annotations.clone().unwrap_or_default();
        if annotations.get(CONTROLLER) != Some(&self.controller)
            || !annotations.contains_key(DISCONNECTED_AT)
        {
            return Ok(false);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: current.metadata.resource_version.clone(),
                uid: current.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(true),
            // Changed meanwhile (a reconnect), or gone already: not ours to delete.
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The leader's cleanup (see the module docs): deletes, in every namespace (or the one of
    /// [`WorkloadEntries::cleaning_in`]), the
    /// auto-registered entries disconnected for longer than `grace`, or connected for longer
    /// than `max_age` (when set) and `grace`, whoever controls them. Returns the names
    /// deleted. Each delete is conditional on the version read, so an entry registered again
    /// meanwhile stays.
    pub async fn clean_up(
        &self,
        grace: Duration,
        max_age: Option<Duration>,
    ) -> Result<Vec<String>, kube::Error> {
        let api: Api<DynamicObject> = match &self.namespace {
            Some(namespace) => self.api(namespace),
            None => Api::all_with(self.client.clone(), &resource()),
        };
        let list = api.list(&ListParams::default()).await?;
        let now = Timestamp::now();
        let older =
            |annotations: &std::collections::BTreeMap<String, String>, key, age: Duration| {
                annotations
                    .get(key)
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .is_some_and(|t| now.duration_since(t).unsigned_abs() > age)
            };
        // A connection lives at most `max_age` and its 10% spread.
        let connected_limit = max_age.map(|age| age + age / 10 + grace);
        let mut deleted = Vec::new();
        for entry in list.items {
            let annotations = entry.metadata.annotations.clone().unwrap_or_default();
            if !annotations.contains_key(GROUP) {
                continue;
            }
            let stale = match annotations.contains_key(DISCONNECTED_AT) {
                true => older(&annotations, DISCONNECTED_AT, grace),
                false => {
                    connected_limit.is_some_and(|limit| older(&annotations, CONNECTED_AT, limit))
                }
            };
            let (Some(namespace), Some(name)) = (&entry.metadata.namespace, &entry.metadata.name)
            else {
                continue;
            };
            if !stale {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: entry.metadata.resource_version.clone(),
                    uid: entry.metadata.uid.clone(),
                }),
                ..DeleteParams::default()
            };
            match self.api(namespace).delete(name, &params).await {
                Ok(_) => deleted.push(format!("{namespace}/{name}")),
                Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    /// Sets the entry's `Healthy` condition: `None` healthy, `Some(why)` unhealthy.
    pub async fn set_health(
        &self,
        namespace: &str,
        name: &str,
        unhealthy: Option<&str>,
    ) -> Result<(), kube::Error> {
        let (status, message) = match unhealthy {
            None => ("True", ""),
            Some(why) => ("False", why),
        };
        let patch = json!({"status": {"conditions": [{
            "type": "Healthy",
            "status": status,
            "message": message,
            "lastTransitionTime": now(),
        }]}});
        self.api(namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_kubernetes_rfc3339_in_whole_seconds() {
        let t = super::now();
        assert!(
            t.ends_with('Z') && t.len() == "2026-11-25T03:20:00Z".len(),
            "{t}"
        );
    }
}
