//! [`FakeApiServer`]: the handle tests hold and its lifecycle; its helper methods are in
//! `helpers`.

mod helpers;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::http;
use super::state::Shared;
use wayfinder_registry::fake_listener::StopListener;

/// A fake Kubernetes API server on `127.0.0.1`; it stops serving when dropped.
///
/// Its helper methods (`apply`, `delete`, `get`, …) act on the state directly: they meet no
/// fault and are not counted.
#[derive(Debug)]
pub struct FakeApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    serving: Mutex<Option<Serving>>,
}

#[derive(Debug)]
struct Serving {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Serving {
    /// Closes the listener and every connection (the task's end drops the listener).
    fn halt(self, shared: &Shared) -> JoinHandle<()> {
        self.stop.send_replace(true);
        shared.stop_all();
        self.task.abort();
        self.task
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    // A deep accept queue: load runs open many watches at once.
    socket.listen(4096)
}

fn serve(shared: &Arc<Shared>, tcp: TcpListener) -> Serving {
    let (stop, stop_rx) = watch::channel(false);
    let app = http::router(shared.clone());
    let listener = StopListener::new(tcp, stop_rx);
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!(%error, "fake API server stopped serving");
        }
    });
    Serving { stop, task }
}

impl FakeApiServer {
    /// Binds `127.0.0.1:0` and serves. Panics if it cannot bind.
    pub async fn start() -> FakeApiServer {
        let tcp = bind((Ipv4Addr::LOCALHOST, 0).into())
            .unwrap_or_else(|e| panic!("fake API server: cannot bind 127.0.0.1:0: {e}"));
        Self::serving(tcp)
    }

    /// Serves on `tcp`, a listener bound by the caller: one bound in a test's network
    /// namespace serves that namespace. Panics if it cannot be used.
    pub async fn start_on(tcp: std::net::TcpListener) -> FakeApiServer {
        let tcp = tcp
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(tcp))
            .unwrap_or_else(|e| panic!("fake API server: cannot use the listener: {e}"));
        Self::serving(tcp)
    }

    fn serving(tcp: TcpListener) -> FakeApiServer {
        let addr = tcp
            .local_addr()
            .unwrap_or_else(|e| panic!("fake API server: no local address: {e}"));
        let shared = Arc::new(Shared::new());
        let serving = serve(&shared, tcp);
        FakeApiServer {
            shared,
            addr,
            serving: Mutex::new(Some(serving)),
        }
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `kube::Client` for the fake: `kube::Config::new(url)`, default namespace `default`
    /// (and kube's default retries of 429, 503 and 504).
    pub fn client(&self) -> kube::Client {
        let uri = self
            .url()
            .parse()
            .unwrap_or_else(|e| panic!("fake API server: bad URL: {e}"));
        kube::Client::try_from(kube::Config::new(uri))
            .unwrap_or_else(|e| panic!("fake API server: cannot build a client: {e}"))
    }

    /// Writes a kubeconfig (cluster `server` = [`FakeApiServer::url`], no auth, one context
    /// named `name` and current, namespace `default`) to `dir/<name>.kubeconfig`; returns its
    /// path. Panics if it cannot write.
    pub fn write_kubeconfig(&self, dir: &Path, name: &str) -> PathBuf {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {url}\n\
             users:\n- name: {name}\n  user: {{}}\ncontexts:\n- name: {name}\n  context:\n    \
             cluster: {name}\n    user: {name}\n    namespace: default\ncurrent-context: {name}\n\
             preferences: {{}}\n",
            url = self.url()
        );
        let path = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, yaml)
            .unwrap_or_else(|e| panic!("fake API server: cannot write {}: {e}", path.display()));
        path
    }

    /// Stops serving: the listener closes (connections are refused) and every open watch and
    /// held request is cut. State and resourceVersions are kept.
    pub async fn stop(&self) {
        let serving = self
            .serving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(serving) = serving {
            let _ = serving.halt(&self.shared).await;
        }
    }

    /// Serves again on the same port, as an API server restart would (after
    /// [`FakeApiServer::stop`]; nothing happens while serving). The history is kept, so
    /// watches resume where they were; call [`FakeApiServer::compact`] as well to model a
    /// restarted watch cache that answers older versions with 410. Panics if the port stays
    /// taken for 10 seconds.
    pub async fn restart(&self) {
        if self
            .serving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
        {
            return;
        }
        let mut tries = 0;
        let tcp = loop {
            match bind(self.addr) {
                Ok(tcp) => break tcp,
                Err(e) if tries >= 200 => {
                    panic!("fake API server: cannot bind {} again: {e}", self.addr)
                }
                Err(_) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let serving = serve(&self.shared, tcp);
        let old = self
            .serving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(serving);
        if let Some(old) = old {
            old.halt(&self.shared);
        }
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        let serving = self
            .serving
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(serving) = serving {
            serving.halt(&self.shared);
        }
    }
}
