//! `kennis kb import ORG DIR`: every file below DIR becomes a document at its relative path
//! (under `--prefix`). Re-importing stores a new version only where the content changed.
//!
//! Files are stored in batches (one transaction, one sync each), the text of PDF and Office
//! files is extracted on the way (two at a time, in sandboxed children), a thread of its own
//! reads the next batch while one is stored, the search index catches up every few batches
//! with the texts just stored handed to it (`kb::handed`), and a large import ends with a
//! merge of the index and the database file's unused tail given back. The file is not
//! rewritten: content is kept in the order it is written (`store::blob`), so its pages are
//! full already (a rewrite took an eighth of a 100 MB import and saved 0.7 % of the file,
//! stop 46).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{AdminContext, AdminError};
use crate::kb;
use crate::progress::{Progress, Report};
use crate::store::Compaction;

#[derive(Debug, Default, Serialize)]
pub struct ImportSummary {
    pub files: usize,
    pub created: usize,
    pub revised: usize,
    pub unchanged: usize,
    pub skipped: Vec<String>,
    /// Binary files whose text was extracted.
    pub extracted: usize,
    /// Binary files whose text could not be extracted (they stay binary documents; the
    /// reason is also on their page in the portal).
    pub extraction_failed: usize,
    /// Which, and why.
    pub extraction_failures: Vec<kb::ExtractionFailure>,
    /// Changes the search index took in for this import (a new or revised document is one).
    pub index_updates: usize,
}

/// Files larger than this are skipped (with a message) rather than loaded into memory.
const MAX_FILE: u64 = 256 * 1024 * 1024;
/// A batch ends after this many files or bytes, whichever comes first.
const BATCH_FILES: usize = 4096;
const BATCH_BYTES: u64 = 16 << 20;
/// The first batch is this much smaller, the next ones twice as large as the one before
/// until they are full size: the index, which waits for the first batch's commit, starts at
/// once instead of after a full batch (half a second of the second core at 100 MB).
const FIRST_BATCH_SHARE: usize = 16;
/// An import of at least this much is followed by a merge of the index and a trim of the file.
const COMPACT_AFTER_BYTES: u64 = 32 << 20;

pub fn import_dir(
    ctx: &AdminContext,
    org_id: u64,
    dir: &Path,
    prefix: Option<&str>,
    progress: Report<'_>,
) -> Result<ImportSummary, AdminError> {
    if !dir.is_dir() {
        return Err(AdminError::Refused(format!(
            "{} is not a folder",
            dir.display()
        )));
    }
    let prefix = match prefix.map(|p| p.trim_matches('/')) {
        None | Some("") => None,
        Some(p) => Some(kb::path::normalize(p)?),
    };
    let mut files = Vec::new();
    collect(dir, dir, &mut files)?;
    files.sort();
    let total = files.len();
    let mut summary = ImportSummary {
        files: total,
        ..ImportSummary::default()
    };
    let now = ctx.clock.now();
    let mut writer = kb::Writer::new(&ctx.store, &ctx.kb_index).extracting(&ctx.extractor);
    // Texts handed to the index and not taken (a document changed again meanwhile, an import
    // that failed) are let go however the import ends.
    let _handed = ForgetHanded(&ctx.kb_index);
    let mut imported_bytes = 0u64;
    // The index catches up on its own thread while the next batches are stored: storing
    // keeps one core busy, indexing the other.
    let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
    let stored = std::thread::scope(|scope| {
        let indexer = scope.spawn(move || -> Result<usize, kb::KbError> {
            let mut indexed = 0;
            while woken.recv().is_ok() {
                indexed += ctx.kb_index.follow(&ctx.store, false)?;
            }
            Ok(indexed)
        });
        let stored = store_batches(
            &files,
            dir,
            prefix.as_deref(),
            org_id,
            now,
            &mut writer,
            &mut summary,
            &mut imported_bytes,
            &wake,
            progress,
        );
        drop(wake);
        let indexed = indexer
            .join()
            .unwrap_or_else(|_| Err(kb::KbError::Index("the indexing thread panicked".into())));
        stored.and(indexed.map_err(AdminError::from))
    });
    let indexed_meanwhile = stored?;
    let counts = writer.extract_counts();
    summary.extracted = counts.extracted;
    summary.extraction_failed = counts.failed;
    summary.extraction_failures = counts.failures;
    // What is left is read into the index; then the index writes its segments while the
    // database file gives back its unused tail (neither waits for the other).
    let started = Instant::now();
    let indexed = indexed_meanwhile + ctx.kb_index.follow(&ctx.store, false)?;
    summary.index_updates = indexed;
    let backlog_ms = started.elapsed().as_millis() as u64;
    if imported_bytes >= COMPACT_AFTER_BYTES {
        progress(Progress::note(
            "merging the search index and trimming the database file",
        ));
        std::thread::scope(|scope| {
            let committing = scope.spawn(|| {
                let committed = ctx.kb_index.commit_pending();
                tracing::debug!(
                    ms = started.elapsed().as_millis() as u64,
                    "import: index committed"
                );
                committed
            });
            // redb grows a file written in one go by doubling it, and a data directory
            // measured by its files' lengths should not count that.
            let trimmed = ctx.store.trim();
            tracing::debug!(
                ms = started.elapsed().as_millis() as u64,
                "import: store trimmed"
            );
            let committed = committing
                .join()
                .unwrap_or_else(|_| Err(kb::KbError::Index("the index commit panicked".into())));
            committed?;
            // Everything is stored and indexed by now: a trim that could not run is worth
            // saying, not failing the import for.
            if let Err(e) = trimmed {
                progress(not_compacted(&e));
            }
            Ok::<_, AdminError>(())
        })?;
        ctx.kb_index.compact(false)?;
    } else {
        ctx.kb_index.commit_pending()?;
    }
    tracing::debug!(
        backlog_ms,
        finishing_ms = started.elapsed().as_millis() as u64,
        "import: finished (the index's backlog, commit, compaction)"
    );
    progress(Progress::note(format!(
        "done: {} created, {} revised, {} unchanged, {} skipped; {} extracted, {} without text; {indexed} index updates",
        summary.created,
        summary.revised,
        summary.unchanged,
        summary.skipped.len(),
        summary.extracted,
        summary.extraction_failed,
    )));
    Ok(summary)
}

/// Lets go of the texts handed to the index when dropped.
struct ForgetHanded<'a>(&'a kb::index::SearchIndex);

impl Drop for ForgetHanded<'_> {
    fn drop(&mut self) {
        self.0.forget_handed();
    }
}

/// A batch of files read into memory: (relative path, document path) each, their content, the
/// files skipped on the way, and how many files of the import it reaches (for progress).
struct Batch {
    files: Vec<(String, String)>,
    /// Their content made ready for storing (`kb::prepare`), in the same order.
    prepared: Vec<kb::Prepared>,
    skipped: Vec<String>,
    bytes: u64,
    done: usize,
}

/// Stores the files in batches, waking the indexer after each. A thread of its own reads the
/// next batch while one is stored, and hashes and compresses it (`kb::prepare`): opening and
/// reading many small files is kernel time, and compressing is most of what storing costs,
/// neither of which need wait for the single writer (stop 47).
#[allow(clippy::too_many_arguments)]
fn store_batches(
    files: &[PathBuf],
    dir: &Path,
    prefix: Option<&str>,
    org_id: u64,
    now: jiff::Timestamp,
    writer: &mut kb::Writer<'_>,
    summary: &mut ImportSummary,
    imported_bytes: &mut u64,
    wake: &std::sync::mpsc::SyncSender<()>,
    progress: Report<'_>,
) -> Result<(), AdminError> {
    let total = files.len();
    let mut indexing = true;
    // One batch read ahead at most: memory stays at two batches.
    let (send, batches) = std::sync::mpsc::sync_channel::<Result<Batch, AdminError>>(1);
    std::thread::scope(|scope| {
        let store = writer.store();
        scope.spawn(move || read_batches(files, dir, prefix, store, org_id, &send));
        // Dropping the receiver on an error ends the reading thread at its next send.
        for batch in batches {
            let batch = batch?;
            summary.skipped.extend(batch.skipped);
            let versions: Vec<kb::NewVersion<'_>> = batch
                .files
                .iter()
                .zip(&batch.prepared)
                .map(|((_, path), prepared)| kb::NewVersion {
                    org_id,
                    path,
                    bytes: prepared.bytes(),
                    expect: kb::Expect::Any,
                    by: None,
                    now,
                })
                .collect();
            let outcomes = writer.put_many_prepared(&versions, &batch.prepared)?;
            drop(versions);
            // What changed is handed to the index with its bytes and their hash, which it need
            // not read back nor make again.
            let mut changed = Vec::new();
            for (((rel_str, _), prepared), outcome) in
                batch.files.into_iter().zip(batch.prepared).zip(outcomes)
            {
                match outcome {
                    Ok(o) if !o.changed => summary.unchanged += 1,
                    Ok(o) => {
                        if o.created {
                            summary.created += 1;
                        } else {
                            summary.revised += 1;
                        }
                        changed.push((org_id, o.path, prepared));
                    }
                    Err(e) => summary.skipped.push(format!("{rel_str}: {e}")),
                }
            }
            // At most a bound ahead of the index, which then reads none of them back; an
            // indexer that stopped (its error ends the import) is neither handed nor waited for.
            if indexing {
                writer.index().hand_when_room(changed);
            }
            *imported_bytes += batch.bytes;
            // Full means the indexer has a wake-up waiting already.
            if let Err(std::sync::mpsc::TrySendError::Disconnected(())) = wake.try_send(()) {
                indexing = false;
            }
            progress(Progress::step(
                "importing files",
                batch.done as u64,
                total as u64,
            ));
        }
        Ok(())
    })
}

/// Reads the files into batches and sends them, until every file is read, a file cannot be
/// read (sent as the error), or the storing side stops listening.
fn read_batches(
    files: &[PathBuf],
    dir: &Path,
    prefix: Option<&str>,
    store: &crate::store::Store,
    org_id: u64,
    send: &std::sync::mpsc::SyncSender<Result<Batch, AdminError>>,
) {
    let mut done = 0usize;
    let mut rest = files;
    let mut share = FIRST_BATCH_SHARE;
    while !rest.is_empty() {
        let mut contents = Vec::new();
        let mut batch = Batch {
            files: Vec::new(),
            prepared: Vec::new(),
            skipped: Vec::new(),
            bytes: 0,
            done: 0,
        };
        let (max_files, max_bytes) = (BATCH_FILES / share, BATCH_BYTES / share as u64);
        share = (share / 2).max(1);
        while let Some((rel, tail)) = rest.split_first() {
            if batch.files.len() >= max_files || batch.bytes >= max_bytes {
                break;
            }
            rest = tail;
            done += 1;
            let rel_str = rel.to_string_lossy().replace('\\', "/");
            let bytes = match read_file(&dir.join(rel)) {
                Ok(Some(bytes)) => bytes,
                Ok(None) => {
                    batch.skipped.push(format!("{rel_str}: larger than 256 MB"));
                    continue;
                }
                Err(e) => {
                    let _ = send.send(Err(e));
                    return;
                }
            };
            let path = match prefix {
                Some(p) => format!("{p}/{rel_str}"),
                None => rel_str.clone(),
            };
            batch.bytes += bytes.len() as u64;
            batch.files.push((rel_str, path));
            contents.push(bytes);
        }
        batch.done = done;
        let documents: Vec<(&str, Vec<u8>)> = batch
            .files
            .iter()
            .map(|(_, path)| path.as_str())
            .zip(contents)
            .collect();
        match kb::prepare(store, org_id, documents) {
            Ok(prepared) => batch.prepared = prepared,
            Err(e) => {
                let _ = send.send(Err(e.into()));
                return;
            }
        }
        if send.send(Ok(batch)).is_err() {
            return;
        }
    }
}

/// A file's bytes, or `None` when it is larger than [`MAX_FILE`]; its size is taken from the
/// open file, so the path is looked up once.
fn read_file(full: &Path) -> Result<Option<Vec<u8>>, AdminError> {
    use std::io::Read as _;
    let refused = |e: std::io::Error| AdminError::Refused(format!("{}: {e}", full.display()));
    let mut file = std::fs::File::open(full).map_err(refused)?;
    let size = file.metadata().map_err(refused)?.len();
    if size > MAX_FILE {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // At most one byte past what it said: a file that grows meanwhile is not read on forever.
    (&mut file)
        .take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(refused)?;
    if bytes.len() as u64 > MAX_FILE {
        return Ok(None);
    }
    Ok(Some(bytes))
}

/// What is said when the compaction after an import or a reindex could not run.
fn not_compacted(e: &impl std::fmt::Display) -> Progress {
    Progress::note(format!(
        "the database file was not compacted ({e}); everything is stored: run `kennis compact` later"
    ))
}

/// [`compact`] after work that is done already (a reindex): a failure is said, not returned.
pub fn compact_after(ctx: &AdminContext, progress: Report<'_>) -> Option<Compaction> {
    match compact(ctx, progress) {
        Ok(c) => Some(c),
        Err(e) => {
            progress(not_compacted(&e));
            None
        }
    }
}

/// Merges the search index and compacts the database file (`kennis compact`, `reindex`).
pub fn compact(ctx: &AdminContext, progress: Report<'_>) -> Result<Compaction, AdminError> {
    progress(Progress::note(
        "compacting the search index and the database",
    ));
    let started = Instant::now();
    ctx.kb_index.compact(true)?;
    let index_ms = started.elapsed().as_millis() as u64;
    let started = Instant::now();
    let mut c = ctx.store.compact(Duration::from_secs(30))?;
    c.bytes_after = ctx.store.trim()?.bytes_after;
    tracing::debug!(
        index_ms,
        store_ms = started.elapsed().as_millis() as u64,
        "compaction"
    );
    Ok(c)
}

/// Regular files below `dir`, relative to `root`; hidden files and folders and links are left
/// out.
fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), AdminError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| AdminError::Refused(format!("{}: {e}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| AdminError::Refused(e.to_string()))?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry
            .file_type()
            .map_err(|e| AdminError::Refused(e.to_string()))?;
        let path = entry.path();
        if kind.is_dir() {
            collect(root, &path, out)?;
        } else if kind.is_file()
            && let Ok(rel) = path.strip_prefix(root)
        {
            out.push(rel.to_owned());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::index::SearchIndex;
    use crate::store::Store;

    /// An import whose indexer stopped (its error ends the import once everything is stored)
    /// hands it no more texts: handed, they would fill the hold, and each batch past its bound
    /// would wait for room that no one makes (stop 56). The first batch is handed before the
    /// import can know; the rest are stored and not handed.
    #[test]
    fn an_import_whose_indexer_stopped_stores_everything_and_hands_it_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let files_dir = dir.path().join("files");
        std::fs::create_dir(&files_dir).unwrap();
        let text = "kozijn van hout\n".repeat(8);
        let count = 600;
        for i in 0..count {
            std::fs::write(files_dir.join(format!("d{i:04}.md")), &text).unwrap();
        }
        let mut files = Vec::new();
        collect(&files_dir, &files_dir, &mut files).unwrap();
        files.sort();
        let store = Store::open(&dir.path().join("data")).unwrap();
        let index = SearchIndex::open(&dir.path().join("index"), false).unwrap();
        let mut writer = kb::Writer::new(&store, &index);
        let mut summary = ImportSummary {
            files: count,
            ..ImportSummary::default()
        };
        let mut imported = 0;
        let mut steps = 0;
        // The indexer is gone before the first batch is stored.
        let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
        drop(woken);
        store_batches(
            &files,
            &files_dir,
            None,
            1,
            jiff::Timestamp::now(),
            &mut writer,
            &mut summary,
            &mut imported,
            &wake,
            &mut |_| steps += 1,
        )
        .unwrap();
        assert_eq!(summary.created, count);
        assert!(summary.skipped.is_empty(), "{:?}", summary.skipped);
        assert_eq!(imported, (count * text.len()) as u64);
        let first_batch = BATCH_FILES / FIRST_BATCH_SHARE;
        assert!(steps >= 2, "{steps} batches: the test needs more than one");
        assert_eq!(index.handed_bytes(), first_batch * text.len());
        // Everything is stored: the index takes it all in once it follows, the first batch
        // from what it was handed.
        assert_eq!(index.catch_up(&store).unwrap(), count);
        assert_eq!(index.handed_bytes(), 0);
    }
}
