//! The `when` keys Istio's builder knows, and what each one's values are and where it applies.

use super::values::Values;

/// The `when` keys, for the message about an unknown one.
const KNOWN_KEYS: &str = "request.headers[NAME], source.ip, remote.ip, source.namespace, \
     source.principal, source.serviceAccount, source.trustDomain, request.auth.principal, \
     request.auth.audiences, request.auth.presenter, request.auth.claims[NAME] (or [a][b] for \
     a nested claim), destination.ip, destination.port, connection.sni and \
     experimental.envoy.filters.NAME[KEY]";

/// A `when` key Istio's builder knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Attribute {
    Header,
    SourceIp,
    RemoteIp,
    SourceNamespace,
    SourcePrincipal,
    SourceServiceAccount,
    SourceTrustDomain,
    RequestPrincipal,
    Audiences,
    Presenter,
    Claims,
    DestinationIp,
    DestinationPort,
    Sni,
    EnvoyFilter,
}

impl Attribute {
    /// The attribute of `key`, or why it is none (Istio's `ValidateAttribute`, with the key
    /// grammar of its builder).
    pub(super) fn parse(key: &str) -> Result<Attribute, String> {
        Ok(match key {
            "source.ip" => Attribute::SourceIp,
            "remote.ip" => Attribute::RemoteIp,
            "source.namespace" => Attribute::SourceNamespace,
            "source.principal" => Attribute::SourcePrincipal,
            "source.serviceAccount" => Attribute::SourceServiceAccount,
            "source.trustDomain" => Attribute::SourceTrustDomain,
            "request.auth.principal" => Attribute::RequestPrincipal,
            "request.auth.audiences" => Attribute::Audiences,
            "request.auth.presenter" => Attribute::Presenter,
            "destination.ip" => Attribute::DestinationIp,
            "destination.port" => Attribute::DestinationPort,
            "connection.sni" => Attribute::Sni,
            "destination.namespace" => {
                return Err(format!(
                    "{key:?} is not supported: a policy applies to the workloads of its own \
                     namespace (metadata.namespace)"
                ));
            }
            "destination.name" | "destination.user" => {
                return Err(format!(
                    "{key:?} is not supported: it was an attribute of Istio's old RBAC \
                     (v1alpha1) only"
                ));
            }
            _ => return Attribute::parse_map_key(key),
        })
    }

    /// The keys that name a header, a claim or Envoy metadata in brackets.
    fn parse_map_key(key: &str) -> Result<Attribute, String> {
        if let Some(rest) = key.strip_prefix("request.headers") {
            return match rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
                Some(name) if !name.is_empty() => Ok(Attribute::Header),
                _ => Err(format!(
                    "{key:?} is not request.headers[NAME]: write the header's name in \
                     brackets, e.g. request.headers[x-user]"
                )),
            };
        }
        if let Some(rest) = key.strip_prefix("request.auth.claims") {
            return match claim_names(rest) {
                Some(names) if names.iter().all(|n| !n.is_empty()) => Ok(Attribute::Claims),
                _ => Err(format!(
                    "{key:?} is not request.auth.claims[NAME]: write the claim's name in \
                     brackets, e.g. request.auth.claims[iss], or [a][b] for claim b inside \
                     claim a"
                )),
            };
        }
        if let Some(rest) = key.strip_prefix("experimental.envoy.filters.") {
            let parts = rest.strip_suffix(']').and_then(|r| r.split_once('['));
            return match parts {
                Some((filter, path)) if !filter.is_empty() && !path.is_empty() => {
                    Ok(Attribute::EnvoyFilter)
                }
                _ => Err(format!(
                    "{key:?} is not experimental.envoy.filters.NAME[KEY]: the rest of the \
                     filter's name, then the metadata key in brackets, e.g. \
                     experimental.envoy.filters.network.mysql_proxy[db.table]"
                )),
            };
        }
        if key.starts_with("destination.labels") {
            return Err(format!(
                "{key:?} is not supported: select workloads by label with spec.selector"
            ));
        }
        Err(format!(
            "unknown attribute {key:?}: the known keys are {KNOWN_KEYS}"
        ))
    }

    pub(super) fn values(self) -> Values {
        match self {
            Attribute::SourceIp | Attribute::RemoteIp | Attribute::DestinationIp => Values::Ip,
            Attribute::DestinationPort => Values::Port,
            Attribute::SourceServiceAccount => Values::ServiceAccount,
            Attribute::SourceTrustDomain => Values::Wildcard,
            _ => Values::Any,
        }
    }

    /// Only HTTP requests have it: on TCP ports the builder cannot use it.
    pub(super) fn http_only(self) -> bool {
        matches!(
            self,
            Attribute::Header
                | Attribute::RequestPrincipal
                | Attribute::Audiences
                | Attribute::Presenter
                | Attribute::Claims
        )
    }

    /// Matched on the operation (Envoy's permission) rather than the source (principal).
    pub(super) fn operation_side(self) -> bool {
        matches!(
            self,
            Attribute::DestinationIp
                | Attribute::DestinationPort
                | Attribute::Sni
                | Attribute::EnvoyFilter
        )
    }

    /// Istio's CUSTOM action cannot match on it: identities, from mTLS or JWT.
    pub(super) fn custom_unsupported(self) -> bool {
        matches!(
            self,
            Attribute::SourceNamespace
                | Attribute::SourceServiceAccount
                | Attribute::SourceTrustDomain
                | Attribute::SourcePrincipal
                | Attribute::RequestPrincipal
                | Attribute::Audiences
                | Attribute::Presenter
                | Attribute::Claims
        )
    }
}

/// The names in `[a][b]…`, or the whole of `[NAME]` when the groups do not parse (Istio's
/// `extractNameInNestedBrackets`); None when `s` is not in brackets.
fn claim_names(s: &str) -> Option<Vec<&str>> {
    let mut names = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let group = rest
            .strip_prefix('[')
            .and_then(|r| r.find(['[', ']']).map(|end| (r, end)))
            .filter(|(r, end)| r.as_bytes()[*end] == b']');
        let Some((r, end)) = group else {
            let whole = s.strip_prefix('[').and_then(|s| s.strip_suffix(']'))?;
            return Some(vec![whole]);
        };
        names.push(&r[..end]);
        rest = &r[end + 1..];
    }
    (!names.is_empty()).then_some(names)
}
