//! Real Envoy 1.40 as an Istio ingress gateway: a `Gateway` and VirtualServices bound to it
//! from `--config-dir`, HTTP backends (`tests/clients/http_backend.py`) on loopback registered
//! by ServiceEntries in the same directory, and requests through the gateway's listener.
//!
//! The only other registry is the File registry over an empty directory: the Mock registry's
//! bookinfo also has `reviews.default…` and `ratings.default…`, whose unreachable endpoints
//! would merge into the subsets under test.
//!
//! Faults, timeouts and retries are in `gateway/faults.rs`.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::future::join_all;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::envoy::Envoy;
use crate::support::binary::{Wayfinder, get};
use crate::support::fixtures::write;
use crate::support::{DEADLINE, eventually};
use crate::tools::{Tools, tools};

mod faults;

const REVIEWS: &str = "reviews.default.svc.cluster.local";
const RATINGS: &str = "ratings.default.svc.cluster.local";
pub(crate) const NODE: &str = "router~127.0.0.1~ingress.default~default.svc.cluster.local";

/// `(count of answers, by status and body)`.
pub(crate) type Tally = BTreeMap<(u16, String), u64>;

/// A backend to start: `(service host, name and version label, flags)`.
type Spec<'a> = (&'a str, &'a str, &'a [&'a str]);

/// Starts an `http_backend.py` answering `name`, with extra `flags` (`--fail-every`,
/// `--delay-ms`); returns it with its port. It is killed (by pid) when the child is dropped,
/// and its stdin pipe, left in the child, keeps it running until then.
pub(crate) async fn backend(tools: &Tools, name: &str, flags: &[&str]) -> (Child, u16) {
    backend_in(Command::new(&tools.python), tools, name, flags).await
}

/// [`backend`] run by `python`, a command that runs the test venv's interpreter (perhaps in
/// a network namespace).
pub(crate) async fn backend_in(
    mut python: Command,
    tools: &Tools,
    name: &str,
    flags: &[&str],
) -> (Child, u16) {
    let mut child = python
        .arg(tools.clients.join("http_backend.py"))
        .args(["--name", name])
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start http_backend.py");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("the backend's port line within the deadline")
        .unwrap()
        .expect("the backend is running");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    (child, u16::try_from(v["port"].as_u64().unwrap()).unwrap())
}

/// Backends, wayfinder and an Envoy gateway; every process is killed when this is dropped.
struct Mesh {
    envoy: Envoy,
    w: Wayfinder,
    dir: tempfile::TempDir,
    _empty: tempfile::TempDir,
    _backends: Vec<Child>,
    http: reqwest::Client,
    /// The Gateway's server port, which Envoy binds on 127.0.0.1.
    port: u16,
}

impl Mesh {
    /// Starts `backends`, writes their ServiceEntries (one per host, endpoints labelled
    /// `version: NAME`), the Gateway `ingress` for every host (`"*"`) on a free port,
    /// DestinationRule `reviews` with `subsets` (`dr.yaml`) and VirtualService `reviews` with
    /// `http` (`vs.yaml`), then starts wayfinder and Envoy as the ingress gateway.
    async fn start(tools: &Tools, backends: &[Spec<'_>], subsets: &[&str], http: &str) -> Self {
        let mut started = Vec::new();
        let mut entries: BTreeMap<&str, Vec<(u16, &str)>> = BTreeMap::new();
        for &(host, name, flags) in backends {
            let (child, port) = backend(tools, name, flags).await;
            entries.entry(host).or_default().push((port, name));
            started.push(child);
        }
        let dir = tempfile::tempdir().unwrap();
        for (host, endpoints) in &entries {
            let file = format!("{}-entry.yaml", host.split('.').next().unwrap());
            write(dir.path(), &file, &entry(host, endpoints));
        }
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        write(dir.path(), "gateway.yaml", &gateway(port));
        write(dir.path(), "dr.yaml", &rule(subsets, "ROUND_ROBIN"));
        write(dir.path(), "vs.yaml", &routes(http));
        let empty = tempfile::tempdir().unwrap();
        let (e, d) = (empty.path().display(), dir.path().display());
        let flags =
            format!("--registries=File --file-registry={e} --config-dir={d} --debounce-after=10ms");
        let w = Wayfinder::start(&flags.split(' ').collect::<Vec<_>>()).await;
        w.ready().await;
        let envoy = Envoy::start(tools, w.grpc, NODE, "{LABELS: {istio: ingressgateway}}").await;
        crate::support::tls_provider();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let (_empty, _backends) = (empty, started);
        Self {
            envoy,
            w,
            dir,
            _empty,
            _backends,
            http,
            port,
        }
    }

    /// Rewrites one configuration file (atomically).
    fn write(&self, name: &str, text: &str) {
        write(self.dir.path(), name, text);
    }

    /// Waits until `path` with `headers` answers 200 from `backend`; on timeout, fails with
    /// the last answer, Envoy's listeners, its rejection stats and what wayfinder serves.
    async fn wait_for(&self, path: &str, headers: &[(&str, &str)], backend: &str) {
        self.wait_for_answer(REVIEWS, path, headers, (200, backend))
            .await;
    }

    /// Waits until `path` with `Host: host` and `headers` gets the answer `want` (status and
    /// body), with the failure message of [`Mesh::wait_for`].
    async fn wait_for_answer(
        &self,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        want: (u16, &str),
    ) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let mut last = self.get_host(host, path, headers).await;
        while (last.0, last.1.as_str()) != want {
            if tokio::time::Instant::now() > deadline {
                let listeners = get(self.envoy.admin, "/listeners").await.1;
                let dump = self
                    .w
                    .get(&format!("/debug/config_dump?proxyID={NODE}"))
                    .await;
                panic!(
                    "no {want:?} for {host}{path} within {DEADLINE:?}; last answer {last:?}\n\
                     Envoy listeners:\n{listeners}\nrejected: {:?}\nwayfinder serves: {}",
                    self.rejected().await,
                    dump.1
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            last = self.get_host(host, path, headers).await;
        }
    }

    /// GETs `path` through the gateway with `Host: reviews.default…` and `headers`; returns
    /// the status and body, or status 0 and the error when there is no HTTP answer.
    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        self.get_host(REVIEWS, path, headers).await
    }

    /// [`Mesh::get`] with `Host: host`.
    async fn get_host(&self, host: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let mut request = self.http.get(url).header(reqwest::header::HOST, host);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        match request.send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => (0, format!("{e:?}")),
        }
    }

    /// `n` requests from `tasks` concurrent loops, tallied.
    async fn tally(&self, n: usize, tasks: usize, path: &str, headers: &[(&str, &str)]) -> Tally {
        let parts = (0..tasks).map(|t| async move {
            let mut part = Vec::new();
            for _ in (t..n).step_by(tasks) {
                part.push(self.get(path, headers).await);
            }
            part
        });
        tally(join_all(parts).await.into_iter().flatten())
    }

    /// Requests Envoy's fault filters delayed, over every listener.
    async fn delays_injected(&self) -> u64 {
        let stats = self.envoy.stats().await.into_iter();
        let delayed = stats.filter(|(k, _)| k.ends_with(".fault.delays_injected"));
        delayed.filter_map(|(_, v)| v.parse::<u64>().ok()).sum()
    }

    async fn rejected(&self) -> Vec<(String, String)> {
        self.envoy.rejected().await
    }

    async fn assert_nothing_rejected(&self) {
        self.envoy.assert_nothing_rejected().await;
    }
}

pub(crate) fn entry(host: &str, endpoints: &[(u16, &str)]) -> String {
    let name = host.split('.').next().unwrap();
    let mut text = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
         metadata: {{name: {name}, namespace: default}}\nspec:\n  hosts: [{host}]\n  \
         location: MESH_INTERNAL\n  resolution: STATIC\n  \
         ports: [{{number: 9080, name: http, protocol: HTTP}}]\n  endpoints:\n"
    );
    for (port, version) in endpoints {
        text.push_str(&format!(
            "  - {{address: 127.0.0.1, ports: {{http: {port}}}, labels: {{version: {version}}}}}\n"
        ));
    }
    text
}

pub(crate) fn gateway(port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\n\
         metadata: {{name: ingress, namespace: default}}\nspec:\n  \
         selector: {{istio: ingressgateway}}\n  servers:\n  \
         - port: {{number: {port}, name: http, protocol: HTTP}}\n    bind: 127.0.0.1\n    \
         hosts: [\"*\"]\n"
    )
}

/// DestinationRule `reviews` with a subset per version and a load balancer.
fn rule(versions: &[&str], lb: &str) -> String {
    let mut text = format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\n\
         metadata: {{name: reviews, namespace: default}}\nspec:\n  host: {REVIEWS}\n  \
         trafficPolicy: {{loadBalancer: {{simple: {lb}}}}}\n  subsets:\n"
    );
    for v in versions {
        text.push_str(&format!("  - {{name: {v}, labels: {{version: {v}}}}}\n"));
    }
    text
}

/// VirtualService `reviews` for host `reviews.default…`, bound to Gateway `ingress`, with
/// `http` (YAML list items, indented two spaces).
fn routes(http: &str) -> String {
    virtual_service("reviews", REVIEWS, http)
}

/// VirtualService `name` for `host`, bound to Gateway `ingress`, with `http`.
pub(crate) fn virtual_service(name: &str, host: &str, http: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\n\
         metadata: {{name: {name}, namespace: default}}\nspec:\n  hosts: [{host}]\n  \
         gateways: [ingress]\n  http:\n{http}"
    )
}

/// A route to one subset of reviews.
fn to(subset: &str) -> String {
    format!("[{{destination: {{host: {REVIEWS}, subset: {subset}}}}}]")
}

pub(crate) fn tally(answers: impl IntoIterator<Item = (u16, String)>) -> Tally {
    let mut out = Tally::new();
    for answer in answers {
        *out.entry(answer).or_default() += 1;
    }
    out
}

fn count(t: &Tally, status: u16, body: &str) -> u64 {
    t.get(&(status, body.to_string())).copied().unwrap_or(0)
}

/// Three reviews backends, v1 to v3.
const V1_V2_V3: [Spec; 3] = [
    (REVIEWS, "v1", &[]),
    (REVIEWS, "v2", &[]),
    (REVIEWS, "v3", &[]),
];

#[tokio::test]
async fn weighted_split_80_20() {
    let Some(tools) = tools() else { return };
    let split = format!(
        "  - route:\n    - destination: {{host: {REVIEWS}, subset: v1}}\n      weight: 80\n    \
         - destination: {{host: {REVIEWS}, subset: v2}}\n      weight: 20\n"
    );
    let m = Mesh::start(&tools, &V1_V2_V3, &["v1", "v2", "v3"], &split).await;
    m.wait_for("/", &[], "v1").await;
    // The listener and the route configuration have Istio's names.
    let p = m.port;
    let listeners = get(m.envoy.admin, "/listeners").await.1;
    let listener = format!("127.0.0.1_{p}::127.0.0.1:{p}");
    assert!(listeners.contains(&listener), "{listeners}");
    let rds = format!(".rds.http.{p}.update_success");
    let stats = m.envoy.stats().await;
    assert!(
        stats.iter().any(|(k, v)| k.ends_with(&rds) && v != "0"),
        "no *{rds}"
    );

    let t = m.tally(1000, 4, "/", &[]).await;
    let (v1, v2) = (count(&t, 200, "v1"), count(&t, 200, "v2"));
    assert_eq!(v1 + v2, 1000, "only v1 and v2 answer, with 200: {t:?}");
    let share = v1 as f64 / 1000.0;
    eprintln!("gateway: v1 answered {share:.3} of 1000 requests");
    assert!((0.75..=0.85).contains(&share), "v1 share {share}: {t:?}");
    m.assert_nothing_rejected().await;
}

#[tokio::test]
async fn header_match_routes_to_v3() {
    let Some(tools) = tools() else { return };
    let http = format!(
        "  - match: [{{headers: {{end-user: {{exact: jason}}}}}}]\n    route: {}\n  \
         - route: {}\n",
        to("v3"),
        to("v1")
    );
    let m = Mesh::start(&tools, &V1_V2_V3, &["v1", "v2", "v3"], &http).await;
    let jason = [("end-user", "jason")];
    m.wait_for("/", &jason, "v3").await;
    let t = m.tally(50, 1, "/", &jason).await;
    assert_eq!(count(&t, 200, "v3"), 50, "{t:?}");
    let t = m.tally(25, 1, "/", &[("end-user", "jasonx")]).await;
    assert_eq!(count(&t, 200, "v1"), 25, "exact means exact: {t:?}");
    let t = m.tally(50, 1, "/", &[]).await;
    assert_eq!(count(&t, 200, "v1"), 50, "{t:?}");
    m.assert_nothing_rejected().await;
}

/// VirtualService `reviews-routes`: a delegate (no hosts) of the `default` namespace, whose
/// short hosts are relative to it. Its second rule is outside any root prefix used here.
const DELEGATE: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\n\
    metadata: {name: reviews-routes, namespace: default}\nspec:\n  http:\n  \
    - match: [{uri: {prefix: /reviews/v2}}]\n    \
      route: [{destination: {host: reviews, subset: v2}}]\n  \
    - match: [{uri: {prefix: /elsewhere}}]\n    \
      route: [{destination: {host: reviews, subset: v2}}]\n  \
    - route: [{destination: {host: reviews, subset: v3}}]\n";

#[tokio::test]
async fn a_delegate_s_rules_serve_under_the_root_s_match_once_it_exists() {
    let Some(tools) = tools() else { return };
    let http = format!(
        "  - match: [{{uri: {{prefix: /reviews}}}}]\n    delegate: {{name: reviews-routes}}\n  \
         - route: {}\n",
        to("v1")
    );
    let m = Mesh::start(&tools, &V1_V2_V3, &["v1", "v2", "v3"], &http).await;
    // No delegate yet: the delegating rule is left out, and the root's other rule answers.
    m.wait_for("/reviews/v2", &[], "v1").await;
    m.write("delegate.yaml", DELEGATE);
    m.wait_for("/reviews/v2", &[], "v2").await;
    let t = m.tally(20, 1, "/reviews/v2/x", &[]).await;
    assert_eq!(count(&t, 200, "v2"), 20, "{t:?}");
    // Under the root's prefix, the delegate's catch-all (narrowed to `/reviews`).
    let t = m.tally(20, 1, "/reviews", &[]).await;
    assert_eq!(count(&t, 200, "v3"), 20, "{t:?}");
    // Outside it, the root's next rule: the delegate's `/elsewhere` rule was left out.
    let t = m.tally(20, 1, "/elsewhere", &[]).await;
    assert_eq!(count(&t, 200, "v1"), 20, "{t:?}");
    m.assert_nothing_rejected().await;
}

#[tokio::test]
async fn moving_a_route_loses_no_request() {
    let Some(tools) = tools() else { return };
    let to_ratings = format!("  - route: [{{destination: {{host: {RATINGS}}}}}]\n");
    let to_v1 = format!("  - route: {}\n", to("v1"));
    let backends: [Spec; 2] = [(REVIEWS, "v1", &[]), (RATINGS, "ratings", &[])];
    let m = Mesh::start(&tools, &backends, &["v1"], &to_v1).await;
    m.wait_for("/", &[], "v1").await;

    // Four loops of sequential requests run until the driver has seen the route move to
    // ratings and back, each time followed by 200 more requests.
    let answers: Mutex<Vec<(u16, String)>> = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let (log, stop_ref, m) = (&answers, &stop, &m);
    let worker = move || async move {
        while !stop_ref.load(Ordering::Relaxed) {
            let answer = m.get("/", &[]).await;
            log.lock().unwrap().push(answer);
        }
    };
    // Waits until `body` answers after the first `from` answers; returns the count then.
    let seen = move |what: &'static str, body: &'static str, from: usize| {
        eventually(what, move || async move {
            let a = log.lock().unwrap();
            a[from..].iter().any(|x| x.1 == body).then_some(a.len())
        })
    };
    let more = move |n: usize| {
        eventually("200 more requests", move || async move {
            (log.lock().unwrap().len() >= n).then_some(())
        })
    };
    let driver = async {
        m.write("vs.yaml", &routes(&to_ratings));
        more(seen("answers from ratings", "ratings", 0).await + 200).await;
        let mark = log.lock().unwrap().len();
        m.write("vs.yaml", &routes(&to_v1));
        more(seen("answers from v1 again", "v1", mark).await + 200).await;
        stop.store(true, Ordering::Relaxed);
    };
    tokio::join!(driver, join_all((0..4).map(|_| worker())));

    let answers = answers.into_inner().unwrap();
    let t = tally(answers.iter().cloned());
    eprintln!(
        "gateway: {} requests while the route moved: {t:?}",
        answers.len()
    );
    let failed: Vec<_> = answers.iter().filter(|a| a.0 != 200).take(5).collect();
    assert!(
        failed.is_empty(),
        "failed requests (first 5): {failed:?}; all: {t:?}"
    );
    assert!(
        count(&t, 200, "v1") > 0 && count(&t, 200, "ratings") > 0,
        "{t:?}"
    );
    m.assert_nothing_rejected().await;
}

#[tokio::test]
async fn changing_the_load_balancer_leaves_no_cluster_warming() {
    let Some(tools) = tools() else { return };
    let backends: [Spec; 2] = [(REVIEWS, "v1", &[]), (REVIEWS, "v2", &[])];
    let http = format!("  - route: {}\n", to("v1"));
    let m = Mesh::start(&tools, &backends, &["v1", "v2"], &http).await;
    m.wait_for("/", &[], "v1").await;
    let version = "cluster_manager.cds.version_text";
    let before = m.envoy.stats().await[version].clone();

    m.write("dr.yaml", &rule(&["v1", "v2"], "LEAST_REQUEST"));
    let received = eventually("the changed clusters in Envoy", || async {
        (m.envoy.stats().await[version] != before).then(Instant::now)
    })
    .await;
    eventually("no cluster warming", || async {
        (m.envoy.stat("cluster_manager.warming_clusters").await == 0).then_some(())
    })
    .await;
    let took = received.elapsed();
    eprintln!("gateway: clusters warmed {took:?} after the load balancer change arrived");
    assert!(
        took < Duration::from_secs(5),
        "warming took {took:?}: endpoints not re-sent?"
    );

    let clusters = "/config_dump?resource=dynamic_active_clusters";
    let dump = get(m.envoy.admin, clusters).await.1;
    assert!(dump.contains("LEAST_REQUEST"), "{dump}");
    m.wait_for("/", &[], "v1").await;
    m.assert_nothing_rejected().await;
}
