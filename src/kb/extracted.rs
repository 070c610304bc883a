//! Text extracted from stored binary files (PDF, Office, OpenDocument, RTF, EPUB): where it is
//! kept, and the two ways it gets there, both off the request path.
//!
//! - Imports and `kennis reindex` extract while they store ([`extract_batch`], [`extract_all`]).
//! - Everything else (portal uploads, documents stored by an older kennis) is picked up by the
//!   [`Backlog`]: the server runs it on a background task that looks at every document once at
//!   start and then follows the change log, the same log the search index follows.
//!
//! Extraction is keyed by content hash (content is stored once per hash), and its outcome is
//! recorded either way: the text (compressed, in `kb_text`) or why there is none (in
//! `kb_extraction`, shown to admins), so a file is never tried twice by the backlog. Storing
//! the text logs a change for the document, so the index picks it up.

use std::collections::{HashSet, VecDeque};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::extract::{self, ExtractError, Extracted, Extractor};
use super::index::SearchIndex;
use super::{Change, DocKind, Document, KbError, NewVersion};
use crate::store::{
    KB_CHANGES, KB_CONTENT, KB_DOCS, KB_EXTRACTION, KB_TEXT, Read, Store, StoreError, WriteTx, key,
};

/// How the extraction of one content went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extraction {
    pub at: Timestamp,
    /// Characters of text found; `None` when extraction failed.
    pub chars: Option<u64>,
    /// The text stopped at the 1 MiB limit.
    #[serde(default)]
    pub truncated: bool,
    /// Pages, sheets or slides.
    #[serde(default)]
    pub parts: Option<u32>,
    /// Why there is no text.
    #[serde(default)]
    pub error: Option<ExtractError>,
}

fn hash_key(hash_hex: &str) -> Option<[u8; 32]> {
    blake3::Hash::from_hex(hash_hex).ok().map(|h| *h.as_bytes())
}

/// The outcome recorded for content `hash_hex`, if it was tried.
pub fn outcome(tx: &impl Read, hash_hex: &str) -> Result<Option<Extraction>, StoreError> {
    match hash_key(hash_hex) {
        Some(k) => tx.get(KB_EXTRACTION, &k),
        None => Ok(None),
    }
}

/// The text extracted from content `hash_hex`, if any.
pub fn text(tx: &impl Read, hash_hex: &str) -> Result<Option<String>, StoreError> {
    let Some(k) = hash_key(hash_hex) else {
        return Ok(None);
    };
    Ok(tx.get_blob(KB_TEXT, &k)?.map(|bytes| {
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }))
}

/// Records the outcome (and the text) for content `hash_hex`.
pub fn record(
    tx: &mut WriteTx,
    hash_hex: &str,
    result: &Result<Extracted, ExtractError>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let Some(k) = hash_key(hash_hex) else {
        return Ok(());
    };
    let record = match result {
        Ok(x) => {
            tx.put_blob(KB_TEXT, &k, x.text.as_bytes())?;
            Extraction {
                at: now,
                chars: Some(x.text.chars().count() as u64),
                truncated: x.truncated,
                parts: x.parts,
                error: None,
            }
        }
        Err(e) => {
            tx.delete_blob(KB_TEXT, &k)?;
            Extraction {
                at: now,
                chars: None,
                truncated: false,
                parts: None,
                error: Some(e.clone()),
            }
        }
    };
    tx.put(KB_EXTRACTION, &k, &record)
}

/// A content hash and what extracting it gave.
pub(super) type Outcome = (String, Result<Extracted, ExtractError>);

/// Whether the file at `path` is one to extract: a binary file whose extension names an
/// extractable format (whatever its bytes turn out to be).
fn wanted(path: &str, bytes: &[u8]) -> bool {
    super::classify(path, bytes).0 == DocKind::Binary && extension_format(path).is_some()
}

/// Extracts a file whose extension names an extractable format; bytes of another kind (random
/// bytes named `.xlsx`, a renamed file) are [`ExtractError::Damaged`].
fn extract_file(
    extractor: &Extractor,
    path: &str,
    bytes: &[u8],
) -> Result<Extracted, ExtractError> {
    match extract::format_of(path, bytes) {
        Some(format) => extractor.extract(format, bytes),
        None => Err(ExtractError::Damaged(format!(
            "it is not a {} file inside",
            extension_format(path).map_or("known", |f| f.extension())
        ))),
    }
}

/// Extracts, before a batch is stored, the text of every binary file in it whose content was
/// not tried yet (each content once). Returns (hash, outcome) to [`record`] with the batch.
pub(super) fn extract_batch<'b>(
    store: &Store,
    extractor: &Extractor,
    batch: &[NewVersion<'b>],
    counts: &mut super::ExtractCounts,
) -> Result<Vec<Outcome>, KbError> {
    let mut todo = Vec::new();
    let mut seen = HashSet::new();
    for new in batch {
        if !wanted(new.path, new.bytes) {
            continue;
        }
        let hash = blake3::hash(new.bytes).to_hex().to_string();
        if seen.insert(hash.clone()) {
            todo.push((hash, new.path, new.bytes));
        }
    }
    if todo.is_empty() {
        return Ok(Vec::new());
    }
    let tried: Vec<bool> = store.read(|tx| {
        todo.iter()
            .map(|(h, _, _)| outcome(tx, h).map(|o| o.is_some()))
            .collect::<Result<_, StoreError>>()
    })?;
    let todo: Vec<_> = todo
        .into_iter()
        .zip(tried)
        .filter(|(_, tried)| !tried)
        .map(|(t, _)| t)
        .collect();
    // One child per file, two at a time: the machine's other core keeps storing.
    let run = |part: Vec<&(String, &'b str, &[u8])>| {
        part.into_iter()
            .map(|(hash, path, bytes)| (hash.clone(), *path, extract_file(extractor, path, bytes)))
            .collect::<Vec<_>>()
    };
    let even: Vec<_> = todo.iter().step_by(2).collect();
    let odd: Vec<_> = todo.iter().skip(1).step_by(2).collect();
    let results: Vec<(String, &'b str, Result<Extracted, ExtractError>)> =
        std::thread::scope(|scope| {
            let other = scope.spawn(|| run(odd));
            let mut out = run(even);
            match other.join() {
                Ok(more) => out.extend(more),
                Err(_) => {
                    tracing::error!(
                        "an extraction thread panicked; its files stay binary documents"
                    )
                }
            }
            out
        });
    Ok(results
        .into_iter()
        .map(|(hash, path, result)| {
            counts.add(path, &result);
            (hash, result)
        })
        .collect())
}

/// Which earlier outcomes [`extract_document`] tries again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// None: only content never tried.
    Never,
    /// Failures that may pass ([`ExtractError::may_pass`]: a time limit hit on a busy machine,
    /// a worker that could not start) — once per server start.
    IfPassing,
    /// Every failure (`kennis reindex`).
    Failed,
}

/// Extracts the document `(org_id, path)` if it is a binary file whose content was not tried
/// yet (or whose extraction failed, as `again` says), records the outcome and logs a change so
/// the index takes the text in. Returns the outcome when it extracted.
pub fn extract_document(
    store: &Store,
    extractor: &Extractor,
    org_id: u64,
    path: &str,
    again: Again,
    now: Timestamp,
) -> Result<Option<Result<(), ExtractError>>, KbError> {
    let found = store.read(|tx| {
        let Some(doc) = super::get_document(tx, org_id, path)? else {
            return Ok::<_, StoreError>(None);
        };
        if doc.kind != DocKind::Binary || extension_format(&doc.path).is_none() {
            return Ok(None);
        }
        let tried = outcome(tx, &doc.hash)?;
        let redo = match (&tried, again) {
            (None, _) => true,
            (Some(_), Again::Never) => false,
            (Some(o), Again::IfPassing) => o.error.as_ref().is_some_and(ExtractError::may_pass),
            (Some(o), Again::Failed) => o.error.is_some(),
        };
        if !redo {
            return Ok(None);
        }
        Ok(super::content(tx, &doc.hash)?.map(|bytes| (doc, bytes)))
    })?;
    let Some((doc, bytes)) = found else {
        return Ok(None);
    };
    let result = extract_file(extractor, &doc.path, &bytes);
    store.write(|tx| {
        // The content may have gone meanwhile (its last document purged, the sweep done):
        // text recorded now would outlive it.
        let gone = hash_key(&doc.hash)
            .map(|k| tx.get_raw(KB_CONTENT, &k))
            .transpose()?
            .flatten()
            .is_none();
        if gone {
            return Ok(());
        }
        record(tx, &doc.hash, &result, now)?;
        // The document may have changed meanwhile; the index reads whatever is current.
        super::log_change(tx, org_id, &doc.path)
    })?;
    Ok(Some(result.map(|_| ())))
}

/// The format a path's extension names, whatever the bytes are.
fn extension_format(path: &str) -> Option<extract::Format> {
    let ext = super::path::extension(path)?;
    extract::Format::ALL
        .into_iter()
        .find(|f| f.extension() == ext)
}

/// Every binary document (of one organisation, or all) whose extension names an extractable
/// format: what [`Backlog`] and `kennis reindex` look at.
fn extractable_documents(
    tx: &impl Read,
    org: Option<u64>,
) -> Result<Vec<(u64, String)>, StoreError> {
    let prefix = org.map(|id| key::id(id).to_vec()).unwrap_or_default();
    Ok(tx
        .scan::<Document>(KB_DOCS, &prefix)?
        .into_iter()
        .filter(|(_, d)| d.kind == DocKind::Binary && extension_format(&d.path).is_some())
        .map(|(_, d)| (d.org_id, d.path))
        .collect())
}

/// Extracts every binary document (of one organisation, or all) not extracted yet, retrying
/// the ones that failed before; reports progress as (done, total).
pub fn extract_all(
    store: &Store,
    extractor: &Extractor,
    org: Option<u64>,
    now: Timestamp,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<super::ExtractCounts, KbError> {
    let docs = store.read(|tx| extractable_documents(tx, org))?;
    let total = docs.len() as u64;
    let mut summary = super::ExtractCounts::default();
    for (i, (org_id, path)) in docs.iter().enumerate() {
        if let Some(result) = extract_document(store, extractor, *org_id, path, Again::Failed, now)?
        {
            summary.add(path, &result);
        }
        progress(i as u64 + 1, total);
    }
    Ok(summary)
}

/// The documents the background extraction still has to look at: every extractable document
/// at start, then each document the change log names.
pub struct Backlog {
    queue: VecDeque<(u64, String)>,
    queued: HashSet<(u64, String)>,
    /// The documents there were at start: their passing failures are tried once more.
    at_start: HashSet<(u64, String)>,
    /// The next change-log entry to read.
    next_change: u64,
}

impl Backlog {
    /// Starts from every extractable document; changes logged from now on follow.
    pub fn start(store: &Store) -> Result<Backlog, StoreError> {
        store.read(|tx| {
            let last = super::last_change(tx)?;
            let mut backlog = Backlog {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                at_start: HashSet::new(),
                next_change: last + 1,
            };
            for item in extractable_documents(tx, None)? {
                backlog.at_start.insert(item.clone());
                backlog.push(item);
            }
            if !backlog.queue.is_empty() {
                tracing::info!(
                    documents = backlog.queue.len(),
                    "looking at PDF and Office documents for text not extracted yet"
                );
            }
            Ok(backlog)
        })
    }

    fn push(&mut self, item: (u64, String)) {
        if self.queued.insert(item.clone()) {
            self.queue.push_back(item);
        }
    }

    /// Looks at the next document (reading new changes when the queue is empty) and extracts
    /// it if needed. Returns false when there was nothing to look at: wait a little, then call
    /// again.
    pub fn step(
        &mut self,
        store: &Store,
        index: &SearchIndex,
        extractor: &Extractor,
        now: Timestamp,
    ) -> Result<bool, KbError> {
        if self.queue.is_empty() {
            let changes: Vec<(Vec<u8>, Change)> =
                store.read(|tx| tx.range(KB_CHANGES, &key::id(self.next_change), 1000))?;
            for (k, change) in changes {
                if let Some(seq) = key::id_at(&k, 0) {
                    self.next_change = seq + 1;
                }
                if extension_format(&change.path).is_some() {
                    self.push((change.org_id, change.path));
                }
            }
        }
        let Some(item) = self.queue.pop_front() else {
            return Ok(false);
        };
        self.queued.remove(&item);
        let again = if self.at_start.remove(&item) {
            Again::IfPassing
        } else {
            Again::Never
        };
        let (org_id, path) = item;
        if let Some(result) = extract_document(store, extractor, org_id, &path, again, now)? {
            if let Err(e) = result {
                tracing::info!(org = org_id, path = %path, reason = %e, "no text could be extracted; the file stays a binary document");
            }
            index.catch_up(store)?;
        }
        Ok(true)
    }
}
