//! Coverage-guided fuzzing of everything wayfinder reads from others: configuration files,
//! Consul and Eureka answers, and ADS requests. Each target takes arbitrary bytes, feeds them
//! through the same code the server runs, and may only end in error values: a panic, a hang
//! (libFuzzer's `-timeout`) or runaway memory (`-rss_limit_mb`) is a finding.
//!
//! | Target | Input | Through |
//! |---|---|---|
//! | [`config`] | files (YAML or JSON), separated by a line `%%` | [`wayfinder_config::Feed`]: the File registry's and the config source's parsing, validation and models; [`wayfinder_file::check()`] (`wayfinder validate`) |
//! | [`consul`] | HTTP answers ([`records`]) | `wayfinder_consul::fuzz::replay`: answer reading, the supervisor's state, the mapping |
//! | [`eureka`] | HTTP answers ([`records`]) | `wayfinder_eureka::fuzz::replay`: answer reading, the mirror and its deltas, the mapping |
//! | [`ads`] | two control bytes, then a gRPC request body | `wayfinder::xds::ads::fuzz::serve`: request framing, limits and budget, node, state machines |
//!
//! # Why libFuzzer on stable Rust
//!
//! The machines wayfinder is built on (and its CI) have stable Rust only. `cargo fuzz` needs
//! nightly for its default AddressSanitizer (`-Zsanitizer`), but not for what does the work:
//! libFuzzer, which `libfuzzer-sys` builds from its C++ sources with the system's C++
//! compiler, and the SanitizerCoverage instrumentation, which stable `rustc` gives with
//! `-C passes=sancov-module` and LLVM's `-sanitizer-coverage-*` options. `scripts/fuzz` builds
//! the targets that way (coverage counters, comparisons traced for the mutator, debug
//! assertions and overflow checks on) into `target/fuzz`, every crate instrumented, so that
//! serde's and prost's parsers guide the fuzzer too. AddressSanitizer is not needed: the
//! workspace forbids `unsafe`, so what is left to find is panics, hangs and memory growth,
//! which libFuzzer catches on its own. AFL++ (`cargo afl`) would also run on stable, but
//! must be built from source with an LLVM plugin matching rustc's LLVM; a property-based
//! harness (`proptest`, `arbitrary` without coverage) would run everywhere but finds far less
//! in parsers, where coverage feedback is what gets past the first syntax error.
//!
//! `cargo test` builds this library without libFuzzer and replays every seed in `corpus/`
//! through each target (`tests/corpus.rs`), so the harness and the seeds (found crashes
//! included, once fixed) are checked on every run.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tonic::{Code, Status};
use wayfinder::aggregate::snapshot_with_config;
use wayfinder::xds::XdsSnapshot;
use wayfinder::xds::ads::Limits;
use wayfinder::xds::ads::fuzz::{Variant, serve};
use wayfinder_config::{ConfigEvent, ConfigObject, Feed};
use wayfinder_registry::{Event, RegistryError, RegistryId};

mod records;

pub use records::{Record, records};

/// Configuration files: each piece of `data` between lines `%%` is the new content of one of
/// two files (`0.yaml`, `1.yaml`, in turn), read by the File registry's model and by the
/// config source's, each committed after every file, as a watched directory is. The last
/// content of both files is then checked as `wayfinder validate DIR` checks it
/// ([`wayfinder_file::check()`], in a directory made for the run and removed after it).
/// Returns how many errors the models reported.
pub fn config(data: &[u8]) -> usize {
    let mut errors = 0;
    let mut entries = Feed::entries();
    let mut config = Feed::config();
    let mut last: [&[u8]; 2] = [b"", b""];
    for (i, file) in split(data).enumerate() {
        last[i % 2] = file;
        let name = format!("{}.yaml", i % 2);
        let mut refused = entries.apply(&name, Some(file));
        refused.extend(config.apply(&name, Some(file)));
        refused.iter().for_each(reported);
        errors += refused.len();
        for item in entries.commit() {
            registry_item(&item);
            errors += usize::from(item.is_err());
        }
        for item in config.commit() {
            if let Err(err) = item {
                reported(&err);
                errors += 1;
            }
        }
    }
    validate(&last);
    errors
}

/// `wayfinder validate` over a directory holding `files` as `0.yaml` and `1.yaml`.
fn validate(files: &[&[u8]; 2]) {
    let dir = std::env::temp_dir().join(format!("wayfinder-fuzz-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        for (i, file) in files.iter().enumerate() {
            std::fs::write(dir.join(format!("{i}.yaml")), file)?;
        }
        Ok(())
    };
    if let Err(e) = write() {
        panic!("{}: {e}", dir.display());
    }
    let report = wayfinder_file::check(std::slice::from_ref(&dir));
    assert_eq!(report.files_checked, 2, "{report}");
    drop(report.to_string());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Consul's answers, as [`records`] (`GET /v1/catalog/services?dc=dc1 200`, headers, body).
/// Returns the registry's stream items.
pub fn consul(data: &[u8]) -> Vec<Result<Event, RegistryError>> {
    let records = records(data);
    let replies: Vec<_> = records
        .iter()
        .filter_map(|r| {
            let path = r.path.strip_prefix("/v1/")?;
            Some(wayfinder_consul::fuzz::Reply {
                path,
                dc: r.query("dc"),
                status: r.status,
                headers: &r.headers,
                body: r.body,
            })
        })
        .collect();
    let items = wayfinder_consul::fuzz::replay(&replies);
    items.iter().for_each(registry_item);
    items
}

/// Eureka's answers, as [`records`] (`GET /apps/delta 200`, headers, body). Returns the
/// registry's stream items.
pub fn eureka(data: &[u8]) -> Vec<Result<Event, RegistryError>> {
    let records = records(data);
    let replies: Vec<_> = records
        .iter()
        .map(|r| wayfinder_eureka::fuzz::Reply {
            path: r.path,
            status: r.status,
            body: r.body,
        })
        .collect();
    let items = wayfinder_eureka::fuzz::replay(&replies);
    items.iter().for_each(registry_item);
    items
}

/// One ADS request stream: `data[0]` chooses the method (even: state of the world, odd:
/// delta), `data[1]` the size of the DATA frames the body arrives in (0: one frame); the rest
/// is the request body (each message after gRPC's 5-byte prefix). Served from the snapshot of
/// `mesh.yaml`; then that snapshot without its last service is pushed. The server's limits are
/// scaled down (16 KiB requests, 256 names, 2 KiB of node metadata, a 64 KiB budget) so that
/// inputs of at most 64 KiB reach each refusal, and time is paused, so that a wait for the
/// budget costs no real time. Returns the number of responses sent, or the status that
/// refused the stream.
pub fn ads(data: &[u8]) -> Result<usize, Status> {
    let [variant, chunk, body @ ..] = data else {
        return Ok(0);
    };
    let variant = if variant % 2 == 0 {
        Variant::Sotw
    } else {
        Variant::Delta
    };
    let body = Bytes::copy_from_slice(body);
    let frames = match usize::from(*chunk) {
        0 => vec![body],
        n => (0..body.len())
            .step_by(n)
            .map(|at| body.slice(at..body.len().min(at + n)))
            .collect(),
    };
    let mesh = mesh();
    let limits = Limits {
        max_request_bytes: 16 << 10,
        request_budget_bytes: 64 << 10,
        max_names_per_request: 256,
        max_node_id_bytes: 1 << 10,
        max_node_metadata_bytes: 2 << 10,
        ..Limits::default()
    };
    let served = runtime().block_on(serve(variant, frames, &limits, DOMAIN, [&mesh.0, &mesh.1]));
    if let Err(status) = &served {
        assert_ne!(
            status.code(),
            Code::Ok,
            "a refusal with status OK: {status:?}"
        );
        assert!(!status.message().is_empty(), "a refusal without a reason");
    }
    served
}

/// The mesh domain the ADS target serves.
const DOMAIN: &str = "cluster.local";

/// The pieces of `data` between lines `%%`.
fn split(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let now = rest?;
        match find(now, b"\n%%\n") {
            Some(at) => {
                rest = Some(&now[at + 4..]);
                Some(&now[..at])
            }
            None => {
                rest = None;
                Some(now)
            }
        }
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Checks a registry's stream item: an error names where it comes from, and every
/// registration sent is one the aggregate accepts.
fn registry_item(item: &Result<Event, RegistryError>) {
    match item {
        Err(err) => reported(err),
        Ok(Event::Reset(all)) => all.iter().for_each(valid),
        Ok(Event::Upsert(one)) => valid(one),
        Ok(_) => {}
    }
}

fn valid(registration: &wayfinder_registry::Registration) {
    if let Err(err) = registration.validate() {
        panic!("sent an invalid registration ({err}): {registration:?}");
    }
}

/// An error as a user sees it names its origin and says what is wrong.
fn reported(err: &RegistryError) {
    assert!(
        !err.origin().is_empty(),
        "an error without an origin: {err:?}"
    );
    assert!(!err.to_string().is_empty());
}

/// One runtime for every run: the request reader is async (frames, deadlines, the budget).
/// Its clock is paused: when every task waits, it jumps to the next timer, so deadlines and
/// the budget's wait behave as they do, instantly.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap_or_else(|e| panic!("a tokio runtime: {e}"))
    })
}

/// The snapshots the ADS target serves: `mesh.yaml` read as the server reads a configuration
/// directory, then the same without its last service.
fn mesh() -> &'static (XdsSnapshot, XdsSnapshot) {
    static MESH: OnceLock<(XdsSnapshot, XdsSnapshot)> = OnceLock::new();
    MESH.get_or_init(|| {
        let yaml = include_bytes!("../mesh.yaml");
        let mut entries = Feed::entries();
        entries.apply("mesh.yaml", Some(yaml));
        let registrations = match entries.commit().into_iter().next() {
            Some(Ok(Event::Reset(all))) => all,
            other => panic!("mesh.yaml: expected its services, got {other:?}"),
        };
        let mut config = Feed::config();
        config.apply("mesh.yaml", Some(yaml));
        let objects: Vec<ConfigObject> = match config.commit().into_iter().next() {
            Some(Ok(ConfigEvent::Reset(all))) => all.iter().map(|o| (**o).clone()).collect(),
            other => panic!("mesh.yaml: expected its configuration, got {other:?}"),
        };
        let id = RegistryId::new("File");
        let build = |registrations, objects| {
            snapshot_with_config(vec![(id.clone(), registrations)], objects)
                .unwrap_or_else(|e| panic!("mesh.yaml: {e}"))
        };
        let mut fewer = registrations.clone();
        fewer.pop();
        let first = XdsSnapshot::new(Arc::new(build(registrations, objects.clone())), DOMAIN);
        let second = XdsSnapshot::next(Arc::new(build(fewer, objects)), DOMAIN, &first);
        (first, second)
    })
}
