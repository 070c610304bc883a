//! The capacity of one kennis node (issue 27), measured from outside against the release
//! binary as a second process over loopback, in one run beside its anchors. For each corpus
//! size (`KENNIS_CAPACITY_MB`, default `100,1000`):
//!
//! - documents generated from the lines of `../shared/corpus` (or `KENNIS_CORPUS`), 1 to 6 KB
//!   each, every one unique, written as files;
//! - `kennis kb import` of those files: MB/s; the data directory against the documents;
//! - `kennisbank_search` over HTTP (MCP `tools/call`, one client) for a fixed set of queries
//!   (single words, accented words, phrases, two words, substrings, two that find nothing),
//!   `KENNIS_CAPACITY_ROUNDS` rounds (default 20): p50, p99, max — beside `rg -i -l -F` over
//!   the same files (the query's words as fixed strings, any of them) as the anchor;
//! - when the import left the index in several segments, last, the same searches again after
//!   `kennis compact` merged them (as the server does itself after ten idle minutes);
//! - `kennisbank_read` from 32 keep-alive clients; hook deliveries skipped by a cooldown and
//!   deliveries that create runs, 32 senders; each for `KENNIS_CAPACITY_SECS` (default 15);
//! - what a run and an audit record take in the store (the pages of their tables, and the
//!   data directory's growth on disk over the whole load divided by the records made);
//! - the server's memory, open files and cold start.
//!
//! Then `KENNIS_CAPACITY_ORGS` organisations (default 1,000; 0 skips this) of
//! `KENNIS_CAPACITY_ORG_DOCS` documents (default 100), and `KENNIS_CAPACITY_ASSISTANTS`
//! assistants (default 100, each a connector grant): the same mix of searches and reads, first
//! with every assistant in one organisation, then spread over the organisations — latencies,
//! memory and open files.
//!
//! `KENNIS_CAPACITY_KEEP=1` keeps each size's documents and data directory (after the merge)
//! and prints where. Needs `rg` (Debian: `apt-get install ripgrep`). A quick check of the
//! whole run:
//! `KENNIS_CAPACITY_MB=20 KENNIS_CAPACITY_ORGS=50 KENNIS_CAPACITY_SECS=3 cargo bench --bench capacity`.
//! Files go to a temporary directory (`TMPDIR`); the 1 GB size needs about 3 GB there.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Call, Deliveries, Load, Measured, Server};
use serde_json::json;

const CLIENTS: usize = 32;
const SEED: u64 = 27;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

struct Settings {
    sizes_mb: Vec<u64>,
    rounds: usize,
    secs: f64,
    orgs: usize,
    org_docs: usize,
    assistants: usize,
    /// Calls per second of each assistant (0: each as fast as it is answered).
    assistant_rate: f64,
}

fn settings() -> Settings {
    let sizes_mb = std::env::var("KENNIS_CAPACITY_MB")
        .unwrap_or_else(|_| "100,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    Settings {
        sizes_mb,
        rounds: env_or("KENNIS_CAPACITY_ROUNDS", 20),
        secs: env_or("KENNIS_CAPACITY_SECS", 15.0),
        orgs: env_or("KENNIS_CAPACITY_ORGS", 1000),
        org_docs: env_or("KENNIS_CAPACITY_ORG_DOCS", 100),
        assistants: env_or("KENNIS_CAPACITY_ASSISTANTS", 100),
        assistant_rate: env_or("KENNIS_CAPACITY_ASSISTANT_RATE", 5.0),
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// What one corpus size measured.
struct SizeRow {
    mb: f64,
    /// The machine's speed as this size began.
    anchor: Anchor,
    documents: usize,
    import_secs: f64,
    data_apparent: u64,
    data_disk: u64,
    search: Measured,
    /// The index's segments after the import.
    segments: usize,
    /// Seconds `kennis compact` took and the search after it (none when one segment).
    merged: Option<(f64, Measured)>,
    rg: Vec<Duration>,
    read: Measured,
    skipped: Measured,
    creating: Measured,
    runs: u64,
    audits: u64,
    run_bytes: f64,
    audit_bytes: f64,
    growth_per_record: f64,
    rss_mb: u64,
    hwm_mb: u64,
    open_files: usize,
    cold_start: Duration,
}

/// The machine's own speed, for comparing runs on different machines (this virtual machine's
/// speed varies by the hour by up to a third, and two machines of the same kind by more): the
/// corpus's documents compressed with zstd at level 3, MB/s, the best of five passes, on one
/// thread and on one thread per core at once (a virtual machine's second core can be the
/// other half of a busy physical one); and how long a read from a random place in 16 MB takes
/// (one read waiting for the one before: the index writer's term map is such a table, and its
/// reads are where the import waits). Taken as each phase begins and after the run: their
/// differences show how far the machine drifted meanwhile. The same code on a machine half as
/// fast gives about half of every figure; a figure measured elsewhere compares through these.
#[derive(Clone, Copy)]
struct Anchor {
    one_thread: f64,
    all_cores: f64,
    random_read_ns: f64,
}

impl Anchor {
    fn measure(source: &[(String, String)]) -> Anchor {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Anchor {
            one_thread: zstd_pass(source, 1),
            all_cores: zstd_pass(source, cores),
            random_read_ns: random_read_ns(16 << 20),
        }
    }
}

impl std::fmt::Display for Anchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} MB/s on one thread, {:.0} on all cores; a random read in 16 MB {:.0} ns",
            self.one_thread, self.all_cores, self.random_read_ns
        )
    }
}

/// Nanoseconds per read following a chain through `bytes` of memory in random order (each
/// read's address is the value the one before it read), best of three passes.
fn random_read_ns(bytes: usize) -> f64 {
    use rand::{Rng, SeedableRng};
    let n = bytes / 4;
    // Sattolo's shuffle: a single cycle through every slot, so the chain visits them all.
    let mut next: Vec<u32> = (0..n as u32).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    for i in (1..n).rev() {
        next.swap(i, rng.gen_range(0..i));
    }
    let steps = 4_000_000;
    (0..3)
        .map(|_| {
            let mut at = 0u32;
            let started = Instant::now();
            for _ in 0..steps {
                at = next[at as usize];
            }
            std::hint::black_box(at);
            started.elapsed().as_secs_f64() * 1e9 / steps as f64
        })
        .fold(f64::MAX, f64::min)
}

/// MB/s of `threads` threads each compressing the whole corpus at once, best of five passes.
fn zstd_pass(source: &[(String, String)], threads: usize) -> f64 {
    let bytes: u64 = source.iter().map(|(_, t)| t.len() as u64).sum();
    let compress = || {
        let mut zstd = zstd::bulk::Compressor::new(3).expect("a zstd context");
        for (_, text) in source {
            std::hint::black_box(zstd.compress(text.as_bytes()).ok());
        }
    };
    (0..5)
        .map(|_| {
            let started = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(compress);
                }
            });
            mb(bytes * threads as u64) / started.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// The query's terms as typed (quotes taken off a phrase), for `rg -F`.
fn raw_terms(query: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = query.trim();
    while !rest.is_empty() {
        if let Some(q) = rest.strip_prefix('"') {
            let end = q.find('"').unwrap_or(q.len());
            out.push(q[..end].to_owned());
            rest = q.get(end + 1..).unwrap_or("").trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            out.push(rest[..end].to_owned());
            rest = rest[end..].trim_start();
        }
    }
    out
}

/// How long `rg -i -l -F` takes to list the files holding any of the query's words.
fn rg_time(dir: &Path, query: &str) -> Duration {
    let mut cmd = Command::new("rg");
    cmd.args(["-i", "-l", "-F"]);
    for t in raw_terms(query) {
        cmd.arg("-e").arg(t);
    }
    let t = Instant::now();
    let out = cmd.arg(dir).output().expect("rg");
    let took = t.elapsed();
    // 1: nothing found, which is an answer too.
    assert!(out.status.code().is_some_and(|c| c <= 1), "rg failed");
    took
}

/// Searches over one client, each query in turn, `rounds` rounds after one that warms the
/// caches up: each query's latencies.
async fn search_rounds(
    url: &str,
    token: &str,
    queries: &[&str],
    rounds: usize,
) -> Vec<(String, Measured)> {
    let mut conn = common::Conn::open(url).await;
    let mut per_query: Vec<Vec<Duration>> = vec![Vec::new(); queries.len()];
    for round in 0..=rounds {
        for (i, q) in queries.iter().enumerate() {
            let call: Call = ("kennisbank_search".into(), json!({"query": q}));
            let t = Instant::now();
            let ok = conn.call(token, i, &call).await;
            let took = t.elapsed();
            assert!(ok, "search {q:?} failed");
            if round > 0 {
                per_query[i].push(took);
            }
        }
    }
    queries
        .iter()
        .zip(per_query)
        .map(|(q, lat)| {
            let total = lat.iter().sum();
            (q.to_string(), Measured::new(lat, total, 0))
        })
        .collect()
}

/// All queries' latencies as one measurement.
fn all_queries(by_query: &[(String, Measured)]) -> Measured {
    let all: Vec<Duration> = by_query
        .iter()
        .flat_map(|(_, m)| m.lat.iter().copied())
        .collect();
    let total = all.iter().sum();
    Measured::new(all, total, 0)
}

/// The searches once more after the index's segments are merged into one, as a server does
/// after ten idle minutes (`housekeeping`): here at once, by `kennis compact` through the
/// admin socket of a server started anew. Last, after every other measurement: the compaction
/// reads the whole store, which would warm redb's cache for the reads and count in the
/// memory and the data directory. Its time in seconds and the searches.
fn search_merged(data: &Path, listen: &str, token: &str, rounds: usize) -> (f64, Measured) {
    let server = Server::start(data, listen, &[]);
    let t = Instant::now();
    common::kennis(data, &["compact", "--json"], &[]);
    let compact_secs = t.elapsed().as_secs_f64();
    let url = format!("{}/mcp/kennisbank", server.base);
    let rt = common::runtime();
    let queries = common::capacity_queries();
    let by_query = rt.block_on(search_rounds(&url, token, &queries, rounds));
    server.stop();
    println!("after `kennis compact` ({compact_secs:.1} s): query | p50 ms | p99 ms | max ms");
    for (q, m) in &by_query {
        println!("{q} | {:.2} | {:.2} | {:.2}", m.p(0.5), m.p(0.99), m.p(1.0));
    }
    let search = all_queries(&by_query);
    println!(
        "search over HTTP after the merge, all queries: {}",
        search.line()
    );
    (compact_secs, search)
}

fn measure_size(source: &[(String, String)], target_mb: u64, s: &Settings) -> SizeRow {
    let queries = common::capacity_queries();
    let anchor = Anchor::measure(source);
    let work = tempfile::tempdir().unwrap();
    let files = work.path().join("documents");
    let t = Instant::now();
    let (documents, bytes) = common::write_generated(source, target_mb * 1_000_000, &files, SEED);
    common::flush_to_disk();
    println!(
        "\n## {:.1} MB: {documents} documents written in {:.1} s; machine anchor {anchor}",
        mb(bytes),
        t.elapsed().as_secs_f64()
    );
    let data = work.path().join("data");
    common::kennis(&data, &["org", "create", "Bench", "--json"], &[]);
    let t = Instant::now();
    common::kennis(
        &data,
        &["kb", "import", "bench", files.to_str().unwrap(), "--json"],
        &[],
    );
    let import_secs = t.elapsed().as_secs_f64();
    let (data_apparent, data_disk) = common::dir_size(&data);
    println!(
        "import: {import_secs:.1} s = {:.1} MB/s; data directory {:.1} MB ({:.2}x), {:.1} MB on disk ({:.2}x)",
        mb(bytes) / import_secs,
        mb(data_apparent),
        data_apparent as f64 / bytes as f64,
        mb(data_disk),
        data_disk as f64 / bytes as f64
    );

    let runs_trigger = common::echo_trigger(&data, "bench", "Runs", "0", &[], &[]);
    let cool_trigger = common::echo_trigger(&data, "bench", "Cooldown", "3600", &[], &[]);
    let port = common::free_port();
    let public_url = format!("http://127.0.0.1:{port}");
    let app = common::open_app(&data, &public_url);
    let org = kennis::identity::find_org(&app.store, "bench").unwrap();
    let token = common::connector_tokens(&app, "bench@example.org", &[org.id]).remove(0);
    let segments = app.kb_index.segments().unwrap().len();
    println!("search index: {segments} segments after the import");
    common::close_app(app);
    // On disk: redb lengthens its file ahead of need (a sparse tail), which the file's length
    // would count as growth.
    let (_, before) = common::dir_size(&data);

    let listen = format!("127.0.0.1:{port}");
    let server = Server::start(&data, &listen, &[]);
    let cold_start = server.started_in;
    let url = format!("{}/mcp/kennisbank", server.base);
    let rt = common::runtime();
    let sampler = server.sample();
    let (search_by_query, read, skipped, creating) = rt.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(CLIENTS)
            .build()
            .unwrap();
        let search_by_query = search_rounds(&url, &token, &queries, s.rounds).await;
        // Reads: 32 clients, documents picked across the corpus.
        let n_docs = documents;
        let read = Load {
            url: url.clone(),
            tokens: vec![token.clone()],
            clients: CLIENTS,
            calls: move |_: usize, n: usize| {
                let d = n.wrapping_mul(7919) % n_docs;
                (
                    "kennisbank_read".to_string(),
                    json!({"path": common::generated_path(d)}),
                )
            },
            max_requests: usize::MAX,
            max_secs: s.secs,
            pace: None,
        }
        .run()
        .await
        .remove(0)
        .1;
        println!("kennisbank_read, {CLIENTS} clients: {}", read.line());
        // Hook deliveries: skipped by the cooldown, then each creating a run.
        let secret = |v: &serde_json::Value| v["secret"].as_str().unwrap().to_owned();
        let (cool_url, cool_secret) = (server.hook_url(&cool_trigger), secret(&cool_trigger));
        let (runs_url, runs_secret) = (server.hook_url(&runs_trigger), secret(&runs_trigger));
        let r = client
            .post(&cool_url)
            .bearer_auth(&cool_secret)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202, "the cooldown's first delivery");
        let time = Duration::from_secs_f64(s.secs);
        let skipped = Deliveries {
            url: &cool_url,
            secret: &cool_secret,
            keyed: None,
            expect: 200,
            total: u64::MAX,
            time,
            senders: CLIENTS,
        }
        .run()
        .await;
        println!("hook deliveries skipped (cooldown): {}", skipped.line());
        let creating = Deliveries {
            url: &runs_url,
            secret: &runs_secret,
            keyed: Some("run"),
            expect: 202,
            total: u64::MAX,
            time,
            senders: CLIENTS,
        }
        .run()
        .await;
        println!("hook deliveries creating runs: {}", creating.line());
        // The runs end (the echo agent answers at once) before their records are measured.
        let waited = Instant::now();
        while waited.elapsed() < Duration::from_secs(300) {
            let m = client
                .get(format!("{}/metrics", server.base))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let queued = m
                .lines()
                .find_map(|l| l.strip_prefix("kennis_run_queue_length "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            let running = m
                .lines()
                .find_map(|l| l.strip_prefix("kennis_runs_running "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            if queued + running == 0.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (search_by_query, read, skipped, creating)
    });
    let (rss_mb, open_files) = sampler.finish();
    let hwm_mb = server.memory_mb("VmHWM:");
    server.stop();

    let (_, after) = common::dir_size(&data);
    let records = common::record_sizes(&data);
    let growth_per_record =
        (after.saturating_sub(before)) as f64 / (records.runs + records.audits).max(1) as f64;
    println!(
        "records: {} runs ({:.0} bytes each in their tables), {} audit records ({:.0} bytes each); data directory +{:.1} MB = {growth_per_record:.0} bytes per record",
        records.runs,
        records.run_bytes,
        records.audits,
        records.audit_bytes,
        mb(after.saturating_sub(before))
    );

    // The anchor: ripgrep over the same files.
    let rg: Vec<Duration> = queries.iter().map(|q| rg_time(&files, q)).collect();
    println!("query | p50 ms | p99 ms | max ms | rg -i -l -F ms");
    for ((q, m), rg) in search_by_query.iter().zip(&rg) {
        println!(
            "{q} | {:.2} | {:.2} | {:.2} | {:.0}",
            m.p(0.5),
            m.p(0.99),
            m.p(1.0),
            rg.as_secs_f64() * 1e3
        );
    }
    let search = all_queries(&search_by_query);
    println!("search over HTTP, all queries: {}", search.line());
    let merged = (segments > 1).then(|| search_merged(&data, &listen, &token, s.rounds));
    if std::env::var_os("KENNIS_CAPACITY_KEEP").is_some() {
        // The documents and the data directory (merged, if it was), to profile one workload
        // again without writing and importing them anew.
        println!("kept: {}", work.keep().display());
    }
    SizeRow {
        anchor,
        mb: mb(bytes),
        documents,
        import_secs,
        data_apparent,
        data_disk,
        search,
        segments,
        merged,
        rg,
        read,
        skipped,
        creating,
        runs: records.runs,
        audits: records.audits,
        run_bytes: records.run_bytes,
        audit_bytes: records.audit_bytes,
        growth_per_record,
        rss_mb,
        hwm_mb,
        open_files,
        cold_start,
    }
}

/// What the thousand-organisation case measured, for one way of spreading the assistants.
struct OrgsPhase {
    name: &'static str,
    search: Measured,
    read: Measured,
    rss_mb: u64,
    hwm_mb: u64,
    open_files: usize,
}

struct OrgsRow {
    /// The machine's speed as the phase began.
    anchor: Anchor,
    orgs: usize,
    documents: usize,
    bytes: u64,
    assistants: usize,
    pace: String,
    seed_secs: f64,
    data_apparent: u64,
    cold_start: Duration,
    phases: Vec<OrgsPhase>,
}

fn measure_orgs(source: &[(String, String)], s: &Settings) -> OrgsRow {
    use rand::{Rng, SeedableRng};
    let anchor = Anchor::measure(source);
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let port = common::free_port();
    let public_url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let app = common::open_app(&data, &public_url);
    let now = app.clock.now();
    let lines = common::corpus_lines(source);
    let titles: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("# "))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    let mut org_ids = Vec::with_capacity(s.orgs);
    let (mut documents, mut bytes) = (0usize, 0u64);
    for o in 0..s.orgs {
        let org =
            kennis::identity::create_org(&app.store, &format!("Organisatie {o:04}"), now).unwrap();
        let texts: Vec<String> = (0..s.org_docs)
            .map(|d| {
                let size = rng.gen_range(1_000..6_000);
                common::generated_text(&lines, &titles, o * s.org_docs + d, size, &mut rng)
            })
            .collect();
        let paths: Vec<String> = (0..s.org_docs).map(common::generated_path).collect();
        let versions: Vec<kennis::kb::NewVersion<'_>> = texts
            .iter()
            .zip(&paths)
            .map(|(text, path)| kennis::kb::NewVersion {
                org_id: org.id,
                path,
                bytes: text.as_bytes(),
                expect: kennis::kb::Expect::Any,
                by: None,
                now,
            })
            .collect();
        for outcome in kennis::kb::Writer::new(&app.store, &app.kb_index)
            .put_many(&versions)
            .unwrap()
        {
            outcome.unwrap();
        }
        documents += texts.len();
        bytes += texts.iter().map(|t| t.len() as u64).sum::<u64>();
        org_ids.push(org.id);
        if o % 100 == 99 {
            app.kb_index.follow(&app.store, false).unwrap();
        }
    }
    app.kb_index.catch_up(&app.store).unwrap();
    // Each assistant: a person with a grant in its own organisation (spread over all) and one
    // in the first (all in one).
    let first = org_ids[0];
    let (mut spread, mut one) = (Vec::new(), Vec::new());
    for a in 0..s.assistants {
        let own = org_ids[a * s.orgs / s.assistants.max(1)];
        let orgs = if own == first {
            vec![first]
        } else {
            vec![own, first]
        };
        let tokens = common::connector_tokens(&app, &format!("assistent{a}@example.org"), &orgs);
        spread.push(tokens[0].clone());
        one.push(tokens.last().unwrap().clone());
    }
    common::close_app(app);
    let seed_secs = started.elapsed().as_secs_f64();
    let (data_apparent, _) = common::dir_size(&data);
    println!(
        "\n## {} organisations x {} documents ({documents} documents, {:.1} MB), {} assistants: seeded in {seed_secs:.1} s; data directory {:.1} MB",
        s.orgs,
        s.org_docs,
        mb(bytes),
        s.assistants,
        mb(data_apparent)
    );
    let listen = format!("127.0.0.1:{port}");
    let server = Server::start(&data, &listen, &[]);
    let cold_start = server.started_in;
    let url = format!("{}/mcp/kennisbank", server.base);
    let rt = common::runtime();
    let mut phases = Vec::new();
    for (name, tokens) in [
        ("one organisation", one),
        ("spread over the organisations", spread),
    ] {
        let per_org = s.org_docs;
        let queries = common::capacity_queries();
        let load = Load {
            url: url.clone(),
            tokens,
            clients: s.assistants,
            // Each assistant alternates a search and a read of its organisation.
            calls: move |c: usize, n: usize| {
                if n.is_multiple_of(2) {
                    let q = queries[(n / 2 + c) % queries.len()];
                    ("kennisbank_search".to_string(), json!({"query": q}))
                } else {
                    let d = n.wrapping_mul(7919) % per_org;
                    (
                        "kennisbank_read".to_string(),
                        json!({"path": common::generated_path(d)}),
                    )
                }
            },
            max_requests: usize::MAX,
            max_secs: s.secs,
            pace: (s.assistant_rate > 0.0).then(|| Duration::from_secs_f64(1.0 / s.assistant_rate)),
        };
        let sampler = server.sample();
        let mut by_tool = rt.block_on(load.run());
        let (rss_mb, open_files) = sampler.finish();
        let take = |tool: &str, by_tool: &mut Vec<(String, Measured)>| {
            let i = by_tool.iter().position(|(t, _)| t == tool).expect(tool);
            by_tool.remove(i).1
        };
        let search = take("kennisbank_search", &mut by_tool);
        let read = take("kennisbank_read", &mut by_tool);
        println!("{name}: search {}", search.line());
        println!("{name}: read {}", read.line());
        phases.push(OrgsPhase {
            name,
            search,
            read,
            rss_mb,
            hwm_mb: server.memory_mb("VmHWM:"),
            open_files,
        });
    }
    server.stop();
    OrgsRow {
        anchor,
        orgs: s.orgs,
        documents,
        bytes,
        assistants: s.assistants,
        pace: if s.assistant_rate > 0.0 {
            format!("each {} calls/s", s.assistant_rate)
        } else {
            "each as fast as it is answered".into()
        },
        seed_secs,
        data_apparent,
        cold_start,
        phases,
    }
}

fn print_table(rows: &[SizeRow], orgs: Option<&OrgsRow>, end: Anchor) {
    println!("\n## Capacity of one node");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\nrelease build, {} cores, load average at the end: {}; machine anchor (zstd level 3 \
         over the corpus; random reads) at the end: {end}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("{}", machine_speed(rows, orgs, &end));
    if !rows.is_empty() {
        print_sizes(rows);
    }
    if let Some(o) = orgs {
        print_orgs(o);
    }
}

/// Below this share of the run's fastest anchor, a phase began on a slower machine.
const SLOW_PHASE: f64 = 0.85;

/// How fast the machine was as each phase began, against the fastest of the run's anchors
/// (one thread's): this machine's speed moves by up to a half within an hour, and a phase that
/// began slow gives a slower machine's figures.
fn machine_speed(rows: &[SizeRow], orgs: Option<&OrgsRow>, end: &Anchor) -> String {
    let mut phases: Vec<(String, f64)> = rows
        .iter()
        .map(|r| (format!("{:.0} MB", r.mb), r.anchor.one_thread))
        .collect();
    if let Some(o) = orgs {
        phases.push(("organisations".into(), o.anchor.one_thread));
    }
    let fastest = phases
        .iter()
        .map(|(_, a)| *a)
        .fold(end.one_thread, f64::max);
    let shares: Vec<String> = phases
        .iter()
        .map(|(name, a)| format!("{name} {:.0} %", 100.0 * a / fastest))
        .collect();
    let slow: Vec<&str> = phases
        .iter()
        .filter(|(_, a)| *a < SLOW_PHASE * fastest)
        .map(|(name, _)| name.as_str())
        .collect();
    let bound = 100.0 * SLOW_PHASE;
    let verdict = if slow.is_empty() {
        format!("every phase began at {bound:.0} % of it or more")
    } else {
        format!(
            "began below {bound:.0} % of it: {} (read its figures as a slower machine's, or run again)",
            slow.join(", ")
        )
    };
    format!(
        "machine speed as each phase began, against the run's fastest anchor ({fastest:.0} MB/s \
         on one thread): {}; {verdict}",
        shares.join(", ")
    )
}

/// The table of the corpus sizes, one column each.
fn print_sizes(rows: &[SizeRow]) {
    let mut head = "| workload |".to_string();
    let mut line = "|---|".to_string();
    for r in rows {
        head.push_str(&format!(" {:.0} MB ({} documents) |", r.mb, r.documents));
        line.push_str("---|");
    }
    println!("\n{head}\n{line}");
    let row = |name: &str, f: &dyn Fn(&SizeRow) -> String| {
        let cells: Vec<String> = rows.iter().map(f).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row(
        "machine anchor as the size began (zstd level 3 over the corpus; random reads)",
        &|r| r.anchor.to_string(),
    );
    row("search over HTTP, p50 / p99 / max", &|r| {
        format!(
            "{:.2} / {:.2} / {:.2} ms",
            r.search.p(0.5),
            r.search.p(0.99),
            r.search.p(1.0)
        )
    });
    row(
        "the same once the index is one segment (idle merge; `kennis compact` here)",
        &|r| match &r.merged {
            Some((secs, m)) => format!(
                "{:.2} / {:.2} / {:.2} ms ({} segments; `kennis compact` {secs:.0} s)",
                m.p(0.5),
                m.p(0.99),
                m.p(1.0),
                r.segments
            ),
            None => "one segment already".into(),
        },
    );
    row(
        "`rg -i -l -F`, median over the queries; speed-up of kennis's median",
        &|r| {
            let mut rg = r.rg.clone();
            rg.sort();
            let rg_p50 = common::pct(&rg, 0.5);
            format!("{rg_p50:.0} ms; {:.0}x", rg_p50 / r.search.p(0.5))
        },
    );
    row("`kb import`", &|r| {
        format!("{:.1} MB/s ({:.1} s)", r.mb / r.import_secs, r.import_secs)
    });
    row("data directory after import (on disk)", &|r| {
        format!(
            "{:.2}x ({:.2}x)",
            r.data_apparent as f64 / (r.mb * 1e6),
            r.data_disk as f64 / (r.mb * 1e6)
        )
    });
    row("`kennisbank_read`, 32 connections", &|r| {
        format!("{:.0}/s, p99 {:.2} ms", r.read.rate(), r.read.p(0.99))
    });
    row("hook deliveries skipped (cooldown)", &|r| {
        format!("{:.0}/s, p99 {:.2} ms", r.skipped.rate(), r.skipped.p(0.99))
    });
    row("hook deliveries creating runs", &|r| {
        format!(
            "{:.0}/s, p99 {:.2} ms",
            r.creating.rate(),
            r.creating.p(0.99)
        )
    });
    row("a run / an audit record in the store", &|r| {
        format!("{:.0} / {:.0} bytes", r.run_bytes, r.audit_bytes)
    });
    row(
        "data directory growth on disk per record (runs + audit)",
        &|r| {
            if r.growth_per_record == 0.0 {
                // The store file had free pages left: the records took those.
                format!(
                    "none: the store file's free pages held them ({} runs, {} audit records)",
                    r.runs, r.audits
                )
            } else {
                format!(
                    "{:.0} bytes ({} runs, {} audit records)",
                    r.growth_per_record, r.runs, r.audits
                )
            }
        },
    );
    row(
        "server memory under load (peak), open files under load",
        &|r| format!("{} MB ({} MB), {}", r.rss_mb, r.hwm_mb, r.open_files),
    );
    row("cold start", &|r| {
        format!("{:.2} s", r.cold_start.as_secs_f64())
    });
    let failed: usize = rows.iter().map(|r| r.read.failed).sum();
    assert_eq!(failed, 0, "some reads failed");
}

/// The thousand organisations' table, one row per way of spreading the assistants.
fn print_orgs(o: &OrgsRow) {
    println!(
        "\n{} organisations x {} documents ({} documents, {:.0} MB; data directory {:.0} MB, seeded in {:.0} s), {} assistants (connector grants) alternating searches and reads, {}; cold start {:.2} s; machine anchor as the phase began: {}",
        o.orgs,
        o.documents / o.orgs.max(1),
        o.documents,
        mb(o.bytes),
        mb(o.data_apparent),
        o.seed_secs,
        o.assistants,
        o.pace,
        o.cold_start.as_secs_f64(),
        o.anchor
    );
    println!(
        "\n| assistants | search p50 / p99 | read p50 / p99 | calls/s | memory under load (peak) | open files under load |"
    );
    println!("|---|---|---|---|---|---|");
    for p in &o.phases {
        println!(
            "| {} | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.0} | {} MB ({} MB) | {} |",
            p.name,
            p.search.p(0.5),
            p.search.p(0.99),
            p.read.p(0.5),
            p.read.p(0.99),
            p.search.rate() + p.read.rate(),
            p.rss_mb,
            p.hwm_mb,
            p.open_files
        );
    }
    let failed: usize = o
        .phases
        .iter()
        .map(|p| p.search.failed + p.read.failed)
        .sum();
    assert_eq!(failed, 0, "some calls failed");
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s = settings();
    match Command::new("rg").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => {
            eprintln!(
                "capacity: `rg` (ripgrep) is needed as the search anchor: apt-get install ripgrep"
            );
            std::process::exit(1);
        }
    }
    let dir = common::corpus_dir();
    let source = common::read_corpus(&dir);
    if source.is_empty() {
        eprintln!(
            "capacity: the corpus is needed at {} (set KENNIS_CORPUS)",
            dir.display()
        );
        std::process::exit(1);
    }
    let rows: Vec<SizeRow> = s
        .sizes_mb
        .iter()
        .map(|&m| measure_size(&source, m, &s))
        .collect();
    let orgs = (s.orgs > 0).then(|| measure_orgs(&source, &s));
    print_table(&rows, orgs.as_ref(), Anchor::measure(&source));
}
