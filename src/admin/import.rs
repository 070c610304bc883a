//! `kennis kb import ORG DIR`: every file below DIR becomes a document at its relative path
//! (under `--prefix`). Re-importing stores a new version only where the content changed.

use std::path::Path;

use serde::Serialize;

use super::{AdminContext, AdminError};
use crate::kb;

#[derive(Debug, Serialize)]
pub struct ImportSummary {
    pub files: usize,
    pub created: usize,
    pub revised: usize,
    pub unchanged: usize,
    pub skipped: Vec<String>,
}

/// Files larger than this are skipped (with a message) rather than loaded into memory.
const MAX_FILE: u64 = 256 * 1024 * 1024;

pub fn import_dir(
    ctx: &AdminContext,
    org_id: u64,
    dir: &Path,
    prefix: Option<&str>,
    progress: &mut dyn FnMut(&str),
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
    };
    let now = ctx.clock.now();
    let mut writer = kb::Writer::new(&ctx.store, &ctx.kb_index);
    for (i, rel) in files.iter().enumerate() {
        let full = dir.join(rel);
        let rel_str = rel.to_string_lossy().replace('\\', "/");
        let path = match &prefix {
            Some(p) => format!("{p}/{rel_str}"),
            None => rel_str.clone(),
        };
        let size = std::fs::metadata(&full).map(|m| m.len()).unwrap_or(0);
        if size > MAX_FILE {
            summary
                .skipped
                .push(format!("{rel_str}: larger than 256 MB"));
            continue;
        }
        let bytes = std::fs::read(&full)
            .map_err(|e| AdminError::Refused(format!("{}: {e}", full.display())))?;
        let version = kb::NewVersion {
            org_id,
            path: &path,
            bytes: &bytes,
            expect: kb::Expect::Any,
            by: None,
            now,
        };
        match writer.put(version) {
            Ok(o) if !o.changed => summary.unchanged += 1,
            Ok(o) if o.created => summary.created += 1,
            Ok(_) => summary.revised += 1,
            Err(kb::KbError::Store(e)) => return Err(e.into()),
            Err(e) => summary.skipped.push(format!("{rel_str}: {e}")),
        }
        if (i + 1) % 200 == 0 || i + 1 == total {
            progress(&format!("imported {} of {total} files", i + 1));
        }
    }
    let indexed = writer.finish()?;
    progress(&format!(
        "done: {} created, {} revised, {} unchanged, {} skipped; {indexed} index updates",
        summary.created,
        summary.revised,
        summary.unchanged,
        summary.skipped.len()
    ));
    Ok(summary)
}

/// Regular files below `dir`, relative to `root`; hidden files and folders and links are left
/// out.
fn collect(root: &Path, dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), AdminError> {
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
        } else if kind.is_file() {
            out.push(path.strip_prefix(root).expect("below root").to_owned());
        }
    }
    Ok(())
}
