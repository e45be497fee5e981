//! The HTTP side: the two GETs the adapter makes (`/apps`, `/apps/delta`) and the error items
//! their failures become.

use std::time::Duration;

use reqwest::{StatusCode, Url, header};
use wayfinder_registry::RegistryError;
use wayfinder_registry::answer::{AnswerError, read_within};

use crate::BuildError;
use crate::api::{Applications, parse_applications};

/// How much of an error response's body goes into an error item.
const BODY_EXCERPT: usize = 200;

/// A Eureka server at one base URL.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    http: reqwest::Client,
    timeout: Duration,
    max_answer: usize,
    apps: Url,
    delta: Url,
    /// The base URL as shown in origins, with any password replaced by `***`.
    shown_base: String,
}

/// What a GET answered.
pub(crate) enum Answer {
    /// A 2xx status and its body.
    Body(Vec<u8>),
    /// Another status, and the beginning of its body.
    Status(StatusCode, String),
}

impl Client {
    /// A client for the server at `base` (an http or https URL without query or fragment).
    /// Credentials in the URL are sent as basic authentication.
    pub(crate) fn new(
        base: &Url,
        timeout: Duration,
        max_answer: usize,
    ) -> Result<Self, BuildError> {
        let mut headers = header::HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            header::HeaderValue::from_static("application/json"),
        );
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("wayfinder-eureka/", env!("CARGO_PKG_VERSION")))
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(BuildError::Client)?;
        let root = base.as_str().trim_end_matches('/');
        let join = |path: &str| {
            Url::parse(&format!("{root}{path}")).map_err(|e| BuildError::Url {
                url: base.to_string(),
                reason: e.to_string(),
            })
        };
        let (apps, delta) = (join("/apps")?, join("/apps/delta")?);
        let mut shown = base.clone();
        if shown.password().is_some() {
            let _ = shown.set_password(Some("***"));
        }
        Ok(Self {
            http,
            timeout,
            max_answer,
            apps,
            delta,
            shown_base: shown.as_str().trim_end_matches('/').to_string(),
        })
    }

    /// The base URL for origins (password redacted).
    pub(crate) fn base(&self) -> &str {
        &self.shown_base
    }

    /// `GET {base}/apps`: the whole registry.
    pub(crate) async fn full(&self) -> Result<Applications, RegistryError> {
        let origin = self.origin("/apps");
        read_full(self.get(&self.apps, &origin).await?, origin)
    }

    /// `GET {base}/apps/delta`: recent changes, or `None` when the server does not serve deltas
    /// (403 or 404, as servers with deltas disabled answer, or an empty body).
    pub(crate) async fn delta(&self) -> Result<Option<Applications>, RegistryError> {
        let origin = self.origin("/apps/delta");
        read_delta(self.get(&self.delta, &origin).await?, origin)
    }

    fn origin(&self, path: &str) -> String {
        format!("GET {}{path}", self.shown_base)
    }

    async fn get(&self, url: &Url, origin: &str) -> Result<Answer, RegistryError> {
        let failed = |what: &str, err: reqwest::Error| RegistryError::Unavailable {
            origin: origin.to_string(),
            detail: format!("{what}{}", describe(err, self.timeout)),
        };
        let response = self
            .http
            .get(url.clone())
            .send()
            .await
            .map_err(|e| failed("", e))?;
        let status = response.status();
        let declared = response.content_length();
        let body = read_within(declared, self.max_answer, response.bytes_stream())
            .await
            .map_err(|e| match e {
                AnswerError::Read(e) => {
                    failed(&format!("HTTP {status}, then reading the body: "), e)
                }
                too_large => RegistryError::Unavailable {
                    origin: origin.to_string(),
                    detail: too_large.to_string(),
                },
            })?;
        Ok(Answer::new(status, &body))
    }
}

impl Answer {
    /// A 2xx answer's body, or another status with the beginning of its body.
    pub(crate) fn new(status: StatusCode, body: &[u8]) -> Self {
        if status.is_success() {
            return Answer::Body(body.to_vec());
        }
        let text = String::from_utf8_lossy(body);
        let excerpt: String = text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(BODY_EXCERPT)
            .collect();
        Answer::Status(status, excerpt)
    }
}

/// What an answer to `GET /apps` (named `origin` in errors) holds.
pub(crate) fn read_full(answer: Answer, origin: String) -> Result<Applications, RegistryError> {
    match answer {
        Answer::Body(body) => parse(&body, origin),
        Answer::Status(status, excerpt) => Err(unavailable(origin, status, &excerpt)),
    }
}

/// What an answer to `GET /apps/delta` holds; `None` when the server serves no deltas.
pub(crate) fn read_delta(
    answer: Answer,
    origin: String,
) -> Result<Option<Applications>, RegistryError> {
    match answer {
        Answer::Body(body) if body.trim_ascii().is_empty() => Ok(None),
        Answer::Body(body) => parse(&body, origin).map(Some),
        Answer::Status(StatusCode::FORBIDDEN | StatusCode::NOT_FOUND, _) => Ok(None),
        Answer::Status(status, excerpt) => Err(unavailable(origin, status, &excerpt)),
    }
}

fn parse(body: &[u8], origin: String) -> Result<Applications, RegistryError> {
    if body.trim_ascii().is_empty() {
        return Err(RegistryError::Malformed {
            origin,
            detail: "empty body".into(),
        });
    }
    parse_applications(body).map_err(|detail| RegistryError::Malformed { origin, detail })
}

fn unavailable(origin: String, status: StatusCode, excerpt: &str) -> RegistryError {
    let detail = if excerpt.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {excerpt}")
    };
    RegistryError::Unavailable { origin, detail }
}

/// A reqwest error with its causes (`error sending request: … tcp connect error: Connection
/// refused`), or the timeout.
fn describe(err: reqwest::Error, timeout: Duration) -> String {
    if err.is_timeout() {
        return format!("no answer within {timeout:?}");
    }
    let err = err.without_url();
    let mut detail = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !detail.contains(&cause_text) {
            detail.push_str(": ");
            detail.push_str(&cause_text);
        }
        source = cause.source();
    }
    detail
}
