//! One proxy: how what it holds differs from what it should have now, type by type, from the
//! `sync` section of `/debug/config_dump?proxyID=`. istioctl compares istiod's dump with
//! Envoy's own; wayfinder reads no proxy's admin port, so what a proxy holds is what the
//! server knows: what it sent, and whether the proxy acknowledged it.

use std::fmt::Write;

use serde_json::Value;

use super::table::{TYPES, name, printable, state};

/// The text for the proxy of `dump` (its config dump, from the replica at `addr`).
pub fn describe(addr: &str, dump: &Value) -> String {
    let id = dump["proxy"].as_str().unwrap_or_default();
    let mut out = format!(
        "Proxy {} ({}) on {}, snapshot {}\n",
        printable(name(id)),
        printable(id),
        printable(addr),
        dump["snapshot_version"]
    );
    for t in TYPES {
        describe_type(&mut out, t, &dump["sync"][t]);
    }
    out
}

/// istioctl's word for a type's resources.
fn title(t: &str) -> &'static str {
    match t {
        "cds" => "Clusters",
        "lds" => "Listeners",
        "eds" => "Endpoints",
        _ => "Routes",
    }
}

fn describe_type(out: &mut String, t: &str, s: &Value) {
    let title = title(t);
    let cell = state(s);
    let status = s["status"].as_str().unwrap_or("IGNORED");
    let differing: u64 = ["missing", "changed", "removed"]
        .iter()
        .map(|k| s[*k]["count"].as_u64().unwrap_or_default())
        .sum();
    let version = |k: &str| s[k].as_str().unwrap_or("-").to_string();
    let _ = match status {
        "IGNORED" => writeln!(out, "{title}: not subscribed (IGNORED)"),
        "NOT SENT" => writeln!(out, "{title}: nothing sent yet (NOT SENT)"),
        "SYNCED" if differing == 0 => writeln!(
            out,
            "{title} Match ({cell}): version {} acknowledged",
            version("acked_version")
        ),
        _ => writeln!(out, "{title} Don't Match ({cell})"),
    };
    match status {
        "SYNCED" if differing > 0 => {
            let _ = writeln!(
                out,
                "  version {} acknowledged; the server's configuration changed since, not sent yet:",
                version("acked_version")
            );
            names(out, s);
        }
        "STALE" => {
            let _ = writeln!(
                out,
                "  version {} sent, not acknowledged; version {} acknowledged before",
                version("sent_version"),
                version("acked_version")
            );
            if differing > 0 {
                let _ = writeln!(out, "  and since that send, not sent yet:");
                names(out, s);
            }
        }
        "NACKED" => {
            let message = s["last_nack"]["message"].as_str().unwrap_or_default();
            let _ = writeln!(
                out,
                "  version {} rejected: {}",
                version("sent_version"),
                printable(message.trim_end())
            );
            let _ = writeln!(
                out,
                "  the proxy runs version {}; the server keeps no copy of what that version \
                 held, so the resources that differ are not listed",
                version("acked_version")
            );
        }
        _ => {}
    }
}

/// The names that differ, by kind: the first ones the page lists and how many there are.
fn names(out: &mut String, s: &Value) {
    for (kind, what) in [
        ("missing", "missing"),
        ("changed", "changed"),
        ("removed", "to remove"),
    ] {
        let count = s[kind]["count"].as_u64().unwrap_or_default();
        if count == 0 {
            continue;
        }
        let listed: Vec<String> = s[kind]["names"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(printable)
            .collect();
        let more = count.saturating_sub(listed.len() as u64);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let _ = writeln!(out, "    {what} ({count}): {}{tail}", listed.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(list: &[&str], count: u64) -> Value {
        json!({"count": count, "names": list})
    }

    #[test]
    fn each_type_says_whether_it_matches_and_what_differs() {
        let none = names(&[], 0);
        let dump = json!({
            "proxy": "router~127.0.0.1~ingress.default~default.svc.cluster.local",
            "snapshot_version": 7,
            "sync": {
                "cds": {"status": "SYNCED", "acked_version": "a1", "sent_version": "a1",
                        "missing": none, "changed": none, "removed": none},
                "lds": {"status": "NACKED", "acked_version": "b1", "sent_version": "b2",
                        "unacked_seconds": 3.0,
                        "last_nack": {"message": "script load error"},
                        "missing": none, "changed": none, "removed": none},
                "eds": {"status": "STALE", "acked_version": "c1", "sent_version": "c2",
                        "unacked_seconds": 5.5,
                        "missing": names(&["outbound|80||new.default.svc.cluster.local"], 1),
                        "changed": names(&["x", "y"], 3), "removed": none},
                "rds": {"status": "SYNCED", "acked_version": "d1", "sent_version": "d1",
                        "missing": none, "changed": none, "removed": names(&["http.9090"], 1)},
            },
        });
        let text = describe("127.0.0.1:8080", &dump);
        let expected = "\
Proxy ingress.default (router~127.0.0.1~ingress.default~default.svc.cluster.local) on 127.0.0.1:8080, snapshot 7
Clusters Match (SYNCED): version a1 acknowledged
Listeners Don't Match (NACKED)
  version b2 rejected: script load error
  the proxy runs version b1; the server keeps no copy of what that version held, so the resources that differ are not listed
Endpoints Don't Match (STALE (5s))
  version c2 sent, not acknowledged; version c1 acknowledged before
  and since that send, not sent yet:
    missing (1): outbound|80||new.default.svc.cluster.local
    changed (3): x, y and 1 more
Routes Don't Match (SYNCED)
  version d1 acknowledged; the server's configuration changed since, not sent yet:
    to remove (1): http.9090
";
        assert_eq!(text, expected);
    }

    #[test]
    fn types_not_subscribed_or_not_sent_say_so() {
        let dump = json!({"proxy": "grpc-client", "snapshot_version": 1,
                          "sync": {"lds": {"status": "NOT SENT"}}});
        let text = describe("a:1", &dump);
        assert!(
            text.starts_with("Proxy grpc-client (grpc-client) on a:1"),
            "{text}"
        );
        assert!(
            text.contains("Clusters: not subscribed (IGNORED)\n"),
            "{text}"
        );
        assert!(
            text.contains("Listeners: nothing sent yet (NOT SENT)\n"),
            "{text}"
        );
    }
}
