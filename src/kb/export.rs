//! Export of an organisation's knowledge base: the latest version of every live document, byte
//! for byte, as a folder tree (`kennis kb export ORG DIR`) or as one zip archive (the portal's
//! download for admins). Both stream: the documents are listed a page at a time (paths and
//! hashes only), and each document's content is read, decompressed and written on its own, so
//! the export's memory stays bounded by the largest document whatever the size of the
//! knowledge base (the store's own page cache, shared with every reader, comes on top).
//!
//! Paths are checked again before anything is written (kb paths are validated when stored,
//! but a file outside the target must be impossible whatever the store holds).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::{DocKind, Document, KbError, content, doc_key};
use crate::store::{KB_DOCS, Store, StoreError};

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ExportSummary {
    /// Documents written.
    pub documents: u64,
    /// Bytes of document content written.
    pub bytes: u64,
}

/// Documents read per page of the listing, so not even the list is whole in memory.
const PAGE: usize = 256;

/// Calls `each` with every live document of the organisation in path order, a page of records
/// (no content) at a time, each page its own read transaction.
fn each_document(
    store: &Store,
    org_id: u64,
    mut each: impl FnMut(Document) -> Result<(), KbError>,
) -> Result<(), KbError> {
    let prefix = doc_key(org_id, "");
    let mut from = prefix.clone();
    loop {
        let page: Vec<(Vec<u8>, Document)> = store.read(|tx| tx.range(KB_DOCS, &from, PAGE))?;
        let full = page.len() == PAGE;
        let mut last = None;
        for (k, doc) in page {
            if !k.starts_with(&prefix) {
                return Ok(());
            }
            each(doc)?;
            last = Some(k);
        }
        match last {
            Some(mut k) if full => {
                k.push(0);
                from = k;
            }
            _ => return Ok(()),
        }
    }
}

/// How many documents there are, every path checked before anything is written.
fn count_checked(store: &Store, org_id: u64) -> Result<u64, KbError> {
    let mut n = 0;
    each_document(store, org_id, |doc| {
        safe_relative(&doc.path).ok_or_else(|| unsafe_path(&doc.path))?;
        n += 1;
        Ok(())
    })?;
    Ok(n)
}

/// `path` as a relative file system path of normal components only, or `None` when it could
/// leave the folder it is written under.
pub fn safe_relative(path: &str) -> Option<PathBuf> {
    if path.is_empty() || path.contains(['\\', '\0']) {
        return None;
    }
    let mut out = PathBuf::new();
    for segment in path.split('/') {
        let mut parts = Path::new(segment).components();
        match (parts.next(), parts.next()) {
            (Some(Component::Normal(s)), None) if s == segment => out.push(s),
            _ => return None,
        }
    }
    Some(out)
}

fn unsafe_path(path: &str) -> KbError {
    KbError::PathNotAllowed(format!("`{path}` cannot be written safely; export stopped"))
}

fn io_error(path: &Path, source: std::io::Error) -> KbError {
    KbError::Store(StoreError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Reads one document's content; `None` when it is gone (purged since the list was read).
fn bytes_of(store: &Store, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
    store.read(|tx| content(tx, hash))
}

/// Calls `progress` now and then (and for the last document).
fn report(progress: &mut dyn FnMut(u64, u64), done: u64, total: u64) {
    if done % 25 == 0 || done == total {
        progress(done, total);
    }
}

/// Writes every live document of the organisation as a file at its path under `dir`, which is
/// created, or must be empty. `progress` receives (documents done, documents in all).
pub fn export_dir(
    store: &Store,
    org_id: u64,
    dir: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ExportSummary, KbError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(KbError::InvalidInput(format!(
                    "{} is not empty; export into a new or empty folder",
                    dir.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(KbError::InvalidInput(format!(
                "{} is a file, not a folder",
                dir.display()
            )));
        }
        Err(e) => return Err(io_error(dir, e)),
    }
    let total = count_checked(store, org_id)?;
    let mut summary = ExportSummary::default();
    let mut done = 0;
    progress(0, total);
    each_document(store, org_id, |doc| {
        let rel = safe_relative(&doc.path).ok_or_else(|| unsafe_path(&doc.path))?;
        if let Some(bytes) = bytes_of(store, &doc.hash)? {
            let target = dir.join(rel);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
            }
            // `create_new`: never through a link or over a file something else put there.
            let mut file = std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&target)
                .map_err(|e| io_error(&target, e))?;
            file.write_all(&bytes).map_err(|e| io_error(&target, e))?;
            summary.documents += 1;
            summary.bytes += bytes.len() as u64;
        }
        done += 1;
        report(progress, done, total.max(done));
        Ok(())
    })?;
    Ok(summary)
}

/// Writes every live document of the organisation into a zip archive on `out`, which need not
/// seek (a response body): text deflated, binary files (compressed already) stored.
pub fn export_zip<W: Write>(store: &Store, org_id: u64, out: W) -> Result<ExportSummary, KbError> {
    use zip::CompressionMethod;
    use zip::write::SimpleFileOptions;
    let zip_error = |e: zip::result::ZipError| match e {
        zip::result::ZipError::Io(e) => io_error(Path::new("zip"), e),
        other => KbError::InvalidInput(format!("zip: {other}")),
    };
    count_checked(store, org_id)?;
    let mut zip = zip::ZipWriter::new_stream(out);
    let mut summary = ExportSummary::default();
    each_document(store, org_id, |doc| {
        if safe_relative(&doc.path).is_none() {
            return Err(unsafe_path(&doc.path));
        }
        let Some(bytes) = bytes_of(store, &doc.hash)? else {
            return Ok(());
        };
        let method = match doc.kind {
            DocKind::Text => CompressionMethod::Deflated,
            DocKind::Binary => CompressionMethod::Stored,
        };
        let options = SimpleFileOptions::default()
            .compression_method(method)
            .large_file(bytes.len() as u64 >= u64::from(u32::MAX))
            .unix_permissions(0o644);
        zip.start_file(doc.path.as_str(), options)
            .map_err(zip_error)?;
        zip.write_all(&bytes)
            .map_err(|e| io_error(Path::new(&doc.path), e))?;
        summary.documents += 1;
        summary.bytes += bytes.len() as u64;
        Ok(())
    })?;
    zip.finish().map_err(zip_error)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::safe_relative;

    #[test]
    fn only_plain_relative_paths_are_written() {
        assert_eq!(
            safe_relative("a/b.md").unwrap(),
            std::path::PathBuf::from("a/b.md")
        );
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a/.",
            "a\\b",
            "a\0b",
        ] {
            assert!(safe_relative(bad).is_none(), "{bad:?}");
        }
    }
}
