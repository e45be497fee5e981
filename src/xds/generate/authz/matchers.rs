//! The matchers an AuthorizationPolicy's values become, as Istio builds them
//! (`pilot/pkg/security/authz/matcher` and `model/generator.go`): a leading or trailing `*` is
//! a suffix or prefix match and `*` alone "anything"; identities match the peer certificate's
//! URI SAN (`authenticated.principal_name`); JWT values match the `jwt_authn` filter's payload
//! in the request's dynamic metadata.

use std::net::IpAddr;

use crate::xds::pb::core::CidrRange;
use crate::xds::pb::matcher::{
    ListMatcher, MetadataMatcher, OrMatcher, PathMatcher, RegexMatcher, StringMatcher,
    ValueMatcher, list_matcher, metadata_matcher, path_matcher, string_matcher, value_matcher,
};
use crate::xds::pb::route::{HeaderMatcher, header_matcher::HeaderMatchSpecifier};

/// The filter whose dynamic metadata holds a verified JWT's payload.
pub(super) const JWT_FILTER: &str = "envoy.filters.http.jwt_authn";
/// The key of that metadata under which the payload is.
pub(super) const JWT_PAYLOAD: &str = "payload";

/// Exact, prefix or suffix by the value's `*`, with `prefix` before the literal part; `*`
/// alone matches any non-empty value (without the prefix, as Istio writes it).
pub(super) fn string_with_prefix(value: &str, prefix: &str) -> StringMatcher {
    if value == "*" {
        regex(".+")
    } else if let Some(rest) = value.strip_prefix('*') {
        if prefix.is_empty() {
            suffix(rest, false)
        } else {
            regex(&format!("{prefix}.*{}", quote_meta(rest)))
        }
    } else if let Some(start) = value.strip_suffix('*') {
        self::prefix(&format!("{prefix}{start}"), false)
    } else {
        exact(&format!("{prefix}{value}"), false)
    }
}

/// [`string_with_prefix`] without a prefix.
pub(super) fn string(value: &str) -> StringMatcher {
    string_with_prefix(value, "")
}

pub(super) fn exact(value: &str, ignore_case: bool) -> StringMatcher {
    pattern(
        string_matcher::MatchPattern::Exact(value.into()),
        ignore_case,
    )
}

pub(super) fn prefix(value: &str, ignore_case: bool) -> StringMatcher {
    pattern(
        string_matcher::MatchPattern::Prefix(value.into()),
        ignore_case,
    )
}

pub(super) fn suffix(value: &str, ignore_case: bool) -> StringMatcher {
    pattern(
        string_matcher::MatchPattern::Suffix(value.into()),
        ignore_case,
    )
}

/// A safe (RE2) regex, as Istio writes it: no engine given.
pub(super) fn regex(regex: &str) -> StringMatcher {
    pattern(
        string_matcher::MatchPattern::SafeRegex(RegexMatcher {
            regex: regex.into(),
            engine_type: None,
        }),
        false,
    )
}

fn pattern(pattern: string_matcher::MatchPattern, ignore_case: bool) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(pattern),
        ignore_case,
    }
}

/// A header by the value's `*` (`*` alone: present); `ignore_case` for hosts.
pub(super) fn header(name: &str, value: &str, ignore_case: bool) -> HeaderMatcher {
    let specifier = if value == "*" {
        HeaderMatchSpecifier::PresentMatch(true)
    } else if let Some(rest) = value.strip_prefix('*') {
        HeaderMatchSpecifier::StringMatch(suffix(rest, ignore_case))
    } else if let Some(start) = value.strip_suffix('*') {
        HeaderMatchSpecifier::StringMatch(prefix(start, ignore_case))
    } else {
        HeaderMatchSpecifier::StringMatch(exact(value, ignore_case))
    };
    HeaderMatcher {
        name: name.into(),
        header_match_specifier: Some(specifier),
        ..Default::default()
    }
}

/// The request's path (without its query) by the value's `*`.
pub(super) fn path(value: &str) -> PathMatcher {
    PathMatcher {
        rule: Some(path_matcher::Rule::Path(string(value))),
    }
}

/// Escapes what RE2 would read as syntax, exactly as Go's `regexp.QuoteMeta` does (Istio's
/// regexes are compared with its own output, and `regex::escape` also escapes `-`, `#`, `&`,
/// `~` and white space, which would make equal matchers differ in bytes).
pub(super) fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        if matches!(
            c,
            '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An address or a CIDR range, as Go's `netip` reads and prints it: host bits kept, a bare
/// address a /32 or /128.
pub(super) fn cidr(value: &str) -> Result<CidrRange, String> {
    let (address, len) = match value.split_once('/') {
        Some((address, len)) => (address, Some(len)),
        None => (value, None),
    };
    let ip: IpAddr = address
        .parse()
        .map_err(|_| format!("{value:?} is not an IP address or CIDR range"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(len) => len
            .parse::<u32>()
            .ok()
            .filter(|l| *l <= max && !len.starts_with('+'))
            .ok_or_else(|| format!("{value:?}: bad prefix length"))?,
    };
    Ok(CidrRange {
        address_prefix: ip.to_string(),
        prefix_len: Some(crate::xds::pb::protobuf::UInt32Value { value: len }),
    })
}

/// A port number (`0` to `65535`), as Istio's `convertToPort`.
pub(super) fn port(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|p| *p <= 65535 && !value.starts_with('+'))
        .ok_or_else(|| format!("invalid port {value}"))
}

/// The metadata of `filter` at `path` matching `value`.
pub(super) fn metadata(filter: &str, path: &[&str], value: ValueMatcher) -> MetadataMatcher {
    MetadataMatcher {
        filter: filter.into(),
        path: path
            .iter()
            .map(|key| metadata_matcher::PathSegment {
                segment: Some(metadata_matcher::path_segment::Segment::Key((*key).into())),
            })
            .collect(),
        value: Some(value),
        invert: false,
    }
}

pub(super) fn value_string(m: StringMatcher) -> ValueMatcher {
    ValueMatcher {
        match_pattern: Some(value_matcher::MatchPattern::StringMatch(m)),
    }
}

/// A list that has an element matching `value`.
pub(super) fn value_list(value: ValueMatcher) -> ValueMatcher {
    ValueMatcher {
        match_pattern: Some(value_matcher::MatchPattern::ListMatch(Box::new(
            ListMatcher {
                match_pattern: Some(list_matcher::MatchPattern::OneOf(Box::new(value))),
            },
        ))),
    }
}

/// Any of `matchers`; one alone is not wrapped (Istio's `OrMatcher`).
pub(super) fn value_or(mut matchers: Vec<ValueMatcher>) -> ValueMatcher {
    if matchers.len() == 1 {
        return matchers.remove(0);
    }
    ValueMatcher {
        match_pattern: Some(value_matcher::MatchPattern::OrMatch(OrMatcher {
            value_matchers: matchers,
        })),
    }
}

/// A JWT claim at `path` (under the payload) that is one of `values`, or a list holding one
/// (`aud` is either).
pub(super) fn jwt_claim(path: &[&str], values: &[String]) -> MetadataMatcher {
    let one_of = value_or(values.iter().map(|v| value_string(string(v))).collect());
    let either = value_or(vec![value_list(one_of.clone()), one_of]);
    let mut full = vec![JWT_PAYLOAD];
    full.extend_from_slice(path);
    metadata(JWT_FILTER, &full, either)
}

/// A JWT claim that is a string matching `m` (the issuer and subject of a request principal).
pub(super) fn jwt_string(claim: &str, m: StringMatcher) -> MetadataMatcher {
    metadata(JWT_FILTER, &[JWT_PAYLOAD, claim], value_string(m))
}

/// The name in `[NAME]` (Istio's `extractNameInBrackets`).
pub(super) fn in_brackets(s: &str) -> Result<&str, String> {
    s.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or_else(|| format!("expecting format [<NAME>], but found {s}"))
}

/// The names in `[a][b]…` (Istio's `extractNameInNestedBrackets`): when the groups do not
/// parse, the whole string as one `[NAME]`.
pub(super) fn in_nested_brackets(s: &str) -> Result<Vec<&str>, String> {
    let bytes = s.as_bytes();
    let end_of = |begin: usize| -> Option<usize> {
        if bytes.get(begin) != Some(&b'[') {
            return None;
        }
        for (i, b) in bytes.iter().enumerate().skip(begin + 1) {
            match b {
                b'[' => return None,
                b']' => return Some(i),
                _ => {}
            }
        }
        None
    };
    let mut names = Vec::new();
    let mut begin = 0;
    while begin < s.len() {
        let Some(end) = end_of(begin) else {
            return Ok(vec![in_brackets(s)?]);
        };
        names.push(&s[begin + 1..end]);
        begin = end + 1;
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_meta_escapes_what_go_escapes_only() {
        assert_eq!(quote_meta("rule[0]-from.x*"), r"rule\[0\]-from\.x\*");
        assert_eq!(quote_meta("a#b&c~d e"), "a#b&c~d e");
    }

    #[test]
    fn addresses_keep_their_host_bits_and_print_canonically() {
        let c = cidr("10.0.0.5/24").unwrap();
        assert_eq!(
            (c.address_prefix.as_str(), c.prefix_len.unwrap().value),
            ("10.0.0.5", 24)
        );
        let c = cidr("2001:DB8:0::1").unwrap();
        assert_eq!(
            (c.address_prefix.as_str(), c.prefix_len.unwrap().value),
            ("2001:db8::1", 128)
        );
        for bad in ["", "10.0.0.1/33", "10.0.0.1/", "10.0.0.01", "host"] {
            assert!(cidr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nested_claim_names() {
        assert_eq!(in_nested_brackets("[a][b]").unwrap(), ["a", "b"]);
        assert_eq!(in_nested_brackets("[a.b]").unwrap(), ["a.b"]);
        assert_eq!(in_nested_brackets("[a[b]").unwrap(), ["a[b"]);
        assert!(in_nested_brackets("a").is_err());
        assert!(in_brackets("[X-header").is_err());
    }
}
