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

use std::sync::Arc;
use std::time::Instant;

use common::{Load, Server};

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

/// Seeds the data directory through the library: an organisation, the corpus, a person who
/// passes every connector check and a grant. Returns the access token.
fn seed(dir: &std::path::Path, public_url: &str, docs: &[(String, String)]) -> String {
    let app = common::open_app(dir, public_url);
    let now = app.clock.now();
    let org = kennis::identity::create_org(&app.store, "Bench", now).unwrap();
    for (path, text) in docs {
        kennis::kb::store_document(&app.store, org.id, path, text.as_bytes(), None, now).unwrap();
    }
    app.kb_index.catch_up(&app.store).unwrap();
    let token = common::connector_tokens(&app, "bench@example.org", &[org.id]).remove(0);
    common::close_app(app);
    token
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let max_requests: usize = std::env::var("KENNIS_LOAD_REQUESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60_000);
    let max_secs: f64 = std::env::var("KENNIS_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30.0);
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
    let port = common::free_port();
    let public_url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let token = seed(data.path(), &public_url, &docs);
    println!("seeded in {:.1} s", started.elapsed().as_secs_f64());

    let server = Server::start(data.path(), &format!("127.0.0.1:{port}"), &[]);
    assert_eq!(server.base, public_url);
    println!(
        "server pid {}, RSS after start {} MB",
        server.pid,
        server.memory_mb("VmRSS:")
    );

    let rt = common::runtime();
    let paths: Arc<Vec<String>> = Arc::new(docs.iter().map(|(p, _)| p.clone()).collect());
    let queries: Arc<Vec<String>> =
        Arc::new(docs.iter().filter_map(|(_, t)| query_of(t)).collect());
    let url = format!("{}/mcp/kennisbank", server.base);
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
        let (paths, queries, name) = (paths.clone(), queries.clone(), tool.clone());
        let load = Load {
            url: url.clone(),
            tokens: vec![token.clone()],
            clients: CLIENTS,
            calls: move |_, n| arguments(&name, n, &paths, &queries),
            max_requests,
            max_secs,
            pace: None,
        };
        for (tool, m) in rt.block_on(load.run()) {
            failed += m.failed;
            println!(
                "RESULT {tool}: {} requests by {CLIENTS} clients: {}; server RSS {} MB (peak {} MB)",
                m.lat.len(),
                m.line(),
                server.memory_mb("VmRSS:"),
                server.memory_mb("VmHWM:")
            );
        }
    }
    server.stop();
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

/// Call `n` of `tool`: a document of the corpus to read or fetch, or a query to search.
fn arguments(tool: &str, n: usize, paths: &[String], queries: &[String]) -> common::Call {
    let pick = |v: &[String]| v[n.wrapping_mul(7919) % v.len()].clone();
    let args = match tool {
        "fetch" => serde_json::json!({"id": pick(paths)}),
        "search" | "kennisbank_search" => serde_json::json!({"query": pick(queries)}),
        _ => serde_json::json!({"path": pick(paths)}),
    };
    (tool.to_owned(), args)
}
