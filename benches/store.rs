//! The store at about 100 MB (issue 15): the shared corpus (`../shared/corpus`, or
//! `KENNIS_CORPUS`) copied until it holds ~100 MB, each copy made unique (its own folder and a
//! line of its own in every document) so no content is deduplicated.
//!
//! 1. Content codecs on the corpus's documents, one value per document as the store keeps
//!    them: zstd levels 1, 3 and 9 against lz4 — size, compression and decompression MB/s;
//!    then zstd 3 with a dictionary trained on every other document, on the rest.
//! 2. `kennis kb import` (the release binary, a fresh data directory, no server): MB/s of
//!    document bytes, wall time including the compaction at the end.
//! 3. The data directory's size against the documents' (database file, index, key).
//! 4. Search p50/p99 over that store, in process, with the search benchmark's queries.
//!
//! `cargo bench --bench store`; `KENNIS_STORE_MB` changes the size (default 100).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kennis::kb::index::SearchIndex;
use kennis::kb::search::{self, Budget, DEFAULT_LIMIT, OUTPUT_CAP_CHARS, SearchRequest};
use kennis::store::Store;

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn codecs(docs: &[(String, String)]) {
    let raw: u64 = docs.iter().map(|(_, t)| t.len() as u64).sum();
    println!(
        "\n## Content codecs: {} documents, {:.1} MB",
        docs.len(),
        mb(raw)
    );
    println!("codec | stored | ratio | compress MB/s | decompress MB/s");
    type Codec = (
        &'static str,
        Box<dyn Fn(&[u8]) -> Vec<u8>>,
        Box<dyn Fn(&[u8], usize) -> Vec<u8>>,
    );
    // One context per codec, reused for every document, as the store does.
    let zstd_at = |level: i32| -> Codec {
        let c = std::cell::RefCell::new(zstd::bulk::Compressor::new(level).unwrap());
        let d = std::cell::RefCell::new(zstd::bulk::Decompressor::new().unwrap());
        (
            Box::leak(format!("zstd {level}").into_boxed_str()),
            Box::new(move |b: &[u8]| c.borrow_mut().compress(b).unwrap()),
            Box::new(move |x: &[u8], n: usize| d.borrow_mut().decompress(x, n).unwrap()),
        )
    };
    let all: Vec<Codec> = vec![
        (
            "lz4",
            Box::new(|b: &[u8]| lz4_flex::block::compress(b)),
            Box::new(|c: &[u8], n: usize| lz4_flex::block::decompress(c, n).unwrap()),
        ),
        zstd_at(1),
        zstd_at(3),
        zstd_at(9),
    ];
    for (name, compress, decompress) in &all {
        codec_row(name, compress, decompress, docs);
    }
    // A dictionary trained on half the documents (every other one), measured on the other
    // half beside plain zstd 3 on that half: what an organisation's own dictionary would give
    // its next documents. Measured only: the store keeps each document's own frame.
    let (train, test): (Vec<_>, Vec<_>) = docs.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let samples: Vec<&[u8]> = train.iter().map(|(_, (_, d))| d.as_bytes()).collect();
    let test: Vec<(String, String)> = test.into_iter().map(|(_, d)| d.clone()).collect();
    println!(
        "\nzstd 3 with a dictionary trained on every other document, on the rest ({} documents, {:.1} MB):",
        test.len(),
        mb(test.iter().map(|(_, t)| t.len() as u64).sum())
    );
    println!("codec | stored | ratio | compress MB/s | decompress MB/s");
    let (_, plain_c, plain_d) = zstd_at(3);
    codec_row("zstd 3", &*plain_c, &*plain_d, &test);
    for size in [32 * 1024, 112_640] {
        let dict = zstd::dict::from_samples(&samples, size).unwrap();
        let c = std::cell::RefCell::new(zstd::bulk::Compressor::with_dictionary(3, &dict).unwrap());
        let d = std::cell::RefCell::new(zstd::bulk::Decompressor::with_dictionary(&dict).unwrap());
        codec_row(
            &format!("zstd 3, {} KB dictionary", dict.len() / 1024),
            &move |b: &[u8]| c.borrow_mut().compress(b).unwrap(),
            &move |x: &[u8], n: usize| d.borrow_mut().decompress(x, n).unwrap(),
            &test,
        );
    }
}

/// One codec's row: every document compressed, then each decompressed (and checked).
fn codec_row(
    name: &str,
    compress: &dyn Fn(&[u8]) -> Vec<u8>,
    decompress: &dyn Fn(&[u8], usize) -> Vec<u8>,
    docs: &[(String, String)],
) {
    let raw: u64 = docs.iter().map(|(_, t)| t.len() as u64).sum();
    let t = Instant::now();
    let packed: Vec<Vec<u8>> = docs.iter().map(|(_, d)| compress(d.as_bytes())).collect();
    let ct = t.elapsed();
    let t = Instant::now();
    for ((_, d), p) in docs.iter().zip(&packed) {
        assert_eq!(decompress(p, d.len()).len(), d.len());
    }
    let dt = t.elapsed();
    let stored: u64 = packed.iter().map(|p| p.len() as u64).sum();
    println!(
        "{name} | {:.2} MB | {:.2}x | {:.0} | {:.0}",
        mb(stored),
        raw as f64 / stored as f64,
        mb(raw) / ct.as_secs_f64(),
        mb(raw) / dt.as_secs_f64()
    );
}

fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        total += if m.is_dir() {
            dir_size(&e.path())
        } else {
            m.len()
        };
    }
    total
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let corpus = common::read_corpus(&common::corpus_dir());
    if corpus.is_empty() {
        println!(
            "corpus not found at {} (set KENNIS_CORPUS); nothing measured",
            common::corpus_dir().display()
        );
        return;
    }
    codecs(&corpus);
    let target_mb: u64 = std::env::var("KENNIS_STORE_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("documents");
    let (n, bytes) = common::write_scaled(&corpus, target_mb * 1_000_000, &src);
    common::flush_to_disk();
    println!("\n## Import: {n} documents, {:.1} MB", mb(bytes));
    let data = work.path().join("data");
    let kennis = env!("CARGO_BIN_EXE_kennis");
    let run = |args: &[&str]| {
        let out = Command::new(kennis)
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .env("KENNIS_LOG", "warn")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    run(&["org", "create", "Bench", "--json"]);
    let t = Instant::now();
    run(&["kb", "import", "bench", src.to_str().unwrap(), "--json"]);
    let took = t.elapsed();
    let db = std::fs::metadata(data.join("kennis.redb")).unwrap().len();
    let index = dir_size(&data.join("index"));
    let total = dir_size(&data);
    println!(
        "import: {:.1} s, {:.1} MB/s (target ≥ 15)",
        took.as_secs_f64(),
        mb(bytes) / took.as_secs_f64()
    );
    println!(
        "data directory: {:.1} MB = {:.2}x the documents (target ≤ 1.5): kennis.redb {:.1} MB ({:.2}x), index {:.1} MB ({:.2}x)",
        mb(total),
        total as f64 / bytes as f64,
        mb(db),
        db as f64 / bytes as f64,
        mb(index),
        index as f64 / bytes as f64
    );

    let store = Store::open(&data).unwrap();
    let index = SearchIndex::open(&data.join("index"), true).unwrap();
    let rounds = 20;
    let mut all = Vec::new();
    println!("\n## Search over the imported store ({rounds} rounds per query)");
    println!("query | results | p50 | max");
    for raw in common::QUERIES {
        let query = search::parse_query(raw).unwrap();
        let req = SearchRequest {
            org_id: 1,
            raw_query: raw,
            query: &query,
            folder: None,
            limit: DEFAULT_LIMIT,
            budget: Budget::DEFAULT,
            output_cap: OUTPUT_CAP_CHARS,
        };
        let mut times = Vec::new();
        let mut results = 0;
        for _ in 0..rounds {
            let t = Instant::now();
            results = search::search(&store, &index, &req).unwrap().results.len();
            times.push(t.elapsed());
        }
        times.sort();
        println!(
            "{raw} | {results} | {:.2} ms | {:.2} ms",
            pct(&times, 0.5).as_secs_f64() * 1e3,
            times.last().unwrap().as_secs_f64() * 1e3
        );
        all.extend(times);
    }
    all.sort();
    println!(
        "ALL: {} searches, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        all.len(),
        pct(&all, 0.5).as_secs_f64() * 1e3,
        pct(&all, 0.99).as_secs_f64() * 1e3,
        all.last().unwrap().as_secs_f64() * 1e3
    );
}
