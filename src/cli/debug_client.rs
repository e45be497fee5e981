//! GETs of a running server's debug pages, with the token of its `--debug-token-file`: what
//! `wayfinder request` and `wayfinder proxy-status` send.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use crate::debug::trust::{TokenError, read_token_file};

/// How long one page may take, connection included: an unreachable replica is reported
/// rather than waited for.
const TIMEOUT: Duration = Duration::from_secs(10);

/// `wayfinder request` arguments.
#[derive(Debug, Args)]
pub struct RequestArgs {
    /// Path to GET, e.g. `/debug/registryz`.
    pub path: String,
    /// The server's debug address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// A file holding the token of the server's `--debug-token-file`, sent as a bearer
    /// token: needed from another host.
    #[arg(long = "token-file", value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

/// A client of debug pages.
pub struct DebugClient {
    http: reqwest::Client,
    token: Option<String>,
}

/// A page that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// `--token-file` could not be read.
    #[error("--token-file: {0}")]
    Token(#[from] TokenError),
    /// The HTTP client could not be built.
    #[error("an HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// No answer (refused, unreachable, timed out) or an answer cut short.
    #[error("GET {url}: {source}")]
    Send {
        /// The page.
        url: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// An answer that is not the JSON the page serves.
    #[error("GET {url}: not JSON: {source}")]
    Json {
        /// The page.
        url: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// An answer other than 200.
    #[error("GET {url}: {status}: {body}")]
    Status {
        /// The page.
        url: String,
        /// Its status.
        status: reqwest::StatusCode,
        /// Its body, without trailing whitespace.
        body: String,
    },
}

impl DebugClient {
    /// A client that sends the token in `token_file`, if any, as a bearer token.
    pub fn new(token_file: Option<&Path>) -> Result<Self, FetchError> {
        let token = token_file.map(read_token_file).transpose()?;
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(FetchError::Client)?;
        Ok(Self { http, token })
    }

    /// The body of `path` (a leading `/` is added when missing) on the server whose debug
    /// address is `addr` (`HOST:PORT`).
    pub async fn get(&self, addr: &str, path: &str) -> Result<String, FetchError> {
        let slash = if path.starts_with('/') { "" } else { "/" };
        let url = format!("http://{addr}{slash}{path}");
        let mut get = self.http.get(&url);
        if let Some(token) = &self.token {
            get = get.bearer_auth(token);
        }
        let send = |source| FetchError::Send {
            url: url.clone(),
            source,
        };
        let response = get.send().await.map_err(send)?;
        let status = response.status();
        let body = response.text().await.map_err(send)?;
        if !status.is_success() {
            let body = body.trim_end().to_string();
            return Err(FetchError::Status { url, status, body });
        }
        Ok(body)
    }

    /// [`DebugClient::get`] of a page that answers JSON, parsed.
    pub async fn get_json(&self, addr: &str, path: &str) -> Result<serde_json::Value, FetchError> {
        let body = self.get(addr, path).await?;
        serde_json::from_str(&body).map_err(|source| FetchError::Json {
            url: format!("http://{addr}{path}"),
            source,
        })
    }
}
