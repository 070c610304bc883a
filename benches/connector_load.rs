//! `tools/call` of `kennisbank_read` under load: 32 concurrent keep-alive clients over loopback
//! against the release binary (`kennis serve`) as a second process, with the real corpus
//! imported (or made-up text when `../shared/corpus` is absent). Token rechecks and audit are
//! always on. Reports requests/s, p50, p99 and the server's RSS. `cargo bench --bench
//! connector_load`; `KENNIS_LOAD_REQUESTS` / `KENNIS_LOAD_SECS` bound the run (per tool).
//! `KENNIS_LOAD_TOOLS` (comma-separated) names the tools to load one after the other:
//! `kennisbank_read` (default), `fetch`, `kennisbank_search`, `search`, or `all` for these four
//! — so ChatGPT's `search`/`fetch` can be compared with the tools they are built on. A read or
//! fetch takes a document from the corpus; a search takes two words of a document's first
//! line. `KENNIS_LOAD_CORPUS=generated` loads the 10,000-document / ~100 MB corpus of the
//! search benchmark instead.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kennis::config::Settings;
use kennis::identity::{self, NewPerson, Role};

const CLIENTS: usize = 32;

fn made_up_docs() -> Vec<(String, String)> {
    (0..2465)
        .map(|i| {
            let text: String = (0..80)
                .map(|l| format!("regel {l} van document {i}: kozijn café tabel opmaak\n"))
                .collect();
            (format!("gen{}/doc{i}.md", i % 20), text)
        })
        .collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Seeds the data directory through the library: an organisation, a person who passes every
/// connector check, the corpus, and a grant. Returns the access token.
fn seed(dir: &Path, public_url: &str, docs: &[(String, String)]) -> String {
    let config = Settings {
        listen: Some(public_url.trim_start_matches("http://").to_owned()),
        data_dir: Some(dir.to_owned()),
        ..Settings::default()
    }
    .validate()
    .expect("config");
    let clock = kennis::clock::system();
    let app = kennis::app::App::open(config, public_url.to_owned(), clock).expect("open");
    let store = &app.store;
    let now = app.clock.now();
    let org = identity::create_org(store, "Bench", now).unwrap();
    let email = "bench@example.org";
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
    identity::add_member(store, &org.slug, email, Role::Admin, true, now).unwrap();
    for (path, text) in docs {
        kennis::kb::store_document(store, org.id, path, text.as_bytes(), None, now).unwrap();
    }
    app.kb_index.catch_up(store).unwrap();
    let token = kennis::oauth::issue_grant(
        &app,
        kennis::oauth::NewGrant {
            org_id: org.id,
            person_id: person.id,
            client_id: "bench".into(),
            scopes: vec!["kennisbank".into()],
            resource: app.connector_url(),
        },
    )
    .unwrap()
    .access_token;
    app.batch.shutdown();
    drop(app);
    token
}

fn rss_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let max_requests: usize = std::env::var("KENNIS_LOAD_REQUESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60_000);
    let max_secs: u64 = std::env::var("KENNIS_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let dir = common::corpus_dir();
    let mut docs = common::read_corpus(&dir);
    if docs.is_empty() {
        println!(
            "corpus not found at {} (set KENNIS_CORPUS): using made-up text instead",
            dir.display()
        );
        docs = made_up_docs();
    } else {
        println!("corpus: {} documents from {}", docs.len(), dir.display());
    }
    if std::env::var("KENNIS_LOAD_CORPUS").as_deref() == Ok("generated") {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x6b656e6e6973);
        docs = common::generated_corpus(&docs, &mut rng);
        let bytes: usize = docs.iter().map(|(_, t)| t.len()).sum();
        println!(
            "generated corpus: {} documents, {:.0} MB",
            docs.len(),
            bytes as f64 / 1e6
        );
    }
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let token = seed(data.path(), &public_url, &docs);
    println!("seeded in {:.1} s", started.elapsed().as_secs_f64());

    let mut child = Command::new(env!("CARGO_BIN_EXE_kennis"))
        .arg("--data-dir")
        .arg(data.path())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the release binary");
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
        .recv_timeout(Duration::from_secs(60))
        .expect("kennis serve printed its address");
    assert_eq!(base, public_url);
    println!(
        "server pid {pid}, RSS after start {} MB",
        rss_kb(pid, "VmRSS:") / 1024
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let paths: Arc<Vec<String>> = Arc::new(docs.iter().map(|(p, _)| p.clone()).collect());
    let queries: Arc<Vec<String>> =
        Arc::new(docs.iter().filter_map(|(_, t)| query_of(t)).collect());
    let url = format!("{base}/mcp/kennisbank");
    let tools: Vec<String> = match std::env::var("KENNIS_LOAD_TOOLS").as_deref() {
        Ok("all") => ["kennisbank_read", "fetch", "kennisbank_search", "search"]
            .map(String::from)
            .to_vec(),
        Ok(list) if !list.trim().is_empty() => {
            list.split(',').map(|t| t.trim().to_owned()).collect()
        }
        _ => vec!["kennisbank_read".to_owned()],
    };
    let mut failed = 0;
    for tool in tools {
        let load = Load {
            url: url.clone(),
            token: token.clone(),
            tool: tool.clone(),
            paths: paths.clone(),
            queries: queries.clone(),
            max_requests,
            max_secs,
        };
        let (lat, errors, elapsed) = rt.block_on(load.run());
        failed += errors;
        let rss = rss_kb(pid, "VmRSS:");
        let hwm = rss_kb(pid, "VmHWM:");
        let mut lat = lat;
        lat.sort();
        let p =
            |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0;
        println!(
            "RESULT {tool}: {} requests ({errors} failed) by {CLIENTS} clients in {:.1} s: {:.0} requests/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; server RSS {} MB (peak {} MB)",
            lat.len(),
            elapsed.as_secs_f64(),
            lat.len() as f64 / elapsed.as_secs_f64(),
            p(0.5),
            p(0.99),
            p(1.0),
            rss / 1024,
            hwm / 1024
        );
    }
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();
    assert_eq!(failed, 0, "some calls failed");
}

/// Two words (of three letters or more) of a document's first line that has two: a query
/// that finds at least that document.
fn query_of(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let words: Vec<&str> = line
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.chars().count() >= 3)
            .take(2)
            .collect();
        (words.len() == 2).then(|| words.join(" "))
    })
}

/// One tool loaded by [`CLIENTS`] clients until `max_requests` or `max_secs`.
struct Load {
    url: String,
    token: String,
    tool: String,
    paths: Arc<Vec<String>>,
    queries: Arc<Vec<String>>,
    max_requests: usize,
    max_secs: u64,
}

impl Load {
    fn arguments(&self, n: usize) -> serde_json::Value {
        let pick = |v: &[String]| v[n.wrapping_mul(7919) % v.len()].clone();
        match self.tool.as_str() {
            "fetch" => serde_json::json!({"id": pick(&self.paths)}),
            "search" | "kennisbank_search" => serde_json::json!({"query": pick(&self.queries)}),
            _ => serde_json::json!({"path": pick(&self.paths)}),
        }
    }

    /// Latencies, failed calls and the time taken.
    async fn run(self) -> (Vec<Duration>, usize, Duration) {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(CLIENTS)
            .build()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(self.max_secs);
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let load = Arc::new(self);
        let begin = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..CLIENTS {
            let (client, load, next) = (client.clone(), load.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = 0usize;
                loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if n >= load.max_requests || Instant::now() >= deadline {
                        break;
                    }
                    let body = serde_json::json!({
                        "jsonrpc": "2.0", "id": n, "method": "tools/call",
                        "params": {"name": load.tool, "arguments": load.arguments(n)}
                    });
                    let t = Instant::now();
                    let r = client
                        .post(&load.url)
                        .bearer_auth(&load.token)
                        .header("accept", "application/json, text/event-stream")
                        .header("mcp-protocol-version", "2025-06-18")
                        .json(&body)
                        .send()
                        .await;
                    let ok = match r {
                        Ok(r) => {
                            let status = r.status();
                            let text = r.text().await.unwrap_or_default();
                            status == 200
                                && text.contains("\"result\"")
                                && !text.contains("\"isError\":true")
                        }
                        Err(_) => false,
                    };
                    lat.push(t.elapsed());
                    if !ok {
                        errors += 1;
                    }
                }
                (lat, errors)
            }));
        }
        let mut lat = Vec::new();
        let mut errors = 0;
        for t in tasks {
            let (l, e) = t.await.unwrap();
            lat.extend(l);
            errors += e;
        }
        (lat, errors, begin.elapsed())
    }
}
