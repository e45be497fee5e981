//! The mesh the server reads: `ServiceEntry` files in a temporary directory, rewritten one file
//! at a time to change one service's endpoints.
//!
//! Service `s` is `svc-NNNNN.load.svc.cluster.local` in namespace `load`, port `http` 8080,
//! `STATIC` with `endpoints` addresses. Files hold `per_file` services each, so a change
//! rewrites one small file and the File registry re-reads only that one. Endpoint addresses
//! are numbered from 10.10.0.0 up: the initial ones first, then a fresh block of `endpoints`
//! per change, so every change moves all of a service's endpoints (a rolling update) and its
//! first new address says which change a client received. Clients sit at 10.9.x.y, outside
//! that range, so no client is an endpoint of a service (no inbound clusters).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tempfile::TempDir;

/// The files and what they currently say.
pub(crate) struct Mesh {
    dir: TempDir,
    endpoints: usize,
    per_file: usize,
    /// Per service, the change that last set its endpoints (0: the initial ones).
    generation: Vec<usize>,
}

/// The namespace of every service, and of every client unless `--namespaces` spreads them.
pub(crate) const NAMESPACE: &str = "load";

/// Client `id`'s namespace: `load`, or `load-K` for `K` = `id` mod `namespaces` when there
/// are several.
pub(crate) fn client_namespace(id: usize, namespaces: usize) -> String {
    match namespaces {
        1 => NAMESPACE.to_string(),
        n => format!("{NAMESPACE}-{}", id % n),
    }
}

/// The services the Sidecar of client namespace `ns` lets its proxies reach: `hosts`
/// consecutive ones from `ns × hosts`, wrapping.
pub(crate) fn scope(ns: usize, hosts: usize, services: usize) -> impl Iterator<Item = usize> {
    (0..hosts.min(services)).map(move |j| (ns * hosts + j) % services)
}

/// Writes one `Sidecar` per client namespace, limiting egress to its [`scope`], into a new
/// temporary directory for `--config-dir`: Istio's recommended configuration for a large mesh.
pub(crate) fn write_sidecars(namespaces: usize, hosts: usize, services: usize) -> TempDir {
    let dir = tempfile::Builder::new()
        .prefix("wayfinder-xds-load-config-")
        .tempdir()
        .unwrap();
    let mut yaml = String::new();
    for ns in 0..namespaces {
        yaml.push_str(&format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\n\
             metadata: {{name: default, namespace: {}}}\nspec:\n  egress:\n  - hosts:\n",
            client_namespace(ns, namespaces)
        ));
        for s in scope(ns, hosts, services) {
            yaml.push_str(&format!("    - {NAMESPACE}/{}\n", hostname(s)));
        }
        yaml.push_str("---\n");
    }
    std::fs::write(dir.path().join("sidecars.yaml"), yaml).unwrap();
    dir
}
/// The service port.
pub(crate) const PORT: u16 = 8080;

/// The hostname of service `s`.
pub(crate) fn hostname(s: usize) -> String {
    format!("svc-{s:05}.{NAMESPACE}.svc.cluster.local")
}

/// The cluster (and EDS resource) of service `s`, as Istio names it.
pub(crate) fn cluster(s: usize) -> String {
    format!("outbound|{PORT}||{}", hostname(s))
}

impl Mesh {
    /// Writes `services` services of `endpoints` endpoints each into a new temporary directory.
    pub(crate) fn write(services: usize, endpoints: usize, per_file: usize) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("wayfinder-xds-load-")
            .tempdir()
            .unwrap();
        let mesh = Self {
            dir,
            endpoints,
            per_file,
            generation: vec![0; services],
        };
        for f in 0..services.div_ceil(per_file) {
            mesh.write_file(f);
        }
        mesh
    }

    /// The directory to pass to `--file-registry`.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Moves every endpoint of service `s` to fresh addresses as change `change` (1, 2, …)
    /// without writing it yet; returns the first new address.
    pub(crate) fn change(&mut self, s: usize, change: usize) -> String {
        self.generation[s] = change;
        self.address(s, 0)
    }

    /// Writes the file of service `s`; returns when the rename returned, as an instant and as
    /// seconds since the epoch (to compare with the server's log). Blocking: run it off the
    /// runtime's workers.
    pub(crate) fn flush(&self, s: usize) -> (Instant, f64) {
        let at = self.write_file(s / self.per_file);
        (at, crate::load::now_secs())
    }

    /// The `i`th endpoint address of service `s` as it is now.
    fn address(&self, s: usize, i: usize) -> String {
        let services = self.generation.len();
        let v = match self.generation[s] {
            0 => s * self.endpoints + i,
            g => (services + g - 1) * self.endpoints + i,
        };
        assert!(v >> 16 < 246, "too many endpoints for 10.10.0.0 and up");
        format!("10.{}.{}.{}", 10 + (v >> 16), (v >> 8) & 255, v & 255)
    }

    /// Writes file `f` to a temporary name beside it and renames it into place, so the
    /// registry never reads half a file; returns when the rename returned.
    fn write_file(&self, f: usize) -> Instant {
        let first = f * self.per_file;
        let last = (first + self.per_file).min(self.generation.len());
        let mut yaml = String::new();
        for s in first..last {
            yaml.push_str(&self.entry(s));
        }
        let path = self.file(f);
        let tmp: PathBuf = self.dir.path().join(format!(".services-{f:04}.tmp"));
        let mut out = std::fs::File::create(&tmp).unwrap();
        out.write_all(yaml.as_bytes()).unwrap();
        drop(out);
        std::fs::rename(&tmp, &path).unwrap();
        Instant::now()
    }

    fn file(&self, f: usize) -> PathBuf {
        self.dir.path().join(format!("services-{f:04}.yaml"))
    }

    fn entry(&self, s: usize) -> String {
        let mut e = format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
             metadata: {{name: svc-{s:05}, namespace: {NAMESPACE}}}\n\
             spec:\n  hosts: [{}]\n  location: MESH_INTERNAL\n  resolution: STATIC\n\
             \x20 ports:\n  - {{name: http, number: {PORT}, protocol: HTTP}}\n  endpoints:\n",
            hostname(s)
        );
        for i in 0..self.endpoints {
            e.push_str(&format!("  - {{address: {}}}\n", self.address(s, i)));
        }
        e.push_str("---\n");
        e
    }
}
