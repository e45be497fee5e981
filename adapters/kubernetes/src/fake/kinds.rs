//! The resources the fake serves: one row per stored kind, found by URL or by type.

/// One stored kind of object and the API versions it is served at.
#[derive(Debug)]
pub(super) struct Kind {
    /// API group; `""` for the core group (`/api/v1`).
    pub(super) group: &'static str,
    /// Versions it is served at; objects come back with the version a request names.
    pub(super) versions: &'static [&'static str],
    /// Resource name in URLs (`services`).
    pub(super) plural: &'static str,
    /// Singular resource name (`service`), for discovery.
    pub(super) singular: &'static str,
    /// `kind` (`Service`).
    pub(super) kind: &'static str,
    /// Whether objects live in a namespace.
    pub(super) namespaced: bool,
    /// Built into the API server (not a CRD): list items then carry no `apiVersion`/`kind`.
    pub(super) builtin: bool,
    /// Has a `/status` subresource: writes to the object keep its status, and writes to
    /// `/status` change only the status.
    pub(super) status: bool,
    /// Short names, for discovery.
    pub(super) short: &'static [&'static str],
}

impl Kind {
    /// `apiVersion` of this kind at `version` (`v1`, `discovery.k8s.io/v1`).
    pub(super) fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// The served version named `version`, as a `'static` string.
    pub(super) fn version(&self, version: &str) -> Option<&'static str> {
        self.versions.iter().copied().find(|v| *v == version)
    }
}

const CORE: &[&str] = &["v1"];
const ISTIO: &[&str] = &["v1", "v1beta1", "v1alpha3"];
const ISTIO_GROUP: &str = "networking.istio.io";
const SECURITY: &[&str] = &["v1", "v1beta1"];
const SECURITY_GROUP: &str = "security.istio.io";

const fn core(plural: &'static str, singular: &'static str, kind: &'static str) -> Kind {
    Kind {
        group: "",
        versions: CORE,
        plural,
        singular,
        kind,
        namespaced: true,
        builtin: true,
        status: true,
        short: &[],
    }
}

const fn istio(plural: &'static str, singular: &'static str, kind: &'static str) -> Kind {
    Kind {
        group: ISTIO_GROUP,
        versions: ISTIO,
        plural,
        singular,
        kind,
        namespaced: true,
        builtin: false,
        status: true,
        short: &[],
    }
}

const fn security(plural: &'static str, singular: &'static str, kind: &'static str) -> Kind {
    Kind {
        group: SECURITY_GROUP,
        versions: SECURITY,
        ..istio(plural, singular, kind)
    }
}

/// A built-in kind of the workload and access APIs (`apps/v1` Deployments, RBAC, …): stored
/// and served like any other, so that `kubectl apply` finds their REST mapping.
const fn workload(
    group: &'static str,
    versions: &'static [&'static str],
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
) -> Kind {
    Kind {
        group,
        versions,
        status: false,
        ..core(plural, singular, kind)
    }
}

/// Every stored kind; a kind's index here is its storage slot.
pub(super) const KINDS: &[Kind] = &[
    Kind {
        short: &["svc"],
        ..core("services", "service", "Service")
    },
    Kind {
        short: &["po"],
        ..core("pods", "pod", "Pod")
    },
    Kind {
        namespaced: false,
        short: &["no"],
        ..core("nodes", "node", "Node")
    },
    Kind {
        namespaced: false,
        short: &["ns"],
        ..core("namespaces", "namespace", "Namespace")
    },
    Kind {
        status: false,
        short: &["ev"],
        ..core("events", "event", "Event")
    },
    Kind {
        status: false,
        ..core("secrets", "secret", "Secret")
    },
    Kind {
        group: "discovery.k8s.io",
        status: false,
        ..core("endpointslices", "endpointslice", "EndpointSlice")
    },
    Kind {
        group: "events.k8s.io",
        status: false,
        short: &["ev"],
        ..core("events", "event", "Event")
    },
    // Leader election's `coordination.k8s.io/v1` Leases: create, get and replace with
    // optimistic concurrency (a `PUT` naming an old resourceVersion is a 409 Conflict).
    Kind {
        group: "coordination.k8s.io",
        status: false,
        ..core("leases", "lease", "Lease")
    },
    Kind {
        short: &["vs"],
        ..istio("virtualservices", "virtualservice", "VirtualService")
    },
    Kind {
        short: &["dr"],
        ..istio("destinationrules", "destinationrule", "DestinationRule")
    },
    Kind {
        short: &["gw"],
        ..istio("gateways", "gateway", "Gateway")
    },
    Kind {
        short: &["se"],
        ..istio("serviceentries", "serviceentry", "ServiceEntry")
    },
    Kind {
        short: &["we"],
        ..istio("workloadentries", "workloadentry", "WorkloadEntry")
    },
    istio("sidecars", "sidecar", "Sidecar"),
    Kind {
        short: &["wg"],
        ..istio("workloadgroups", "workloadgroup", "WorkloadGroup")
    },
    Kind {
        versions: &["v1alpha3"],
        ..istio("envoyfilters", "envoyfilter", "EnvoyFilter")
    },
    Kind {
        versions: &["v1beta1"],
        ..istio("proxyconfigs", "proxyconfig", "ProxyConfig")
    },
    Kind {
        short: &["ap"],
        ..security(
            "authorizationpolicies",
            "authorizationpolicy",
            "AuthorizationPolicy",
        )
    },
    Kind {
        short: &["pa"],
        ..security(
            "peerauthentications",
            "peerauthentication",
            "PeerAuthentication",
        )
    },
    Kind {
        short: &["ra"],
        ..security(
            "requestauthentications",
            "requestauthentication",
            "RequestAuthentication",
        )
    },
    Kind {
        short: &["sa"],
        ..workload(
            "",
            CORE,
            "serviceaccounts",
            "serviceaccount",
            "ServiceAccount",
        )
    },
    workload("", CORE, "podtemplates", "podtemplate", "PodTemplate"),
    Kind {
        status: true,
        short: &["deploy"],
        ..workload("apps", CORE, "deployments", "deployment", "Deployment")
    },
    Kind {
        status: true,
        short: &["pdb"],
        ..workload(
            "policy",
            CORE,
            "poddisruptionbudgets",
            "poddisruptionbudget",
            "PodDisruptionBudget",
        )
    },
    Kind {
        status: true,
        short: &["hpa"],
        ..workload(
            "autoscaling",
            &["v2"],
            "horizontalpodautoscalers",
            "horizontalpodautoscaler",
            "HorizontalPodAutoscaler",
        )
    },
    Kind {
        namespaced: false,
        ..workload(RBAC, CORE, "clusterroles", "clusterrole", "ClusterRole")
    },
    Kind {
        namespaced: false,
        ..workload(
            RBAC,
            CORE,
            "clusterrolebindings",
            "clusterrolebinding",
            "ClusterRoleBinding",
        )
    },
    workload(RBAC, CORE, "roles", "role", "Role"),
    workload(RBAC, CORE, "rolebindings", "rolebinding", "RoleBinding"),
];

const RBAC: &str = "rbac.authorization.k8s.io";

/// The kind served at `/api[s]/{group}/{version}/…/{plural}`, with its slot and the version.
pub(super) fn by_path(group: &str, version: &str, plural: &str) -> Option<(usize, &'static str)> {
    KINDS.iter().enumerate().find_map(|(i, k)| {
        let v = k.version(version)?;
        (k.group == group && k.plural == plural).then_some((i, v))
    })
}

/// The kind with this `apiVersion` and `kind`, with its slot and the version.
pub(super) fn by_type(api_version: &str, kind: &str) -> Option<(usize, &'static str)> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    KINDS.iter().enumerate().find_map(|(i, k)| {
        let v = k.version(version)?;
        (k.group == group && k.kind == kind).then_some((i, v))
    })
}

/// The groups other than core, each once, in table order.
pub(super) fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for k in KINDS {
        if !k.group.is_empty() && !groups.contains(&k.group) {
            groups.push(k.group);
        }
    }
    groups
}

/// The versions served in `group`, preferred first.
pub(super) fn versions(group: &str) -> &'static [&'static str] {
    KINDS
        .iter()
        .find(|k| k.group == group)
        .map_or(&[], |k| k.versions)
}
