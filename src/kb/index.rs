//! The search index (tantivy, in `<data>/index/`): derived data that proposes candidate
//! documents in a useful order. Each searchable document's latest version (its own text, or
//! the text extracted from a binary file) is indexed these ways, all from its folded text:
//!
//! - `words`: the whole words with their frequencies, for BM25 over the body, and each
//!   occurrence's line as its position ([`super::lines`]); with `long`, the index's vocabulary
//!   ([`super::vocabulary`]). A query term found as a substring
//!   (kozijn in kozijnen) selects the documents through the words that hold its runs of
//!   letters and digits; this only filters, it does not score.
//! - `long`: the words of 40 bytes or more, which `words` leaves out, in pieces, once per
//!   document: so that a substring of one is found like any other.
//! - `joins`: the 3-character grams around a sign between two other characters (`e-m` in
//!   `e-mail`), once per document: a term with such a sign needs them too, so that its runs
//!   are found side by side and not only each somewhere.
//! - `title`: the words of the first line (a Markdown heading or a title) and of the file
//!   name, for BM25 over the title, weighted [`TITLE_BOOST`] times.
//! - `title_exact`: the first line's words, and the file name's, each joined into one key,
//!   so a query that is exactly a document's title (whole words, in order) finds it.
//!
//! Ranking is therefore: documents whose title the query is, exactly, first; then BM25 over
//! whole query words in title and body — among the documents that contain every term as a
//! substring. The verifier then applies the exact rules. The
//! index records in its commit payload how far it has followed the store's change log; at
//! start it replays what it missed.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::path::Path;
use std::sync::Mutex;

use rustc_hash::FxHasher;
use tantivy::collector::{Count, TopDocs};
use tantivy::query::{
    BooleanQuery, BoostQuery, ConstScoreQuery, EmptyQuery, EnableScoring, Occur, Query, QueryClone,
    Scorer, TermQuery, TermSetQuery, Weight,
};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing,
    TextOptions, Value,
};
use tantivy::tokenizer::{
    RemoveLongFilter, SimpleTokenizer, TextAnalyzer, Token, TokenStream, Tokenizer,
};
use tantivy::{
    DocAddress, DocId, DocSet, Index, IndexReader, IndexWriter, ReloadPolicy, Score, SegmentReader,
    TERMINATED, TantivyDocument, Term, doc,
};

use super::fold::fold_text;
use super::handed::{self, Handed};
use super::lines::LineWords;
use super::vocabulary::{self, Run, Vocabulary, Words, runs};
use super::{Change, Document, KbError, MAX_SEARCHED_BYTES, doc_key, prefix_on_char_boundary};
use crate::store::{KB_CHANGES, KB_DOCS, Store, key};

const LONG: &str = "kennis_long";
const JOINS: &str = "kennis_joins";
const WORDS: &str = "kennis_words";
/// Memory the index writer may use before it writes a segment: its threads share it. Only
/// documents added and not yet committed fill it (a server commits each write; an import or
/// a rebuild commits at its end), and tantivy's term table starts at the same size whatever
/// the budget, so a server's memory does not follow it. At 96 MB a 1 GB import wrote more
/// than eight segments, which it then merged into one (4–5 s more at its end); at 384 MB it
/// writes four and merges none, for about 100 MB more at its peak (`docs/performance.md`,
/// stop 53).
const WRITER_HEAP: usize = 384_000_000;
/// Indexing threads: the machine kennis is made for has two cores.
const WRITER_THREADS: usize = 2;
/// How much more a query word in the title counts than one in the body.
pub const TITLE_BOOST: f32 = 2.0;
/// The score an exact title match adds: more than BM25 gives any query of at most ten words,
/// so such documents come before the others (and among themselves by BM25).
const EXACT_TITLE_SCORE: f32 = 1000.0;
/// A title key longer than this is not indexed (no query of ten terms is that long).
const MAX_TITLE_KEY: usize = 512;
/// Bytes of stored fields compressed together (tantivy's default is 16 KiB): reading one
/// candidate's path, version and hash decompresses its block. At 2 KiB that is about a
/// quarter of the instructions (measured with callgrind on 28,000 documents) for 6 % more
/// stored-field bytes (about 100 KB per 100 MB of documents).
const DOCSTORE_BLOCK: usize = 2048;
/// How long an import waits for the index to take a handed text before it lets go of those
/// held: longer than both indexing threads writing a segment at once.
const HANDED_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);
/// Bytes of a document's values besides its text, title and path (numbers, hash, folders' and
/// keys' separators), with some to spare: [`SearchIndex::document`] sizes its buffer by it.
const DOCUMENT_ROOM: usize = 256;
/// Bumped when the schema or what a field holds changes; a mismatch rebuilds the index.
const INDEX_FORMAT: &str = "kennis-index-6";

struct Fields {
    key: Field,
    org: Field,
    path: Field,
    folders: Field,
    version: Field,
    hash: Field,
    size: Field,
    extracted: Field,
    long: Field,
    joins: Field,
    words: Field,
    title: Field,
    title_exact: Field,
}

/// A candidate document proposed by the index.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub path: String,
    pub version: u64,
    pub hash: String,
    /// Bytes of its searchable text (for an extracted file, of the text taken from it).
    pub size: u64,
    /// Its text was extracted from a binary file.
    pub extracted: bool,
    /// The index's lines rule it out: no three consecutive lines hold every term of the
    /// search ([`super::lines`]), so the verifier need not read it.
    pub apart: bool,
}

/// The tantivy writer and how far it has followed the change log without committing.
struct Writer {
    tantivy: IndexWriter,
    pending: Option<u64>,
}

pub struct SearchIndex {
    index: Index,
    reader: IndexReader,
    writer: Mutex<Writer>,
    /// Held through a whole merge of every segment ([`compact`](SearchIndex::compact),
    /// [`merge_segments`](SearchIndex::merge_segments)) and a rebuild, before the writer lock:
    /// a second merge of the same segments, or their removal, would fail the first merge.
    merging: Mutex<()>,
    fields: Fields,
    words: TextAnalyzer,
    /// The words of the `words` and `long` fields, found by their grams.
    vocabulary: Vocabulary,
    with_extracted: bool,
    /// [`RANK_WHOLE`], changed by tests to take the other path.
    rank_whole: std::sync::atomic::AtomicUsize,
    /// How far in the change log the searches see: the last commit's, set once the reader
    /// has reloaded it (a searcher taken after reading this sees at least as far).
    visible: std::sync::atomic::AtomicU64,
    /// Texts an import handed over with the documents it stored.
    handed: Handed,
    /// Set while every segment is merged: tantivy starts no merges of its own ([`Pausable`]).
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// tantivy's default merge policy, which a merge of every segment pauses: one that began
/// while tantivy merged some of them in the background fails when the other ends first and
/// takes them away (seen after a 1 GB import, whose many segments tantivy was merging).
#[derive(Debug)]
struct Pausable {
    inner: tantivy::merge_policy::LogMergePolicy,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl tantivy::merge_policy::MergePolicy for Pausable {
    fn compute_merge_candidates(
        &self,
        segments: &[tantivy::index::SegmentMeta],
    ) -> Vec<tantivy::merge_policy::MergeCandidate> {
        if self.paused.load(std::sync::atomic::Ordering::Acquire) {
            Vec::new()
        } else {
            self.inner.compute_merge_candidates(segments)
        }
    }
}

/// Pauses tantivy's own merges while it lives: set as a merge of every segment begins,
/// cleared when it ends, however it ends.
struct Paused<'a>(&'a std::sync::atomic::AtomicBool);

impl<'a> Paused<'a> {
    fn new(flag: &'a std::sync::atomic::AtomicBool) -> Self {
        flag.store(true, std::sync::atomic::Ordering::Release);
        Paused(flag)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// How many times a merge of every segment is started again after one of tantivy's own
/// merges, already under way when it began, took some of its segments: tantivy starts no
/// new ones meanwhile, so each attempt leaves fewer under way.
const MERGE_ATTEMPTS: usize = 8;

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let joins_opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(JOINS)
            .set_index_option(IndexRecordOption::Basic)
            .set_fieldnorms(false),
    );
    let long_opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(LONG)
            .set_index_option(IndexRecordOption::Basic)
            .set_fieldnorms(false),
    );
    // The body's words with their lines as positions ([`super::lines`]); the title's without.
    let words_opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(WORDS)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let title_opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(WORDS)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        key: b.add_text_field("key", STRING),
        org: b.add_u64_field("org", INDEXED),
        // Stored only: the exact-path scope finds a document by its `key`.
        path: b.add_text_field("path", STORED),
        folders: b.add_text_field("folders", STRING),
        version: b.add_u64_field("version", STORED),
        hash: b.add_bytes_field("hash", STORED),
        // Also a fast field: a candidate its lines rule out needs only this (for the budget).
        size: b.add_u64_field("size", STORED | FAST),
        extracted: b.add_u64_field("extracted", STORED),
        long: b.add_text_field("long", long_opts),
        joins: b.add_text_field("joins", joins_opts),
        words: b.add_text_field("words", words_opts),
        title: b.add_text_field("title", title_opts),
        title_exact: b.add_text_field("title_exact", STRING),
    };
    (b.build(), fields)
}

fn words_analyzer() -> TextAnalyzer {
    // The text is folded (lower case, no accents) before it gets here.
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(vocabulary::LONG_WORD))
        .build()
}

fn index_err(e: impl std::fmt::Display) -> KbError {
    KbError::Index(e.to_string())
}

/// Whether merging these segments (documents alive, deleted) into one is worth rewriting the
/// index for: several segments of which none holds three quarters of the documents (what a
/// large import leaves: a few of similar size, which a search walks one by one — at 1 GB five
/// segments searched a sixth slower than one at stop 38, `docs/performance.md`), or a tenth of the
/// documents deleted. A server that writes now and then has one large segment and a few small
/// ones, which tantivy's own merges keep few: rewriting the large one for those is not worth
/// it until they are a quarter of the documents.
pub fn merge_worth(segments: &[(u32, u32)]) -> bool {
    let alive: u64 = segments.iter().map(|s| u64::from(s.0)).sum();
    let largest = segments.iter().map(|s| u64::from(s.0)).max().unwrap_or(0);
    let scattered = segments.len() > 1 && largest * 4 < alive * 3;
    scattered || tenth_deleted(segments)
}

/// Whether more than a tenth of these segments' documents (alive, deleted) are deleted: text
/// that only a merge takes out of the files.
fn tenth_deleted(segments: &[(u32, u32)]) -> bool {
    let alive: u64 = segments.iter().map(|s| u64::from(s.0)).sum();
    let deleted: u64 = segments.iter().map(|s| u64::from(s.1)).sum();
    deleted * 10 > alive + deleted
}

/// Each segment's (documents alive, documents deleted).
fn doc_counts(metas: &[tantivy::index::SegmentMeta]) -> Vec<(u32, u32)> {
    metas
        .iter()
        .map(|m| (m.num_docs(), m.num_deleted_docs()))
        .collect()
}

/// How a run of a query term that many words hold filters the candidates
/// ([`SearchIndex::ranked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairTerms {
    /// Through the words holding it, unless more than [`FEW_RUN_WORDS`] hold it and their
    /// lists hold more postings than the index has documents: their union would then cost
    /// more than the documents it leaves out, and the verifier finds such a term early in
    /// most documents, so it alone decides ([`Ranked::loose`]). (At 1 GB, `formule`: 44 words,
    /// 0.66 postings a document, filters; `de`: 2,394 words, 27 a document, does not.)
    Adaptive,
    /// Through the words holding it, however many: for an organisation where the term is rare
    /// though the index's other documents mostly hold it.
    Filtered,
}

/// The 3-character grams a sign joins: a character that is neither a letter, a digit nor
/// white space, between two that are not white space (`e-m` in `e-mail`, `s.n` in
/// `kennis.nl`, `e-1` in `ronde-1`). The vocabulary finds each side of such a sign by itself;
/// these say that they stand side by side, which words alone cannot (`ronde` and a number
/// may be in every document, `ronde-1` in none).
pub fn joins(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut seen: HashSet<(char, char, char), BuildHasherDefault<FxHasher>> = HashSet::default();
    // Byte by byte: letters, digits and spaces (nearly all of a text) are passed over without
    // decoding; a sign between two ASCII characters is read from the bytes; only a character
    // beyond ASCII (its first byte; the bytes continuing it are passed over) or beside one is
    // decoded.
    let bytes = text.as_bytes();
    for (i, &byte) in bytes.iter().enumerate() {
        let sign = match ASCII_CLASS.get(usize::from(byte)) {
            Some(&SIGN) => true,
            Some(_) => continue,
            None if byte >= 0xC0 => false,
            None => continue,
        };
        if sign
            && let (Some(&a), Some(&c)) = (
                i.checked_sub(1).and_then(|before| bytes.get(before)),
                bytes.get(i + 1),
            )
            && a.is_ascii()
            && c.is_ascii()
        {
            let spaced = |x: u8| ASCII_CLASS.get(usize::from(x)) == Some(&SPACE);
            if !spaced(a) && !spaced(c) && seen.insert((a.into(), byte.into(), c.into())) {
                out.push((i - 1, i + 2));
            }
            continue;
        }
        let (Some(before), Some(rest)) = (text.get(..i), text.get(i..)) else {
            continue;
        };
        let mut after = rest.chars();
        let (Some(b), Some(c), Some(a)) = (after.next(), after.next(), before.chars().next_back())
        else {
            continue;
        };
        if !b.is_alphanumeric()
            && !b.is_whitespace()
            && !a.is_whitespace()
            && !c.is_whitespace()
            && seen.insert((a, b, c))
        {
            out.push((i - a.len_utf8(), i + b.len_utf8() + c.len_utf8()));
        }
    }
    out
}

const WORD: u8 = 0;
const SPACE: u8 = 1;
const SIGN: u8 = 2;
/// What each ASCII character is to [`joins`]: a letter or digit, white space (as
/// `char::is_whitespace` has it: tab to carriage return and the space) or a sign.
// Indexed while the program is built: an index out of bounds fails the build, never a run.
#[allow(clippy::indexing_slicing)]
const ASCII_CLASS: [u8; 128] = {
    let mut table = [SIGN; 128];
    let mut b = 0;
    while b < 128 {
        if (b as u8).is_ascii_alphanumeric() {
            table[b] = WORD;
        } else if matches!(b, 9..=13 | 32) {
            table[b] = SPACE;
        }
        b += 1;
    }
    table
};

/// Tokenizer of the `joins` field ([`joins`]), each gram once.
#[derive(Clone)]
struct Joins;

impl Tokenizer for Joins {
    type TokenStream<'a> = PieceStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> PieceStream<'a> {
        PieceStream::new(text, joins(text))
    }
}

/// Tokenizer of the `long` field: the words of at least [`vocabulary::LONG_WORD`] bytes (which the
/// `words` field leaves out), in pieces ([`vocabulary::pieces`]), so that a substring of one
/// is found through the vocabulary like a substring of any other word.
#[derive(Clone)]
struct LongWords;

struct PieceStream<'a> {
    text: &'a str,
    /// The pieces, in reverse order: `advance` pops.
    rest: Vec<(usize, usize)>,
    current: Token,
}

impl<'a> PieceStream<'a> {
    /// The pieces of `text` at these byte ranges, in this order.
    fn new(text: &'a str, mut pieces: Vec<(usize, usize)>) -> Self {
        pieces.reverse();
        PieceStream {
            text,
            rest: pieces,
            current: Token::default(),
        }
    }
}

impl TokenStream for PieceStream<'_> {
    fn advance(&mut self) -> bool {
        let Some((from, to)) = self.rest.pop() else {
            return false;
        };
        self.current.offset_from = from;
        self.current.offset_to = to;
        self.current.position = self.current.position.wrapping_add(1);
        self.current.text.clear();
        self.current
            .text
            .push_str(self.text.get(from..to).unwrap_or_default());
        true
    }
    fn token(&self) -> &Token {
        &self.current
    }
    fn token_mut(&mut self) -> &mut Token {
        &mut self.current
    }
}

impl Tokenizer for LongWords {
    type TokenStream<'a> = PieceStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> PieceStream<'a> {
        PieceStream::new(text, long_words(text))
    }
}

/// The pieces of `text`'s words of at least [`vocabulary::LONG_WORD`] bytes, as byte ranges.
/// Every word lies between two ASCII bytes that are neither letters nor digits (such a byte is
/// never inside a character of more bytes), and few such stretches are long enough to hold a
/// long word: only those are read character by character.
fn long_words(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    // A stretch of at least LONG_WORD bytes holds a whole chunk (twice a chunk, less one, is
    // enough): most texts have no chunk without a byte that splits words, and only around
    // such a chunk is a stretch looked for.
    const _: () = assert!(vocabulary::LONG_WORD >= 2 * CHUNK - 1);
    let mut done = 0;
    for (k, chunk) in bytes.chunks_exact(CHUNK).enumerate() {
        let at = k * CHUNK;
        // Inside the stretch just read, or with a byte that splits words.
        if at < done
            || !<&[u8; CHUNK]>::try_from(chunk)
                .is_ok_and(|c| c.iter().fold(true, |all, &b| all & keeps_word(b)))
        {
            continue;
        }
        let before = bytes.get(..at).unwrap_or_default();
        let from = before
            .iter()
            .rposition(|&b| splits_words(b))
            .map_or(0, |p| p + 1);
        let after = bytes.get(at + CHUNK..).unwrap_or_default();
        let to = after
            .iter()
            .position(|&b| splits_words(b))
            .map_or(bytes.len(), |p| at + CHUNK + p);
        if to - from >= vocabulary::LONG_WORD {
            long_words_in(text, from..to, &mut out);
        }
        done = to;
    }
    out
}

/// The bytes [`long_words`] tests at once.
const CHUNK: usize = 16;

/// Whether `b` may be part of a word: an ASCII letter or digit, or a byte of a character
/// beyond ASCII. In comparisons without branches, which a chunk's test compiles to vector
/// instructions with.
const fn keeps_word(b: u8) -> bool {
    let letter = (b | 0x20).wrapping_sub(b'a') < 26;
    let digit = b.wrapping_sub(b'0') < 10;
    (b >= 0x80) | letter | digit
}

/// Whether `byte` is an ASCII character that is neither a letter nor a digit.
const fn splits_words(byte: u8) -> bool {
    !keeps_word(byte)
}

/// [`long_words`] within `stretch` of `text`, character by character.
fn long_words_in(text: &str, stretch: std::ops::Range<usize>, out: &mut Vec<(usize, usize)>) {
    let Some(part) = text.get(stretch.clone()) else {
        return;
    };
    let base = stretch.start;
    let mut start: Option<usize> = None;
    let bounds = part.char_indices().chain([(part.len(), ' ')]);
    for (i, c) in bounds {
        if c.is_alphanumeric() && i < part.len() {
            start.get_or_insert(i);
            continue;
        }
        if let Some(from) = start.take()
            && i - from >= vocabulary::LONG_WORD
            && let Some(word) = part.get(from..i)
        {
            for piece in vocabulary::pieces(word) {
                out.push((base + from + piece.start, base + from + piece.end));
            }
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

/// What the `title` field holds: the first non-empty line (without Markdown heading marks)
/// and the file name, both folded.
fn title_of(path: &str, folded: &str) -> String {
    let first = folded
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
    format!("{first}\n{}", super::fold::fold_line(stem))
}

/// The words of `text` as the `words` field holds them, joined by single spaces: the key of
/// the `title_exact` field, for a title and for a query alike.
fn word_key<'a>(analyzer: &mut TextAnalyzer, texts: impl IntoIterator<Item = &'a str>) -> String {
    let mut key = String::new();
    for text in texts {
        let mut stream = analyzer.token_stream(text);
        while let Some(t) = stream.next() {
            if !key.is_empty() {
                key.push(' ');
            }
            key.push_str(&t.text);
        }
    }
    key
}

impl SearchIndex {
    /// Opens the index in `dir`, creating it (or recreating it, when it was made by another
    /// index format, or with extracted text in or out) as needed. A recreated index starts at
    /// change 0 and catches up. `with_extracted`: index the text extracted from binary files
    /// (`[kb] extract_text`).
    pub fn open(dir: &Path, with_extracted: bool) -> Result<SearchIndex, KbError> {
        std::fs::create_dir_all(dir).map_err(index_err)?;
        let (schema, fields) = schema();
        let marker = dir.join("FORMAT");
        let format = format!(
            "{INDEX_FORMAT}{}",
            if with_extracted { "+extracted" } else { "" }
        );
        let format_ok = std::fs::read_to_string(&marker).is_ok_and(|s| s.trim() == format);
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
        let mut index = Index::open_or_create(mmap, schema).map_err(index_err)?;
        // Segments written from now on (an existing index's as it merges) keep their stored
        // fields in small blocks: a search reads a few candidates' fields, each from a block
        // decompressed whole.
        index.settings_mut().docstore_blocksize = DOCSTORE_BLOCK;
        if !format_ok {
            std::fs::write(&marker, &format).map_err(index_err)?;
        }
        index.tokenizers().register(LONG, LongWords);
        index.tokenizers().register(JOINS, Joins);
        index.tokenizers().register(WORDS, LineWords::default());
        let writer = index
            .writer_with_num_threads(WRITER_THREADS, WRITER_HEAP)
            .map_err(index_err)?;
        let paused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        writer.set_merge_policy(Box::new(Pausable {
            inner: tantivy::merge_policy::LogMergePolicy::default(),
            paused: paused.clone(),
        }));
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(index_err)?;
        let index = SearchIndex {
            index,
            reader,
            writer: Mutex::new(Writer {
                tantivy: writer,
                pending: None,
            }),
            merging: Mutex::new(()),
            fields,
            words: words_analyzer(),
            vocabulary: Vocabulary::default(),
            with_extracted,
            rank_whole: std::sync::atomic::AtomicUsize::new(RANK_WHOLE),
            visible: std::sync::atomic::AtomicU64::new(0),
            handed: Handed::default(),
            paused,
        };
        index
            .visible
            .store(index.applied(), std::sync::atomic::Ordering::Release);
        Ok(index)
    }

    /// Reads the vocabulary of every segment the searches see now, as the first search would
    /// otherwise (a third of a second at 1 GB): the server does it as it starts, before it
    /// answers. Returns how many words it holds.
    pub fn prepare_search(&self) -> Result<usize, KbError> {
        self.read_vocabulary(&self.reader.searcher())?;
        Ok(self.vocabulary.len())
    }

    /// How many words the vocabulary holds so far ([`prepare_search`](Self::prepare_search)),
    /// without waiting: `None` while words are being read in.
    pub fn vocabulary_words(&self) -> Option<usize> {
        self.vocabulary.len_now()
    }

    /// Takes the words of `searcher`'s segments into the vocabulary (those not read before).
    fn read_vocabulary(&self, searcher: &tantivy::Searcher) -> Result<(), KbError> {
        self.vocabulary
            .ensure(searcher, &[self.fields.words, self.fields.long])
            .map_err(index_err)
    }

    /// Holds the texts of documents just stored (organisation, path, the content as prepared)
    /// for the next [`follow`](Self::follow), which then need not read them back from the
    /// store nor hash them again ([`handed`]); returns how many it took.
    pub fn hand(&self, texts: impl IntoIterator<Item = (u64, String, super::Prepared)>) -> usize {
        self.handed.hand(texts)
    }

    /// [`hand`](Self::hand) once they fit beside the texts held, waiting for that as long as
    /// the index keeps taking them ([`handed::Handed::hand_when_room`]): an import stays at
    /// most a bound ahead of the index rather than have it read back what it stored.
    pub fn hand_when_room(&self, texts: Vec<(u64, String, super::Prepared)>) -> usize {
        self.handed.hand_when_room(texts, HANDED_PATIENCE)
    }

    /// Lets go of the handed texts not used (an import ended).
    pub fn forget_handed(&self) {
        self.handed.clear();
    }

    /// Bytes of handed texts held.
    pub fn handed_bytes(&self) -> usize {
        self.handed.bytes()
    }

    /// Whether text extracted from binary files is searched.
    pub fn with_extracted(&self) -> bool {
        self.with_extracted
    }

    fn merging(&self) -> std::sync::MutexGuard<'_, ()> {
        self.merging
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        // A panic while indexing leaves at worst uncommitted documents, which the next
        // catch-up replays from the change log.
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The last change-log sequence number the index's files say it has applied (read from
    /// disk: at open, after which [`visible`](Self::visible) follows every commit): 0 for a new
    /// index, and for one whose commit cannot say (its metadata unreadable, its payload
    /// damaged), so that the whole change log is applied again — slow, but applying a change
    /// twice is harmless, and the next commit writes a sound payload. That case is logged.
    pub fn applied(&self) -> u64 {
        let payload = match self.index.load_metas() {
            Ok(metas) => metas.payload,
            Err(e) => {
                tracing::warn!(error = %e, "the search index's metadata cannot be read; the whole change log is applied again");
                return 0;
            }
        };
        let Some(payload) = payload else {
            return 0;
        };
        payload.parse().unwrap_or_else(|_| {
            tracing::warn!(
                payload = %payload.chars().take(40).collect::<String>(),
                "the search index's commit does not say how far it followed the change log; the whole log is applied again"
            );
            0
        })
    }

    /// Applies every change the store logged after [`visible`](Self::visible); returns how
    /// many were applied. Serialised by the writer lock, so concurrent callers are safe.
    pub fn catch_up(&self, store: &Store) -> Result<usize, KbError> {
        self.follow(store, true)
    }

    /// Like [`catch_up`](Self::catch_up), but leaves what it added uncommitted (searches do
    /// not see it yet) unless `commit`: a long import follows the change log as it goes and
    /// commits once at the end, instead of making a segment per batch. A later call goes on
    /// from where this one stopped; after a crash the next start replays from the last commit.
    pub fn follow(&self, store: &Store, commit: bool) -> Result<usize, KbError> {
        let mut writer = self.writer();
        let mut applied = writer.pending.unwrap_or_else(|| self.visible());
        let mut count = 0;
        loop {
            let batch: Vec<(Vec<u8>, Change)> =
                store.read(|tx| tx.range(KB_CHANGES, &key::id(applied + 1), 1000))?;
            let Some(last) = batch.last().and_then(|(k, _)| key::id_at(k, 0)) else {
                break;
            };
            // A document changed several times in the batch is indexed once.
            let mut seen = HashSet::new();
            let mut docs = Vec::new();
            for (_, change) in batch.iter().rev() {
                if seen.insert((change.org_id, change.path.as_str())) {
                    docs.push((change.org_id, change.path.as_str()));
                }
            }
            self.reindex(&writer.tantivy, store, &docs)?;
            applied = last;
            writer.pending = Some(applied);
            count += batch.len();
        }
        if commit && writer.pending.is_some() {
            self.commit(&mut writer.tantivy, applied)?;
            writer.pending = None;
        }
        Ok(count)
    }

    /// Commits what [`follow`](Self::follow) added without committing. Touches only the
    /// index, so it can run while the store is busy (an import compacts it meanwhile).
    pub fn commit_pending(&self) -> Result<(), KbError> {
        let mut writer = self.writer();
        if let Some(applied) = writer.pending.take() {
            self.commit(&mut writer.tantivy, applied)?;
        }
        Ok(())
    }

    fn commit(&self, writer: &mut IndexWriter, applied: u64) -> Result<(), KbError> {
        let mut prepared = writer.prepare_commit().map_err(index_err)?;
        prepared.set_payload(&applied.to_string());
        prepared.commit().map_err(index_err)?;
        self.reader.reload().map_err(index_err)?;
        self.visible
            .store(applied, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Replaces the index entries of these documents with their current state in the store.
    /// Reading and folding the texts is split over two threads; tantivy's own threads index.
    fn reindex(
        &self,
        writer: &IndexWriter,
        store: &Store,
        docs: &[(u64, &str)],
    ) -> Result<(), KbError> {
        let f = &self.fields;
        for (org_id, path) in docs {
            writer.delete_term(Term::from_field_text(f.key, &format!("{org_id}:{path}")));
        }
        let half = docs.len().div_ceil(2);
        let (first, second) = docs.split_at(half);
        std::thread::scope(|scope| {
            let other = scope.spawn(|| self.add_documents(writer, store, second));
            let mine = self.add_documents(writer, store, first);
            let theirs = other
                .join()
                .unwrap_or_else(|_| Err(KbError::Index("an indexing thread panicked".into())));
            mine.and(theirs)
        })
    }

    fn add_documents(
        &self,
        writer: &IndexWriter,
        store: &Store,
        docs: &[(u64, &str)],
    ) -> Result<(), KbError> {
        for (org_id, path) in docs {
            let handed = self.handed.take(*org_id, path);
            let found = store.read(|tx| {
                let Some(doc) = tx.get::<Document>(KB_DOCS, &doc_key(*org_id, path))? else {
                    return Ok::<_, KbError>(None);
                };
                let text = match handed.and_then(|hashed| handed::text_for(&doc, hashed)) {
                    Some(text) => Some(text),
                    None => super::text_of(tx, &doc, self.with_extracted)?,
                };
                Ok(text.map(|t| (doc, t)))
            })?;
            let Some((doc, text)) = found else {
                continue;
            };
            writer
                .add_document(self.document(*org_id, &doc, &text))
                .map_err(index_err)?;
        }
        Ok(())
    }

    fn document(&self, org_id: u64, doc: &Document, text: &super::DocText) -> TantivyDocument {
        let f = &self.fields;
        let folded = fold_text(prefix_on_char_boundary(&text.text, MAX_SEARCHED_BYTES));
        let title = title_of(&doc.path, &folded);
        // Its values are copied into one buffer, which would otherwise grow from 1 KiB by
        // doubling (the folded text goes in three times): room for all of them at once.
        let mut d = TantivyDocument::with_capacity(
            3 * folded.len() + 2 * title.len() + 4 * doc.path.len() + DOCUMENT_ROOM,
        );
        d.add_text(f.key, format!("{org_id}:{}", doc.path));
        d.add_u64(f.org, org_id);
        d.add_text(f.path, &doc.path);
        d.add_u64(f.version, doc.version);
        let hash = blake3::Hash::from_hex(&doc.hash).ok();
        d.add_bytes(f.hash, hash.as_ref().map_or(&[][..], |h| h.as_bytes()));
        // What verifying it reads: its text (for an extracted file, not the file's size).
        d.add_u64(f.size, text.text.len() as u64);
        d.add_u64(f.extracted, u64::from(text.extracted));
        let mut analyzer = self.words.clone();
        let mut keys: Vec<String> = Vec::with_capacity(2);
        for line in title.lines() {
            let key = word_key(&mut analyzer, [line]);
            if !key.is_empty() && key.len() <= MAX_TITLE_KEY && !keys.contains(&key) {
                keys.push(key);
            }
        }
        for key in keys {
            d.add_text(f.title_exact, key);
        }
        d.add_text(f.title, title);
        for folder in ancestors(&doc.path) {
            d.add_text(f.folders, folder);
        }
        d.add_text(f.words, &folded);
        d.add_text(f.joins, &folded);
        d.add_text(f.long, folded);
        d
    }

    /// Rebuilds the index from the store: every organisation, or one. Reports progress as
    /// (documents done, documents in all).
    pub fn rebuild(
        &self,
        store: &Store,
        org: Option<u64>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<usize, KbError> {
        // Removing every segment under a merge would fail the merge.
        let _merging = self.merging();
        let mut guard = self.writer();
        let writer = &mut guard.tantivy;
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
        let last = store.read(super::last_change)?.max(self.visible());
        let prefix = org.map(|id| key::id(id).to_vec()).unwrap_or_default();
        let docs: Vec<(Vec<u8>, Document)> = store.read(|tx| tx.scan(KB_DOCS, &prefix))?;
        let total = docs.len() as u64;
        for (i, chunk) in docs.chunks(500).enumerate() {
            let keys: Vec<(u64, &str)> = chunk
                .iter()
                .map(|(_, d)| (d.org_id, d.path.as_str()))
                .collect();
            self.reindex(writer, store, &keys)?;
            progress(((i * 500 + chunk.len()) as u64).min(total), total);
        }
        self.commit(writer, last)?;
        guard.pending = None;
        Ok(docs.len())
    }

    /// Merges the index into one segment and removes the files no longer used (`kennis
    /// compact`, `reindex`). Unless `always`, only when that is worth its time: more than a few
    /// segments, or more than a tenth of the documents deleted (a fresh import leaves a few
    /// full segments, which search as fast).
    pub fn compact(&self, always: bool) -> Result<(), KbError> {
        let _merging = self.merging();
        let mut guard = self.writer();
        self.merge_all(
            || {
                let metas = self.index.searchable_segment_metas().map_err(index_err)?;
                let counts = doc_counts(&metas);
                let worth = metas.len() > 8 || tenth_deleted(&counts);
                // One segment is merged too when documents were deleted from it: only a merge
                // takes their text out of the files (an organisation's removal relies on it).
                let deleted = counts.iter().any(|c| c.1 > 0);
                if (metas.len() > 1 || deleted) && (always || worth) {
                    let ids: Vec<_> = metas.iter().map(|m| m.id()).collect();
                    Ok(Some((guard.tantivy.merge(&ids), ())))
                } else {
                    Ok(None)
                }
            },
            || (),
        )?;
        guard
            .tantivy
            .garbage_collect_files()
            .wait()
            .map_err(index_err)?;
        self.reader.reload().map_err(index_err)
    }

    /// Starts a merge of every segment with `start` (`None`: not worth one) and waits for it,
    /// with tantivy's own merges paused; when one of those, already under way, took some of
    /// its segments, starts it again (up to [`MERGE_ATTEMPTS`] times). `started`: called once
    /// the first merge is under way. Returns what the merge's `start` returned.
    fn merge_all<T>(
        &self,
        mut start: impl FnMut() -> Result<
            Option<(
                tantivy::FutureResult<Option<tantivy::index::SegmentMeta>>,
                T,
            )>,
            KbError,
        >,
        started: impl FnOnce(),
    ) -> Result<Option<T>, KbError> {
        let _paused = Paused::new(&self.paused);
        let mut started = Some(started);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Some((merging, out)) = start()? else {
                return Ok(None);
            };
            if let Some(started) = started.take() {
                started();
            }
            match merging.wait() {
                Ok(_) => return Ok(Some(out)),
                Err(tantivy::TantivyError::InvalidArgument(e)) if attempt < MERGE_ATTEMPTS => {
                    tracing::info!(
                        attempt,
                        error = %e,
                        "search index: a merge of its own took some segments; merging again"
                    );
                }
                Err(e) => return Err(index_err(e)),
            }
        }
    }

    /// How far in the change log the searches see (it moves with every commit).
    pub fn visible(&self) -> u64 {
        self.visible.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The committed segments, each as (documents alive, documents deleted).
    pub fn segments(&self) -> Result<Vec<(u32, u32)>, KbError> {
        let metas = self.index.searchable_segment_metas().map_err(index_err)?;
        Ok(doc_counts(&metas))
    }

    /// Merges every segment into one when [`merge_worth`] says so (a server that has gone
    /// idle calls it; `housekeeping`). Unlike [`compact`](Self::compact), the writer lock is
    /// held only to start the merge, as tantivy's own background merges: writes and commits go
    /// on meanwhile, tantivy applies deletions made meanwhile to the merged segment before it
    /// takes the others' place, and the commit's payload (the change log's position) is
    /// kept. Returns how many segments were merged, or `None` when it was not worth it.
    pub fn merge_segments(&self) -> Result<Option<usize>, KbError> {
        self.merge_segments_then(|| ())
    }

    /// [`merge_segments`](Self::merge_segments), calling `started` once the merge is under
    /// way and the writer lock is free again, before waiting for the merge to end (a test
    /// writes from there: a write that waited for the merge would never return).
    #[doc(hidden)]
    pub fn merge_segments_then(&self, started: impl FnOnce()) -> Result<Option<usize>, KbError> {
        let _merging = self.merging();
        let count = self.merge_all(
            || {
                let mut guard = self.writer();
                let metas = self.index.searchable_segment_metas().map_err(index_err)?;
                if !merge_worth(&doc_counts(&metas)) {
                    return Ok(None);
                }
                let ids: Vec<_> = metas.iter().map(|m| m.id()).collect();
                Ok(Some((guard.tantivy.merge(&ids), ids.len())))
            },
            started,
        )?;
        if count.is_some() {
            self.reader.reload().map_err(index_err)?;
        }
        Ok(count)
    }

    /// Removes every entry of an organisation (its removal) and commits at once; the text
    /// leaves the files at the next [`compact`](Self::compact).
    pub fn remove_org(&self, org_id: u64) -> Result<(), KbError> {
        let mut guard = self.writer();
        let applied = guard.pending.take().unwrap_or_else(|| self.visible());
        guard
            .tantivy
            .delete_query(Box::new(TermQuery::new(
                Term::from_field_u64(self.fields.org, org_id),
                IndexRecordOption::Basic,
            )))
            .map_err(index_err)?;
        self.commit(&mut guard.tantivy, applied)
    }

    /// Bytes the index's files take.
    pub fn size_on_disk(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Candidate documents of `org_id` (inside `folder`, if given) that hold, for every run of
    /// every term, a word containing it, best first: at most `max` of them, and how many there are in all. Resolves
    /// every candidate and counts them all; a search uses [`ranked`](Self::ranked), which
    /// does either only as far as it gets.
    pub fn candidates(
        &self,
        org_id: u64,
        folder: Option<&str>,
        terms: &[String],
        max: usize,
    ) -> Result<(Vec<Candidate>, usize), KbError> {
        let mut ranked = self.ranked(org_id, folder, terms, max, PairTerms::Adaptive)?;
        let mut all = Vec::new();
        while let Some(c) = ranked.candidate(self, all.len(), true)? {
            all.push(c);
        }
        Ok((all, ranked.total()?))
    }

    /// The same candidates in the same order as [`ranked`](Self::ranked), found the plain way:
    /// every matching document scored and counted by tantivy's own collectors. The reference
    /// the pruned ranking is tested against.
    #[doc(hidden)]
    pub fn candidates_exhaustive(
        &self,
        org_id: u64,
        folder: Option<&str>,
        terms: &[String],
        max: usize,
    ) -> Result<(Vec<Candidate>, usize), KbError> {
        let searcher = self.reader.searcher();
        let plan = self.plan(&searcher, org_id, folder, terms, PairTerms::Adaptive)?;
        let limit = max.min(searcher.num_docs() as usize).max(1);
        let (total, top) = searcher
            .search(
                &plan.full(),
                &(Count, TopDocs::with_limit(limit).order_by_score()),
            )
            .map_err(index_err)?;
        let addrs: Vec<DocAddress> = top.into_iter().map(|(_, addr)| addr).collect();
        let apart = plan.apart(&searcher, &addrs)?;
        let mut out = Vec::with_capacity(addrs.len());
        for (addr, apart) in addrs.into_iter().zip(apart) {
            out.push(Candidate {
                apart: apart.is_some(),
                ..self.candidate(&searcher, addr)?
            });
        }
        Ok((out, total))
    }

    /// The candidates of a search, best first: at most `max` of the documents of `org_id`
    /// (inside `folder`, if given) that hold, for every run of every term, a word containing
    /// it. Ranked as
    /// [`candidates_exhaustive`](Self::candidates_exhaustive) ranks them — documents whose
    /// title the query is, then BM25 over the query's words, then the rest in index order —
    /// but without scoring every match: block-max WAND over the words finds the best ones,
    /// checking the filter only for the documents it stops at, and only those are scored
    /// exactly. Their stored fields are read, and the matches counted, when asked for.
    /// `pairs`: how a run that many words hold filters.
    pub fn ranked(
        &self,
        org_id: u64,
        folder: Option<&str>,
        terms: &[String],
        max: usize,
        pairs: PairTerms,
    ) -> Result<Ranked, KbError> {
        let through = self.visible();
        let searcher = self.reader.searcher();
        let plan = self.plan(&searcher, org_id, folder, terms, pairs)?;
        let k = max.min(searcher.num_docs() as usize).max(1);
        let asked = k.min(first_ranked(terms));
        let docs = rank(&searcher, &plan, asked)?;
        Ok(Ranked {
            through,
            searcher,
            plan,
            k,
            asked,
            docs,
            apart: Vec::new(),
            first_apart: FIRST_APART,
        })
    }

    /// Sets up to how many documents of the organisation in a segment it is scored whole
    /// (tests: 0 always takes block-max WAND).
    #[doc(hidden)]
    pub fn set_rank_whole(&self, n: usize) {
        self.rank_whole
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// The queries a search is made of.
    fn plan(
        &self,
        searcher: &tantivy::Searcher,
        org_id: u64,
        folder: Option<&str>,
        terms: &[String],
        pairs: PairTerms,
    ) -> Result<Plan, KbError> {
        let f = &self.fields;
        let mut filter: Vec<(Occur, Box<dyn Query>)> = vec![(
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
                        Term::from_field_text(f.key, &format!("{org_id}:{folder}")),
                        IndexRecordOption::Basic,
                    )),
                ),
            ]);
            filter.push((Occur::Must, Box::new(scope)));
        }
        // Every sign a term holds between two other characters, as the `joins` field has it.
        let mut signs: Vec<&str> = terms
            .iter()
            .flat_map(|t| joins(t).into_iter().filter_map(|(a, b)| t.get(a..b)))
            .collect();
        signs.sort_unstable();
        signs.dedup();
        for sign in signs {
            filter.push((
                Occur::Must,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.joins, sign),
                    IndexRecordOption::Basic,
                )),
            ));
        }
        // Each run of each term: one of the words holding it.
        self.read_vocabulary(searcher)?;
        let mut unfiltered = false;
        let mut runs: Vec<Run> = terms.iter().flat_map(|t| runs(t)).collect();
        runs.sort();
        runs.dedup();
        let found: Vec<(&Run, Words)> = runs.iter().map(|r| (r, self.vocabulary.find(r))).collect();
        let lines = self.line_words(terms, &found);
        for (_, words) in found {
            let (ids, postings) = match words {
                Words::Any => continue,
                Words::Some { ids, postings } => (ids, postings),
            };
            if pairs == PairTerms::Adaptive
                && ids.len() > FEW_RUN_WORDS
                && postings > searcher.num_docs()
            {
                unfiltered = true;
                continue;
            }
            let terms: Vec<Term> = self
                .vocabulary
                .words(&ids)
                .iter()
                .map(|w| {
                    let field = if w.len() >= vocabulary::LONG_WORD {
                        f.long
                    } else {
                        f.words
                    };
                    Term::from_field_text(field, w)
                })
                .collect();
            if terms.is_empty() {
                // No document holds it.
                filter.push((Occur::Must, Box::new(EmptyQuery)));
                continue;
            }
            // The words' lists are walked side by side, as far as the ranking gets (measured at
            // 1 GB: a third faster than reading them into one set of documents up front, for
            // runs of 27–44 words). Only a search filtering through every word of a run that
            // many words hold reads them into a set.
            let query: Box<dyn Query> = if terms.len() <= SET_OF_WORDS {
                Box::new(BooleanQuery::new(
                    terms
                        .into_iter()
                        .map(|t| {
                            (
                                Occur::Should,
                                Box::new(TermQuery::new(t, IndexRecordOption::Basic))
                                    as Box<dyn Query>,
                            )
                        })
                        .collect(),
                ))
            } else {
                Box::new(TermSetQuery::new(terms))
            };
            filter.push((Occur::Must, query));
        }
        let mut words: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for word in self.query_words(terms) {
            words.push((
                Occur::Should,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.words, &word),
                    IndexRecordOption::WithFreqs,
                )),
            ));
            words.push((
                Occur::Should,
                Box::new(BoostQuery::new(
                    Box::new(TermQuery::new(
                        Term::from_field_text(f.title, &word),
                        IndexRecordOption::WithFreqs,
                    )),
                    TITLE_BOOST,
                )),
            ));
        }
        let key = word_key(&mut self.words.clone(), terms.iter().map(String::as_str));
        let exact = (!key.is_empty()).then(|| {
            TermQuery::new(
                Term::from_field_text(f.title_exact, &key),
                IndexRecordOption::Basic,
            )
        });
        Ok(Plan {
            filter: BooleanQuery::new(filter),
            unfiltered,
            lines,
            words,
            exact,
            org: Term::from_field_u64(f.org, org_id),
            rank_whole: self.rank_whole.load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// For each term of a search of several, the words of the `words` field that one of its
    /// runs lies in ([`super::lines`]): the run with the fewest, if they are few enough
    /// ([`LINE_WORDS`]) and none is a long word's piece (those have no lines). Terms without such
    /// a run are left to the verifier; fewer than two such terms, nothing to check.
    fn line_words(&self, terms: &[String], found: &[(&Run, Words)]) -> Vec<Vec<Term>> {
        if terms.len() < 2 {
            return Vec::new();
        }
        let mut lines: Vec<Vec<Term>> = Vec::new();
        for term in terms {
            let best = runs(term)
                .iter()
                .filter_map(|run| match found.iter().find(|(r, _)| *r == run) {
                    Some((_, Words::Some { ids, .. }))
                        if !ids.is_empty() && ids.len() <= LINE_WORDS =>
                    {
                        let words = self.vocabulary.words(ids);
                        words
                            .iter()
                            .all(|w| w.len() < vocabulary::LONG_WORD)
                            .then_some(words)
                    }
                    _ => None,
                })
                .min_by_key(Vec::len);
            if let Some(words) = best {
                let f = self.fields.words;
                lines.push(words.iter().map(|w| Term::from_field_text(f, w)).collect());
            }
        }
        if lines.len() < 2 {
            lines.clear();
        }
        lines
    }

    /// The whole words of the query's terms, as the `words` field holds them.
    fn query_words(&self, terms: &[String]) -> Vec<String> {
        let mut analyzer = self.words.clone();
        let mut out: Vec<String> = Vec::new();
        for term in terms {
            let mut stream = analyzer.token_stream(term);
            while let Some(t) = stream.next() {
                if !out.contains(&t.text) {
                    out.push(t.text.clone());
                }
            }
        }
        out
    }

    fn candidate(
        &self,
        searcher: &tantivy::Searcher,
        addr: DocAddress,
    ) -> Result<Candidate, KbError> {
        let f = &self.fields;
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
        Ok(Candidate {
            path: text(f.path),
            version: num(f.version),
            hash: d
                .get_first(f.hash)
                .and_then(|v| v.as_bytes())
                .map(hex::encode)
                .unwrap_or_default(),
            size: num(f.size),
            extracted: num(f.extracted) == 1,
            apart: false,
        })
    }
}

/// The queries of one search: which documents qualify (`filter`: the organisation, the
/// folder, a word for every run of every term), and what ranks them (BM25 over the query's words in body and title,
/// and a constant for an exact title).
struct Plan {
    filter: BooleanQuery,
    /// A run was left out of `filter` (too many words hold it, or they are in most documents).
    unfiltered: bool,
    /// Per term checked for lines, the words of one of its runs ([`SearchIndex::line_words`]).
    lines: Vec<Vec<Term>>,
    words: Vec<(Occur, Box<dyn Query>)>,
    exact: Option<TermQuery>,
    /// The organisation's term: a segment with at most `rank_whole` of its documents is
    /// scored whole.
    org: Term,
    rank_whole: usize,
}

impl Plan {
    /// Everything in one query, as tantivy scores it: the filter required (scoring nothing),
    /// the words and the exact title optional.
    fn full(&self) -> BooleanQuery {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(
            Occur::Must,
            Box::new(ConstScoreQuery::new(self.filter.box_clone(), 0.0)),
        )];
        clauses.extend(self.words.iter().map(|(o, q)| (*o, q.box_clone())));
        if let Some(exact) = &self.exact {
            clauses.push((
                Occur::Should,
                Box::new(ConstScoreQuery::new(
                    Box::new(exact.clone()),
                    EXACT_TITLE_SCORE,
                )),
            ));
        }
        BooleanQuery::new(clauses)
    }

    /// The words alone: a union of term queries, which tantivy walks with block-max WAND.
    fn words(&self) -> Option<BooleanQuery> {
        (!self.words.is_empty()).then(|| {
            BooleanQuery::new(
                self.words
                    .iter()
                    .map(|(o, q)| (*o, q.box_clone()))
                    .collect(),
            )
        })
    }

    fn exact(&self) -> Option<TermQuery> {
        self.exact.clone()
    }

    /// For each of these documents, whether the index's lines rule it out
    /// ([`super::lines::apart`]): if so, its size (`size`'s fast field), else `None`.
    fn apart(
        &self,
        searcher: &tantivy::Searcher,
        docs: &[DocAddress],
    ) -> Result<Vec<Option<u64>>, KbError> {
        let mut out = vec![None; docs.len()];
        if self.lines.is_empty() {
            return Ok(out);
        }
        // Each segment's documents in ascending order, where its lists are walked once.
        let mut order: Vec<usize> = (0..docs.len()).collect();
        order.sort_unstable_by_key(|&i| docs.get(i).map(|a| (a.segment_ord, a.doc_id)));
        for group in order.chunk_by(|&a, &b| {
            docs.get(a).map(|d| d.segment_ord) == docs.get(b).map(|d| d.segment_ord)
        }) {
            let Some(reader) = group
                .first()
                .and_then(|&i| docs.get(i))
                .and_then(|d| searcher.segment_readers().get(d.segment_ord as usize))
            else {
                continue;
            };
            let ids: Vec<DocId> = group
                .iter()
                .filter_map(|&i| docs.get(i).map(|a| a.doc_id))
                .collect();
            let verdicts = super::lines::apart(reader, &self.lines, &ids).map_err(index_err)?;
            if !verdicts.contains(&true) {
                continue;
            }
            let sizes = reader.fast_fields().u64("size").map_err(index_err)?;
            for ((&i, doc), apart) in group.iter().zip(ids).zip(verdicts) {
                if let Some(o) = out.get_mut(i)
                    && apart
                {
                    *o = Some(sizes.first(doc).unwrap_or_default());
                }
            }
        }
        Ok(out)
    }
}

/// Best first; equal scores in index order (as tantivy's top-docs collector orders them).
fn sort_ranked<D: Ord + Copy>(docs: &mut [(Score, D)]) {
    docs.sort_by(|a, b| {
        b.0.partial_cmp(&a.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.1.cmp(&b.1))
    });
}

/// How far below the k-th best score found so far a document is still kept: WAND sums a
/// document's term scores in another order than the exact scorer, so the two may differ in
/// the last bits. Far more than that, far less than any real difference between documents.
const SCORE_SLACK: f32 = 1e-4;

/// The best `k` documents by approximate score, and those evicted within [`SCORE_SLACK`] of
/// the k-th.
struct Best {
    k: usize,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(Approx, DocId)>>,
    near: Vec<(Score, DocId)>,
}

/// A score ordered totally (scores are never NaN).
#[derive(Clone, Copy, PartialEq)]
struct Approx(Score);
impl Eq for Approx {}
impl PartialOrd for Approx {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Approx {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Best {
    fn new(k: usize) -> Best {
        Best {
            k,
            heap: std::collections::BinaryHeap::with_capacity(k.min(1024) + 1),
            near: Vec::new(),
        }
    }

    /// Below this, a document cannot be among the best `k`.
    fn threshold(&self) -> Score {
        match self.heap.peek() {
            Some(std::cmp::Reverse((Approx(kth), _))) if self.heap.len() >= self.k => {
                kth - kth.abs() * SCORE_SLACK
            }
            _ => Score::MIN,
        }
    }

    fn push(&mut self, score: Score, doc: DocId) {
        self.heap.push(std::cmp::Reverse((Approx(score), doc)));
        if self.heap.len() > self.k
            && let Some(std::cmp::Reverse((Approx(s), d))) = self.heap.pop()
        {
            self.near.push((s, d));
            let floor = self.threshold();
            if self.near.len() > self.k {
                self.near.retain(|(s, _)| *s >= floor);
            }
        }
    }

    fn into_docs(self) -> Vec<DocId> {
        let floor = self.threshold();
        self.heap
            .into_iter()
            .map(|std::cmp::Reverse((_, d))| d)
            .chain(
                self.near
                    .into_iter()
                    .filter(|(s, _)| *s >= floor)
                    .map(|(_, d)| d),
            )
            .collect()
    }
}

/// The documents of one segment that may be among the best `k` of the `filter`'s: every
/// exact title, the best of the rest by their words (block-max WAND; the filter is checked
/// only for the documents it stops at), and — when fewer than `k` match a word — the first
/// others in index order (they all score 0). Ascending, for the exact scores; and which of
/// them have the query as their exact title. `floor`: the earlier segments' `k`-th best score
/// when they gave `k` already — below it nothing here can count, and a document scoring 0
/// here comes after theirs.
fn pick_in_segment(
    reader: &SegmentReader,
    k: usize,
    floor: Option<Score>,
    filter: &dyn Weight,
    words: Option<&dyn Weight>,
    exact: Option<&dyn Weight>,
    whole: (&Term, usize),
) -> tantivy::Result<(Vec<DocId>, Vec<DocId>)> {
    let alive = |doc: DocId| !reader.is_deleted(doc);
    // Making the filter's scorer finds its first document: for a rare combination of common
    // words, a walk through their lists to the end of the segment. So it is made once, and
    // again only for a second pass over the documents.
    let first = filter.scorer(reader, 1.0)?;
    if first.doc() == TERMINATED {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut unused = Some(first);
    let mut filter_scorer = || -> tantivy::Result<Box<dyn Scorer>> {
        match unused.take() {
            Some(s) => Ok(s),
            None => filter.scorer(reader, 1.0),
        }
    };
    let mut exact_docs: Vec<DocId> = Vec::new();
    if let Some(exact) = exact {
        let mut titles = exact.scorer(reader, 1.0)?;
        let mut doc = titles.doc();
        if doc != TERMINATED {
            let mut filtered = filter_scorer()?;
            while doc != TERMINATED {
                if alive(doc) && filtered.doc() <= doc && filtered.seek(doc) == doc {
                    exact_docs.push(doc);
                }
                doc = titles.advance();
            }
        }
    }
    // An organisation with few documents in the segment, among many others', is ranked whole:
    // the words' lists hold every organisation's documents, and WAND would walk nearly all of
    // them before finding `k` of the filter's to raise its threshold. (Its count includes
    // documents deleted since the segment was written: an upper bound, one lookup.)
    let (org, rank_whole) = whole;
    if reader.inverted_index(org.field())?.doc_freq(org)? as usize <= rank_whole {
        let mut filtered = filter_scorer()?;
        let mut all: Vec<DocId> = Vec::new();
        let mut doc = filtered.doc();
        while doc != TERMINATED {
            if alive(doc) {
                all.push(doc);
            }
            doc = filtered.advance();
        }
        return Ok((all, exact_docs));
    }
    let mut best = Best::new(k);
    if let Some(words) = words {
        let mut filtered = filter_scorer()?;
        let floor = floor.map_or(Score::MIN, |f| f - f.abs() * SCORE_SLACK);
        words.for_each_pruning(floor, reader, &mut |doc, score| {
            if alive(doc)
                && exact_docs.binary_search(&doc).is_err()
                && filtered.doc() <= doc
                && filtered.seek(doc) == doc
            {
                best.push(score, doc);
            }
            // No document after this one passes the filter: a threshold nothing reaches ends
            // the walk.
            if filtered.doc() == TERMINATED {
                return Score::INFINITY;
            }
            best.threshold().max(floor)
        })?;
    }
    let mut picked = best.into_docs();
    picked.sort_unstable();
    // Fewer than k documents have a word of the query: the rest score 0, in index order.
    if picked.len() < k && floor.is_none() {
        let scored = picked.clone();
        let mut filtered = filter_scorer()?;
        let mut doc = filtered.doc();
        let mut zero = 0;
        while doc != TERMINATED && scored.len() + zero < k {
            if alive(doc)
                && exact_docs.binary_search(&doc).is_err()
                && scored.binary_search(&doc).is_err()
            {
                picked.push(doc);
                zero += 1;
            }
            doc = filtered.advance();
        }
    }
    picked.extend(&exact_docs);
    picked.sort_unstable();
    picked.dedup();
    Ok((picked, exact_docs))
}

/// A run held by at most this many words can be checked for lines ([`super::lines`]): each
/// word's list is looked up and walked for the candidates (the slow pairs of the 1 GB
/// benchmark hold 2–44 words a run), so the cost grows with the words; a run that many more
/// words hold is a common one (2,394 words hold `de` at 1 GB), left to the verifier.
const LINE_WORDS: usize = 64;

/// A run held by at most this many words always filters ([`PairTerms`]).
const FEW_RUN_WORDS: usize = 16;
/// A run held by more words than this filters through one set of their documents, read
/// up front, rather than through their lists side by side ([`SearchIndex::plan`]).
const SET_OF_WORDS: usize = 1024;

/// A segment with at most this many documents of the organisation is scored whole rather than
/// through block-max WAND ([`pick_in_segment`]).
const RANK_WHOLE: usize = 2048;

/// How many candidates are ranked at first: most searches have their results among them.
/// A search that needs more ranks again, up to its budget (the first ones come out the same).
const FIRST_RANKED: usize = 64;

/// How many candidates a search ranks at first: [`FIRST_RANKED`], or its whole budget for a
/// query of several terms. The rule that all terms stand within three lines turns many of
/// those candidates down (at 100 MB three of the benchmark's five such queries verified 68–125,
/// at 1 GB 142–200), and ranking again repeats the first ranking's work: a fifth of such a
/// search's time (`docs/performance.md`).
fn first_ranked(terms: &[String]) -> usize {
    if terms.len() > 1 {
        usize::MAX
    } else {
        FIRST_RANKED
    }
}

/// The best `k` documents of the plan's filter, best first.
fn rank(searcher: &tantivy::Searcher, plan: &Plan, k: usize) -> Result<Vec<DocAddress>, KbError> {
    let scoring = EnableScoring::enabled_from_searcher(searcher);
    let filtering = EnableScoring::disabled_from_searcher(searcher);
    let filter = plan.filter.weight(filtering).map_err(index_err)?;
    let words = match plan.words() {
        Some(q) => Some(q.weight(scoring).map_err(index_err)?),
        None => None,
    };
    let clauses = plan
        .words
        .iter()
        .map(|(_, q)| q.weight(scoring))
        .collect::<tantivy::Result<Vec<_>>>()
        .map_err(index_err)?;
    let exact = match plan.exact() {
        Some(q) => Some(q.weight(filtering).map_err(index_err)?),
        None => None,
    };
    let mut ranked: Vec<(Score, DocAddress)> = Vec::new();
    for (ord, reader) in searcher.segment_readers().iter().enumerate() {
        let ord = u32::try_from(ord).map_err(index_err)?;
        // The k-th best score of the segments before, once they gave k.
        let floor = ranked.get(k - 1).map(|(s, _)| *s);
        let (picked, exact_docs) = pick_in_segment(
            reader,
            k,
            floor,
            filter.as_ref(),
            words.as_deref(),
            exact.as_deref(),
            (&plan.org, plan.rank_whole),
        )
        .map_err(index_err)?;
        // The exact scores: what tantivy's scorer of the whole query gives, the sum of the
        // matching clauses' scores in the order of the clauses (each term's own scorer,
        // advanced from one picked document to the next, instead of a union scorer that
        // refills a window of 4,096 documents at each).
        let mut scorers = clauses
            .iter()
            .map(|w| w.scorer(reader, 1.0))
            .collect::<tantivy::Result<Vec<_>>>()
            .map_err(index_err)?;
        let mut scored: Vec<(Score, DocAddress)> = Vec::with_capacity(picked.len());
        for doc in picked {
            let mut score: Score = 0.0;
            for s in &mut scorers {
                if s.doc() < doc {
                    s.seek(doc);
                }
                if s.doc() == doc {
                    score += s.score();
                }
            }
            if exact_docs.binary_search(&doc).is_ok() {
                score += EXACT_TITLE_SCORE;
            }
            scored.push((score, DocAddress::new(ord, doc)));
        }
        sort_ranked(&mut scored);
        scored.truncate(k);
        ranked.extend(scored);
        sort_ranked(&mut ranked);
        ranked.truncate(k);
    }
    sort_ranked(&mut ranked);
    ranked.truncate(k);
    Ok(ranked.into_iter().map(|(_, addr)| addr).collect())
}

/// The candidates of one search in rank order ([`SearchIndex::ranked`]): ranked as far as the
/// search gets, their stored fields read one by one as the verifier reaches them, and the
/// matches counted only if the search needs their number.
pub struct Ranked {
    /// The searcher sees every change up to this one.
    through: u64,
    searcher: tantivy::Searcher,
    plan: Plan,
    /// How many candidates the search may take at most.
    k: usize,
    /// How many the ranking so far asked for.
    asked: usize,
    docs: Vec<DocAddress>,
    /// Whether the lines rule out each of the first of `docs` (and then its size), found in
    /// batches as the search reaches them.
    apart: Vec<Option<u64>>,
    /// How many candidates' lines are checked at first ([`expecting`](Self::expecting)).
    first_apart: usize,
}

/// How many candidates' lines are checked at first unless the search says how many results
/// it wants; past them, all the rest at once (each batch opens every word's list again, the
/// larger part of its cost).
const FIRST_APART: usize = 16;

impl Ranked {
    /// The search wants this many results: the lines of twice as many candidates are checked
    /// at first. It reads at least as many candidates as results unless fewer match, and
    /// more when some are ruled out (with 16 first and 20 wanted, a second batch was opened
    /// whenever the search got past them).
    pub fn expecting(mut self, results: usize) -> Ranked {
        self.first_apart = results.saturating_mul(2).max(1);
        self
    }

    /// The candidate at rank `i` (0-based) as the verifier needs it, or `None` past the last:
    /// one its lines rule out carries only its size (no stored fields read, as it will not be
    /// read either).
    pub fn to_verify(
        &mut self,
        index: &SearchIndex,
        i: usize,
    ) -> Result<Option<Candidate>, KbError> {
        self.candidate(index, i, false)
    }

    /// The candidate at rank `i`; `stored`: with its stored fields even when its lines rule it
    /// out ([`SearchIndex::candidates`] lists them whole).
    fn candidate(
        &mut self,
        index: &SearchIndex,
        i: usize,
        stored: bool,
    ) -> Result<Option<Candidate>, KbError> {
        if i >= self.docs.len() && self.docs.len() == self.asked && self.asked < self.k {
            self.docs = rank(&self.searcher, &self.plan, self.k)?;
            self.asked = self.k;
            self.apart.clear();
        }
        let Some(addr) = self.docs.get(i).copied() else {
            return Ok(None);
        };
        while self.apart.len() <= i {
            let from = self.apart.len();
            let to = if from == 0 {
                self.first_apart.min(self.docs.len())
            } else {
                self.docs.len()
            };
            let batch = self.docs.get(from..to).unwrap_or_default();
            let verdicts = self.plan.apart(&self.searcher, batch)?;
            if verdicts.is_empty() {
                break;
            }
            self.apart.extend(verdicts);
        }
        let apart = self.apart.get(i).copied().flatten();
        match apart {
            Some(size) if !stored => Ok(Some(Candidate {
                path: String::new(),
                version: 0,
                hash: String::new(),
                size,
                extracted: false,
                apart: true,
            })),
            _ => Ok(Some(Candidate {
                apart: apart.is_some(),
                ..index.candidate(&self.searcher, addr)?
            })),
        }
    }

    /// Whether every candidate is the live version of its document in a store snapshot whose
    /// last change is `last_change`: the searcher has applied every change up to it.
    pub fn all_live(&self, last_change: u64) -> bool {
        last_change <= self.through
    }

    /// Whether a run of a term was left to the verifier, too many words holding it
    /// ([`PairTerms::Adaptive`]).
    pub fn loose(&self) -> bool {
        self.plan.unfiltered
    }

    /// How many documents match in all.
    pub fn total(&self) -> Result<usize, KbError> {
        if self.docs.len() < self.asked {
            return Ok(self.docs.len());
        }
        self.searcher
            .search(&self.plan.filter, &Count)
            .map_err(index_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long_tokens(text: &str) -> Vec<String> {
        let mut t = LongWords;
        let mut stream = t.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        out
    }

    #[test]
    fn a_merge_is_worth_it_for_segments_of_similar_size_or_many_deletions() {
        // What an import leaves: a few segments, none with three quarters of the documents.
        assert!(merge_worth(&[
            (70_000, 0),
            (60_000, 0),
            (50_000, 0),
            (20_000, 0)
        ]));
        assert!(merge_worth(&[(74, 0), (26, 0)]));
        // One large segment and a few small ones: tantivy's own merges see to those.
        assert!(!merge_worth(&[(75, 0), (25, 0)]));
        assert!(!merge_worth(&[(100_000, 0), (300, 0), (20, 0), (1, 0)]));
        // Nothing to merge.
        assert!(!merge_worth(&[]));
        assert!(!merge_worth(&[(100, 0)]));
        assert!(!merge_worth(&[(0, 0), (0, 0)]));
        // More than a tenth deleted, even in one segment: only a merge takes their text out.
        assert!(merge_worth(&[(89, 11)]));
        assert!(!merge_worth(&[(90, 10)]));
        assert!(merge_worth(&[(1000, 50), (10, 80)]));
    }

    #[test]
    fn a_sign_between_two_characters_is_a_join() {
        let grams = |text: &str| -> Vec<String> {
            joins(text)
                .into_iter()
                .map(|(a, b)| text[a..b].to_owned())
                .collect()
        };
        assert_eq!(grams("ronde-1 en e-mail"), vec!["e-1", "e-m"]);
        assert_eq!(grams("kennis.nl/a"), vec!["s.n", "l/a"]);
        assert_eq!(grams("http://x"), vec!["p:/", "://", "//x"]);
        // Not beside white space, not twice, not across a line.
        assert_eq!(grams("kat. de - kat a-b a-b"), vec!["a-b"]);
        assert_eq!(grams("a-\nb"), Vec::<String>::new());
        assert_eq!(grams("€-€ é.é"), vec!["€-€", "é.é"]);
    }

    /// The joins and long words as first written, a character at a time: the byte scans
    /// must find exactly these.
    fn joins_by_characters(text: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut last: [(usize, char); 2] = [(0, ' '); 2];
        for (i, c) in text.char_indices() {
            let [(start, a), (_, b)] = last;
            if !a.is_whitespace()
                && !b.is_alphanumeric()
                && !b.is_whitespace()
                && !c.is_whitespace()
                && seen.insert((a, b, c))
            {
                out.push((start, i + c.len_utf8()));
            }
            last = [last[1], (i, c)];
        }
        out
    }

    fn long_words_by_characters(text: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        long_words_in(text, 0..text.len(), &mut out);
        out
    }

    #[test]
    fn the_byte_scans_agree_with_reading_character_by_character() {
        use rand::{Rng, SeedableRng};
        // Letters and digits in and beyond ASCII, white space in and beyond it (a vertical
        // tab, a no-break and an ideographic space), signs in and beyond it.
        let alphabet: Vec<char> = "aaaaeeeeé9ĳ漢 \t\n\u{b}\u{a0}\u{3000}-./:€–\u{301}"
            .chars()
            .collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(27);
        for round in 0..2000 {
            let len = if round % 10 == 0 { 400 } else { 30 };
            let text: String = (0..rng.gen_range(0..len))
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
                .collect();
            // Now and then a word long enough for the long field.
            let text = if round % 7 == 0 {
                text.replacen(' ', &"ab".repeat(rng.gen_range(15..40)), 1)
            } else {
                text
            };
            // And text as most is: ASCII words and spaces, now and then a sign or an accent,
            // with words about as long as a long word's bound, anywhere in its chunks.
            let text = if round % 2 == 1 {
                let mut prose = String::new();
                let bytes = rng.gen_range(0..len * 3);
                while prose.len() < bytes {
                    let word = rng.gen_range(1..48);
                    prose.extend((0..word).map(|_| ['a', 'q', '7', 'é'][rng.gen_range(0..4)]));
                    prose.push([' ', ' ', '\n', '.', '-', '\t'][rng.gen_range(0..6)]);
                }
                prose
            } else {
                text
            };
            assert_eq!(joins(&text), joins_by_characters(&text), "{text:?}");
            assert_eq!(
                long_words(&text),
                long_words_by_characters(&text),
                "{text:?}"
            );
        }
    }

    /// A search checks its candidates' lines in two batches, each opening every word's list:
    /// the first is twice the results the search wants (a search of 20 always got past 16),
    /// the second all the rest. The verdicts do not depend on the batches.
    #[test]
    fn a_search_checks_the_lines_of_twice_the_results_it_wants_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let index = SearchIndex::open(&dir.path().join("index"), false).unwrap();
        let now = jiff::Timestamp::now();
        for i in 0..100 {
            // Four lines apart: every one is ruled out.
            let text = if i % 2 == 0 {
                "kozijn\n\n\n\nhout\n"
            } else {
                "kozijn\n\nhout\n"
            };
            super::super::store_document(
                &store,
                1,
                &format!("d{i}.md"),
                text.as_bytes(),
                None,
                now,
            )
            .unwrap();
        }
        index.catch_up(&store).unwrap();
        let terms = vec!["kozijn".to_owned(), "hout".to_owned()];
        let checked_for_first = |ranked: &mut Ranked| {
            assert!(ranked.to_verify(&index, 0).unwrap().is_some());
            ranked.apart.len()
        };
        let mut plain = index
            .ranked(1, None, &terms, 200, PairTerms::Adaptive)
            .unwrap();
        assert_eq!(checked_for_first(&mut plain), FIRST_APART);
        let mut wanting = index
            .ranked(1, None, &terms, 200, PairTerms::Adaptive)
            .unwrap()
            .expecting(20);
        assert_eq!(checked_for_first(&mut wanting), 40);
        assert!(wanting.to_verify(&index, 40).unwrap().is_some());
        assert_eq!(wanting.apart.len(), 100);
        // The same verdicts either way: exactly the documents whose terms stand apart.
        let apart = |ranked: &mut Ranked| -> Vec<bool> {
            (0..100)
                .map(|i| ranked.to_verify(&index, i).unwrap().unwrap().apart)
                .collect()
        };
        let verdicts = apart(&mut wanting);
        assert_eq!(verdicts, apart(&mut plain));
        assert_eq!(verdicts.iter().filter(|a| **a).count(), 50);
    }

    #[test]
    fn a_byte_keeps_a_word_exactly_when_it_is_an_ascii_letter_or_digit_or_beyond_ascii() {
        for b in 0..=u8::MAX {
            assert_eq!(
                keeps_word(b),
                !b.is_ascii() || b.is_ascii_alphanumeric(),
                "{b:#x}"
            );
        }
    }

    #[test]
    fn only_long_words_are_in_the_long_field_in_pieces() {
        let forty = "a".repeat(40);
        let text = format!(
            "de kat {forty} en\n{} x-{}",
            "b".repeat(39),
            "c".repeat(2000)
        );
        let got = long_tokens(&text);
        assert_eq!(got.len(), 1 + vocabulary::pieces(&"c".repeat(2000)).len());
        assert_eq!(got[0], forty);
        assert!(got[1..].iter().all(|p| p.chars().all(|c| c == 'c')));
        assert!(long_tokens("de kat krabt").is_empty());
        // Letters beyond ASCII count by their bytes, as the words field's limit does.
        assert_eq!(long_tokens(&"é".repeat(20)), vec!["é".repeat(20)]);
        assert!(long_tokens(&"é".repeat(19)).is_empty());
    }

    #[test]
    fn titles_take_the_first_line_and_the_file_name() {
        assert_eq!(
            title_of("a/01150100.md", "\n# aziatische lay-out\ntekst"),
            "aziatische lay-out\n01150100"
        );
        assert_eq!(title_of("offerte-2026.pdf", ""), "\nofferte-2026");
    }

    #[test]
    fn ancestors_of_a_path() {
        assert_eq!(ancestors("a/b/c.md"), vec!["a/", "a/b/"]);
    }
}
