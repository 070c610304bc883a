//! The knowledge base: per-organisation folders of versioned documents, content addressed by
//! BLAKE3 and deduplicated, a search index fed by every write, and signed download links.
//!
//! A document write stores content, version, current record and a change-log entry in ONE
//! redb transaction, so a crash never leaves a version pointing at missing content; the search
//! index is derived from the change log and catches up after a crash.

pub mod export;
pub mod extract;
pub mod extracted;
pub mod fold;
pub mod handed;
pub mod index;
pub mod lines;
pub mod link;
pub mod path;
pub mod search;
pub mod trash;
pub mod vocabulary;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::store::blob::Encoded;
use crate::store::{
    KB_CHANGES, KB_CONTENT, KB_DOCS, KB_VERSIONS, Read, Store, StoreError, WriteTx, key,
};
use index::SearchIndex;

/// Largest text a `kennisbank_write` may store.
pub const MAX_WRITE_BYTES: usize = 256 * 1024;
/// Only this much of each document is searched.
pub const MAX_SEARCHED_BYTES: usize = 1024 * 1024;

/// Why a knowledge-base operation was refused. Each variant is one tool error code.
#[derive(Debug, thiserror::Error)]
pub enum KbError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    PathNotAllowed(String),
    #[error("{0}")]
    UnsupportedType(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{message}")]
    VersionConflict {
        message: String,
        current_version: Option<u64>,
    },
    #[error("search index: {0}")]
    Index(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl KbError {
    /// The tool error code of DESIGN.md.
    pub fn code(&self) -> &'static str {
        match self {
            KbError::InvalidInput(_) => "invalid_input",
            KbError::NotFound(_) => "not_found",
            KbError::PathNotAllowed(_) => "path_not_allowed",
            KbError::UnsupportedType(_) => "unsupported_type",
            KbError::TooLarge(_) => "too_large",
            KbError::VersionConflict { .. } => "version_conflict",
            KbError::Index(_) | KbError::Store(_) => "internal",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DocKind {
    Text,
    Binary,
}

/// The current state of one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub org_id: u64,
    pub path: String,
    pub version: u64,
    pub size: u64,
    /// BLAKE3 of the content, hex.
    pub hash: String,
    pub kind: DocKind,
    pub content_type: String,
    pub updated_at: Timestamp,
    /// The person who wrote this version; `None` for imports.
    pub updated_by: Option<u64>,
}

/// One version in a document's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Version {
    pub version: u64,
    pub size: u64,
    pub hash: String,
    pub created_at: Timestamp,
    pub created_by: Option<u64>,
}

/// An entry of the change log the search index follows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub org_id: u64,
    pub path: String,
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WriteOutcome {
    pub path: String,
    pub version: u64,
    pub created: bool,
    pub size: u64,
    /// False when the content equalled the current version, so nothing new was stored.
    pub changed: bool,
}

pub fn doc_key(org_id: u64, path: &str) -> Vec<u8> {
    let mut k = key::id(org_id).to_vec();
    k.extend_from_slice(path.as_bytes());
    k
}

fn version_key(org_id: u64, path: &str, version: u64) -> Vec<u8> {
    let mut k = doc_key(org_id, path);
    k.push(0);
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// Text: valid UTF-8 without NUL bytes, with an extension that does not name a binary format.
pub fn classify(path: &str, bytes: &[u8]) -> (DocKind, String) {
    if let Some(t) = path::binary_type(path) {
        return (DocKind::Binary, t.to_owned());
    }
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.contains('\0') => (DocKind::Text, path::text_type(path).to_owned()),
        _ => (DocKind::Binary, "application/octet-stream".to_owned()),
    }
}

/// The first `max` bytes of `s`, cut on a character boundary.
pub fn prefix_on_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// How a stored version must relate to what exists.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// Create only; an existing document is a conflict.
    Create,
    /// Revise exactly this version.
    Version(u64),
    /// Create or revise whatever is there (imports).
    Any,
}

/// Stores `bytes` as the next version of `path` (already normalised) in one transaction.
/// `prepared`, when given, is `new`'s content made ready outside the transaction.
fn put_document(
    tx: &mut WriteTx,
    new: &NewVersion<'_>,
    path: &str,
    prepared: Option<&Prepared>,
) -> Result<WriteOutcome, KbError> {
    let &NewVersion {
        org_id,
        bytes,
        expect,
        by,
        now,
        ..
    } = new;
    let dkey = doc_key(org_id, path);
    let current = get_document(tx, org_id, path)?;
    if let Some(folder) = folder_conflict(tx, org_id, path)? {
        return Err(KbError::InvalidInput(format!(
            "`{folder}` is a document, so it cannot also be a folder"
        )));
    }
    match (expect, &current) {
        (Expect::Create, Some(doc)) => {
            return Err(KbError::VersionConflict {
                message: format!(
                    "`{path}` already exists at version {}; pass expected_version {} to revise it",
                    doc.version, doc.version
                ),
                current_version: Some(doc.version),
            });
        }
        (Expect::Version(v), Some(doc)) if doc.version != v => {
            return Err(KbError::VersionConflict {
                message: format!(
                    "`{path}` is at version {}, not {v}; read it again and retry with expected_version {}",
                    doc.version, doc.version
                ),
                current_version: Some(doc.version),
            });
        }
        (Expect::Version(v), None) => {
            return Err(KbError::VersionConflict {
                message: format!(
                    "`{path}` does not exist (expected version {v}); omit expected_version to create it"
                ),
                current_version: None,
            });
        }
        _ => {}
    }
    // Prepared from these very bytes (the same memory, which it owns and lends), or hashed
    // here; what was prepared from other bytes is not used.
    let hash_bytes = match prepared {
        Some(p) if p.holds(bytes) => p.hash,
        _ => blake3::hash(bytes),
    };
    let hash = hash_bytes.to_hex().to_string();
    let prepared = prepared.filter(|p| p.hash == hash_bytes);
    if let Some(doc) = &current
        && doc.hash == hash
        && matches!(expect, Expect::Any)
    {
        return Ok(WriteOutcome {
            path: path.to_owned(),
            version: doc.version,
            created: false,
            size: doc.size,
            changed: false,
        });
    }
    let (kind, content_type) = classify(path, bytes);
    if tx.get_raw(KB_CONTENT, hash_bytes.as_bytes())?.is_none() {
        match prepared.and_then(|p| p.stored.as_ref()) {
            Some(stored) => tx.put_encoded(KB_CONTENT, hash_bytes.as_bytes(), stored)?,
            None => tx.put_blob(KB_CONTENT, hash_bytes.as_bytes(), bytes)?,
        }
    }
    let version = current.as_ref().map_or(1, |d| d.version + 1);
    let doc = Document {
        org_id,
        path: path.to_owned(),
        version,
        size: bytes.len() as u64,
        hash: hash.clone(),
        kind,
        content_type,
        updated_at: now,
        updated_by: by,
    };
    tx.put(KB_DOCS, &dkey, &doc)?;
    tx.put(
        KB_VERSIONS,
        &version_key(org_id, path, version),
        &Version {
            version,
            size: doc.size,
            hash,
            created_at: now,
            created_by: by,
        },
    )?;
    log_change(tx, org_id, path)?;
    Ok(WriteOutcome {
        path: path.to_owned(),
        version,
        created: current.is_none(),
        size: doc.size,
        changed: true,
    })
}

/// Tells the search index (and the extraction worker) that `path` changed.
pub(crate) fn log_change(tx: &mut WriteTx, org_id: u64, path: &str) -> Result<(), StoreError> {
    let seq = tx.next_id("kb_change")?;
    tx.put(
        KB_CHANGES,
        &key::id(seq),
        &Change {
            org_id,
            path: path.to_owned(),
        },
    )
}

/// A path whose ancestor is a document (or which is itself an ancestor of documents) would make
/// the tree ambiguous; returns the clashing path.
fn folder_conflict(tx: &impl Read, org_id: u64, path: &str) -> Result<Option<String>, StoreError> {
    let mut prefix = String::new();
    for segment in path
        .split('/')
        .collect::<Vec<_>>()
        .split_last()
        .map(|s| s.1)
        .unwrap_or(&[])
    {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(segment);
        if get_document(tx, org_id, &prefix)?.is_some() {
            return Ok(Some(prefix));
        }
    }
    let below = tx.scan_keys(KB_DOCS, &doc_key(org_id, &format!("{path}/")), 1)?;
    Ok((!below.is_empty()).then(|| path.to_owned()))
}

/// The sequence number of the last change logged (0 before the first): the index has every
/// change up to it once it has applied this far.
pub fn last_change(tx: &impl Read) -> Result<u64, StoreError> {
    Ok(tx
        .last_key(KB_CHANGES)?
        .and_then(|k| key::id_at(&k, 0))
        .unwrap_or(0))
}

pub fn get_document(
    tx: &impl Read,
    org_id: u64,
    path: &str,
) -> Result<Option<Document>, StoreError> {
    tx.get(KB_DOCS, &doc_key(org_id, path))
}

pub fn get_version(
    tx: &impl Read,
    org_id: u64,
    path: &str,
    version: u64,
) -> Result<Option<Version>, StoreError> {
    tx.get(KB_VERSIONS, &version_key(org_id, path, version))
}

/// A document's versions, oldest first.
pub fn versions(tx: &impl Read, org_id: u64, path: &str) -> Result<Vec<Version>, StoreError> {
    let mut prefix = doc_key(org_id, path);
    prefix.push(0);
    Ok(tx
        .scan::<Version>(KB_VERSIONS, &prefix)?
        .into_iter()
        .map(|r| r.1)
        .collect())
}

/// Content bytes by BLAKE3 hex.
pub fn content(tx: &impl Read, hash_hex: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let Ok(hash) = blake3::Hash::from_hex(hash_hex) else {
        return Ok(None);
    };
    tx.get_blob(KB_CONTENT, hash.as_bytes())
}

/// The text of a document as search and excerpts see it: a text document's own text, or the
/// text extracted from a binary one.
#[derive(Debug, Clone, PartialEq)]
pub struct DocText {
    pub text: String,
    /// Taken from a binary file (PDF, Office, …) rather than the document itself.
    pub extracted: bool,
}

/// The text of `doc` (its whole text; extracted text is at most 1 MiB already), or `None` for
/// a binary document without extracted text, and for every binary document when
/// `with_extracted` is off.
pub fn text_of(
    tx: &impl Read,
    doc: &Document,
    with_extracted: bool,
) -> Result<Option<DocText>, StoreError> {
    match doc.kind {
        DocKind::Text => Ok(content(tx, &doc.hash)?.map(|bytes| DocText {
            text: text_from_bytes(bytes),
            extracted: false,
        })),
        DocKind::Binary if with_extracted => {
            Ok(extracted::text(tx, &doc.hash)?.map(|text| DocText {
                text,
                extracted: true,
            }))
        }
        DocKind::Binary => Ok(None),
    }
}

/// A text document's content as text: valid UTF-8 (every text document) taken as it is,
/// without a copy.
fn text_from_bytes(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// An entry of a folder listing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub name: String,
    pub path: String,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// The folders and documents directly inside `folder` (`None`: the top level), folders first.
pub fn list(tx: &impl Read, org_id: u64, folder: Option<&str>) -> Result<Vec<Entry>, KbError> {
    let base = folder.map(|f| format!("{f}/")).unwrap_or_default();
    if let Some(f) = folder
        && get_document(tx, org_id, f)?.is_some()
    {
        return Err(KbError::InvalidInput(format!(
            "`{f}` is a document, not a folder; read it with kennisbank_read"
        )));
    }
    let mut folders = std::collections::BTreeSet::new();
    let mut docs = Vec::new();
    for (_, doc) in tx.scan::<Document>(KB_DOCS, &doc_key(org_id, &base))? {
        let rest = &doc.path[base.len()..];
        match rest.split_once('/') {
            Some((sub, _)) => {
                folders.insert(sub.to_owned());
            }
            None => docs.push(Entry {
                name: rest.to_owned(),
                path: doc.path.clone(),
                kind: "document",
                version: Some(doc.version),
                size: Some(doc.size),
            }),
        }
    }
    if let Some(f) = folder
        && folders.is_empty()
        && docs.is_empty()
    {
        return Err(KbError::NotFound(format!("folder `{f}` does not exist")));
    }
    let mut out: Vec<Entry> = folders
        .into_iter()
        .map(|name| Entry {
            path: format!("{base}{name}"),
            name,
            kind: "folder",
            version: None,
            size: None,
        })
        .collect();
    out.extend(docs);
    Ok(out)
}

/// A document version to store: the path as given (it is normalised here), and how it must
/// relate to what exists.
#[derive(Debug, Clone, Copy)]
pub struct NewVersion<'a> {
    pub org_id: u64,
    pub path: &'a str,
    pub bytes: &'a [u8],
    pub expect: Expect,
    /// The person who writes; `None` for imports.
    pub by: Option<u64>,
    pub now: Timestamp,
}

/// Writes one document: stores the version in one transaction and brings the search index up
/// to date, so the document is found by a search as soon as this returns. The one entry point
/// for every single write (connector, portal); many writes at once go through [`Writer`].
/// Text is extracted from a binary file later, off the request path (see [`extracted`]).
pub fn write(
    store: &Store,
    index: &SearchIndex,
    new: NewVersion<'_>,
) -> Result<WriteOutcome, KbError> {
    let mut writer = Writer::new(store, index);
    let outcome = writer.put(new)?;
    writer.finish()?;
    Ok(outcome)
}

/// The batch form of [`write`] (imports, demo data): [`put_many`](Writer::put_many) stores a
/// batch of documents in one transaction (one commit, one sync), and
/// [`finish`](Writer::finish) brings the search index up to date once for all of them. A
/// writer dropped unfinished leaves the index behind until the next write or start, which
/// catch up. With [`extracting`](Writer::extracting), the text of binary files is extracted
/// before their batch is stored and stored with it.
pub struct Writer<'a> {
    store: &'a Store,
    index: &'a SearchIndex,
    extractor: Option<&'a extract::Extractor>,
    extracted: ExtractCounts,
}

/// What an import ([`Writer`]) or `kennis reindex` extracted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExtractCounts {
    /// Files whose text was extracted.
    pub extracted: usize,
    /// Files whose text could not be extracted (they stay binary documents).
    pub failed: usize,
    /// Which, and why (one file of each content).
    pub failures: Vec<ExtractionFailure>,
}

impl ExtractCounts {
    /// Counts one file's outcome.
    pub(crate) fn add<T>(&mut self, path: &str, result: &Result<T, extract::ExtractError>) {
        match result {
            Ok(_) => self.extracted += 1,
            Err(e) => {
                self.failed += 1;
                self.failures.push(ExtractionFailure {
                    path: path.to_owned(),
                    reason: e.to_string(),
                });
            }
        }
    }
}

/// A file whose text could not be extracted, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExtractionFailure {
    pub path: String,
    pub reason: String,
}

impl<'a> Writer<'a> {
    pub fn new(store: &'a Store, index: &'a SearchIndex) -> Writer<'a> {
        Writer {
            store,
            index,
            extractor: None,
            extracted: ExtractCounts::default(),
        }
    }

    /// Extracts text from binary files as they are stored (when the index searches extracted
    /// text at all); for imports, which run off the request path.
    pub fn extracting(mut self, extractor: &'a extract::Extractor) -> Writer<'a> {
        if self.index.with_extracted() {
            self.extractor = Some(extractor);
        }
        self
    }

    /// Stores one document version (see [`put_document`]).
    pub fn put(&mut self, new: NewVersion<'_>) -> Result<WriteOutcome, KbError> {
        self.put_many(&[new])?
            .pop()
            .unwrap_or_else(|| Err(KbError::InvalidInput("nothing to store".into())))
    }

    /// Stores a batch in one transaction: each document's own outcome (a refused document does
    /// not stop the others), or an error of the store, which stores none of them.
    pub fn put_many(
        &mut self,
        batch: &[NewVersion<'_>],
    ) -> Result<Vec<Result<WriteOutcome, KbError>>, KbError> {
        self.put_many_prepared(batch, &[])
    }

    /// [`put_many`](Self::put_many) with the batch's content made ready beforehand by
    /// [`prepare`] (the same documents in the same order), so that the transaction only
    /// inserts; what was not prepared from a document's very bytes is not used.
    pub fn put_many_prepared(
        &mut self,
        batch: &[NewVersion<'_>],
        prepared: &[Prepared],
    ) -> Result<Vec<Result<WriteOutcome, KbError>>, KbError> {
        let paths: Vec<Result<String, KbError>> =
            batch.iter().map(|n| path::normalize(n.path)).collect();
        let texts = match self.extractor {
            Some(x) => extracted::extract_batch(self.store, x, batch, &mut self.extracted)?,
            None => Vec::new(),
        };
        self.store.write(|tx| {
            for (hash, result) in &texts {
                extracted::record(
                    tx,
                    hash,
                    result,
                    batch.first().map_or_else(Timestamp::now, |n| n.now),
                )?;
            }
            let mut out = Vec::with_capacity(batch.len());
            for (i, (new, path)) in batch.iter().zip(paths).enumerate() {
                let r = path.and_then(|path| {
                    let outcome = put_document(tx, new, &path, prepared.get(i))?;
                    // Unchanged content that only now has its text (stored before, not yet
                    // extracted): the index must hear of the document all the same.
                    if !outcome.changed && !texts.is_empty() {
                        let hash = blake3::hash(new.bytes).to_hex().to_string();
                        if texts.iter().any(|(h, r)| *h == hash && r.is_ok()) {
                            log_change(tx, new.org_id, &outcome.path)?;
                        }
                    }
                    Ok(outcome)
                });
                match r {
                    Err(KbError::Store(e)) => return Err(KbError::Store(e)),
                    r => out.push(r),
                }
            }
            Ok(out)
        })
    }

    /// The store it writes to.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// The search index it brings up to date.
    pub fn index(&self) -> &'a SearchIndex {
        self.index
    }

    /// What was extracted so far.
    pub fn extract_counts(&self) -> ExtractCounts {
        self.extracted.clone()
    }

    /// Brings the search index up to date; returns how many changes it applied.
    pub fn finish(self) -> Result<usize, KbError> {
        self.index.catch_up(self.store)
    }
}

/// Stores a document outside the write rules ([`Expect::Any`]) WITHOUT updating the search
/// index: for tests and benchmarks that feed the index themselves. Everything else writes
/// through [`write`] or [`Writer`].
pub fn store_document(
    store: &Store,
    org_id: u64,
    path: &str,
    bytes: &[u8],
    by: Option<u64>,
    now: Timestamp,
) -> Result<WriteOutcome, KbError> {
    let new = NewVersion {
        org_id,
        path,
        bytes,
        expect: Expect::Any,
        by,
        now,
    };
    let path = path::normalize(path)?;
    store.write(|tx| put_document(tx, &new, &path, None))
}

/// A document's content made ready outside the write transaction: the bytes, their hash and,
/// unless they are the document's current content already, their stored form (compressed), so
/// that storing a batch only inserts. An import prepares its next batch on its reading thread
/// while one is stored ([`prepare`], [`Writer::put_many_prepared`]).
///
/// It owns the bytes it hashed: a write of [`bytes`](Self::bytes) — the same memory — takes
/// the hash as it is, and so does the search index when the bytes are handed to it
/// ([`SearchIndex::hand`]). Each hash of an import's files was made three times before
/// (reading, storing, indexing); now once.
pub struct Prepared {
    hash: blake3::Hash,
    stored: Option<Encoded>,
    bytes: Vec<u8>,
}

impl Prepared {
    /// Whether its stored form was made (its content is not the document's already).
    pub fn encoded(&self) -> bool {
        self.stored.is_some()
    }

    /// The content, to write as [`NewVersion::bytes`].
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether `bytes` is its content lent out: the same memory, which cannot change while
    /// both are borrowed. Two equal contents elsewhere are not it (they are hashed again).
    fn holds(&self, bytes: &[u8]) -> bool {
        std::ptr::eq(self.bytes.as_slice(), bytes)
    }

    /// The content and its hash, the stored form let go.
    pub(crate) fn into_hashed(self) -> (blake3::Hash, Vec<u8>) {
        (self.hash, self.bytes)
    }
}

/// Prepares a batch of `org_id`'s documents (path as given, bytes): each one's hash, and its
/// stored form when it differs from the document's current content (an unchanged file of a
/// repeated import is not compressed for nothing). Reads the store, writes nothing.
pub fn prepare(
    store: &Store,
    org_id: u64,
    batch: Vec<(&str, Vec<u8>)>,
) -> Result<Vec<Prepared>, KbError> {
    store.read(|tx| {
        let mut out = Vec::with_capacity(batch.len());
        for (path, bytes) in batch {
            let hash = blake3::hash(&bytes);
            let current = match path::normalize(path) {
                Ok(path) => get_document(tx, org_id, &path)?,
                Err(_) => None,
            };
            let unchanged = current.is_some_and(|d| d.hash == hash.to_hex().as_str());
            out.push(Prepared {
                hash,
                stored: (!unchanged).then(|| Encoded::of(&bytes)),
                bytes,
            });
        }
        Ok(out)
    })
}
