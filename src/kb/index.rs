//! The search index (tantivy, in `<data>/index/`): derived data that proposes candidate
//! documents. Each text document's latest version is indexed as 2- and 3-character grams of its
//! folded text, so a query term found as a substring (kozijn in kozijnen) selects the document
//! through the grams it consists of. The index records in its commit payload how far it has
//! followed the store's change log; at start it replays what it missed.

use std::path::Path;
use std::sync::Mutex;

use tantivy::collector::{Count, TopDocs};
use tantivy::query::{AllQuery, BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
    Value,
};
use tantivy::tokenizer::NgramTokenizer;
use tantivy::{
    DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term, doc,
};

use super::{Change, DocKind, Document, KbError, doc_key};
use crate::store::{KB_CHANGES, KB_DOCS, KB_FOLDED, Store, key};

const TOKENIZER: &str = "kennis_grams";
const WRITER_HEAP: usize = 50_000_000;
/// Bumped when the schema or the gram scheme changes; a mismatch rebuilds the index.
const INDEX_FORMAT: &str = "kennis-index-1";

struct Fields {
    key: Field,
    org: Field,
    path: Field,
    folders: Field,
    version: Field,
    hash: Field,
    size: Field,
    grams: Field,
}

/// A candidate document proposed by the index.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub path: String,
    pub version: u64,
    pub hash: String,
    pub size: u64,
}

pub struct SearchIndex {
    index: Index,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    fields: Fields,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let grams_opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        key: b.add_text_field("key", STRING),
        org: b.add_u64_field("org", INDEXED),
        path: b.add_text_field("path", STRING | STORED),
        folders: b.add_text_field("folders", STRING),
        version: b.add_u64_field("version", STORED),
        hash: b.add_text_field("hash", STORED),
        size: b.add_u64_field("size", STORED),
        grams: b.add_text_field("grams", grams_opts),
    };
    (b.build(), fields)
}

fn index_err(e: impl std::fmt::Display) -> KbError {
    KbError::Index(e.to_string())
}

/// The grams a query term must contain: its 3-grams, or the term itself when shorter than 3
/// characters but 2 long. A 1-character term constrains nothing here (the verifier decides).
pub fn term_grams(term: &str) -> Vec<String> {
    let chars: Vec<char> = term.chars().collect();
    match chars.len() {
        0 | 1 => Vec::new(),
        2 => vec![term.to_owned()],
        _ => {
            let mut grams: Vec<String> = chars.windows(3).map(|w| w.iter().collect()).collect();
            grams.sort();
            grams.dedup();
            grams
        }
    }
}

/// The folders containing `path`, each with a trailing slash: `a/b/c.md` → `a/`, `a/b/`.
fn ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, c) in path.char_indices() {
        if c == '/' {
            out.push(path[..=i].to_owned());
        }
    }
    out
}

impl SearchIndex {
    /// Opens the index in `dir`, creating it (or recreating it, when it was made by another
    /// index format) as needed. A recreated index starts at change 0 and catches up.
    pub fn open(dir: &Path) -> Result<SearchIndex, KbError> {
        std::fs::create_dir_all(dir).map_err(index_err)?;
        let (schema, fields) = schema();
        let marker = dir.join("FORMAT");
        let format_ok = std::fs::read_to_string(&marker).is_ok_and(|s| s.trim() == INDEX_FORMAT);
        if !format_ok {
            for entry in std::fs::read_dir(dir).map_err(index_err)? {
                let p = entry.map_err(index_err)?.path();
                if p.is_dir() {
                    std::fs::remove_dir_all(&p).map_err(index_err)?;
                } else {
                    std::fs::remove_file(&p).map_err(index_err)?;
                }
            }
        }
        let mmap = tantivy::directory::MmapDirectory::open(dir).map_err(index_err)?;
        let index = Index::open_or_create(mmap, schema).map_err(index_err)?;
        if !format_ok {
            std::fs::write(&marker, INDEX_FORMAT).map_err(index_err)?;
        }
        index.tokenizers().register(
            TOKENIZER,
            NgramTokenizer::new(2, 3, false).map_err(index_err)?,
        );
        let writer = index.writer(WRITER_HEAP).map_err(index_err)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(index_err)?;
        Ok(SearchIndex {
            index,
            reader,
            writer: Mutex::new(writer),
            fields,
        })
    }

    /// The last change-log sequence number the index has applied.
    pub fn applied(&self) -> u64 {
        self.index
            .load_metas()
            .ok()
            .and_then(|m| m.payload)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// Applies every change the store logged after [`applied`](Self::applied); returns how
    /// many were applied. Serialised by the writer lock, so concurrent callers are safe.
    pub fn catch_up(&self, store: &Store) -> Result<usize, KbError> {
        let mut writer = self.writer.lock().expect("index writer lock");
        let mut applied = self.applied();
        let mut count = 0;
        loop {
            let batch: Vec<(Vec<u8>, Change)> =
                store.read(|tx| tx.range(KB_CHANGES, &key::id(applied + 1), 1000))?;
            if batch.is_empty() {
                break;
            }
            for (k, change) in &batch {
                self.reindex_one(&mut writer, store, change.org_id, &change.path)?;
                applied = key::id_at(k, 0).expect("change key");
                count += 1;
            }
        }
        if count > 0 {
            self.commit(&mut writer, applied)?;
        }
        Ok(count)
    }

    fn commit(&self, writer: &mut IndexWriter, applied: u64) -> Result<(), KbError> {
        let mut prepared = writer.prepare_commit().map_err(index_err)?;
        prepared.set_payload(&applied.to_string());
        prepared.commit().map_err(index_err)?;
        self.reader.reload().map_err(index_err)
    }

    /// Replaces the index entry of one document with its current state in the store.
    fn reindex_one(
        &self,
        writer: &mut IndexWriter,
        store: &Store,
        org_id: u64,
        path: &str,
    ) -> Result<(), KbError> {
        let f = &self.fields;
        let key = format!("{org_id}:{path}");
        writer.delete_term(Term::from_field_text(f.key, &key));
        let found: Option<(Document, Option<Vec<u8>>)> = store.read(|tx| {
            let Some(doc) = tx.get::<Document>(KB_DOCS, &doc_key(org_id, path))? else {
                return Ok::<_, KbError>(None);
            };
            if doc.kind != DocKind::Text {
                return Ok(None);
            }
            let hash = blake3::Hash::from_hex(&doc.hash).map_err(index_err)?;
            let folded = tx.get_raw(KB_FOLDED, hash.as_bytes())?;
            Ok(Some((doc, folded)))
        })?;
        let Some((doc, Some(folded))) = found else {
            return Ok(());
        };
        let mut d = doc!(
            f.key => key,
            f.org => org_id,
            f.path => doc.path.clone(),
            f.version => doc.version,
            f.hash => doc.hash.clone(),
            f.size => doc.size,
            f.grams => String::from_utf8_lossy(&folded).into_owned(),
        );
        for folder in ancestors(&doc.path) {
            d.add_text(f.folders, folder);
        }
        writer.add_document(d).map_err(index_err)?;
        Ok(())
    }

    /// Rebuilds the index from the store: every organisation, or one. Reports progress.
    pub fn rebuild(
        &self,
        store: &Store,
        org: Option<u64>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<usize, KbError> {
        let mut writer = self.writer.lock().expect("index writer lock");
        match org {
            Some(id) => {
                writer
                    .delete_query(Box::new(TermQuery::new(
                        Term::from_field_u64(self.fields.org, id),
                        IndexRecordOption::Basic,
                    )))
                    .map_err(index_err)?;
            }
            None => {
                writer.delete_all_documents().map_err(index_err)?;
            }
        }
        // The change log's end: everything up to it is reflected by the rebuild.
        let last = store.read(|tx| {
            let n = tx.count(KB_CHANGES)?;
            let rows: Vec<(Vec<u8>, Change)> = if n == 0 {
                Vec::new()
            } else {
                tx.range(KB_CHANGES, &key::id(self.applied().max(1)), usize::MAX)?
            };
            Ok::<_, KbError>(
                rows.last()
                    .and_then(|(k, _)| key::id_at(k, 0))
                    .unwrap_or(self.applied()),
            )
        })?;
        let prefix = org.map(|id| key::id(id).to_vec()).unwrap_or_default();
        let docs: Vec<(Vec<u8>, Document)> = store.read(|tx| tx.scan(KB_DOCS, &prefix))?;
        let total = docs.len();
        let mut done = 0;
        for (i, (_, doc)) in docs.iter().enumerate() {
            self.reindex_one(&mut writer, store, doc.org_id, &doc.path)?;
            done += 1;
            if (i + 1) % 500 == 0 || i + 1 == total {
                progress(&format!("indexed {} of {total} documents", i + 1));
            }
        }
        self.commit(&mut writer, last)?;
        Ok(done)
    }

    /// Candidate documents of `org_id` (inside `folder`, if given) that contain every gram of
    /// every term: the best `max` of them, and how many there are in all. Only the ones a call
    /// may verify are fetched, so a common term does not load the whole knowledge base.
    pub fn candidates(
        &self,
        org_id: u64,
        folder: Option<&str>,
        terms: &[String],
        max: usize,
    ) -> Result<(Vec<Candidate>, usize), KbError> {
        let f = &self.fields;
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(
            Occur::Must,
            Box::new(TermQuery::new(
                Term::from_field_u64(f.org, org_id),
                IndexRecordOption::Basic,
            )),
        )];
        if let Some(folder) = folder {
            // A folder scope, or the exact path of one document.
            let scope = BooleanQuery::new(vec![
                (
                    Occur::Should,
                    Box::new(TermQuery::new(
                        Term::from_field_text(f.folders, &format!("{folder}/")),
                        IndexRecordOption::Basic,
                    )) as Box<dyn Query>,
                ),
                (
                    Occur::Should,
                    Box::new(TermQuery::new(
                        Term::from_field_text(f.path, folder),
                        IndexRecordOption::Basic,
                    )),
                ),
            ]);
            clauses.push((Occur::Must, Box::new(scope)));
        }
        let mut grams: Vec<String> = terms.iter().flat_map(|t| term_grams(t)).collect();
        grams.sort();
        grams.dedup();
        for g in &grams {
            clauses.push((
                Occur::Must,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.grams, g),
                    IndexRecordOption::WithFreqs,
                )),
            ));
        }
        let query: Box<dyn Query> = if clauses.is_empty() {
            Box::new(AllQuery)
        } else {
            Box::new(BooleanQuery::new(clauses))
        };
        let searcher = self.reader.searcher();
        let total = searcher.search(&query, &Count).map_err(index_err)?;
        if total == 0 {
            return Ok((Vec::new(), 0));
        }
        let top: Vec<(f32, DocAddress)> = searcher
            .search(
                &query,
                &TopDocs::with_limit(total.min(max)).order_by_score(),
            )
            .map_err(index_err)?;
        let mut out = Vec::with_capacity(top.len());
        for (_, addr) in top {
            let d: TantivyDocument = searcher.doc(addr).map_err(index_err)?;
            let text = |field| {
                d.get_first(field)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            let num = |field| {
                d.get_first(field)
                    .and_then(|v| v.as_u64())
                    .unwrap_or_default()
            };
            out.push(Candidate {
                path: text(f.path),
                version: num(f.version),
                hash: text(f.hash),
                size: num(f.size),
            });
        }
        Ok((out, total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grams_of_terms() {
        assert_eq!(term_grams("kozijn"), vec!["ijn", "koz", "ozi", "zij"]);
        assert_eq!(term_grams("ab"), vec!["ab"]);
        assert!(term_grams("a").is_empty());
        assert_eq!(ancestors("a/b/c.md"), vec!["a/", "a/b/"]);
    }
}
