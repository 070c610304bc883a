//! Known-item search quality: every document of the real corpus (`../shared/corpus`, or
//! `KENNIS_CORPUS`) is searched for by its own title, and we look at where it lands.
//! `cargo bench --bench known_item`; without the corpus it says so and exits.
//!
//! The query rule: the title is the document's first line that starts with `# `, without that
//! `# `. Its white-space-separated words are taken one by one; every character that is not a
//! letter or digit is stripped from both ends of a word (quotes, parentheses, colons, commas,
//! full stops, dashes, …), words left empty are dropped, at most the first 10 words are kept
//! (a search allows at most 10 terms) and they are joined with single spaces. A document without
//! a `# ` line, or whose query would be shorter than 2 characters, is skipped and counted.
//!
//! Two rankings, same documents, same queries, one run:
//! - kennis: the documents are stored through `kb::Writer` into a temporary data directory and
//!   each query goes through `kb::search::search_text` (org 1, no folder, limit 20), exactly as
//!   the connector's `kennisbank_search` does.
//! - BM25: a word-level tantivy index in RAM over the same folded text (`kb::fold::fold_text`),
//!   one text field with tantivy's `default` tokenizer (simple tokenizer, lower case, tokens over
//!   40 bytes removed); the query is folded (`kb::fold::fold_line`), tokenised with the same
//!   tokenizer, and each distinct token becomes a SHOULD term query (OR, plain BM25), top 20.
//!
//! For each: success@1 (share of queries whose document comes first) and MRR@20 (mean of 1/rank,
//! 0 when the document is not among the first 20), and the time per query (p50, one pass over
//! all queries). Documents whose title gives the same query as another document's cap success@1
//! below 100 % for any ranking; the run prints how many there are and the resulting ceilings
//! of success@1 and MRR@20.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use kennis::kb::fold::{fold_line, fold_text};
use kennis::kb::index::SearchIndex;
use kennis::kb::search::{MAX_TERMS, MIN_QUERY_CHARS, search_text};
use kennis::kb::{Expect, MAX_SEARCHED_BYTES, NewVersion, Writer, prefix_on_char_boundary};
use kennis::store::Store;
use tantivy::collector::TopDocs;
use tantivy::query::BooleanQuery;
use tantivy::schema::{STORED, STRING, Schema, TEXT, Value};
use tantivy::{Index, TantivyDocument, Term, doc};

const ORG: u64 = 1;
const TOP: usize = 20;

/// The title (first line starting with `# `) and the query made from it (see the module doc),
/// or `None` when the document has no such line.
fn title_query(text: &str) -> Option<(String, String)> {
    let title = text
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .map(str::trim)?;
    let query = title
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty())
        .take(MAX_TERMS)
        .collect::<Vec<_>>()
        .join(" ");
    Some((title.to_owned(), query))
}

/// Stores `docs` as the server does (one `Writer`, `Expect::Any`); returns the stored
/// (normalised) path of each document, in order.
fn store_all(dir: &Path, docs: &[(String, String)]) -> (Store, SearchIndex, Vec<String>) {
    let store = Store::open(dir).unwrap();
    let index = SearchIndex::open(&dir.join("index"), true).unwrap();
    let now = jiff::Timestamp::now();
    let mut paths = Vec::with_capacity(docs.len());
    {
        let mut writer = Writer::new(&store, &index);
        for (path, text) in docs {
            let outcome = writer
                .put(NewVersion {
                    org_id: ORG,
                    path,
                    bytes: text.as_bytes(),
                    expect: Expect::Any,
                    by: None,
                    now,
                })
                .unwrap();
            paths.push(outcome.path);
        }
        writer.finish().unwrap();
    }
    (store, index, paths)
}

/// The word-level BM25 baseline (see the module doc).
struct Bm25 {
    index: Index,
    reader: tantivy::IndexReader,
    path: tantivy::schema::Field,
    body: tantivy::schema::Field,
}

impl Bm25 {
    fn build(docs: &[(String, String)], paths: &[String]) -> Bm25 {
        let mut schema = Schema::builder();
        let path = schema.add_text_field("path", STRING | STORED);
        let body = schema.add_text_field("body", TEXT);
        let index = Index::create_in_ram(schema.build());
        let mut writer = index
            .writer_with_num_threads::<TantivyDocument>(1, 64_000_000)
            .unwrap();
        for ((_, text), p) in docs.iter().zip(paths) {
            // The same prefix kennis indexes and verifies (no corpus document is that long).
            let folded = fold_text(prefix_on_char_boundary(text, MAX_SEARCHED_BYTES));
            writer
                .add_document(doc!(path => p.as_str(), body => folded))
                .unwrap();
        }
        writer.commit().unwrap();
        let reader = index.reader().unwrap();
        reader.reload().unwrap();
        Bm25 {
            index,
            reader,
            path,
            body,
        }
    }

    /// The paths of the best `TOP` documents for `query`, best first.
    fn search(&self, query: &str) -> Vec<String> {
        let mut analyzer = self.index.tokenizer_for_field(self.body).unwrap();
        let folded = fold_line(query);
        let mut words: Vec<String> = Vec::new();
        analyzer.token_stream(&folded).process(&mut |t| {
            if !words.contains(&t.text) {
                words.push(t.text.clone());
            }
        });
        if words.is_empty() {
            return Vec::new();
        }
        let terms = words
            .iter()
            .map(|w| Term::from_field_text(self.body, w))
            .collect();
        let query = BooleanQuery::new_multiterms_query(terms);
        let searcher = self.reader.searcher();
        let top = searcher
            .search(&query, &TopDocs::with_limit(TOP).order_by_score())
            .unwrap();
        top.into_iter()
            .map(|(_, addr)| {
                let d: TantivyDocument = searcher.doc(addr).unwrap();
                d.get_first(self.path)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }
}

/// Ranks (1-based, `None` = not in the top `TOP`) and time per query of one ranking.
#[derive(Default)]
struct Outcome {
    ranks: Vec<Option<usize>>,
    times: Vec<Duration>,
    errors: usize,
}

impl Outcome {
    fn record(&mut self, target: &str, found: &[String], took: Duration) {
        self.ranks.push(
            found
                .iter()
                .take(TOP)
                .position(|p| p == target)
                .map(|i| i + 1),
        );
        self.times.push(took);
    }

    fn row(&self, name: &str) -> String {
        let n = self.ranks.len() as f64;
        let first = self.ranks.iter().filter(|r| **r == Some(1)).count();
        let missing = self.ranks.iter().filter(|r| r.is_none()).count();
        let mrr: f64 = self
            .ranks
            .iter()
            .map(|r| r.map_or(0.0, |r| 1.0 / r as f64))
            .sum::<f64>()
            / n;
        let mut times = self.times.clone();
        times.sort();
        let p50 = times[(times.len() - 1) / 2];
        format!(
            "{name} | {} | {:.1} % ({first}) | {mrr:.3} | {missing} | {} | {:.2} ms",
            self.ranks.len(),
            100.0 * first as f64 / n,
            self.errors,
            p50.as_secs_f64() * 1000.0
        )
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let started = Instant::now();
    let dir = common::corpus_dir();
    let docs = common::read_corpus(&dir);
    if docs.is_empty() {
        println!(
            "corpus not found at {} (set KENNIS_CORPUS): known-item benchmark skipped",
            dir.display()
        );
        return;
    }
    println!("corpus: {} documents from {}", docs.len(), dir.display());

    let t = Instant::now();
    let data = tempfile::tempdir().unwrap();
    let (store, index, paths) = store_all(data.path(), &docs);
    let kennis_load = t.elapsed();
    let t = Instant::now();
    let bm25 = Bm25::build(&docs, &paths);
    let bm25_load = t.elapsed();
    println!(
        "store + index through kb::Writer: {:.1} s; BM25 index in RAM: {:.1} s",
        kennis_load.as_secs_f64(),
        bm25_load.as_secs_f64()
    );

    // (stored path, title, query) of every document that gives a query.
    let mut no_title = 0;
    let mut too_short = 0;
    let mut queries = Vec::new();
    for ((_, text), path) in docs.iter().zip(&paths) {
        match title_query(text) {
            None => no_title += 1,
            Some((_, q)) if q.chars().count() < MIN_QUERY_CHARS => too_short += 1,
            Some((title, q)) => queries.push((path.as_str(), title, q)),
        }
    }
    println!(
        "queries: {} (skipped: {no_title} documents without a `# ` line, {too_short} with a query under {MIN_QUERY_CHARS} characters)",
        queries.len()
    );

    // Duplicates: the same title, and (what bounds success@1) the same folded query.
    let count_shared = |keys: Vec<String>| {
        let mut by: HashMap<String, usize> = HashMap::new();
        for k in keys {
            *by.entry(k).or_default() += 1;
        }
        let groups = by.values().filter(|n| **n > 1).count();
        let docs: usize = by.values().filter(|n| **n > 1).sum();
        (docs, groups)
    };
    let (same_title, title_groups) = count_shared(queries.iter().map(|q| q.1.clone()).collect());
    let (same_query, query_groups) =
        count_shared(queries.iter().map(|q| fold_line(&q.2)).collect());
    let ceiling = (queries.len() - same_query + query_groups) as f64 / queries.len() as f64;
    // The best any ranking can do for MRR: of k documents sharing a query, one at rank 1, one
    // at rank 2, … one at rank k.
    let mut nth: HashMap<String, usize> = HashMap::new();
    let mrr_ceiling = queries
        .iter()
        .map(|q| {
            let n = nth.entry(fold_line(&q.2)).or_default();
            *n += 1;
            1.0 / *n as f64
        })
        .sum::<f64>()
        / queries.len() as f64;
    println!(
        "duplicate titles: {same_title} documents share their title with another ({title_groups} titles); \
         {same_query} share their folded query ({query_groups} queries), so success@1 is at most {:.1} % \
         and MRR@20 at most {mrr_ceiling:.3}",
        100.0 * ceiling
    );

    let mut ours = Outcome::default();
    for (path, _, q) in &queries {
        let t = Instant::now();
        let found = match search_text(&store, &index, ORG, q, None, TOP) {
            Ok(out) => out.results.into_iter().map(|h| h.path).collect(),
            Err(_) => {
                ours.errors += 1;
                Vec::new()
            }
        };
        ours.record(path, &found, t.elapsed());
    }
    let mut base = Outcome::default();
    for (path, _, q) in &queries {
        let t = Instant::now();
        let found = bm25.search(q);
        base.record(path, &found, t.elapsed());
    }

    println!("\nranking | queries | success@1 | MRR@20 | not in top 20 | errors | p50");
    println!("{}", ours.row("kennis (kb::search::search_text)"));
    println!("{}", base.row("BM25 (tantivy, words, OR)"));
    println!("\ntotal: {:.1} s", started.elapsed().as_secs_f64());
}
