//! What an analyzer says: Istio's message codes, their levels and texts, and the line
//! `istioctl analyze` prints for each.
//!
//! The codes, names, levels and templates are those of Istio's
//! `pkg/config/analysis/msg/messages.yaml`, so a message reads as Istio's and a user can look
//! it up in Istio's documentation; [`Code::MtlsPolicyConflict`] is the one exception (see
//! there).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// How bad a message is, as Istio's `diag.Level`: `Error` first, then `Warning`, then `Info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Istio's `Error`: the configuration does not do what it says (a request will fail).
    Error,
    /// Istio's `Warning`: probably not what was meant.
    Warning,
    /// Istio's `Info`: worth knowing.
    Info,
}

impl Level {
    /// Every level, worst first.
    pub const ALL: [Level; 3] = [Level::Error, Level::Warning, Level::Info];

    /// The level's name as Istio writes it: `Error`, `Warning`, `Info`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "Error",
            Level::Warning => "Warning",
            Level::Info => "Info",
        }
    }

    /// The level named `name`, case-insensitively, as istioctl's `--failure-threshold` reads
    /// it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|level| level.name().eq_ignore_ascii_case(name))
    }

    /// Whether a message of this level is at `threshold` or worse.
    pub fn reaches(self, threshold: Level) -> bool {
        self <= threshold
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The messages `wayfinder analyze` gives, by Istio's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Code {
    /// IST0101, Error: a reference to a host, a subset, a gateway, a workload selector's
    /// workloads or a credential that does not exist.
    ReferencedResourceNotFound,
    /// IST0106, Error: an object the server would refuse, with validation's reason.
    SchemaValidationError,
    /// IST0109, Error: VirtualServices of the mesh gateway that define the same host.
    ConflictingMeshGatewayVirtualServiceHosts,
    /// IST0113, Error: a DestinationRule's TLS mode that the PeerAuthentication in force for
    /// the host's workloads refuses (plaintext to a `STRICT` workload, Istio mTLS to a
    /// `DISABLE` one).
    ///
    /// Istio retired IST0113 in 1.21 (istio/istio#48599), when its analyzer had long been
    /// gone: with auto mTLS, most DestinationRules set no TLS at all. A DestinationRule that
    /// does still breaks every connection when it disagrees with the workloads'
    /// PeerAuthentication, and the user running `analyze` wants to hear about it, so
    /// wayfinder gives it under the code and name it had, at the level it had, with a text
    /// naming the PeerAuthentication (Istio's v1alpha1 `Policy` no longer exists).
    MtlsPolicyConflict,
    /// IST0132, Warning: a VirtualService bound to a Gateway none of whose servers serves any
    /// of its hosts.
    VirtualServiceHostNotFoundInGateway,
    /// IST0133, Warning: what the server accepts with a warning (a field it does not act on).
    SchemaWarning,
    /// IST0174, Warning: a DestinationRule whose host is no known service.
    UnknownDestinationRuleHost,
}

impl Code {
    /// Istio's code, `IST0101`.
    pub fn code(self) -> &'static str {
        match self {
            Code::ReferencedResourceNotFound => "IST0101",
            Code::SchemaValidationError => "IST0106",
            Code::ConflictingMeshGatewayVirtualServiceHosts => "IST0109",
            Code::MtlsPolicyConflict => "IST0113",
            Code::VirtualServiceHostNotFoundInGateway => "IST0132",
            Code::SchemaWarning => "IST0133",
            Code::UnknownDestinationRuleHost => "IST0174",
        }
    }

    /// Istio's name, `ReferencedResourceNotFound`.
    pub fn name(self) -> &'static str {
        match self {
            Code::ReferencedResourceNotFound => "ReferencedResourceNotFound",
            Code::SchemaValidationError => "SchemaValidationError",
            Code::ConflictingMeshGatewayVirtualServiceHosts => {
                "ConflictingMeshGatewayVirtualServiceHosts"
            }
            Code::MtlsPolicyConflict => "MTLSPolicyConflict",
            Code::VirtualServiceHostNotFoundInGateway => "VirtualServiceHostNotFoundInGateway",
            Code::SchemaWarning => "SchemaWarning",
            Code::UnknownDestinationRuleHost => "UnknownDestinationRuleHost",
        }
    }

    /// Istio's level for the code.
    pub fn level(self) -> Level {
        match self {
            Code::ReferencedResourceNotFound
            | Code::SchemaValidationError
            | Code::ConflictingMeshGatewayVirtualServiceHosts
            | Code::MtlsPolicyConflict => Level::Error,
            Code::VirtualServiceHostNotFoundInGateway
            | Code::SchemaWarning
            | Code::UnknownDestinationRuleHost => Level::Warning,
        }
    }
}

/// The object a message is about and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    /// `VirtualService`.
    pub kind: Arc<str>,
    /// Its namespace.
    pub namespace: Arc<str>,
    /// Its name.
    pub name: Arc<str>,
    /// The file it is in.
    pub path: Arc<Path>,
    /// The line the message is about: the field's when it is found, else the object's.
    pub line: u64,
}

/// One message: its code, its object and place, and its text.
///
/// Displayed as istioctl prints it: `Error [IST0101] (VirtualService default/reviews
/// reviews.yaml:12) Referenced host not found: "ratings"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// What kind of message.
    pub code: Code,
    /// The object it is about, and where.
    pub subject: Subject,
    /// The text, Istio's template filled in.
    pub text: String,
}

impl Message {
    /// The message's level (its code's).
    pub fn level(&self) -> Level {
        self.code.level()
    }

    /// istioctl's order: level, code, then the object by kind, name and namespace.
    pub(super) fn sort_key(&self) -> impl Ord + '_ {
        let s = &self.subject;
        (
            self.level(),
            self.code,
            (&s.kind, &s.name, &s.namespace),
            (&s.path, s.line, &self.text),
        )
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.subject;
        write!(
            f,
            "{} [{}] ({} {}/{} {}:{}) {}",
            self.level(),
            self.code.code(),
            s.kind,
            s.namespace,
            s.name,
            s.path.display(),
            s.line,
            self.text
        )
    }
}

/// Istio's `ReferencedResourceNotFound` text: `Referenced host not found: "ratings"`.
pub(super) fn not_found(what: &str, value: &str) -> String {
    format!("Referenced {what} not found: {}", go_quote(value))
}

/// A string as Go's `%q` writes it (`strconv.Quote`): in double quotes, with `"`, `\` and
/// control characters escaped (`\n`, `\x01`, `\u0085`).
pub(super) fn go_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{b}' => out.push_str("\\v"),
            '\u{c}' => out.push_str("\\f"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_read_as_istioctl_reads_them_and_compare_worst_first() {
        assert_eq!(Level::from_name("warning"), Some(Level::Warning));
        assert_eq!(Level::from_name("ERROR"), Some(Level::Error));
        assert_eq!(Level::from_name("fatal"), None);
        assert!(Level::Error.reaches(Level::Warning));
        assert!(!Level::Info.reaches(Level::Warning));
    }

    #[test]
    fn values_are_quoted_as_go_quotes_them() {
        assert_eq!(
            not_found("host", "a\"b\\c\n"),
            r#"Referenced host not found: "a\"b\\c\n""#
        );
        assert_eq!(go_quote("\u{1}\u{7f}\u{7}"), r#""\x01\x7f\a""#);
        assert_eq!(go_quote("\u{85}é"), r#""\u0085é""#);
    }
}
