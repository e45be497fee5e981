//! A private network namespace for one test, as a pod has: its own loopback (up), no other
//! interface, and so every port free, default ports included (Envoy's 15000, 15001, 15006,
//! the agent's 15020). Tests that run the agent, Envoy and traffic capture run them in one.
//!
//! A holder process (`unshare --net`, then `sleep`) keeps the namespace alive; it is killed by
//! pid when the [`Netns`] is dropped, and the namespace goes with its last process. Programs
//! run inside through util-linux's `nsenter --net=/proc/PID/ns/net`, which enters the
//! namespace and execs the program, so the child's pid is the program's. The test itself
//! reaches servers inside from a thread of its own moved into the namespace (`setns`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Stdio};

/// util-linux's `nsenter`, found on `PATH` once.
fn nsenter() -> &'static std::path::Path {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|dir| dir.join("nsenter"))
            .find(|p| p.is_file())
            .expect("util-linux's nsenter on PATH")
    })
}

/// A network namespace of its own, alive while this value is.
pub(crate) struct Netns {
    holder: Child,
    path: PathBuf,
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

impl Netns {
    /// Creates the namespace with its loopback up; returns once it is ready.
    pub(crate) fn new() -> Self {
        let mut holder = std::process::Command::new("unshare")
            .args(["--net", "--", "sh", "-c"])
            .arg("ip link set lo up && echo up && exec sleep 2147483647")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start `unshare --net` (util-linux) for a private network namespace");
        let mut line = String::new();
        let stdout = holder.stdout.take().expect("piped stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the namespace holder's output");
        assert_eq!(
            line.trim(),
            "up",
            "the network namespace did not come up (are we root, with iproute2?)"
        );
        let path = PathBuf::from(format!("/proc/{}/ns/net", holder.id()));
        Self { holder, path }
    }

    /// The holder's pid, which names the namespace (`ip link set DEV netns PID`).
    pub(crate) fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// A command that runs `program` inside the namespace (its pid is the program's).
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
        // By its path: a test may give the program a `PATH` without it.
        let mut command = tokio::process::Command::new(nsenter());
        command
            .arg(format!("--net={}", self.path.display()))
            .arg("--")
            .arg(program);
        command
    }

    /// The `nsenter` prefix that [`Netns::command`] puts before a program, for helpers that
    /// take a wrapper command.
    pub(crate) fn wrapper(&self) -> [String; 3] {
        [
            nsenter().display().to_string(),
            format!("--net={}", self.path.display()),
            "--".to_string(),
        ]
    }

    /// Starts `f` on a thread of its own inside the namespace (every socket it opens is the
    /// namespace's); its result arrives on the receiver.
    pub(crate) fn spawn<T, F>(&self, f: F) -> tokio::sync::oneshot::Receiver<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let path = self.path.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Not spawn_blocking: a pooled thread left in the namespace would serve other tasks.
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).expect("open the namespace");
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&ns),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("setns into the test's network namespace");
            let _ = tx.send(f());
        });
        rx
    }

    /// Runs the future `make()` returns on a current-thread runtime inside the namespace, on
    /// a thread of its own; its result arrives on the receiver.
    pub(crate) fn spawn_async<T, F, Fut>(&self, make: F) -> tokio::sync::oneshot::Receiver<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T>,
    {
        self.spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime in the namespace")
                .block_on(make())
        })
    }

    /// Runs the future `make()` returns inside the namespace and returns its output.
    pub(crate) async fn block_on<T, F, Fut>(&self, make: F) -> T
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T>,
    {
        self.spawn_async(make)
            .await
            .expect("the namespace thread panicked")
    }

    /// GETs `http://ADDR/PATH` from inside the namespace: status and body. A connection error
    /// is status 0 with the error as body, so that callers can wait for a server to come up.
    pub(crate) async fn get(&self, addr: SocketAddr, path: &str) -> (u16, String) {
        let url = format!("http://{addr}{path}");
        self.block_on(move || async move {
            crate::support::tls_provider();
            match reqwest::get(&url).await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    (status, response.text().await.unwrap_or_default())
                }
                Err(e) => (0, format!("GET {url}: {e}")),
            }
        })
        .await
    }
}
