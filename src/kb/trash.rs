//! The life of a document after it is written: to the trash and back, moved or renamed, purged
//! when its time in the trash is over, and content no version refers to any more removed.
//!
//! A deleted document leaves `kb_docs` and `kb_versions` in one transaction and is kept whole
//! (its current record and every version) as one record of `kb_trash`, keyed by organisation
//! and a trash sequence number. Its path is free again at once: a write there makes a new
//! document, and restoring is refused while that one lives. Content stays in `kb_content`
//! (shared by hash) until housekeeping purges the trashed document and nothing else refers to
//! it. Every change logs the path in the change log, so the search index forgets (or finds)
//! the document before the call returns.

use std::collections::HashSet;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::index::SearchIndex;
use super::{
    Document, KbError, Version, doc_key, folder_conflict, get_document, log_change, path,
    version_key, versions,
};
use crate::audit::{self, Actor};
use crate::store::{
    CONTENT_SWEEP_DUE, KB_CONTENT, KB_DOCS, KB_EXTRACTION, KB_TEXT, KB_TRASH, KB_VERSIONS, META,
    Read, Store, StoreError, WriteTx, key,
};

/// Says that content may have lost its last reference (set before trash records are purged,
/// cleared by the sweep that follows; absent on a store from before, which is swept once): the
/// next
/// [`purge_orphaned_content`] sweeps. Committed before the records that refer to the content
/// are removed, so a crash in between leaves the sweep due rather than the content for ever.
pub fn mark_content_sweep_due(store: &Store) -> Result<(), StoreError> {
    store.write(|tx| tx.put(META, CONTENT_SWEEP_DUE, &true))
}

/// A deleted document, whole: what restoring puts back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trashed {
    pub doc: Document,
    /// Every version, oldest first.
    pub versions: Vec<Version>,
    pub deleted_at: Timestamp,
    /// The person who deleted it; `None` for the operator (command line).
    pub deleted_by: Option<u64>,
}

/// What the trash shows of a deleted document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrashItem {
    pub path: String,
    pub version: u64,
    pub deleted_at: Timestamp,
    pub deleted_by: Option<u64>,
}

fn trash_key(org_id: u64, seq: u64) -> [u8; 16] {
    key::pair(org_id, seq)
}

/// Takes the document's versions out of `kb_versions` and its record out of `kb_docs`.
fn take_out(tx: &mut WriteTx, doc: &Document) -> Result<Vec<Version>, StoreError> {
    let all = versions(tx, doc.org_id, &doc.path)?;
    for v in &all {
        tx.delete(KB_VERSIONS, &version_key(doc.org_id, &doc.path, v.version))?;
    }
    tx.delete(KB_DOCS, &doc_key(doc.org_id, &doc.path))?;
    log_change(tx, doc.org_id, &doc.path)?;
    Ok(all)
}

/// Puts a document and its versions in at `doc.path`, which must be free.
fn put_in(tx: &mut WriteTx, doc: &Document, all: &[Version]) -> Result<(), KbError> {
    if let Some(live) = get_document(tx, doc.org_id, &doc.path)? {
        return Err(path_taken(&doc.path, live.version));
    }
    if let Some(folder) = folder_conflict(tx, doc.org_id, &doc.path)? {
        return Err(KbError::InvalidInput(format!(
            "`{folder}` is a document, so it cannot also be a folder"
        )));
    }
    for v in all {
        tx.put(
            KB_VERSIONS,
            &version_key(doc.org_id, &doc.path, v.version),
            v,
        )?;
    }
    tx.put(KB_DOCS, &doc_key(doc.org_id, &doc.path), doc)?;
    log_change(tx, doc.org_id, &doc.path)?;
    Ok(())
}

/// The refusals of this module (the portal translates each: `portal::refusal`).
pub(crate) fn missing(p: &str) -> KbError {
    KbError::NotFound(format!("`{p}` does not exist"))
}

pub(crate) fn path_taken(p: &str, version: u64) -> KbError {
    KbError::VersionConflict {
        message: format!(
            "`{p}` is taken by a live document (version {version}); move or delete that one first"
        ),
        current_version: Some(version),
    }
}

pub(crate) fn not_in_trash(p: &str) -> KbError {
    KbError::NotFound(format!("`{p}` is not in the trash"))
}

pub(crate) fn same_path(p: &str) -> KbError {
    KbError::InvalidInput(format!("`{p}` is already at that path"))
}

/// Moves the document at `path` to the trash with its whole history, audited (`kb.delete`) in
/// the same transaction; the search index forgets it before this returns.
pub fn delete(
    store: &Store,
    index: &SearchIndex,
    org_id: u64,
    raw_path: &str,
    by: &Actor,
    now: Timestamp,
) -> Result<TrashItem, KbError> {
    let p = path::normalize(raw_path)?;
    let deleted_by = by.acting_person();
    let item = store.write(|tx| {
        let doc = get_document(tx, org_id, &p)?.ok_or_else(|| missing(&p))?;
        let all = take_out(tx, &doc)?;
        let seq = tx.next_id("kb_trash")?;
        let item = TrashItem {
            path: doc.path.clone(),
            version: doc.version,
            deleted_at: now,
            deleted_by,
        };
        let target = format!("{} version {}", doc.path, doc.version);
        tx.put(
            KB_TRASH,
            &trash_key(org_id, seq),
            &Trashed {
                doc,
                versions: all,
                deleted_at: now,
                deleted_by,
            },
        )?;
        audit::admin_in(tx, org_id, by, "kb.delete", &target, now)?;
        Ok::<_, KbError>(item)
    })?;
    index.catch_up(store)?;
    Ok(item)
}

/// The organisation's deleted documents, most recently deleted first.
pub fn trash(tx: &impl Read, org_id: u64) -> Result<Vec<TrashItem>, StoreError> {
    let rows: Vec<(Vec<u8>, Trashed)> = tx.scan(KB_TRASH, &key::id(org_id))?;
    Ok(rows
        .into_iter()
        .rev()
        .map(|(_, t)| TrashItem {
            path: t.doc.path,
            version: t.doc.version,
            deleted_at: t.deleted_at,
            deleted_by: t.deleted_by,
        })
        .collect())
}

/// Brings the most recently deleted document at `path` back with its whole history (the same
/// versions), audited (`kb.restore`); refused while a live document holds the path.
pub fn restore(
    store: &Store,
    index: &SearchIndex,
    org_id: u64,
    raw_path: &str,
    by: &Actor,
    now: Timestamp,
) -> Result<TrashItem, KbError> {
    let p = path::normalize(raw_path)?;
    let item = store.write(|tx| {
        let rows: Vec<(Vec<u8>, Trashed)> = tx.scan(KB_TRASH, &key::id(org_id))?;
        let (k, t) = rows
            .into_iter()
            .rev()
            .find(|(_, t)| t.doc.path == p)
            .ok_or_else(|| not_in_trash(&p))?;
        put_in(tx, &t.doc, &t.versions)?;
        tx.delete(KB_TRASH, &k)?;
        let target = format!("{} version {}", t.doc.path, t.doc.version);
        audit::admin_in(tx, org_id, by, "kb.restore", &target, now)?;
        Ok::<_, KbError>(TrashItem {
            path: t.doc.path,
            version: t.doc.version,
            deleted_at: t.deleted_at,
            deleted_by: t.deleted_by,
        })
    })?;
    index.catch_up(store)?;
    Ok(item)
}

/// What a move did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Moved {
    pub from: String,
    pub to: String,
    pub version: u64,
}

/// Moves (renames) the document at `from` to `to` with its whole history, audited (`kb.move`);
/// refused when `to` is not a valid path or a live document holds it. The index drops the old
/// path and finds the new one before this returns.
pub fn move_document(
    store: &Store,
    index: &SearchIndex,
    org_id: u64,
    from: &str,
    to: &str,
    by: &Actor,
    now: Timestamp,
) -> Result<Moved, KbError> {
    let from = path::normalize(from)?;
    let to = path::normalize(to)?;
    if from == to {
        return Err(same_path(&from));
    }
    let moved = store.write(|tx| {
        let doc = get_document(tx, org_id, &from)?.ok_or_else(|| missing(&from))?;
        let all = take_out(tx, &doc)?;
        let version = doc.version;
        let doc = Document {
            path: to.clone(),
            ..doc
        };
        put_in(tx, &doc, &all)?;
        let target = format!("{from} to {to}");
        audit::admin_in(tx, org_id, by, "kb.move", &target, now)?;
        Ok::<_, KbError>(Moved {
            from: from.clone(),
            to: to.clone(),
            version,
        })
    })?;
    index.catch_up(store)?;
    Ok(moved)
}

/// Removes every trashed document deleted before `cutoff` (all organisations); returns how many
/// documents were purged. Their content goes with the next [`purge_orphaned_content`], which
/// housekeeping runs every round whether or not trash expired, so a crash between the two
/// leaves the content only until the next round.
pub fn purge_trash(store: &Store, cutoff: Timestamp) -> Result<usize, StoreError> {
    /// Deletions per write transaction, so a large purge never holds the writer for long.
    const CHUNK: usize = 500;
    let expired: Vec<Vec<u8>> = store.read(|tx| {
        Ok::<_, StoreError>(
            tx.scan::<Trashed>(KB_TRASH, b"")?
                .into_iter()
                .filter(|(_, t)| t.deleted_at < cutoff)
                .map(|(k, _)| k)
                .collect(),
        )
    })?;
    if !expired.is_empty() {
        mark_content_sweep_due(store)?;
    }
    store.delete_in_chunks(KB_TRASH, &expired, CHUNK)?;
    Ok(expired.len())
}

/// Removes content (and the text extracted from it) that no version of a live or trashed
/// document refers to; returns how many contents were removed. One write transaction, so a
/// write storing that content at the same moment is either before (and keeps it) or after
/// (and stores it anew). Extracted text or an extraction record left for content that is gone
/// goes too, uncounted. Only when due ([`mark_content_sweep_due`]).
pub fn purge_orphaned_content(store: &Store) -> Result<usize, StoreError> {
    // Reading every version takes the single writer for a moment per hundred thousand
    // documents: only when a purge may have left content behind.
    if store.read(|tx| tx.get::<bool>(META, CONTENT_SWEEP_DUE))? == Some(false) {
        return Ok(0);
    }
    store.write(|tx| {
        tx.put(META, CONTENT_SWEEP_DUE, &false)?;
        let mut referenced: HashSet<[u8; 32]> = HashSet::new();
        let mut keep = |hash_hex: &str| {
            if let Ok(h) = blake3::Hash::from_hex(hash_hex) {
                referenced.insert(*h.as_bytes());
            }
        };
        for (_, v) in tx.scan::<Version>(KB_VERSIONS, b"")? {
            keep(&v.hash);
        }
        for (_, t) in tx.scan::<Trashed>(KB_TRASH, b"")? {
            for v in &t.versions {
                keep(&v.hash);
            }
        }
        let unreferenced = |tx: &WriteTx, table| -> Result<Vec<Vec<u8>>, StoreError> {
            Ok(tx
                .scan_keys(table, b"", usize::MAX)?
                .into_iter()
                // A hash's own key only: the parts of a long value (its key and four bytes)
                // go with it.
                .filter(|k| {
                    <[u8; 32]>::try_from(k.as_slice()).is_ok_and(|h| !referenced.contains(&h))
                })
                .collect())
        };
        let orphans = unreferenced(tx, KB_CONTENT)?;
        let mut derived = unreferenced(tx, KB_TEXT)?;
        derived.extend(unreferenced(tx, KB_EXTRACTION)?);
        for k in &orphans {
            tx.delete_blob(KB_CONTENT, k)?;
        }
        for k in orphans.iter().chain(&derived) {
            tx.delete_blob(KB_TEXT, k)?;
            tx.delete(KB_EXTRACTION, k)?;
        }
        Ok(orphans.len())
    })
}
