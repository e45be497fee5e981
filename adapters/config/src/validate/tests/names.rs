//! The shared grammar: host names, wildcards, overlap, and the RE2 check.

use super::super::names::{
    check_fqdn, check_wildcard_domain, host_within, hosts_overlap, is_dns1123_label, is_ip_or_cidr,
};
use super::super::regex::check_re2;

#[test]
fn labels_and_hosts() {
    assert!(is_dns1123_label("reviews-v1"));
    for bad in ["", "-a", "a-", "A", "a.b", &"a".repeat(64)] {
        assert!(!is_dns1123_label(bad), "{bad:?}");
    }
    for ok in [
        "reviews",
        "reviews.default.svc.cluster.local",
        "*",
        "*.example.com",
        "*-api.example.com",
        "Example.COM",
        "example.com.",
    ] {
        assert_eq!(check_wildcard_domain(ok), Ok(()), "{ok:?}");
    }
    for bad in [
        "",
        "a..b",
        "a.*.com",
        "**.com",
        "a_b.com",
        "1.2.3.4",
        "-a.com",
        &"a.".repeat(130),
    ] {
        assert!(check_wildcard_domain(bad).is_err(), "{bad:?}");
    }
    assert!(check_fqdn("*.example.com").is_err());
    assert_eq!(check_fqdn("gw.istio-system"), Ok(()));
}

#[test]
fn addresses_and_blocks() {
    for ok in ["10.0.0.1", "10.0.0.0/8", "::1", "2001:db8::/32"] {
        assert!(is_ip_or_cidr(ok), "{ok:?}");
    }
    for bad in [
        "10.0.0.0/33",
        "2001:db8::/129",
        "example.com",
        "10.0.0.0/",
        "/8",
    ] {
        assert!(!is_ip_or_cidr(bad), "{bad:?}");
    }
}

#[test]
fn host_overlap_and_containment_follow_istio() {
    assert!(hosts_overlap("a.example.com", "a.example.com"));
    assert!(hosts_overlap("*.example.com", "a.example.com"));
    assert!(hosts_overlap("*.com", "*.example.com"));
    assert!(hosts_overlap("*", "reviews"));
    assert!(!hosts_overlap("a.example.com", "b.example.com"));
    assert!(!hosts_overlap("*.example.com", "example.com"));

    assert!(host_within("a.example.com", "*.example.com"));
    assert!(host_within("*.a.example.com", "*.example.com"));
    assert!(!host_within("*.example.com", "*.a.example.com"));
    assert!(!host_within("*.example.com", "a.example.com"));
}

#[test]
fn re2_patterns() {
    for ok in [
        "^/api/v[0-9]+/.*$",
        "(?i)jason",
        "(?P<id>[a-f0-9]{8})",
        "(?s:a.b)",
        r"\bword\b",
        r"[\p{Greek}\d]+",
        "a{1000}",
    ] {
        assert_eq!(check_re2(ok), Ok(()), "{ok:?}");
    }
    for bad in [
        "",
        "(",
        "a)",
        "(?=x)",
        "(?<!x)y",
        r"(a)\1",
        "[a[b]]",
        "[a-z&&[^c]]",
        r"\<word\>",
        r"\b{start}a",
        "(?x)a b",
        "(?u)a",
        "a{1001}",
        "a{2,1001}",
        r"\p{NotAClass}",
    ] {
        assert!(check_re2(bad).is_err(), "{bad:?}");
    }
    assert!(check_re2(&"a".repeat(1025)).is_err());
    let message = check_re2("(").unwrap_err();
    assert!(
        message.contains("not a valid RE2 regular expression"),
        "{message}"
    );
}
