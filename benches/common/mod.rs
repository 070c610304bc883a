//! What several benchmarks share: where the real corpus is and how it is read and scaled; the
//! release binary run as a second process (its commands, `kennis serve`, its memory); hook
//! deliveries and connector tool calls from many concurrent keep-alive clients; percentiles.
//!
//! Each benchmark includes this module (`mod common;`) and uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde_json::Value;

/// `KENNIS_CORPUS`, or `../shared/corpus` beside the checkout.
pub fn corpus_dir() -> PathBuf {
    std::env::var_os("KENNIS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"))
}

/// Every Markdown document under `dir` (but its README) as (relative path, text), sorted.
pub fn read_corpus(dir: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.extension().is_some_and(|x| x == "md")
                && p.file_name().is_some_and(|n| n != "README.md")
                && let Ok(text) = std::fs::read_to_string(&p)
            {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Writes the corpus below `dir`, copied until it holds about `target` bytes, each copy made
/// unique (its own folder and a line of its own in every document, so nothing deduplicates);
/// returns (documents, bytes).
pub fn write_scaled(docs: &[(String, String)], target: u64, dir: &Path) -> (usize, u64) {
    let one: u64 = docs.iter().map(|(_, t)| t.len() as u64).sum();
    let copies = target.div_ceil(one.max(1)).max(1);
    let mut bytes = 0;
    let mut n = 0;
    for k in 0..copies {
        for (path, text) in docs {
            let p = dir.join(format!("kopie-{k:02}")).join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let text = format!("{text}\nKopie {k} van {path}.\n");
            bytes += text.len() as u64;
            n += 1;
            std::fs::write(p, text).unwrap();
        }
    }
    (n, bytes)
}

/// The non-empty lines of the source documents: what generated documents are made of.
pub fn corpus_lines(source: &[(String, String)]) -> Vec<&str> {
    source
        .iter()
        .flat_map(|(_, t)| t.lines())
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// One generated document of about `target` bytes: a title (a heading line of the corpus),
/// then random lines of it, then a line naming the document, so no two are alike.
pub fn generated_text(
    lines: &[&str],
    titles: &[&str],
    n: usize,
    target: usize,
    rng: &mut impl Rng,
) -> String {
    let mut text = String::with_capacity(target + 200);
    if !titles.is_empty() {
        text.push_str(titles[rng.gen_range(0..titles.len())]);
        text.push('\n');
    }
    while text.len() < target {
        text.push_str(lines[rng.gen_range(0..lines.len())]);
        text.push('\n');
    }
    text.push_str(&format!("Document {n}.\n"));
    text
}

/// Writes about `target` bytes of generated documents below `dir` (1 to 6 KB each, 3.5 KB on
/// average, like the knowledge bases kennis is measured with), 500 to a folder; the same
/// `seed` writes the same files. Returns (documents, bytes).
pub fn write_generated(
    source: &[(String, String)],
    target: u64,
    dir: &Path,
    seed: u64,
) -> (usize, u64) {
    let lines = corpus_lines(source);
    let titles: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("# "))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut n, mut bytes) = (0usize, 0u64);
    while bytes < target {
        let size = rng.gen_range(1_000..6_000);
        let text = generated_text(&lines, &titles, n, size, &mut rng);
        let p = dir.join(generated_path(n));
        if n % 500 == 0 {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        }
        std::fs::write(&p, &text).unwrap();
        bytes += text.len() as u64;
        n += 1;
    }
    (n, bytes)
}

/// Writes every file system's dirty pages to disk (`sync`), called by a benchmark between
/// writing its documents and timing their import: files just written would otherwise be
/// written back while the measurement runs (the kernel writes a page back
/// about 30 s after it changed, or sooner under pressure), so an import would be measured
/// beside the writeback of its own input — as much as a gigabyte, depending on how long the
/// writing took (8.8 to 42 s for the same 1 GB in one hour).
pub fn flush_to_disk() {
    match std::process::Command::new("sync").status() {
        Ok(status) if status.success() => {}
        other => eprintln!(
            "`sync` did not flush the files just written ({other:?}): the next figures may include their writeback"
        ),
    }
}

/// Where [`write_generated`] puts document `n`: 500 to a folder.
pub fn generated_path(n: usize) -> String {
    format!("map{:03}/doc{n:07}.md", n / 500)
}

/// The queries the search benchmarks time: common and rare words, phrases, accents, case.
pub const QUERIES: &[&str] = &[
    "tabel",
    "opmaak",
    "noot",
    "kozijn",
    "cel",
    "de",
    "invoeg",
    "werkblad",
    "afdrukken pagina",
    "lettertype grootte",
    "\"klik op\"",
    "\"de cel\"",
    "Café",
    "één",
    "geïnstalleerd",
    "DOCUMENT",
    "maat akkoord",
    "formule som",
];

/// [`QUERIES`] and two that find nothing though their grams are common: an accented word and a
/// rare word beside a common one (issue 27's slow queries).
pub fn capacity_queries() -> Vec<&'static str> {
    QUERIES
        .iter()
        .copied()
        .chain(["naïef", "uitgeschakeld dircolors"])
        .collect()
}

/// 10,000 documents of ~10 KB each (~100 MB), built from the source documents' lines.
pub fn generated_corpus(
    source: &[(String, String)],
    rng: &mut rand::rngs::StdRng,
) -> Vec<(String, String)> {
    let lines = corpus_lines(source);
    (0..10_000)
        .map(|i| {
            let target = rng.gen_range(5_000..15_000);
            let mut text = String::with_capacity(target + 200);
            while text.len() < target {
                text.push_str(lines[rng.gen_range(0..lines.len())]);
                text.push('\n');
            }
            (format!("gen/{:02}/doc{i:05}.md", i % 50), text)
        })
        .collect()
}

// ---- percentiles -------------------------------------------------------------------------

/// The `p` quantile (0..=1) of sorted latencies, nearest rank, in milliseconds.
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// Latencies of one load and how long it took.
pub struct Measured {
    pub lat: Vec<Duration>,
    pub elapsed: Duration,
    pub failed: usize,
}

impl Measured {
    pub fn new(mut lat: Vec<Duration>, elapsed: Duration, failed: usize) -> Measured {
        lat.sort();
        Measured {
            lat,
            elapsed,
            failed,
        }
    }

    pub fn rate(&self) -> f64 {
        self.lat.len() as f64 / self.elapsed.as_secs_f64()
    }

    pub fn p(&self, q: f64) -> f64 {
        pct(&self.lat, q)
    }

    /// `n requests in s = r/s; p50, p99, max`.
    pub fn line(&self) -> String {
        format!(
            "{} in {:.1} s = {:.0}/s; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms{}",
            self.lat.len(),
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.p(0.5),
            self.p(0.99),
            self.p(1.0),
            if self.failed > 0 {
                format!(" ({} FAILED)", self.failed)
            } else {
                String::new()
            }
        )
    }
}

// ---- the release binary ------------------------------------------------------------------

/// The release binary (`target/release/kennis`, which `cargo bench` builds): what the load
/// benchmarks measure. `KENNIS_BENCH_BIN` names another build of the same store format (the
/// previous commit's, say) to measure it with the same benchmark in the same hour.
pub fn bin() -> PathBuf {
    std::env::var_os("KENNIS_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kennis")))
}

/// The load generator's runtime: two worker threads, as many as this machine has cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs a command of the release binary on `data` and returns its JSON output.
pub fn kennis(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = Command::new(bin())
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .envs(env.iter().copied())
        .env("KENNIS_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bin().display()));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// A port free on 127.0.0.1 a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `kennis serve` on loopback, as a second process.
pub struct Server {
    child: Child,
    pub pid: u32,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// From spawning to the address printed.
    pub started_in: Duration,
}

impl Server {
    /// Starts the release binary on `data`, listening on `listen` (`127.0.0.1:0` for any
    /// port), and waits until it prints its address.
    pub fn start(data: &Path, listen: &str, env: &[(&str, &str)]) -> Server {
        let started = Instant::now();
        // Its log beside the data directory, to say why it did not start.
        let log_path = data.with_extension("log");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut child = Command::new(bin())
            .arg("--data-dir")
            .arg(data)
            .args(["serve", "--listen", listen])
            .envs(env.iter().copied())
            .env("KENNIS_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin().display()));
        let pid = child.id();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.strip_prefix("kennis listening on ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| {
                panic!(
                    "kennis serve did not start: {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                )
            });
        Server {
            child,
            pid,
            base,
            started_in: started.elapsed(),
        }
    }

    pub fn port(&self) -> &str {
        self.base.rsplit(':').next().unwrap_or_default()
    }

    /// A hook trigger's URL (as `kennis trigger add --json` gives it) on this server.
    pub fn hook_url(&self, trigger: &Value) -> String {
        let u = trigger["url"].as_str().unwrap();
        format!("{}{}", self.base, &u[u.find("/api/").unwrap()..])
    }

    /// A field of `/proc/<pid>/status` in MB (`VmRSS:`, `VmHWM:`).
    pub fn memory_mb(&self, field: &str) -> u64 {
        status_kb(self.pid, field) / 1024
    }

    /// Samples its resident memory and open files every 50 ms until the sampler is stopped:
    /// their highest values while a load ran.
    pub fn sample(&self) -> Sampler {
        let pid = self.pid;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut rss, mut files) = (0u64, 0usize);
            while !flag.load(Ordering::Relaxed) {
                rss = rss.max(status_kb(pid, "VmRSS:") / 1024);
                files = files
                    .max(std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count()));
                std::thread::sleep(Duration::from_millis(50));
            }
            (rss, files)
        });
        Sampler { stop, thread }
    }

    /// Asks it to stop (SIGTERM) and waits until it has.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// See [`Server::sample`].
pub struct Sampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(u64, usize)>,
}

impl Sampler {
    /// The highest resident memory (MB) and number of open files seen.
    pub fn finish(self) -> (u64, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or((0, 0))
    }
}

/// A process's open file descriptors (files, sockets, the index's segment files).
pub fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A field of `/proc/<pid>/status` in kB.
pub fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes of the files below `dir`: as their lengths say, and as the disk holds them.
pub fn dir_size(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut apparent, mut disk) = (0, 0);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            let (a, d) = dir_size(&e.path());
            apparent += a;
            disk += d;
        } else {
            apparent += m.len();
            disk += m.blocks() * 512;
        }
    }
    (apparent, disk)
}

/// What runs and audit records take in the store file: rows, and the bytes their tables
/// occupy (stored, their pages' own metadata, and the unused rest of those pages) per row.
pub struct Records {
    pub runs: u64,
    pub audits: u64,
    pub run_bytes: f64,
    pub audit_bytes: f64,
}

/// [`Records`] of the store in `data` (no server may have it open). A run's tables: its
/// record, transcript, trigger slot and index entries, callbacks.
pub fn record_sizes(data: &Path) -> Records {
    use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};
    let db = redb::Database::open(data.join("kennis.redb")).unwrap();
    let txn = db.begin_read().unwrap();
    let table = |name: &str| -> (u64, u64) {
        let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new(name);
        match txn.open_table(def) {
            Ok(t) => {
                let st = t.stats().unwrap();
                (
                    t.len().unwrap(),
                    st.stored_bytes() + st.metadata_bytes() + st.fragmented_bytes(),
                )
            }
            Err(_) => (0, 0),
        }
    };
    let (runs, _) = table("requests");
    let run_bytes: u64 = [
        "requests",
        "run_transcripts",
        "active_runs",
        "trigger_slots",
        "trigger_runs",
        "trigger_deliveries",
        "run_callbacks",
        "run_callbacks_due",
    ]
    .iter()
    .map(|t| table(t).1)
    .sum();
    let (audits, audit_bytes) = table("audit");
    Records {
        runs,
        audits,
        run_bytes: run_bytes as f64 / runs.max(1) as f64,
        audit_bytes: audit_bytes as f64 / audits.max(1) as f64,
    }
}

// ---- hook deliveries ---------------------------------------------------------------------

/// An echo agent and a project called `name`, and a trigger of them, in organisation `org`
/// (its slug) on `data`, made with the command line; `extra` adds flags to `trigger add`. The trigger as `--json` gives
/// it (its `url` and `secret`).
pub fn echo_trigger(
    data: &Path,
    org: &str,
    name: &str,
    cooldown: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Value {
    let agent = kennis(
        data,
        &[
            "agent", "add", org, name, "--kind", "generic", "--exec", "echo", "--json",
        ],
        env,
    );
    let project = kennis(
        data,
        &["project", "add", org, name, "--ready", "--json"],
        env,
    );
    let (a, p) = (agent["id"].to_string(), project["id"].to_string());
    let mut args = vec![
        "trigger",
        "add",
        org,
        "T",
        "--agent",
        &a,
        "--project",
        &p,
        "--instructions",
        "Benchmark",
        "--cooldown",
        cooldown,
        "--json",
    ];
    args.extend_from_slice(extra);
    kennis(data, &args, env)
}

/// Deliveries to one hook from `senders` concurrent keep-alive senders until `total` were
/// sent or `time` has passed. With `keyed`, each carries a new event key (`<tag>-<n>`), so
/// each may start a run; every answer must have status `expect`.
pub struct Deliveries<'a> {
    pub url: &'a str,
    pub secret: &'a str,
    pub keyed: Option<&'a str>,
    pub expect: u16,
    pub total: u64,
    pub time: Duration,
    pub senders: usize,
}

impl Deliveries<'_> {
    pub async fn run(&self) -> Measured {
        let next = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..self.senders {
            let (url, secret, next) = (self.url.to_owned(), self.secret.to_owned(), next.clone());
            let (expect, keyed, total, time) = (
                self.expect,
                self.keyed.map(str::to_owned),
                self.total,
                self.time,
            );
            tasks.push(tokio::spawn(async move {
                let mut conn = Conn::open(&url).await;
                let mut lat = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total || start.elapsed() > time {
                        break;
                    }
                    let key = keyed.as_ref().map(|tag| format!("{tag}-{n}"));
                    let headers: Vec<(&str, &str)> = key
                        .iter()
                        .map(|k| ("x-service-event-key", k.as_str()))
                        .collect();
                    let t = Instant::now();
                    let (status, _) = conn
                        .post(&secret, &headers, br#"{"bench":true}"#.to_vec())
                        .await
                        .expect("delivery");
                    lat.push(t.elapsed());
                    assert_eq!(status, expect, "delivery {n}");
                }
                lat
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        Measured::new(all, start.elapsed(), 0)
    }
}

// ---- the connector -----------------------------------------------------------------------

/// Makes a person who passes every connector check (TOTP confirmed, terms accepted) a member
/// of each of `orgs` (their ids) and gives the connector a grant in each: the access tokens,
/// in the same order. Done through the library on `app`'s store.
pub fn connector_tokens(app: &kennis::app::App, email: &str, orgs: &[u64]) -> Vec<String> {
    use kennis::identity::{self, NewPerson, Role};
    let store = &app.store;
    let now = app.clock.now();
    let person = identity::add_person(
        store,
        NewPerson {
            email,
            name: None,
            password: "paard-batterij-niet",
        },
        now,
    )
    .unwrap();
    let enrol = identity::reset_totp(store, email).unwrap();
    identity::verify_totp(
        store,
        person.id,
        &identity::code_at(&enrol.secret, now),
        now,
    )
    .unwrap();
    identity::accept_terms(store, person.id, &app.config.terms_version).unwrap();
    orgs.iter()
        .map(|&org_id| {
            let slug = store
                .read(|tx| identity::org(tx, org_id))
                .unwrap()
                .expect("organisation")
                .slug;
            identity::add_member(store, &slug, email, Role::Admin, true, now).unwrap();
            kennis::oauth::issue_grant(
                app,
                kennis::oauth::NewGrant {
                    org_id,
                    person_id: person.id,
                    client_id: "bench".into(),
                    scopes: vec!["kennisbank".into()],
                    resource: app.connector_url(),
                },
            )
            .unwrap()
            .access_token
        })
        .collect()
}

/// Opens the data directory through the library as a server on `public_url` would (nothing
/// else may have it open), for seeding.
pub fn open_app(data: &Path, public_url: &str) -> Arc<kennis::app::App> {
    let config = kennis::config::Settings {
        listen: Some(public_url.trim_start_matches("http://").to_owned()),
        data_dir: Some(data.to_owned()),
        ..kennis::config::Settings::default()
    }
    .validate()
    .expect("config");
    kennis::app::App::open(config, public_url.to_owned(), kennis::clock::system()).expect("open")
}

/// Closes an [`open_app`]: its batched writes flushed and both writer threads stopped, so the
/// store is released before a server opens it (a thread still ending held it now and then).
pub fn close_app(app: Arc<kennis::app::App>) {
    app.batch.shutdown();
    app.commits.shutdown();
    drop(app);
}

/// One connector tool call: its name and arguments.
pub type Call = (String, Value);

/// The body of a `tools/call` request.
pub fn tool_call(n: usize, (tool, arguments): &Call) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0", "id": n, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}
    })
}

/// One keep-alive HTTP/1.1 connection to one URL, driven through hyper's own client
/// connection: a load generator shares the two cores with the server, and reqwest's per-call
/// work (its pool, URL parsing, header maps) took about 65 % of a core in the read benchmark;
/// this takes about 44 % (`docs/performance.md`).
pub struct Conn {
    url: String,
    authority: String,
    path: String,
    send: hyper::client::conn::http1::SendRequest<http_body_util::Full<axum::body::Bytes>>,
}

impl Conn {
    /// Connects to the server `url` names (`http://host:port/path`); requests go to its path.
    pub async fn open(url: &str) -> Conn {
        let uri: axum::http::Uri = url.parse().expect("url");
        let authority = uri.authority().expect("host:port").to_string();
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let stream = tokio::net::TcpStream::connect(&authority)
            .await
            .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let (send, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("handshake");
        tokio::spawn(connection);
        Conn {
            url: url.to_owned(),
            authority,
            path,
            send,
        }
    }

    /// A new connection in place of this one once the server closed it.
    pub async fn reopen_if_closed(&mut self) {
        if self.send.is_closed() {
            *self = Conn::open(&self.url).await;
        }
    }

    /// POSTs `body` with a bearer token and `headers`: the status and the body, or `None`
    /// when the connection failed.
    pub async fn post(
        &mut self,
        token: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Option<(u16, axum::body::Bytes)> {
        use http_body_util::BodyExt;
        let mut req = axum::http::Request::post(self.path.as_str())
            .header("host", &self.authority)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req
            .body(http_body_util::Full::new(axum::body::Bytes::from(body)))
            .ok()?;
        self.send.ready().await.ok()?;
        let resp = self.send.send_request(req).await.ok()?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.ok()?.to_bytes();
        Some((status, body))
    }

    /// Sends one tool call; whether it succeeded (HTTP 200, a result, not an error result).
    pub async fn call(&mut self, token: &str, n: usize, call: &Call) -> bool {
        let body = serde_json::to_vec(&tool_call(n, call)).expect("json");
        let headers = [
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-06-18"),
        ];
        match self.post(token, &headers, body).await {
            Some((200, body)) => {
                let has = |needle: &[u8]| memchr::memmem::find(&body, needle).is_some();
                has(b"\"result\"") && !has(b"\"isError\":true")
            }
            _ => false,
        }
    }
}

/// Connector tool calls from `clients` concurrent keep-alive clients until `max_requests`
/// were sent or `max_secs` have passed. Client `c` uses `tokens[c % tokens.len()]`; call `n`
/// is `calls(c, n)`. Each client sends its next call when the last one is answered, or —
/// with `pace` — not before `pace` after the last one was sent (an assistant's own pace).
pub struct Load<F> {
    pub url: String,
    pub tokens: Vec<String>,
    pub clients: usize,
    pub calls: F,
    pub max_requests: usize,
    pub max_secs: f64,
    pub pace: Option<Duration>,
}

impl<F> Load<F>
where
    F: Fn(usize, usize) -> Call + Send + Sync + 'static,
{
    /// Latencies per tool (in the order first seen), failed calls counted per tool.
    pub async fn run(self) -> Vec<(String, Measured)> {
        let deadline = Instant::now() + Duration::from_secs_f64(self.max_secs);
        let next = Arc::new(AtomicUsize::new(0));
        let load = Arc::new(self);
        let begin = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..load.clients {
            let (load, next) = (load.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                // Each client its own connection, as separate assistants have.
                let mut conn = Conn::open(&load.url).await;
                let token = load.tokens[c % load.tokens.len()].clone();
                let mut lat: Vec<(String, Duration, bool)> = Vec::new();
                // Paced clients start spread over one interval.
                let mut due = load
                    .pace
                    .map(|p| Instant::now() + p.mul_f64(c as f64 / load.clients.max(1) as f64));
                loop {
                    if let (Some(at), Some(pace)) = (due, load.pace) {
                        tokio::time::sleep_until(at.into()).await;
                        due = Some(at + pace);
                    }
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= load.max_requests || Instant::now() >= deadline {
                        break;
                    }
                    let call = (load.calls)(c, n);
                    let t = Instant::now();
                    let ok = conn.call(&token, n, &call).await;
                    lat.push((call.0, t.elapsed(), ok));
                    // Outside the timed call: a failed one may have cost the connection.
                    if !ok {
                        conn.reopen_if_closed().await;
                    }
                }
                lat
            }));
        }
        let mut all: Vec<(String, Duration, bool)> = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let elapsed = begin.elapsed();
        let mut tools: Vec<String> = Vec::new();
        for (tool, _, _) in &all {
            if !tools.contains(tool) {
                tools.push(tool.clone());
            }
        }
        tools
            .into_iter()
            .map(|tool| {
                let mine: Vec<&(String, Duration, bool)> =
                    all.iter().filter(|(t, _, _)| *t == tool).collect();
                let failed = mine.iter().filter(|(_, _, ok)| !ok).count();
                let lat = mine.iter().map(|(_, d, _)| *d).collect();
                (tool, Measured::new(lat, elapsed, failed))
            })
            .collect()
    }
}
