//! Application probes, in Kubernetes' shape, which both of Istio's uses share: the kubelet's
//! probes rewritten to the agent (`ISTIO_KUBE_APP_PROBERS`, served on the status port) and a
//! WorkloadGroup's `probe` (ProxyConfig's `readinessProbe`, whose results a VM's agent reports
//! to the control plane).
//!
//! A probe has exactly one of `httpGet` (plain HTTP: a status from 200 to 399 passes),
//! `tcpSocket` (a connection passes) and `exec` (exit status 0 passes; not for the status
//! port, where the kubelet runs exec probes itself), each against `127.0.0.1` unless it names
//! a `host`, within `timeoutSeconds` (default 1).

use std::time::Duration;

use serde::Deserialize;

/// One probe.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    http_get: Option<HttpGet>,
    tcp_socket: Option<TcpSocket>,
    exec: Option<Exec>,
    /// Seconds a probe may take (Kubernetes' default 1).
    #[serde(default = "one")]
    pub timeout_seconds: u64,
    /// Seconds between probes (Kubernetes' default 10).
    #[serde(default = "ten")]
    pub period_seconds: u64,
    /// Seconds before the first probe.
    #[serde(default)]
    pub initial_delay_seconds: u64,
    /// Passes in a row that make a failing workload healthy (default 1).
    #[serde(default = "one")]
    pub success_threshold: u64,
    /// Failures in a row that make a healthy workload unhealthy (default 3).
    #[serde(default = "three")]
    pub failure_threshold: u64,
}

fn one() -> u64 {
    1
}

fn three() -> u64 {
    3
}

fn ten() -> u64 {
    10
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HttpGet {
    #[serde(default)]
    path: String,
    port: u16,
    host: Option<String>,
    scheme: Option<String>,
    #[serde(default)]
    http_headers: Vec<Header>,
}

#[derive(Clone, Debug, Deserialize)]
struct Header {
    name: String,
    value: String,
}

#[derive(Clone, Debug, Deserialize)]
struct TcpSocket {
    port: u16,
    host: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
struct Exec {
    command: Vec<String>,
}

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It passed, with the application's HTTP status where there is one.
    Pass(Option<u16>),
    /// It failed: why, and the application's HTTP status where there is one.
    Fail(String, Option<u16>),
}

impl Probe {
    /// Checks the probe can run: exactly one handler, HTTP only, and `exec` only when
    /// `allow_exec`. The error says what is wrong.
    pub fn check(&self, allow_exec: bool) -> Result<(), String> {
        let handlers = [
            self.http_get.is_some(),
            self.tcp_socket.is_some(),
            self.exec.is_some(),
        ];
        if handlers.iter().filter(|h| **h).count() != 1 {
            return Err(if allow_exec {
                "give exactly one of httpGet, tcpSocket and exec".to_string()
            } else {
                "give exactly one of httpGet and tcpSocket".to_string()
            });
        }
        if let Some(h) = &self.http_get
            && let Some(scheme) = h
                .scheme
                .as_deref()
                .filter(|s| !s.eq_ignore_ascii_case("HTTP"))
        {
            return Err(format!("scheme {scheme} is not supported (HTTP only)"));
        }
        if let Some(e) = &self.exec {
            if !allow_exec {
                return Err("exec probes are the kubelet's, not the agent's".to_string());
            }
            if e.command.is_empty() {
                return Err("exec needs a command".to_string());
            }
        }
        Ok(())
    }

    /// Runs the probe once.
    pub async fn run(&self, client: &reqwest::Client) -> Outcome {
        let timeout = Duration::from_secs(self.timeout_seconds.max(1));
        let host = |h: &Option<String>| h.clone().unwrap_or_else(|| "127.0.0.1".to_string());
        if let Some(h) = &self.http_get {
            let path = if h.path.starts_with('/') {
                h.path.clone()
            } else {
                format!("/{}", h.path)
            };
            let url = format!("http://{}:{}{path}", host(&h.host), h.port);
            let mut request = client.get(&url).timeout(timeout);
            for header in &h.http_headers {
                request = request.header(&header.name, &header.value);
            }
            return match request.send().await {
                Ok(r) => {
                    let code = r.status().as_u16();
                    if (200..400).contains(&code) {
                        Outcome::Pass(Some(code))
                    } else {
                        Outcome::Fail(format!("GET {url}: HTTP {code}"), Some(code))
                    }
                }
                Err(e) => Outcome::Fail(format!("GET {url}: {e}"), None),
            };
        }
        if let Some(t) = &self.tcp_socket {
            let target = format!("{}:{}", host(&t.host), t.port);
            return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&target))
                .await
            {
                Ok(Ok(_)) => Outcome::Pass(None),
                Ok(Err(e)) => Outcome::Fail(format!("connect {target}: {e}"), None),
                Err(_) => Outcome::Fail(format!("connect {target}: timed out"), None),
            };
        }
        if let Some(e) = &self.exec {
            let mut command = tokio::process::Command::new(&e.command[0]);
            command
                .args(&e.command[1..])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true);
            return match tokio::time::timeout(timeout, command.status()).await {
                Ok(Ok(status)) if status.success() => Outcome::Pass(None),
                Ok(Ok(status)) => {
                    Outcome::Fail(format!("{:?} exited with {status}", e.command), None)
                }
                Ok(Err(err)) => Outcome::Fail(format!("{:?}: {err}", e.command), None),
                Err(_) => Outcome::Fail(format!("{:?}: timed out", e.command), None),
            };
        }
        Outcome::Fail("no handler".to_string(), None)
    }
}
