//! The list: one row per connected proxy and replica, from `/debug/syncz`, in istioctl's
//! columns (NAME, CLUSTER, CDS, LDS, EDS, RDS, ISTIOD, VERSION) and two of wayfinder's
//! (IDENTITY, NACK).

use serde_json::Value;

/// The types shown, in istioctl's order, by their short names on `/debug/syncz`.
pub(super) const TYPES: [&str; 4] = ["cds", "lds", "eds", "rds"];

/// One proxy as one replica sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Istio's `POD.NAMESPACE` when the node id has Istio's form, else the node id.
    pub name: String,
    /// The proxy's `CLUSTER_ID`, `-` without one.
    pub cluster: String,
    /// CDS, LDS, EDS and RDS: `SYNCED`, `NOT SENT`, `STALE (Ns)`, `NACKED` or `IGNORED`.
    pub types: [String; 4],
    /// The replica's debug address, as `--addr` gave it.
    pub istiod: String,
    /// `ISTIO_VERSION`, else the user agent and its version (`envoy/1.40.0`).
    pub version: String,
    /// The verified identity of its certificate (secure port), else `-`.
    pub identity: String,
    /// The NACK text of each type whose latest response was rejected (`LDS: …`), else `-`.
    pub nack: String,
}

/// The rows of one replica's `/debug/syncz` page (`page`), read from `addr`.
pub fn rows(addr: &str, page: &Value) -> Vec<Row> {
    let conns = page.as_array().map(Vec::as_slice).unwrap_or_default();
    conns.iter().map(|c| row(addr, c)).collect()
}

/// The table: a header and the rows sorted by name, then replica; columns padded to their
/// widest cell and three spaces.
pub fn render(mut rows: Vec<Row>) -> String {
    rows.sort_by(|a, b| (&a.name, &a.istiod).cmp(&(&b.name, &b.istiod)));
    let header = [
        "NAME", "CLUSTER", "CDS", "LDS", "EDS", "RDS", "ISTIOD", "VERSION", "IDENTITY", "NACK",
    ];
    let mut lines: Vec<Vec<&str>> = vec![header.to_vec()];
    for r in &rows {
        let mut cells = vec![r.name.as_str(), r.cluster.as_str()];
        cells.extend(r.types.iter().map(String::as_str));
        cells.extend([
            r.istiod.as_str(),
            r.version.as_str(),
            r.identity.as_str(),
            r.nack.as_str(),
        ]);
        lines.push(cells);
    }
    let mut widths = vec![0; header.len()];
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in lines {
        let last = line.len() - 1;
        for (i, cell) in line.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths[i] - cell.chars().count() + 3;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

/// One type's cell: its state, with the seconds since the unacknowledged response for
/// `STALE`; `IGNORED` for a type the proxy does not subscribe to (istioctl's word).
pub(super) fn state(t: &Value) -> String {
    match t["status"].as_str() {
        None => "IGNORED".into(),
        Some("STALE") => {
            let seconds = t["unacked_seconds"].as_f64().unwrap_or_default();
            // Whole seconds, rounded down, as the age of a Kubernetes object is shown.
            format!("STALE ({}s)", seconds.max(0.0).floor() as u64)
        }
        Some(other) => printable(other),
    }
}

/// `s` on one line, with control characters (a NACK's newlines, a proxy's escape sequences)
/// shown escaped: the text comes from proxies.
pub(super) fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// The name istioctl shows: `POD.NAMESPACE` from `TYPE~IP~POD.NAMESPACE~DOMAIN`.
pub(super) fn name(id: &str) -> &str {
    let parts: Vec<&str> = id.split('~').collect();
    if parts.len() == 4 { parts[2] } else { id }
}

fn row(addr: &str, c: &Value) -> Row {
    let text = |v: &Value| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map_or_else(|| "-".to_string(), printable)
    };
    let id = c["proxy"].as_str().unwrap_or_default();
    let types = TYPES.map(|t| state(&c["types"][t]));
    let nacks: Vec<String> = TYPES
        .iter()
        .filter(|t| c["types"][**t]["status"] == "NACKED")
        .map(|t| {
            let message = c["types"][*t]["last_nack"]["message"]
                .as_str()
                .unwrap_or_default();
            format!("{}: {}", t.to_uppercase(), printable(message.trim_end()))
        })
        .collect();
    Row {
        name: printable(name(id)),
        cluster: text(&c["cluster_id"]),
        types,
        istiod: printable(addr),
        version: text(&c["version"]),
        identity: text(&c["identity"]),
        nack: if nacks.is_empty() {
            "-".into()
        } else {
            nacks.join("; ")
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn page() -> Value {
        json!([{
            "proxy": "router~127.0.0.1~ingress.default~default.svc.cluster.local",
            "cluster_id": "",
            "version": "envoy/1.40.0",
            "identity": null,
            "types": {
                "cds": {"status": "SYNCED", "unacked_seconds": null},
                "lds": {"status": "NACKED", "unacked_seconds": 4.2,
                        "last_nack": {"message": "Error adding/updating listener(s) x:\nscript load error\n"}},
                "eds": {"status": "STALE", "unacked_seconds": 12.9},
                "rds": {"status": "NOT SENT"},
            },
        }, {
            "proxy": "grpc-client",
            "cluster_id": "Kubernetes",
            "version": "1.27.0",
            "identity": "spiffe://cluster.local/ns/default/sa/client",
            "types": {"lds": {"status": "SYNCED"}},
        }])
    }

    #[test]
    fn a_row_per_proxy_in_istioctls_words() {
        let rows = rows("10.0.0.1:8080", &page());
        assert_eq!(rows[0].name, "ingress.default");
        assert_eq!(rows[0].cluster, "-");
        assert_eq!(
            rows[0].types,
            ["SYNCED", "NACKED", "STALE (12s)", "NOT SENT"]
        );
        assert_eq!(rows[0].istiod, "10.0.0.1:8080");
        assert_eq!(rows[0].version, "envoy/1.40.0");
        assert_eq!(rows[0].identity, "-");
        assert_eq!(
            rows[0].nack, "LDS: Error adding/updating listener(s) x:\\nscript load error",
            "one line, the inner newline shown escaped, the last one left out"
        );
        assert_eq!(
            rows[1].name, "grpc-client",
            "not Istio's form: the whole id"
        );
        assert_eq!(rows[1].types, ["IGNORED", "SYNCED", "IGNORED", "IGNORED"]);
        assert_eq!(
            rows[1].identity,
            "spiffe://cluster.local/ns/default/sa/client"
        );
        assert_eq!(rows[1].nack, "-");
    }

    #[test]
    fn the_table_is_sorted_and_aligned_and_merges_replicas() {
        let mut all = rows("b:8080", &page());
        all.extend(rows("a:8080", &page()));
        let table = render(all);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(
            lines[0].starts_with("NAME              CLUSTER      CDS"),
            "{table}"
        );
        assert!(lines[1].starts_with("grpc-client ") && lines[1].contains(" a:8080 "));
        assert!(lines[2].starts_with("grpc-client ") && lines[2].contains(" b:8080 "));
        assert!(lines[3].starts_with("ingress.default ") && lines[3].contains(" a:8080 "));
        let column = |line: &str, cell: &str| line.find(cell).unwrap();
        assert_eq!(column(lines[0], "ISTIOD"), column(lines[3], "a:8080"));
        assert_eq!(column(lines[0], "NACK"), column(lines[3], "LDS: "));
    }

    #[test]
    fn control_characters_from_a_proxy_are_escaped() {
        assert_eq!(printable("a\u{1b}[31mb\r\n"), "a\\u{1b}[31mb\\r\\n");
        assert_eq!(printable("ünïcode"), "ünïcode");
    }
}
