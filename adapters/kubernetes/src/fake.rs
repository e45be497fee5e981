//! An in-process fake of the Kubernetes API server, for tests and load runs (feature `fake`).
//!
//! [`FakeApiServer`] serves, over plain HTTP on `127.0.0.1` and a port the system picks, the
//! resources a service-discovery client reads: core `v1` Services, Pods, Nodes, Namespaces,
//! Events, Secrets, ServiceAccounts and PodTemplates, `discovery.k8s.io/v1` EndpointSlices,
//! what wayfinder's manifests hold (`apps/v1` Deployments, `policy/v1` PodDisruptionBudgets,
//! `autoscaling/v2` HorizontalPodAutoscalers, `rbac.authorization.k8s.io/v1` roles and
//! bindings, stored like the rest, so that `kubectl apply` finds their REST mapping), `events.k8s.io/v1` Events, and Istio's
//! `networking.istio.io` VirtualServices, DestinationRules, Gateways, ServiceEntries,
//! WorkloadEntries and Sidecars at `v1`, `v1beta1` and `v1alpha3`, and `security.istio.io`
//! AuthorizationPolicies, PeerAuthentications and RequestAuthentications at `v1` and `v1beta1`,
//! `coordination.k8s.io/v1` Leases (leader election)
//! (one store per kind; objects come back with the version asked for). Also `/version` and the discovery documents `/api`,
//! `/apis`, `/apis/{group}`, `/api/v1` and `/apis/{group}/{version}`, and two reviews (not in
//! discovery): `authentication.k8s.io/v1` TokenReview of the tokens a test registers
//! ([`FakeApiServer::add_token`]) and `authorization.k8s.io/v1` SubjectAccessReview of what a
//! test granted ([`FakeApiServer::allow`]), answered as the RBAC authorizer answers.
//! Every distinct call is recorded as RBAC names it ([`Call`], in [`Counts::calls`]), so a
//! test can check a client's calls against a ClusterRole.
//!
//! It follows the API conventions ("API Concepts", "Efficient detection of changes",
//! "Resource versions") rather than any one client:
//! - one global resourceVersion, bumped by every write; a write that changes nothing takes no
//!   version and sends no event (test helpers always write);
//! - lists with `labelSelector` (`=`, `==`, `!=`, exists, `!`, `in`, `notin`), `fieldSelector`
//!   (`metadata.name`, `metadata.namespace`, and the real server's few extra fields per kind),
//!   `limit`/`continue` (pages in (namespace, name) order; every page shows the state at the
//!   first page's resourceVersion; 410 `Expired` once that is compacted), and
//!   `resourceVersion`/`resourceVersionMatch` per the "Semantics for get and list" table
//!   (`"0"` ignores `limit`, as the real server's watch cache does);
//! - list items of built-in kinds carry no `apiVersion`/`kind`; those of Istio's CRDs do;
//! - watches: synthetic `ADDED` events when started without a resourceVersion (or `"0"`),
//!   replay from a resourceVersion, `ERROR` with a 410 `Expired` Status for a compacted one,
//!   `BOOKMARK`s with `allowWatchBookmarks`, `sendInitialEvents` with the
//!   `k8s.io/initial-events-end` bookmark, `timeoutSeconds` (default 30 minutes), and
//!   `DELETED`/`ADDED` for objects leaving or entering a selector;
//! - create (`generateName` too), replace with optimistic concurrency, JSON merge patch (also
//!   for strategic merge patch), JSON patch, `/status` subresources, delete (with
//!   preconditions and finalizers), delete collection; errors are `Status` bodies;
//! - server-set `uid`, `creationTimestamp`, `generation` (bumped when anything but metadata
//!   and status changes) and a `managedFields` entry per writer.
//!
//! Where it departs from a real server, on purpose:
//! - no authentication, authorization, admission, defaulting or schema validation beyond
//!   object names (requests are not checked against the grants SubjectAccessReview answers
//!   from, and a Secret without `type` stays without one, which field selectors see as `""`
//!   where a real server would have defaulted it to `Opaque`); namespaces need not exist; the
//!   fake starts empty (no `default` namespace, no `kubernetes` Service);
//! - server-side apply (`application/apply-patch+yaml`) is answered with 415, protobuf and
//!   `dryRun` are not served, and the legacy `/api/v1/watch/…` paths are not either;
//! - a watch is never ended for being slow: the kept history is its buffer. History is kept
//!   until [`FakeApiServer::compact`], or, per kind, until it holds about a million changes;
//! - on HTTP create, Services, Pods and Istio objects lose their status (Pods start
//!   `Pending`, Namespaces `Active`); the helpers ([`FakeApiServer::apply`]) store objects as
//!   given, status included, as a controller would.
//!
//! Note that `kube::Client` retries 429, 503 and 504 answers itself (up to 15 times with
//! exponential backoff) unless its config sets `default_retry = false`.

mod access_review;
mod discovery;
mod http;
mod kinds;
mod list;
mod meta;
mod objects;
mod params;
mod patch;
mod route;
mod selector;
mod server;
mod state;
mod status;
mod store;
mod token_review;
mod watch;
mod write;

use std::collections::{BTreeMap, BTreeSet};

pub use server::FakeApiServer;

/// Requests answered so far over HTTP (fault answers included; held requests count once
/// answered); the helper methods of [`FakeApiServer`] are not counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// List requests by plural (`services`, `endpointslices`, …).
    pub lists: BTreeMap<String, usize>,
    /// Watch requests by plural.
    pub watches: BTreeMap<String, usize>,
    /// Write requests: `POST`, `PUT`, `PATCH` and `DELETE`, whatever their outcome.
    pub writes: usize,
    /// 410 answers: lists and watch `ERROR` events for an expired resourceVersion.
    pub gone: usize,
    /// TokenReviews answered.
    pub token_reviews: usize,
    /// SubjectAccessReviews answered.
    pub access_reviews: usize,
    /// Every distinct API call, as RBAC names it: what a ClusterRole must grant the client.
    pub calls: BTreeSet<Call>,
}

/// One API call as RBAC authorizes it (the request attributes of Kubernetes' "Authorization"
/// docs): `verb` (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
/// `deletecollection`), API `group` (`""` for core) and `resource` (with `/status` for the
/// subresource). Discovery documents and `/version` are not calls: every account may read them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Call {
    /// The verb.
    pub verb: String,
    /// The API group.
    pub group: String,
    /// The resource, `workloadentries/status` for a subresource.
    pub resource: String,
}

/// A failure every HTTP request meets, watches and `/version` included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No fault.
    None,
    /// Answer with this HTTP status and a `Status` body (reason `ServiceUnavailable` for 503,
    /// `InternalError` for 500, `TooManyRequests` for 429, …).
    Status(u16),
    /// Hold requests without an answer until the fault changes; then serve them as usual.
    Hang,
}
