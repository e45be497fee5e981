//! The helper methods of [`FakeApiServer`]: state written and read directly, knobs and counts.
//! None of them meets a fault or is counted.

use std::time::Duration;

use serde_json::Value;

use super::FakeApiServer;
use crate::fake::kinds::{self, KINDS};
use crate::fake::store::{Key, Stored};
use crate::fake::write::{Mode, Preconditions, Write};
use crate::fake::{Counts, Fault};

/// The field manager of objects written by the helpers.
const MANAGER: &str = "wayfinder-fake";

impl FakeApiServer {
    /// Makes `token` a valid token of the service account `namespace/service_account` for
    /// `audiences` (empty: the API server's own), as TokenReview will say.
    pub fn add_token(
        &self,
        token: &str,
        namespace: &str,
        service_account: &str,
        audiences: &[&str],
    ) {
        let audiences = if audiences.is_empty() {
            vec![crate::fake::token_review::API_AUDIENCE.to_owned()]
        } else {
            audiences.iter().map(|a| (*a).to_owned()).collect()
        };
        self.shared.lock().tokens.insert(
            token.to_owned(),
            crate::fake::token_review::Token {
                namespace: namespace.to_owned(),
                service_account: service_account.to_owned(),
                audiences,
            },
        );
    }

    /// Lets `user` (`system:serviceaccount:NAMESPACE:NAME` for a service account) `verb` the
    /// `resource` in `namespace` (`""`: in every namespace), as SubjectAccessReview will say;
    /// the answer's reason names a synthetic RoleBinding (ClusterRoleBinding) of the grant.
    /// `resource` is `RESOURCE[.GROUP][/SUBRESOURCE]` as the review asks (`secrets`,
    /// `deployments.apps`, `pods/log`); `*` as the verb or the resource matches any.
    pub fn allow(&self, user: &str, namespace: &str, verb: &str, resource: &str) {
        self.shared
            .lock()
            .grants
            .push(crate::fake::access_review::Grant {
                user: user.to_owned(),
                namespace: namespace.to_owned(),
                verb: verb.to_owned(),
                resource: resource.to_owned(),
            });
    }

    /// Creates or replaces an object given as full JSON (`apiVersion`, `kind`,
    /// `metadata.name`, and `metadata.namespace` for namespaced kinds, `default` if absent),
    /// status included. Sets `uid` (kept across replaces), `creationTimestamp`,
    /// `resourceVersion`, `generation` and `managedFields`; sends `ADDED` or `MODIFIED`.
    /// Returns the new resourceVersion. Panics on a kind the fake does not serve or an
    /// invalid object.
    pub fn apply(&self, object: Value) -> u64 {
        self.apply_many([object])
    }

    /// [`FakeApiServer::apply`] for many objects under one lock; returns the last
    /// resourceVersion.
    pub fn apply_many(&self, objects: impl IntoIterator<Item = Value>) -> u64 {
        self.shared.commit(|st| {
            for object in objects {
                let field = |f: &str| {
                    object
                        .get(f)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                let (slot, version) = lookup(&field("apiVersion"), &field("kind"));
                let write = Write {
                    slot,
                    version,
                    namespace: None,
                    name: None,
                    object,
                    mode: Mode::Apply,
                    manager: MANAGER,
                };
                if let Err(e) = st.write(write) {
                    panic!("fake API server: apply failed: {}", e.to_status());
                }
            }
            st.rv
        })
    }

    /// Deletes an object at once (finalizers notwithstanding) and sends `DELETED` with a new
    /// resourceVersion. Returns whether it existed. `namespace` is ignored for cluster-scoped
    /// kinds and defaults to `default`.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        let (slot, _) = lookup(api_version, kind);
        let key = key(slot, namespace, name);
        self.shared
            .commit(|st| st.delete(slot, key, &Preconditions::default(), false))
            .is_ok()
    }

    /// The current object, if any, at the version `api_version` names.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let (slot, version) = lookup(api_version, kind);
        let st = self.shared.lock();
        let stored = st.stores[slot].objects.get(&key(slot, namespace, name))?;
        Some(typed(slot, version, stored))
    }

    /// Every object of a kind (all namespaces), in (namespace, name) order.
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let (slot, version) = lookup(api_version, kind);
        let st = self.shared.lock();
        st.stores[slot]
            .objects
            .values()
            .map(|stored| typed(slot, version, stored))
            .collect()
    }

    /// The current resourceVersion (global, like etcd's revision; only ever grows).
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }

    /// Forgets the history up to now, as etcd compaction does: lists and watches asking for an
    /// older resourceVersion, and continue tokens from before, get 410 `Expired`.
    pub fn compact(&self) {
        self.shared.lock().compact();
    }

    /// Ends every open watch stream now, as a load balancer or a restarting API server
    /// would, and keeps serving.
    pub fn cut_watches(&self) {
        self.shared.cut_watches();
    }

    /// Sets the fault every HTTP request meets ([`Fault::None`] clears it; held requests are
    /// then served).
    pub fn set_fault(&self, fault: Fault) {
        self.shared.set_fault(fault);
    }

    /// Caps how long a watch lasts (the client's `timeoutSeconds` applies when shorter);
    /// `None`: only `timeoutSeconds`. Applies to watches opened afterwards.
    pub fn set_watch_timeout(&self, cap: Option<Duration>) {
        self.shared.lock().watch_cap = cap;
    }

    /// How often watches with `allowWatchBookmarks=true` get a `BOOKMARK` (default 1 s; real
    /// servers about once a minute). Applies to watches opened afterwards.
    pub fn set_bookmark_interval(&self, every: Duration) {
        self.shared.lock().bookmark_every = every.max(Duration::from_millis(1));
    }

    /// Requests answered so far.
    pub fn counts(&self) -> Counts {
        self.shared.lock().counts.clone()
    }

    /// Resolves once at least `n` watch streams on `plural` (`services`, `endpointslices`,
    /// `virtualservices`, …) are open.
    pub async fn until_watching(&self, plural: &str, n: usize) {
        self.shared.until_watching(plural, n).await;
    }

    /// The Events (core `v1` and `events.k8s.io/v1`) that clients created with `POST`, in
    /// order, as created.
    pub fn events(&self) -> Vec<Value> {
        self.shared.lock().events.clone()
    }
}

/// The stored kind of `api_version`/`kind`; panics for kinds the fake does not serve.
fn lookup(api_version: &str, kind: &str) -> (usize, &'static str) {
    kinds::by_type(api_version, kind)
        .unwrap_or_else(|| panic!("the fake API server does not serve {api_version} {kind}"))
}

fn key(slot: usize, namespace: Option<&str>, name: &str) -> Key {
    let namespace = match (KINDS[slot].namespaced, namespace) {
        (false, _) => "",
        (true, ns) => ns.unwrap_or("default"),
    };
    (namespace.to_owned(), name.to_owned())
}

fn typed(slot: usize, version: &str, stored: &Stored) -> Value {
    let kind = &KINDS[slot];
    let mut out = Vec::with_capacity(stored.json.len() + 64);
    stored.write_typed(&kind.api_version(version), kind.kind, &mut out);
    serde_json::from_slice(&out).unwrap_or(Value::Null)
}
