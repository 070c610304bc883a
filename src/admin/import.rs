//! `kennis kb import ORG DIR`: every file below DIR becomes a document at its relative path
//! (under `--prefix`). Re-importing stores a new version only where the content changed.
//!
//! Files are stored in batches (one transaction, one sync each), the text of PDF and Office
//! files is extracted on the way (two at a time, in sandboxed children), the search index
//! catches up every few batches, and a large import ends with a compaction of the database
//! file and the index.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::{AdminContext, AdminError};
use crate::kb;
use crate::progress::{Progress, Report};
use crate::store::Compaction;

#[derive(Debug, Serialize)]
pub struct ImportSummary {
    pub files: usize,
    pub created: usize,
    pub revised: usize,
    pub unchanged: usize,
    pub skipped: Vec<String>,
    /// Binary files whose text was extracted.
    pub extracted: usize,
    /// Binary files whose text could not be extracted (they stay binary documents; the
    /// reason is on their page in the portal).
    pub extraction_failed: usize,
}

/// Files larger than this are skipped (with a message) rather than loaded into memory.
const MAX_FILE: u64 = 256 * 1024 * 1024;
/// A batch ends after this many files or bytes, whichever comes first.
const BATCH_FILES: usize = 512;
const BATCH_BYTES: u64 = 16 << 20;
/// The search index catches up after this many bytes (and at the end).
const INDEX_EVERY_BYTES: u64 = 64 << 20;
/// An import of at least this much is followed by a compaction.
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
        created: 0,
        revised: 0,
        unchanged: 0,
        skipped: Vec::new(),
        extracted: 0,
        extraction_failed: 0,
    };
    let now = ctx.clock.now();
    let mut writer = kb::Writer::new(&ctx.store, &ctx.kb_index).extracting(&ctx.extractor);
    let mut done = 0usize;
    let mut imported_bytes = 0u64;
    let mut since_index = 0u64;
    let mut rest = files.as_slice();
    while !rest.is_empty() {
        // The next batch: its files read into memory.
        let mut batch: Vec<(String, String, Vec<u8>)> = Vec::new();
        let mut batch_bytes = 0u64;
        while let Some((rel, tail)) = rest.split_first() {
            if batch.len() >= BATCH_FILES || batch_bytes >= BATCH_BYTES {
                break;
            }
            rest = tail;
            done += 1;
            let full = dir.join(rel);
            let rel_str = rel.to_string_lossy().replace('\\', "/");
            let size = std::fs::metadata(&full).map(|m| m.len()).unwrap_or(0);
            if size > MAX_FILE {
                summary
                    .skipped
                    .push(format!("{rel_str}: larger than 256 MB"));
                continue;
            }
            let bytes = std::fs::read(&full)
                .map_err(|e| AdminError::Refused(format!("{}: {e}", full.display())))?;
            let path = match &prefix {
                Some(p) => format!("{p}/{rel_str}"),
                None => rel_str.clone(),
            };
            batch_bytes += bytes.len() as u64;
            batch.push((rel_str, path, bytes));
        }
        let versions: Vec<kb::NewVersion<'_>> = batch
            .iter()
            .map(|(_, path, bytes)| kb::NewVersion {
                org_id,
                path,
                bytes,
                expect: kb::Expect::Any,
                by: None,
                now,
            })
            .collect();
        let outcomes = writer.put_many(&versions)?;
        for ((rel_str, _, _), outcome) in batch.iter().zip(outcomes) {
            match outcome {
                Ok(o) if !o.changed => summary.unchanged += 1,
                Ok(o) if o.created => summary.created += 1,
                Ok(_) => summary.revised += 1,
                Err(e) => summary.skipped.push(format!("{rel_str}: {e}")),
            }
        }
        imported_bytes += batch_bytes;
        since_index += batch_bytes;
        if since_index >= INDEX_EVERY_BYTES {
            writer.catch_up()?;
            since_index = 0;
        }
        progress(Progress::step("importing files", done as u64, total as u64));
    }
    let counts = writer.extract_counts();
    summary.extracted = counts.extracted;
    summary.extraction_failed = counts.failed;
    let indexed = writer.finish()?;
    if imported_bytes >= COMPACT_AFTER_BYTES {
        compact(ctx, progress)?;
    }
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

/// Compacts the search index and the database file (`kennis compact`, and after large
/// imports and reindexing).
pub fn compact(ctx: &AdminContext, progress: Report<'_>) -> Result<Compaction, AdminError> {
    progress(Progress::note(
        "compacting the search index and the database",
    ));
    ctx.kb_index.compact()?;
    Ok(ctx.store.compact(Duration::from_secs(30))?)
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
