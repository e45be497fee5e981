//! One HTTP client for Consul: requests, blocking-query parameters, the index rules, and
//! failures turned into [`RegistryError`]s that name the request.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;
use wayfinder_registry::RegistryError;
use wayfinder_registry::answer::{AnswerError, read_within};

use crate::{BuildError, Config};

/// Consul answers a blocking query after at most `wait` plus up to `wait/16` of jitter; the
/// HTTP timeout allows that and this much more for the answer to travel.
const BLOCKING_SLACK: Duration = Duration::from_secs(5);
/// How much of an error body goes into a message.
const BODY_EXCERPT: usize = 200;

/// A configured HTTP client for one Consul agent or server.
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    wait: Duration,
    timeout: Duration,
    max_answer: usize,
}

/// What to read: a path under `/v1`, in one datacenter (`None`: the agent's own).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Query {
    pub(crate) path: String,
    pub(crate) dc: Option<String>,
}

/// A parsed answer and the `X-Consul-Index` it came with.
pub(crate) struct Answer<T> {
    pub(crate) value: T,
    pub(crate) index: Option<u64>,
    /// What the answer said of the cluster's leader.
    pub(crate) leader: Leader,
}

/// Whether the server that answered knew the cluster's leader (`X-Consul-KnownLeader`).
#[derive(Debug)]
pub(crate) enum Leader {
    /// It did.
    Known,
    /// It did not: the answer is that server's own view, which may be stale, and nothing
    /// written can reach it. The error names the request and how long ago the server last
    /// heard from a leader.
    Unknown(RegistryError),
    /// The answer did not say (no header: a proxy stripped it, or an endpoint without it).
    Unsaid,
}

impl Client {
    /// Builds the client: address, token, TLS files.
    pub(crate) fn new(config: &Config) -> Result<Self, BuildError> {
        // reqwest is built without a default TLS provider; ring is the one the project uses.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let base = normalize_addr(&config.addr)?;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(config.timeout)
            .pool_idle_timeout(Duration::from_secs(90));
        if let Some(ca) = &config.tls.ca_file {
            let pem = read(ca)?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| BuildError::Tls(format!("{}: {e}", ca.display())))?;
            if certs.is_empty() {
                return Err(BuildError::Tls(format!(
                    "{}: no PEM certificate in the file",
                    ca.display()
                )));
            }
            builder = builder.tls_certs_only(certs);
        }
        match (&config.tls.cert_file, &config.tls.key_file) {
            (Some(cert), Some(key)) => {
                let mut pem = read(cert)?;
                pem.extend_from_slice(b"\n");
                pem.extend_from_slice(&read(key)?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    BuildError::Tls(format!("{} and {}: {e}", cert.display(), key.display()))
                })?;
                builder = builder.identity(identity);
            }
            (None, None) => {}
            _ => {
                return Err(BuildError::Tls(
                    "a client certificate needs both a certificate file and a key file".into(),
                ));
            }
        }
        let http = builder
            .build()
            .map_err(|e| BuildError::Tls(error_chain(&e)))?;
        Ok(Self {
            http,
            base,
            token: config.token.clone().filter(|t| !t.is_empty()),
            wait: config.wait,
            timeout: config.timeout,
            max_answer: config.max_answer_bytes,
        })
    }

    /// How errors name a request: method, URL and datacenter.
    pub(crate) fn origin(&self, query: &Query) -> String {
        origin(&format!("{}/v1/{}", self.base, query.path), query)
    }

    /// `GET /v1/<path>`, blocking until the index moves past `index` when one is given.
    /// Reads are `stale`: any server may answer, as Consul recommends for reads that scale.
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        query: &Query,
        index: Option<u64>,
    ) -> Result<Answer<T>, RegistryError> {
        let mut params: Vec<(&str, String)> = vec![("stale", String::new())];
        let mut timeout = self.timeout;
        if let Some(index) = index {
            params.push(("index", index.to_string()));
            params.push(("wait", format!("{}ms", self.wait.as_millis())));
            timeout = self.wait + self.wait / 16 + BLOCKING_SLACK;
        }
        let (origin, headers, body) = self.send(query, params, timeout).await?;
        read_answer(&origin, &headers, &body)
    }

    /// A plain `GET /v1/<path>` with this timeout, such as `status/leader`, whose answer is
    /// the leader's address (`""` when the cluster has none).
    pub(crate) async fn get_plain<T: DeserializeOwned>(
        &self,
        query: &Query,
        timeout: Duration,
    ) -> Result<T, RegistryError> {
        let (origin, _, body) = self.send(query, Vec::new(), timeout).await?;
        parse(&origin, &body)
    }

    /// The request timeout of requests that do not block.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends `GET /v1/<path>` with `params` and the token, and returns the request as errors
    /// name it, the headers and the body of a 2xx answer.
    async fn send(
        &self,
        query: &Query,
        mut params: Vec<(&str, String)>,
        timeout: Duration,
    ) -> Result<(String, HeaderMap, Bytes), RegistryError> {
        let url = format!("{}/v1/{}", self.base, query.path);
        let origin = origin(&url, query);
        if let Some(dc) = &query.dc {
            params.push(("dc", dc.clone()));
        }
        let mut request = self.http.get(&url).query(&params).timeout(timeout);
        if let Some(token) = &self.token {
            request = request.header("X-Consul-Token", token);
        }
        let unavailable = |detail: String| RegistryError::Unavailable {
            origin: origin.clone(),
            detail,
        };
        let response = request
            .send()
            .await
            .map_err(|e| unavailable(describe(&e.without_url())))?;
        let status = response.status();
        let headers = response.headers().clone();
        let declared = response.content_length();
        let body = read_within(declared, self.max_answer, response.bytes_stream())
            .await
            .map_err(|e| match e {
                AnswerError::Read(e) => unavailable(format!(
                    "the answer broke off while being read: {}",
                    describe(&e.without_url())
                )),
                too_large => unavailable(too_large.to_string()),
            })?;
        let body = Bytes::from(body);
        if !status.is_success() {
            return Err(unavailable(status_detail(status, &body)));
        }
        Ok((origin, headers, body))
    }
}

/// Reads a 2xx answer to the request `origin`: its body, its `X-Consul-Index` and what it
/// says of the cluster's leader. Apart from the network, this is all the adapter takes from
/// Consul, so it is also what the fuzzer feeds (`crate::fuzz`).
pub(crate) fn read_answer<T: DeserializeOwned>(
    origin: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Answer<T>, RegistryError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let index = header("X-Consul-Index").and_then(|v| v.parse().ok());
    let leader = match header("X-Consul-KnownLeader") {
        None => Leader::Unsaid,
        Some(v) if !v.eq_ignore_ascii_case("false") => Leader::Known,
        Some(_) => Leader::Unknown(RegistryError::Unavailable {
            origin: origin.to_string(),
            detail: no_leader_detail(header("X-Consul-LastContact")),
        }),
    };
    let value = parse(origin, body)?;
    Ok(Answer {
        value,
        index,
        leader,
    })
}

fn parse<T: DeserializeOwned>(origin: &str, body: &[u8]) -> Result<T, RegistryError> {
    serde_json::from_slice(body).map_err(|e| RegistryError::Malformed {
        origin: origin.to_string(),
        detail: format!("{e} (in an answer of {} bytes)", body.len()),
    })
}

/// What an answer without a known leader means, with `X-Consul-LastContact` (milliseconds).
fn no_leader_detail(last_contact: Option<&str>) -> String {
    let since = last_contact
        .and_then(|v| v.parse::<u64>().ok())
        .map(|ms| format!(", last contact with a leader {ms} ms before"))
        .unwrap_or_default();
    format!(
        "answered without a known cluster leader (X-Consul-KnownLeader: false{since}): \
         Consul has lost its quorum or this server its leader, so answers may be stale"
    )
}

/// The index to send with the next blocking query, by Consul's rules ("Blocking Queries",
/// implementation details): an index that went backwards (a snapshot restore, a KV removal)
/// starts over at 0; an index of 0 is taken as 1 so the next query still blocks; no index at
/// all (a proxy stripped the header) means the next query cannot block.
pub(crate) fn next_index(previous: u64, returned: Option<u64>) -> u64 {
    match returned {
        None => 0,
        Some(i) if i < previous => 0,
        Some(0) => 1,
        Some(i) => i,
    }
}

/// Accepts `host:port`, `http://host:port` and `https://host:port` (with an optional path
/// prefix, for Consul behind a proxy) and returns it without a trailing slash.
fn normalize_addr(addr: &str) -> Result<String, BuildError> {
    let addr = addr.trim();
    let with_scheme = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let url = reqwest::Url::parse(&with_scheme)
        .map_err(|e| BuildError::Addr(format!("{addr:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(BuildError::Addr(format!(
            "{addr:?}: expected http://HOST:PORT or https://HOST:PORT"
        )));
    }
    Ok(with_scheme.trim_end_matches('/').to_string())
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, BuildError> {
    std::fs::read(path).map_err(|e| BuildError::Tls(format!("{}: {e}", path.display())))
}

/// The request as errors name it: method, URL and datacenter, not the index (so that repeated
/// failures of one watch read the same).
fn origin(url: &str, query: &Query) -> String {
    match &query.dc {
        Some(dc) => format!("GET {url}?dc={dc}"),
        None => format!("GET {url}"),
    }
}

pub(crate) fn status_detail(status: StatusCode, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let excerpt: String = text.chars().take(BODY_EXCERPT).collect();
    let mut detail = format!("HTTP {}", status.as_u16());
    if !excerpt.is_empty() {
        let _ = write!(detail, ": {excerpt}");
    }
    match status {
        StatusCode::FORBIDDEN => detail.push_str(
            " (the ACL token, from --consul-token or CONSUL_HTTP_TOKEN, needs service:read and node:read)",
        ),
        StatusCode::TOO_MANY_REQUESTS => detail.push_str(
            " (Consul limits concurrent connections per client, limits.http_max_conns_per_client, \
             default 200; raise it above the number of services, or poll with --consul-interval)",
        ),
        _ => {}
    }
    detail
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("no answer in time ({})", error_chain(e));
    }
    error_chain(e)
}

/// An error with its causes, which is where reqwest keeps the useful part ("connection
/// refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let _ = write!(text, ": {s}");
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_rules_follow_consuls_docs() {
        assert_eq!(next_index(0, Some(42)), 42);
        assert_eq!(next_index(42, Some(42)), 42);
        assert_eq!(next_index(42, Some(7)), 0, "backwards: start over");
        assert_eq!(next_index(5, Some(0)), 0, "0 after 5 is backwards too");
        assert_eq!(next_index(0, Some(0)), 1, "0 is taken as 1");
        assert_eq!(next_index(42, None), 0, "no header: cannot block");
    }

    #[test]
    fn addresses_take_a_scheme_and_lose_the_trailing_slash() {
        assert_eq!(
            normalize_addr("127.0.0.1:8500").unwrap(),
            "http://127.0.0.1:8500"
        );
        assert_eq!(
            normalize_addr("https://consul.example:8501/").unwrap(),
            "https://consul.example:8501"
        );
        assert!(normalize_addr("ftp://x").is_err());
        assert!(normalize_addr("http://").is_err());
    }

    #[test]
    fn status_errors_explain_acl_and_connection_limits() {
        let d = status_detail(StatusCode::FORBIDDEN, b"ACL not found");
        assert!(
            d.starts_with("HTTP 403: ACL not found") && d.contains("CONSUL_HTTP_TOKEN"),
            "{d}"
        );
        let d = status_detail(StatusCode::TOO_MANY_REQUESTS, b"");
        assert!(d.contains("http_max_conns_per_client"), "{d}");
    }
}
