//! `wayfinder proxy-status`, istioctl's view of the proxies connected to one replica or to
//! several: a line per proxy with the state of CDS, LDS, EDS and RDS (`SYNCED`, `NOT SENT`,
//! `STALE (Ns)` while the latest response is not acknowledged, `NACKED` when it was
//! rejected, `IGNORED` for a type the proxy does not subscribe to), the NACK text, the
//! proxy's version and its identity; with a proxy id, how what that proxy holds differs from
//! what it should have now.
//!
//! Everything comes from the debug pages of each replica (`--addr`, repeatable):
//! `/debug/syncz` for the list, then `/debug/config_dump?proxyID=` and its `sync` section for
//! one proxy. The lines are made by `table.rs` and `diff.rs`, from those pages' JSON alone.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use serde_json::Value;

use super::debug_client::{DebugClient, FetchError};

mod diff;
mod table;

pub use diff::describe;
pub use table::{Row, render, rows};

/// `wayfinder proxy-status` arguments.
#[derive(Debug, Args)]
pub struct ProxyStatusArgs {
    /// A proxy, by its full node id (`router~10.1.1.5~ingress.default~default.svc.cluster.local`)
    /// or Istio's `POD.NAMESPACE` (the id's third part): show, per type, how what it holds
    /// differs from what it should have now.
    #[arg(value_name = "PROXY")]
    pub proxy: Option<String>,
    /// A replica's debug address (its `--http-addr`); repeat it to ask several, whose rows are
    /// merged with the address in the ISTIOD column.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    pub addr: Vec<String>,
    /// A file holding the token of the servers' `--debug-token-file`, sent as a bearer token:
    /// needed from another host.
    #[arg(long = "token-file", value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

/// Runs the command, printing to standard output and each replica that cannot be read to
/// standard error; returns the exit status: 0, or 1 when a replica could not be read or the
/// proxy asked about is connected to none of them.
pub async fn run(args: &ProxyStatusArgs) -> u8 {
    let client = match DebugClient::new(args.token_file.as_deref()) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let mut failed = false;
    let mut replicas = Vec::new();
    for addr in &args.addr {
        match client.get_json(addr, "/debug/syncz").await {
            Ok(page) => replicas.push((addr.as_str(), page)),
            Err(e) => {
                eprintln!("error: replica {addr}: {e}");
                failed = true;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let printed = match &args.proxy {
        None => {
            let rows: Vec<Row> = replicas
                .iter()
                .flat_map(|(addr, page)| rows(addr, page))
                .collect();
            writeln!(out, "{}", render(rows).trim_end())
        }
        Some(query) => match one(&client, query, &replicas).await {
            Ok(text) => write!(out, "{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        },
    };
    if printed.is_err() {
        return 1;
    }
    u8::from(failed)
}

/// True when the node id `id` is the proxy `query` names: the id itself, or Istio's
/// `POD.NAMESPACE`, the third part of a `TYPE~IP~POD.NAMESPACE~DOMAIN` id.
pub fn matches(id: &str, query: &str) -> bool {
    if id == query {
        return true;
    }
    let parts: Vec<&str> = id.split('~').collect();
    parts.len() == 4 && parts[2] == query
}

/// Why one proxy's state could not be shown.
#[derive(Debug, thiserror::Error)]
enum OneError {
    /// No replica that answered has it.
    #[error("no proxy {query:?} is connected to {replicas}")]
    NotConnected { query: String, replicas: String },
    /// It names several proxies.
    #[error("{query:?} names several proxies ({ids}): give the full node id")]
    Ambiguous { query: String, ids: String },
    /// Its page could not be read.
    #[error("replica {addr}: {source}")]
    Fetch {
        addr: String,
        #[source]
        source: FetchError,
    },
}

/// The diff of the proxy `query` names, from the first replica it is connected to.
async fn one(
    client: &DebugClient,
    query: &str,
    replicas: &[(&str, Value)],
) -> Result<String, OneError> {
    let mut found: Vec<(&str, &str)> = Vec::new();
    for (addr, page) in replicas {
        for conn in page.as_array().into_iter().flatten() {
            if let Some(id) = conn["proxy"].as_str().filter(|id| matches(id, query)) {
                found.push((addr, id));
            }
        }
    }
    let mut ids: Vec<&str> = found.iter().map(|(_, id)| *id).collect();
    ids.sort_unstable();
    ids.dedup();
    let Some((addr, id)) = found.first().copied() else {
        let replicas: Vec<&str> = replicas.iter().map(|(a, _)| *a).collect();
        return Err(OneError::NotConnected {
            query: query.to_string(),
            replicas: if replicas.is_empty() {
                "any replica".into()
            } else {
                replicas.join(", ")
            },
        });
    };
    if ids.len() > 1 {
        return Err(OneError::Ambiguous {
            query: query.to_string(),
            ids: ids.join(", "),
        });
    }
    let path = format!("/debug/config_dump?proxyID={}", encode(id));
    let fetch = |source| OneError::Fetch {
        addr: addr.to_string(),
        source,
    };
    let dump = client.get_json(addr, &path).await.map_err(fetch)?;
    Ok(describe(addr, &dump))
}

/// `s` as a query value: every byte but unreserved ones percent-encoded.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_is_named_by_its_node_id_or_by_pod_and_namespace() {
        let id = "router~127.0.0.1~ingress.default~default.svc.cluster.local";
        assert!(matches(id, id));
        assert!(matches(id, "ingress.default"));
        assert!(!matches(id, "ingress"));
        assert!(!matches(id, "ingress.other"));
        assert!(!matches(id, "127.0.0.1"), "only the id part names a proxy");
        assert!(matches("grpc-client", "grpc-client"));
        assert!(
            !matches("a~b~c", "c"),
            "not Istio's form: the whole id only"
        );
    }

    #[test]
    fn a_node_id_is_encoded_as_a_query_value() {
        assert_eq!(
            encode("sidecar~10.0.0.1~a b&c=d.ns~x"),
            "sidecar~10.0.0.1~a%20b%26c%3Dd.ns~x"
        );
    }
}
