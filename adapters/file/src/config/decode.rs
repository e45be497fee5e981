//! A file into configuration objects, each judged: its type read through [`documents::parse`],
//! its metadata handled as the File registry handles it (lenient, `default` namespace), its
//! spec strict, and every object checked by [`validate`] plus the rules no spec can break on
//! its own (a name).
//!
//! Nothing here logs: the config source logs what it skips and the warnings it finds, the
//! offline check turns them into report lines, and neither wants the other's output.

use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use wayfinder_registry::RegistryError;
use wayfinder_registry::config::validate::{self, Problem};
use wayfinder_registry::config::{ConfigMeta, ConfigObject, ConfigSpec, Kind};

use crate::documents::{self, Decode, DocumentError, Origin, TypeMeta};
use crate::istio::{self, IstioObject, Metadata, Object};

/// How objects are validated: [`validate::validate`], or a stand-in in unit tests.
pub(crate) type Validator = fn(&ConfigObject) -> Vec<Problem>;

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
}

/// An object read from a file and checked.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Judged {
    /// Where it starts.
    pub(crate) origin: Origin,
    /// The object; its `meta.origin` is `origin` displayed.
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
}

/// Reads every object of a file, in file order. Fails as [`documents::parse`] does: the first
/// document that does not parse (syntax, wrong types, unknown fields) fails the file.
pub(crate) fn read(
    path: &std::path::Path,
    bytes: &[u8],
    validator: Validator,
) -> Result<Vec<Item>, DocumentError> {
    let parsed = documents::parse::<Box<Decoded>>(path, bytes)?;
    let items = parsed.into_iter().map(|item| match item.object {
        Some(decoded) => Item::Object(judge(item.origin, *decoded, validator)),
        None if IstioObject::accepts(&item.meta) => Item::Registry,
        None => Item::Unknown {
            origin: item.origin,
            meta: item.meta,
        },
    });
    Ok(items.collect())
}

/// What to say about an object nothing in wayfinder reads.
pub(crate) fn unknown_kind(meta: &TypeMeta) -> String {
    format!(
        "skipping {meta}: an unknown kind (wayfinder reads ServiceEntry, WorkloadEntry, \
         VirtualService, DestinationRule, Gateway and Sidecar of {}/{{{}}})",
        istio::GROUP,
        istio::VERSIONS.join(","),
    )
}

/// Builds the object and finds its problems.
fn judge(origin: Origin, decoded: Decoded, validator: Validator) -> Judged {
    let Decoded { metadata, spec } = decoded;
    let object = ConfigObject {
        meta: ConfigMeta {
            name: metadata.name.as_str().into(),
            namespace: metadata.namespace().into(),
            labels: metadata.labels.unwrap_or_default(),
            annotations: metadata.annotations.unwrap_or_default(),
            origin: origin.to_string().into(),
        },
        spec,
    };
    let mut problems = validator(&object);
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
        istio::is_networking(meta) && Kind::from_name(&meta.kind).is_some()
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
            None => return Err(D::Error::custom(format!("unexpected kind {}", meta.kind))),
        })
    }
}
