//! Kubernetes Events on the objects wayfinder rejects, so that `kubectl describe` and
//! `kubectl get events` show why a route is not in force, as they show it for a pod.
//!
//! One Warning Event (reason [`REASON`]) per version of an object: the watch reads an object
//! again after every relist and after a failure, and none of those is news. Events are posted
//! from their own tasks, so a slow API server never holds up the stream; a failure to post is
//! logged and otherwise ignored (the error item and the log line have already said it all).
//!
//! With replicas, one Event for the whole deployment: only the leader ([`Leadership`]) posts.
//! A replica that refuses an object while it does not lead keeps the refusal until it leads
//! or the object changes; when it comes to lead, it first asks the API server whether an Event
//! for that version exists (the replica that led then posted it) and posts only if none does.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use wayfinder_registry::{CancellationToken, RegistryError};

use super::object::ApiObject;
use crate::leader::Leadership;

/// The reason of the Events posted.
pub(super) const REASON: &str = "InvalidConfig";
/// Who posts them (`source.component`, `reportingComponent`).
pub(super) const COMPONENT: &str = "wayfinder";
/// The API server refuses longer messages.
const MAX_MESSAGE: usize = 1024;
/// How long one post may take before it is given up.
const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// Posts Events, at most one per version of an object.
pub(super) struct Poster {
    client: Client,
    shutdown: CancellationToken,
    leadership: Leadership,
    /// The resource version last reported, per object (by uid; by name when it has none),
    /// and the token that stops its post (still waiting for leadership) when it is replaced.
    posted: HashMap<String, (Option<String>, CancellationToken)>,
}

impl Poster {
    /// Posts with `client` while `leadership` says so; posts under way are dropped when
    /// `shutdown` is cancelled.
    pub(super) fn new(client: Client, shutdown: CancellationToken, leadership: Leadership) -> Self {
        Self {
            client,
            shutdown,
            leadership,
            posted: HashMap::new(),
        }
    }

    /// Reports that `object` was rejected for `errors`, unless this version of it already was.
    pub(super) fn rejected(&mut self, object: &ApiObject, errors: &[RegistryError]) {
        let version = object.reference.resource_version.clone();
        if self.posted.get(&id(object)).map(|(v, _)| v) == Some(&version) {
            return;
        }
        let stop = self.shutdown.child_token();
        if let Some((_, old)) = self.posted.insert(id(object), (version, stop.clone())) {
            old.cancel();
        }
        let event = event(object, message(object, errors));
        let api: Api<CoreEvent> = Api::namespaced(
            self.client.clone(),
            event.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let what = format!("{} {}", object.name, REASON);
        let mut leadership = self.leadership.clone();
        let led = leadership.is_leader();
        tokio::spawn(async move {
            let post = async {
                if !led {
                    // Posted already, perhaps, by the replica that led meanwhile.
                    if !leadership.until_leader().await {
                        return Ok(());
                    }
                    if posted(&api, &event).await? {
                        tracing::info!("{what}: the Event was posted by the previous leader");
                        return Ok(());
                    }
                }
                tokio::time::timeout(POST_TIMEOUT, api.create(&PostParams::default(), &event))
                    .await
                    .map_err(|_| format!("no answer within {}s", POST_TIMEOUT.as_secs()))?
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            };
            if let Some(Err(err)) = stop.run_until_cancelled(post).await {
                tracing::warn!("{what}: cannot post the Event: {err}");
            }
        });
    }

    /// Forgets an object that is gone.
    pub(super) fn forget(&mut self, object: &ApiObject) {
        if let Some((_, stop)) = self.posted.remove(&id(object)) {
            stop.cancel();
        }
    }
}

/// Whether an Event of ours on this version of the object exists already.
async fn posted(api: &Api<CoreEvent>, event: &CoreEvent) -> Result<bool, String> {
    let ObjectReference {
        uid,
        resource_version,
        ..
    } = &event.involved_object;
    let (Some(uid), Some(version)) = (uid, resource_version) else {
        return Ok(false);
    };
    let params = ListParams::default()
        .fields(&format!(
            "involvedObject.uid={uid},involvedObject.resourceVersion={version},reason={REASON}"
        ))
        .limit(1);
    let list = tokio::time::timeout(POST_TIMEOUT, api.list(&params))
        .await
        .map_err(|_| format!("no answer within {}s", POST_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    Ok(!list.items.is_empty())
}

fn id(object: &ApiObject) -> String {
    object
        .reference
        .uid
        .clone()
        .unwrap_or_else(|| object.name.clone())
}

/// The fatal problems as `field: message; …` (the object's name, which the models put first,
/// is the Event's subject already).
fn message(object: &ApiObject, errors: &[RegistryError]) -> String {
    let prefix = format!("{}: ", object.key());
    let problems: Vec<&str> = errors
        .iter()
        .map(|err| match err {
            RegistryError::Malformed { detail, .. }
            | RegistryError::Invalid { detail, .. }
            | RegistryError::Unavailable { detail, .. } => {
                detail.strip_prefix(&prefix).unwrap_or(detail)
            }
        })
        .collect();
    let mut message = problems.join("; ");
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - '…'.len_utf8();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

fn event(object: &ApiObject, message: String) -> CoreEvent {
    let now = Timestamp::now();
    let reference = &object.reference;
    let name = reference.name.as_deref().unwrap_or("object");
    CoreEvent {
        metadata: ObjectMeta {
            // As client-go names Events: the object's name and the time in hex.
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: reference.namespace.clone(),
            ..Default::default()
        },
        involved_object: reference.clone(),
        type_: Some("Warning".into()),
        reason: Some(REASON.into()),
        message: Some(message),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;

    use super::*;

    fn object() -> ApiObject {
        ApiObject {
            name: "c: /apis/networking.istio.io/v1/namespaces/ns/virtualservices/vs".into(),
            bytes: Vec::new(),
            reference: ObjectReference {
                api_version: Some("networking.istio.io/v1".into()),
                kind: Some("VirtualService".into()),
                namespace: Some("ns".into()),
                name: Some("vs".into()),
                uid: Some("u".into()),
                resource_version: Some("3".into()),
                field_path: None,
            },
        }
    }

    #[test]
    fn the_message_lists_the_problems_without_the_object() {
        let invalid = RegistryError::Invalid {
            origin: "x".into(),
            detail: "VirtualService ns/vs: spec.hosts: required; spec.http[0]: bad".into(),
        };
        let malformed = RegistryError::Malformed {
            origin: "x".into(),
            detail: "unknown field `colour`".into(),
        };
        assert_eq!(
            message(&object(), &[invalid, malformed]),
            "spec.hosts: required; spec.http[0]: bad; unknown field `colour`"
        );
        let long = RegistryError::Invalid {
            origin: "x".into(),
            detail: "é".repeat(MAX_MESSAGE),
        };
        let message = message(&object(), &[long]);
        assert!(message.len() <= MAX_MESSAGE && message.ends_with('…'));
    }

    #[test]
    fn the_event_is_a_warning_on_the_object() {
        let event = event(&object(), "m".into());
        assert_eq!(event.involved_object, object().reference);
        assert_eq!(event.metadata.namespace.as_deref(), Some("ns"));
        assert!(event.metadata.name.is_some_and(|n| n.starts_with("vs.")));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reason.as_deref(), Some(REASON));
        assert_eq!(
            event.source.and_then(|s| s.component).as_deref(),
            Some(COMPONENT)
        );
    }
}
