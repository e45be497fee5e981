//! What the analyzers read: the accepted objects by kind, the known services and workloads,
//! the credentials; and what they report, a [`Found`] on an object's field.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use wayfinder_registry::{Labels, Registration};

use super::Known;
use super::lines::{Field, Lines};
use super::message::{Code, Message, Subject};
use crate::documents::Origin;
use crate::objects::Located;
use crate::validate::names::host_within;
use crate::{ConfigSpec, DestinationRule, Gateway, PeerAuthentication, Sidecar, VirtualService};

/// A workload: what selectors match.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Workload<'a> {
    /// Its namespace.
    pub(crate) namespace: &'a str,
    /// Its labels.
    pub(crate) labels: &'a Labels,
}

/// Everything an analyzer reads.
pub(crate) struct Context<'a> {
    /// The settings and registries given.
    pub(crate) known: &'a Known,
    /// The accepted configuration objects, in file order.
    pub(crate) config: &'a [Located],
    /// Every known service by hostname, in order: the analysed files' ServiceEntries, then
    /// the registries'. An index, so that a mesh of thousands of routes is looked up in
    /// linear time.
    by_host: HashMap<&'a str, Vec<&'a Registration>>,
    /// The known services of wildcard hosts (`*.example.com`), in the same order.
    wildcards: Vec<&'a Registration>,
    /// Every known workload.
    pub(crate) workloads: Vec<Workload<'a>>,
    /// The `Secret`s of the analysed files, as (namespace, name).
    pub(crate) secrets: &'a BTreeSet<(String, String)>,
}

impl<'a> Context<'a> {
    /// What the analyzers read: `services` in precedence order (the analysed files'
    /// ServiceEntries, then the registries').
    pub(crate) fn new(
        known: &'a Known,
        config: &'a [Located],
        services: impl IntoIterator<Item = &'a Registration>,
        workloads: Vec<Workload<'a>>,
        secrets: &'a BTreeSet<(String, String)>,
    ) -> Self {
        let mut by_host: HashMap<&str, Vec<&Registration>> = HashMap::new();
        let mut wildcards = Vec::new();
        for registration in services {
            let host = &*registration.service.hostname;
            by_host.entry(host).or_default().push(registration);
            if host.starts_with('*') {
                wildcards.push(registration);
            }
        }
        Self {
            known,
            config,
            by_host,
            wildcards,
            workloads,
            secrets,
        }
    }

    /// Istio's `ConvertHostToFQDN`: a name without a dot (and not a wildcard) is a service of
    /// `namespace`; anything else is taken as written.
    pub(crate) fn fqdn(&self, host: &str, namespace: &str) -> String {
        if host.starts_with('*') || host.contains('.') {
            host.to_owned()
        } else {
            format!("{host}.{namespace}.svc.{}", self.known.domain)
        }
    }

    /// The service `host` names from `namespace` (Istio's `GetDestinationHost`): one of that
    /// name visible there, else a wildcard service covering it.
    pub(crate) fn service(&self, host: &str, namespace: &str) -> Option<&'a Registration> {
        let fqdn = self.fqdn(host, namespace);
        let named = self.by_host.get(fqdn.as_str()).into_iter().flatten();
        let visible = |r: &&&'a Registration| visible_from(r, namespace);
        named
            .filter(visible)
            .chain(
                self.wildcards
                    .iter()
                    .filter(visible)
                    .filter(|r| host_within(&fqdn, &r.service.hostname)),
            )
            .next()
            .copied()
    }

    /// The services a DestinationRule's `host` applies to from `namespace`: the one it names,
    /// or, for a wildcard (`*.example.com`), every visible service it covers (where Istio looks
    /// only for a ServiceEntry of that wildcard).
    pub(crate) fn services_of(&self, host: &str, namespace: &str) -> Vec<&'a Registration> {
        if !host.starts_with('*') {
            return self.service(host, namespace).into_iter().collect();
        }
        let all = self.by_host.values().flatten().copied();
        all.filter(|r| visible_from(r, namespace) && host_within(&r.service.hostname, host))
            .collect()
    }

    /// The first workload with every label of `selector`, of `namespace` when one is given.
    pub(crate) fn workload(
        &self,
        namespace: Option<&str>,
        selector: &BTreeMap<String, String>,
    ) -> Option<Workload<'a>> {
        self.workloads.iter().copied().find(|w| {
            namespace.is_none_or(|ns| ns == w.namespace)
                && selector
                    .iter()
                    .all(|(k, v)| w.labels.get(k.as_str()).is_some_and(|l| **l == **v))
        })
    }

    /// The VirtualServices.
    pub(crate) fn virtual_services(
        &self,
    ) -> impl Iterator<Item = (&'a Located, &'a VirtualService)> {
        self.config.iter().filter_map(|l| match &l.object.spec {
            ConfigSpec::VirtualService(vs) => Some((l, vs)),
            _ => None,
        })
    }

    /// The DestinationRules.
    pub(crate) fn destination_rules(
        &self,
    ) -> impl Iterator<Item = (&'a Located, &'a DestinationRule)> {
        self.config.iter().filter_map(|l| match &l.object.spec {
            ConfigSpec::DestinationRule(dr) => Some((l, &**dr)),
            _ => None,
        })
    }

    /// The Gateways.
    pub(crate) fn gateways(&self) -> impl Iterator<Item = (&'a Located, &'a Gateway)> {
        self.config.iter().filter_map(|l| match &l.object.spec {
            ConfigSpec::Gateway(gw) => Some((l, gw)),
            _ => None,
        })
    }

    /// The Sidecars.
    pub(crate) fn sidecars(&self) -> impl Iterator<Item = (&'a Located, &'a Sidecar)> {
        self.config.iter().filter_map(|l| match &l.object.spec {
            ConfigSpec::Sidecar(sc) => Some((l, sc)),
            _ => None,
        })
    }

    /// The PeerAuthentications.
    pub(crate) fn peer_authentications(
        &self,
    ) -> impl Iterator<Item = (&'a Located, &'a PeerAuthentication)> + Clone {
        self.config.iter().filter_map(|l| match &l.object.spec {
            ConfigSpec::PeerAuthentication(pa) => Some((l, pa)),
            _ => None,
        })
    }
}

/// Whether a proxy in `namespace` sees `registration` (its `exportTo`).
fn visible_from(registration: &Registration, namespace: &str) -> bool {
    let service = &registration.service;
    service
        .export_to
        .visible_from(&service.namespace, namespace)
}

/// What an analyzer found: a message's code and text, on a field of an object.
pub(crate) struct Found {
    code: Code,
    kind: Arc<str>,
    namespace: Arc<str>,
    name: Arc<str>,
    origin: Origin,
    field: Field,
    text: String,
}

impl Found {
    /// A finding on `field` of the accepted object `on`.
    pub(crate) fn on(on: &Located, field: Field, code: Code, text: String) -> Self {
        let meta = &on.object.meta;
        Self {
            code,
            kind: on.object.kind().name().into(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            origin: on.origin.clone(),
            field,
            text,
        }
    }

    /// Istio's `ReferencedResourceNotFound` (IST0101) on `field` of `on`: `Referenced WHAT
    /// not found: "VALUE"`.
    pub(crate) fn not_found(on: &Located, field: Field, what: &str, value: &str) -> Self {
        let text = super::message::not_found(what, value);
        Self::on(on, field, Code::ReferencedResourceNotFound, text)
    }

    /// A finding on an object known only by its kind, namespace and name (one validation
    /// refused, or a ServiceEntry).
    pub(crate) fn named(
        (kind, namespace, name): (&str, &str, &str),
        origin: Origin,
        field: Field,
        code: Code,
        text: String,
    ) -> Self {
        Self {
            code,
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            origin,
            field,
            text,
        }
    }

    /// The message, with the field's line.
    pub(crate) fn resolve(self, lines: &mut Lines) -> Message {
        let line = lines.line(&self.origin, &self.field);
        Message {
            code: self.code,
            subject: Subject {
                kind: self.kind,
                namespace: self.namespace,
                name: self.name,
                path: self.origin.path,
                line,
            },
            text: self.text,
        }
    }
}
