//! Search latency through the index against a brute-force scan, on the real corpus
//! (`../shared/corpus`, or `KENNIS_CORPUS`) and on a 10,000-document / ~100 MB corpus generated
//! deterministically from its lines. `cargo bench --bench search`.

mod common;

use std::time::{Duration, Instant};

use kennis::kb::fold::fold_text;
use kennis::kb::index::SearchIndex;
use kennis::kb::search::{
    self, Budget, DEFAULT_LIMIT, OUTPUT_CAP_CHARS, SearchRequest, parse_query,
};
use kennis::store::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ORG: u64 = 1;

/// Text made up here when the corpus is absent: pseudo-words from a seeded generator.
fn made_up_docs(n: usize, rng: &mut StdRng) -> Vec<(String, String)> {
    const SYL: &[&str] = &[
        "ka", "ta", "bel", "op", "maak", "noot", "cel", "werk", "blad", "ko", "zijn", "café",
        "één", "de", "het", "en", "in", "voeg", "le", "ter", "type", "druk", "pa", "gi", "na",
    ];
    (0..n)
        .map(|i| {
            let lines: Vec<String> = (0..rng.gen_range(5..60))
                .map(|_| {
                    (0..rng.gen_range(2..12))
                        .map(|_| {
                            (0..rng.gen_range(1..4))
                                .map(|_| SYL[rng.gen_range(0..SYL.len())])
                                .collect::<String>()
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            (format!("gen{}/doc{i}.md", i % 20), lines.join("\n"))
        })
        .collect()
}

struct Loaded {
    _dir: tempfile::TempDir,
    store: Store,
    index: SearchIndex,
}

fn load(docs: &[(String, String)]) -> (Loaded, Duration) {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let index = SearchIndex::open(&dir.path().join("index"), true).unwrap();
    let now = jiff::Timestamp::now();
    for (path, text) in docs {
        kennis::kb::store_document(&store, ORG, path, text.as_bytes(), None, now).unwrap();
    }
    index.catch_up(&store).unwrap();
    (
        Loaded {
            _dir: dir,
            store,
            index,
        },
        started.elapsed(),
    )
}

/// The rules applied naively: fold every document, then the 3-line rule. Returns matches.
fn brute_force(docs: &[(String, String)], terms: &[String]) -> usize {
    let mut found = 0;
    for (_, text) in docs {
        let head = kennis::kb::prefix_on_char_boundary(text, kennis::kb::MAX_SEARCHED_BYTES);
        let folded = fold_text(head);
        let lines: Vec<&str> = folded.split('\n').collect();
        for l in 0..lines.len() {
            if !terms.iter().any(|t| lines[l].contains(t.as_str())) {
                continue;
            }
            let window = &lines[l..(l + 3).min(lines.len())];
            if terms
                .iter()
                .all(|t| window.iter().any(|line| line.contains(t.as_str())))
            {
                found += 1;
                break;
            }
        }
    }
    found
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn bench(name: &str, docs: &[(String, String)], rounds: usize) {
    let bytes: usize = docs.iter().map(|(_, t)| t.len()).sum();
    println!(
        "\n## {name}: {} documents, {:.1} MB",
        docs.len(),
        bytes as f64 / 1e6
    );
    let (l, took) = load(docs);
    println!("import + index: {:.1} s", took.as_secs_f64());
    let mut all = Vec::new();
    let mut brute_total = Duration::ZERO;
    let mut index_total = Duration::ZERO;
    println!("query | results | not_searched | p50 | max | brute force");
    for raw in common::QUERIES {
        let query = parse_query(raw).unwrap();
        let req = SearchRequest {
            org_id: ORG,
            raw_query: raw,
            query: &query,
            folder: None,
            limit: DEFAULT_LIMIT,
            budget: Budget::DEFAULT,
            output_cap: OUTPUT_CAP_CHARS,
        };
        let mut times = Vec::with_capacity(rounds);
        let mut out = None;
        for _ in 0..rounds {
            let t = Instant::now();
            out = Some(search::search(&l.store, &l.index, &req).unwrap());
            times.push(t.elapsed());
        }
        let out = out.unwrap();
        let t = Instant::now();
        let matched = brute_force(docs, &query.terms);
        let brute = t.elapsed();
        brute_total += brute;
        index_total += times.iter().sum::<Duration>() / rounds as u32;
        times.sort();
        println!(
            "{raw} | {} | {} | {} | {} | {} ({matched} matching documents)",
            out.results.len(),
            out.not_searched.map_or(0, |n| n.documents),
            ms(pct(&times, 0.5)),
            ms(*times.last().unwrap()),
            ms(brute),
        );
        all.extend(times);
    }
    all.sort();
    println!(
        "ALL {name}: {} searches, p50 {}, p99 {}, max {}; mean per query: index {}, brute force {}; speed-up {:.0}x",
        all.len(),
        ms(pct(&all, 0.5)),
        ms(pct(&all, 0.99)),
        ms(*all.last().unwrap()),
        ms(index_total / common::QUERIES.len() as u32),
        ms(brute_total / common::QUERIES.len() as u32),
        brute_total.as_secs_f64() / index_total.as_secs_f64()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let rounds: usize = std::env::var("KENNIS_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let mut rng = StdRng::seed_from_u64(0x6b656e6e6973);
    let dir = common::corpus_dir();
    let corpus = common::read_corpus(&dir);
    let source = if corpus.is_empty() {
        println!(
            "corpus not found at {} (set KENNIS_CORPUS): using made-up text instead",
            dir.display()
        );
        made_up_docs(2_465, &mut rng)
    } else {
        println!("corpus: {} documents from {}", corpus.len(), dir.display());
        corpus
    };
    bench("corpus", &source, rounds);
    let generated = common::generated_corpus(&source, &mut rng);
    bench("generated", &generated, rounds);
}
