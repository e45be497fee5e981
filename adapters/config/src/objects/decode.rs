//! A file into configuration objects, each judged: its type read through [`documents::parse`],
//! its metadata handled as the File registry handles it (lenient, `default` namespace), the
//! fields its spec types skipped judged by [`crate::fields`] (Istio's: a warning; a typo: an
//! error), and every object checked by [`validate`] plus the rules no spec can break on its own
//! (a name). Documents that do not parse, and the security policies wayfinder does not read
//! (see [`crate::security`]), are refused on their own.
//!
//! Nothing here logs: the config source logs what it skips and the warnings it finds, the
//! offline check turns them into report lines, and neither wants the other's output.

use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use wayfinder_registry::RegistryError;

use crate::documents::{self, Decode, Head, Origin, TypeMeta};
use crate::fields;
use crate::istio::{self, IstioObject, Metadata, Object};
use crate::keep::ObjectId;
use crate::security;
use crate::services::malformed;
use crate::validate::{self, Problem};
use crate::{ConfigMeta, ConfigObject, ConfigSpec, FieldPath, Kind, Refusal};

/// How objects are validated: [`validate::validate`], or a stand-in in unit tests.
pub type Validator = fn(&ConfigObject) -> Vec<Problem>;

/// The validator of the real source.
pub(crate) const VALIDATE: Validator = validate::validate;

/// What a document of a file holds, for the config source.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    /// An object of a kind the config source reads, with its problems.
    Object(Judged),
    /// A `ServiceEntry` or `WorkloadEntry`: read by the File registry, not here.
    Registry,
    /// An object of a kind nothing in wayfinder reads.
    Unknown {
        /// Where it is.
        origin: Origin,
        /// Its type.
        meta: TypeMeta,
    },
    /// A document refused before it could be judged as an object: it does not parse, or it
    /// is a security policy wayfinder must not ignore and does not enforce yet.
    Refused(Rejected),
}

/// A document refused as a whole, and what is known of the object it holds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rejected {
    pub(crate) origin: Origin,
    /// What could be read of the document.
    pub(crate) head: Option<Head>,
    pub(crate) error: RegistryError,
}

impl Rejected {
    /// Which object it holds, when that could be read.
    pub(crate) fn id(&self) -> Option<ObjectId> {
        self.head.as_ref().and_then(ObjectId::of)
    }

    /// The entry of the source's refused list.
    pub(crate) fn refusal(&self) -> Refusal {
        let head = self.head.as_ref();
        let text = |s: Option<&String>| s.map(|s| Arc::from(s.as_str()));
        let namespace = head
            .and_then(|h| h.name.as_ref().map(|_| h.namespace.as_deref()))
            .map(|ns| Arc::from(ns.filter(|ns| !ns.is_empty()).unwrap_or("default")));
        Refusal {
            file: Arc::from(self.origin.path.display().to_string()),
            document: Some(self.origin.document),
            line: Some(self.origin.line),
            kind: text(head.map(|h| &h.meta.kind)),
            namespace,
            name: text(head.and_then(|h| h.name.as_ref())),
            error: detail(&self.error),
        }
    }
}

/// An object read from a file and checked.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Judged {
    /// Where it starts.
    pub(crate) origin: Origin,
    /// The object; its `meta.origin` is `origin` displayed, its `meta.warnings` the problems
    /// that are not fatal.
    pub(crate) object: Arc<ConfigObject>,
    /// Every problem found, fatal or not.
    pub(crate) problems: Vec<Problem>,
}

impl Judged {
    /// The error that rejects the object, when any of its problems is fatal: it names the
    /// object and lists every fatal problem as `field: message`, `; `-separated.
    pub(crate) fn rejection(&self) -> Option<RegistryError> {
        let fatal: Vec<String> = self
            .problems
            .iter()
            .filter(|p| p.fatal)
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect();
        if fatal.is_empty() {
            return None;
        }
        Some(RegistryError::Invalid {
            origin: self.origin.to_string(),
            detail: format!("{}: {}", self.object.key(), fatal.join("; ")),
        })
    }

    /// The problems that do not reject the object.
    pub(crate) fn warnings(&self) -> impl Iterator<Item = &Problem> {
        self.problems.iter().filter(|p| !p.fatal)
    }

    /// The entry of the source's refused list, when the object is rejected.
    pub(crate) fn refusal(&self) -> Option<Refusal> {
        let err = self.rejection()?;
        let meta = &self.object.meta;
        Some(Refusal {
            file: Arc::from(self.origin.path.display().to_string()),
            document: Some(self.origin.document),
            line: Some(self.origin.line),
            kind: Some(Arc::from(self.object.kind().name())),
            namespace: Some(meta.namespace.clone()),
            name: Some(meta.name.clone()),
            error: detail(&err),
        })
    }
}

/// Reads every document of a file, in file order: each object judged on its own, each
/// document that does not parse refused on its own.
pub(crate) fn read(path: &std::path::Path, bytes: &[u8], validator: Validator) -> Vec<Item> {
    let documents = documents::parse::<Box<Decoded>>(path, bytes);
    let items = documents.into_iter().map(|document| match document {
        Err(err) => Item::Refused(Rejected {
            origin: err.origin.clone(),
            head: err.head.as_deref().cloned(),
            error: malformed(err),
        }),
        Ok(item) => match item.object {
            Some(decoded) => Item::Object(judge(item.origin, *decoded, &item.skipped, validator)),
            None if IstioObject::accepts(&item.meta) => Item::Registry,
            None if security::is_policy(&item.meta) => {
                let head = item.head();
                Item::Refused(security::refuse(item.origin, head))
            }
            None => Item::Unknown {
                origin: item.origin,
                meta: item.meta,
            },
        },
    });
    items.collect()
}

/// What to say about an object nothing in wayfinder reads.
pub(crate) fn unknown_kind(meta: &TypeMeta) -> String {
    format!(
        "skipping {meta}: an unknown kind (wayfinder reads ServiceEntry, WorkloadEntry, \
         VirtualService, DestinationRule, Gateway, Sidecar and WorkloadGroup of {}/{{{}}}, \
         EnvoyFilter of {}, ProxyConfig of {}, and \
         PeerAuthentication, AuthorizationPolicy and RequestAuthentication of {}/{{{}}})",
        istio::GROUP,
        istio::VERSIONS.join(","),
        istio::ENVOY_FILTER_API_VERSION,
        istio::PROXY_CONFIG_API_VERSION,
        security::GROUP,
        security::VERSIONS.join(","),
    )
}

/// An error's text without its origin (which a refusal gives as file, document and line).
fn detail(err: &RegistryError) -> String {
    match err {
        RegistryError::Malformed { detail, .. } => format!("malformed: {detail}"),
        RegistryError::Invalid { detail, .. } => format!("invalid: {detail}"),
        RegistryError::Unavailable { detail, .. } => format!("unavailable: {detail}"),
    }
}

/// Builds the object and finds its problems: the validator's, the skipped fields' (see
/// [`crate::fields`]) and a missing name.
fn judge(origin: Origin, decoded: Decoded, skipped: &[FieldPath], validator: Validator) -> Judged {
    let Decoded { metadata, spec } = decoded;
    let mut object = ConfigObject {
        meta: ConfigMeta {
            name: metadata.name.as_str().into(),
            namespace: metadata.namespace().into(),
            labels: metadata.labels.unwrap_or_default(),
            annotations: metadata.annotations.unwrap_or_default(),
            origin: origin.to_string().into(),
            warnings: Arc::default(),
        },
        spec,
    };
    let mut problems = validator(&object);
    let fields = fields::judge(object.kind().name(), skipped, &problems);
    problems.extend(fields);
    // An object without a name has no key to be replaced or removed by. The validator may
    // say so too; one line about it is enough.
    if object.meta.name.is_empty() && !problems.iter().any(|p| p.field == "metadata.name") {
        problems.insert(
            0,
            Problem {
                field: "metadata.name".into(),
                message: "must not be empty".into(),
                fatal: true,
            },
        );
    }
    object.meta.warnings = problems
        .iter()
        .filter(|p| !p.fatal)
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect();
    Judged {
        origin,
        object: Arc::new(object),
        problems,
    }
}

/// An object of one of the config kinds, as written: metadata and spec. Decoded boxed: a
/// file's parsed documents are all held until they are judged, and inline they were 336
/// bytes each (75,000 VirtualServices: a 44 MB list, besides the objects).
#[derive(Debug)]
struct Decoded {
    metadata: Metadata,
    spec: ConfigSpec,
}

impl Decoded {
    /// Fits the spec's lists to their contents as each object is read, so that a large
    /// file never holds all its objects with the room serde left in their lists.
    fn new<S>(object: Object<S>, spec: fn(S) -> ConfigSpec) -> Box<Self> {
        let mut spec = spec(object.spec);
        spec.shrink_to_fit();
        Box::new(Self {
            metadata: object.metadata,
            spec,
        })
    }
}

impl Decode for Box<Decoded> {
    fn accepts(meta: &TypeMeta) -> bool {
        match Kind::from_name(&meta.kind) {
            Some(
                Kind::PeerAuthentication | Kind::AuthorizationPolicy | Kind::RequestAuthentication,
            ) => security::is_read(meta),
            // Istio serves EnvoyFilter in v1alpha3 only.
            Some(Kind::EnvoyFilter) => meta.api_version == istio::ENVOY_FILTER_API_VERSION,
            // And ProxyConfig in v1beta1 only.
            Some(Kind::ProxyConfig) => meta.api_version == istio::PROXY_CONFIG_API_VERSION,
            Some(_) => istio::is_networking(meta),
            None => false,
        }
    }

    fn decode<'de, D: Deserializer<'de>>(meta: &TypeMeta, de: D) -> Result<Self, D::Error> {
        Ok(match Kind::from_name(&meta.kind) {
            Some(Kind::VirtualService) => {
                Decoded::new(Object::deserialize(de)?, ConfigSpec::VirtualService)
            }
            Some(Kind::DestinationRule) => Decoded::new(Object::deserialize(de)?, |dr| {
                ConfigSpec::DestinationRule(Box::new(dr))
            }),
            Some(Kind::Gateway) => Decoded::new(Object::deserialize(de)?, ConfigSpec::Gateway),
            Some(Kind::Sidecar) => Decoded::new(Object::deserialize(de)?, ConfigSpec::Sidecar),
            Some(Kind::WorkloadGroup) => Decoded::new(Object::deserialize(de)?, |wg| {
                ConfigSpec::WorkloadGroup(Box::new(wg))
            }),
            Some(Kind::PeerAuthentication) => {
                Decoded::new(Object::deserialize(de)?, ConfigSpec::PeerAuthentication)
            }
            Some(Kind::AuthorizationPolicy) => Decoded::new(Object::deserialize(de)?, |ap| {
                ConfigSpec::AuthorizationPolicy(Box::new(ap))
            }),
            Some(Kind::RequestAuthentication) => Decoded::new(Object::deserialize(de)?, |ra| {
                ConfigSpec::RequestAuthentication(Box::new(ra))
            }),
            Some(Kind::EnvoyFilter) => Decoded::new(Object::deserialize(de)?, |ef| {
                ConfigSpec::EnvoyFilter(Box::new(ef))
            }),
            Some(Kind::ProxyConfig) => {
                Decoded::new(Object::deserialize(de)?, ConfigSpec::ProxyConfig)
            }
            None => return Err(D::Error::custom(format!("unexpected kind {}", meta.kind))),
        })
    }
}
