#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Checks of the fake Consul itself, with plain HTTP requests: answer shapes, ACLs, faults and
//! counts (`api`), blocking queries (`blocking`), and the leader and outages that leave
//! parked queries parked (`outage`).

mod api;
mod blocking;
mod outage;

use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use wayfinder_consul::fake::{FakeConsul, Instance};

/// A bound on waits that should end at once, so a broken fake fails instead of hanging.
pub(crate) const GUARD: Duration = Duration::from_secs(20);

thread_local! {
    /// One client per test thread (each test has its own thread and runtime): building a
    /// client loads TLS roots, too slow to do per request.
    static CLIENT: reqwest::Client = {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::new()
    };
}

pub(crate) fn client() -> reqwest::Client {
    CLIENT.with(reqwest::Client::clone)
}

pub(crate) struct Answer {
    status: u16,
    index: Option<u64>,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

pub(crate) async fn get(fake: &FakeConsul, path: &str) -> Answer {
    send(client().get(format!("{}{path}", fake.url()))).await
}

pub(crate) async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    let headers = response.headers().clone();
    let index = headers
        .get("x-consul-index")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    Answer {
        status,
        index,
        headers,
        body,
    }
}

/// Starts a GET in a task of its own.
pub(crate) fn spawn_get(fake: &FakeConsul, path: &str) -> JoinHandle<Answer> {
    let request = client().get(format!("{}{path}", fake.url()));
    tokio::spawn(send(request))
}

pub(crate) async fn join(task: JoinHandle<Answer>) -> Answer {
    tokio::time::timeout(GUARD, task).await.unwrap().unwrap()
}

pub(crate) fn web(id: &str, address: &str) -> Instance {
    Instance::new("web", id, address, 8080)
}
