//! An object from the API reduced to what the models read and what an Event names: its
//! type, name, namespace, labels, annotations, uid, resource version and spec.
//!
//! The rest (`managedFields`, `status` but a WorkloadEntry's conditions, owner references, …)
//! is dropped before anything is
//! kept, and so is the `kubectl.kubernetes.io/last-applied-configuration` annotation: a copy
//! of the whole object that would double what is kept and shown on debug pages.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use serde_json::{Map, Value};

use super::kinds::ApiKind;

/// The annotation `kubectl apply` writes: the object again, as JSON.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An Istio object read from the API.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ApiObject {
    /// `<cluster>: <API path>`: its name in the models, and its origin in messages.
    pub(super) name: String,
    /// The reduced object as compact JSON, which the models read as a one-document file.
    pub(super) bytes: Vec<u8>,
    /// What an Event about it names.
    pub(super) reference: ObjectReference,
}

impl ApiObject {
    /// Reduces `object`, read as `kind` in `version` from `cluster`.
    pub(super) fn new(cluster: &str, kind: &ApiKind, version: &str, object: DynamicObject) -> Self {
        let DynamicObject {
            types,
            metadata,
            data,
        } = object;
        let api_version = types.map_or_else(|| kind.api_version(version), |t| t.api_version);
        let name = metadata.name.unwrap_or_default();
        let namespace = metadata.namespace.unwrap_or_default();
        let mut meta = Map::new();
        meta.insert("name".into(), name.clone().into());
        meta.insert("namespace".into(), namespace.clone().into());
        if let Some(labels) = metadata.labels {
            meta.insert("labels".into(), Value::from_iter(labels));
        }
        if let Some(mut annotations) = metadata.annotations {
            annotations.remove(LAST_APPLIED);
            meta.insert("annotations".into(), Value::from_iter(annotations));
        }
        if let Some(uid) = &metadata.uid {
            meta.insert("uid".into(), uid.clone().into());
        }
        if let Some(version) = &metadata.resource_version {
            meta.insert("resourceVersion".into(), version.clone().into());
        }
        let mut reduced = Map::new();
        reduced.insert("apiVersion".into(), api_version.clone().into());
        reduced.insert("kind".into(), kind.kind.into());
        reduced.insert("metadata".into(), meta.into());
        // Without a spec the models say so, as they do for a file.
        if let Some(spec) = data.get("spec") {
            reduced.insert("spec".into(), spec.clone());
        }
        // A WorkloadEntry's conditions say whether its workload is healthy (auto-registration
        // sets them); every other status is dropped.
        if kind.kind == "WorkloadEntry"
            && let Some(conditions) = data.get("status").and_then(|s| s.get("conditions"))
        {
            reduced.insert(
                "status".into(),
                serde_json::json!({"conditions": conditions}),
            );
        }
        Self {
            name: format!("{cluster}: {}", kind.path(version, &namespace, &name)),
            bytes: Value::Object(reduced).to_string().into_bytes(),
            reference: ObjectReference {
                api_version: Some(api_version),
                kind: Some(kind.kind.into()),
                namespace: Some(namespace),
                name: Some(name),
                uid: metadata.uid,
                resource_version: metadata.resource_version,
                field_path: None,
            },
        }
    }

    /// `VirtualService default/reviews`: how the models name the object in their messages.
    pub(super) fn key(&self) -> String {
        let r = &self.reference;
        format!(
            "{} {}/{}",
            r.kind.as_deref().unwrap_or_default(),
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_source::kinds::CONFIG;

    #[test]
    fn reduces_to_what_the_models_read_and_events_name() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {
                "name": "reviews", "namespace": "default", "uid": "u1", "resourceVersion": "42",
                "labels": {"app": "reviews"},
                "annotations": {LAST_APPLIED: "{…}", "team": "a"},
                "managedFields": [{"manager": "kubectl"}], "generation": 3,
            },
            "spec": {"hosts": ["reviews"]},
            "status": {"observedGeneration": "3"},
        }))
        .unwrap_or_else(|err| panic!("{err}"));
        let reduced = ApiObject::new("c1", &CONFIG[0], "v1", object);
        assert_eq!(
            reduced.name,
            "c1: /apis/networking.istio.io/v1/namespaces/default/virtualservices/reviews"
        );
        let json: Value = serde_json::from_slice(&reduced.bytes).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
                "metadata": {"name": "reviews", "namespace": "default", "uid": "u1",
                             "resourceVersion": "42", "labels": {"app": "reviews"},
                             "annotations": {"team": "a"}},
                "spec": {"hosts": ["reviews"]},
            })
        );
        assert_eq!(reduced.reference.uid.as_deref(), Some("u1"));
        assert_eq!(reduced.reference.resource_version.as_deref(), Some("42"));
        assert_eq!(reduced.key(), "VirtualService default/reviews");
    }
}
