//! Export of an organisation's knowledge base: the latest version of every live document, byte
//! for byte, as a folder tree (`kennis kb export ORG DIR`) or as one zip archive (the portal's
//! download for admins). Both stream: the documents are listed a page at a time (paths and
//! hashes only), and each document's content is read, decompressed and written on its own, so
//! the export's memory stays bounded by the largest document whatever the size of the
//! knowledge base (the store's own page cache, shared with every reader, comes on top).
//!
//! Paths are checked again before anything is written (kb paths are validated when stored,
//! but a file outside the target must be impossible whatever the store holds).

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{CWD, Dir, Mode, OFlags, mkdirat, openat};
use rustix::io::Errno;

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
    if done.is_multiple_of(25) || done == total {
        progress(done, total);
    }
}

/// The export folder `dir`, opened: created here (its parents as needed), or an empty folder
/// that exists. Its last component must not be a symbolic link (in a folder others may write
/// to, such as `/tmp`, someone could point it elsewhere), and it is checked empty through the
/// descriptor that every file is then written through.
fn open_root(dir: &Path) -> Result<OwnedFd, KbError> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
            }
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_error(dir, e)),
            }
        }
        Err(e) => return Err(io_error(dir, e)),
    }
    let root = match open_dir(CWD, dir) {
        Ok(fd) => fd,
        // (`O_NOFOLLOW` with `O_DIRECTORY` gives either for a link, by system.)
        Err(Errno::LOOP | Errno::NOTDIR) => {
            let link = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
            return Err(KbError::InvalidInput(if link {
                format!(
                    "{} is a symbolic link; name the folder itself",
                    dir.display()
                )
            } else {
                format!("{} is a file, not a folder", dir.display())
            }));
        }
        Err(e) => return Err(io_error(dir, e.into())),
    };
    let entries = Dir::read_from(&root).map_err(|e| io_error(dir, e.into()))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, e.into()))?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            return Err(KbError::InvalidInput(format!(
                "{} is not empty; export into a new or empty folder",
                dir.display()
            )));
        }
    }
    Ok(root)
}

/// Opens the folder `name` under `at` without following a symbolic link.
fn open_dir<P: rustix::path::Arg>(at: impl AsFd, name: P) -> Result<OwnedFd, Errno> {
    openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// A symbolic link or a file where the export needs a folder: something else wrote there.
fn not_a_folder(path: &Path) -> KbError {
    KbError::PathNotAllowed(format!(
        "{} is a symbolic link or a file, not a folder the export made; export stopped",
        path.display()
    ))
}

/// The folders of the document being written, each opened relative to the one above it (the
/// export folder first) and never through a symbolic link: a link planted in the tree while
/// the export runs is refused, not followed out of it. Documents come in path order, so the
/// open folders are kept for the next document in the same folder.
struct Tree<'a> {
    dir: &'a Path,
    root: OwnedFd,
    /// The open folders below the root, outermost first, with their names.
    open: Vec<(std::ffi::OsString, OwnedFd)>,
}

impl Tree<'_> {
    /// The descriptor of the folder `folders` (names below the root), made where missing.
    fn folder(&mut self, folders: &[&std::ffi::OsStr]) -> Result<&OwnedFd, KbError> {
        let same = self
            .open
            .iter()
            .zip(folders)
            .take_while(|((open, _), want)| open.as_os_str() == **want)
            .count();
        self.open.truncate(same);
        for name in folders.iter().skip(same) {
            let at = self.open.last().map_or(&self.root, |(_, fd)| fd);
            let shown = || {
                let mut p = self.dir.to_path_buf();
                p.extend(self.open.iter().map(|(n, _)| n));
                p.push(name);
                p
            };
            let fd = match open_dir(at, *name) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    match mkdirat(at, *name, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(io_error(&shown(), e.into())),
                    }
                    open_dir(at, *name).map_err(|e| match e {
                        Errno::LOOP | Errno::NOTDIR => not_a_folder(&shown()),
                        e => io_error(&shown(), e.into()),
                    })?
                }
                Err(Errno::LOOP | Errno::NOTDIR) => return Err(not_a_folder(&shown())),
                Err(e) => return Err(io_error(&shown(), e.into())),
            };
            self.open.push(((*name).to_owned(), fd));
        }
        Ok(self.open.last().map_or(&self.root, |(_, fd)| fd))
    }

    /// Creates the file at `rel` (a path [`safe_relative`] gave) with `bytes`: a new file only,
    /// never through a link or over something else put there.
    fn write(&mut self, rel: &Path, bytes: &[u8]) -> Result<(), KbError> {
        let target = self.dir.join(rel);
        let names: Vec<&std::ffi::OsStr> = rel.iter().collect();
        let Some((file, folders)) = names.split_last() else {
            return Err(unsafe_path(&rel.to_string_lossy()));
        };
        let at = self.folder(folders)?;
        let fd = openat(
            at,
            *file,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| io_error(&target, e.into()))?;
        std::fs::File::from(fd)
            .write_all(bytes)
            .map_err(|e| io_error(&target, e))
    }
}

/// Writes every live document of the organisation as a file at its path under `dir`, which is
/// created, or must be an empty folder (not a symbolic link). Every folder and file is opened
/// relative to `dir` without following symbolic links, so nothing planted in the folder while
/// the export runs can lead a file out of it. `progress` receives (documents done, documents
/// in all).
pub fn export_dir(
    store: &Store,
    org_id: u64,
    dir: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ExportSummary, KbError> {
    let root = open_root(dir)?;
    let mut tree = Tree {
        dir,
        root,
        open: Vec::new(),
    };
    let total = count_checked(store, org_id)?;
    let mut summary = ExportSummary::default();
    let mut done = 0;
    progress(0, total);
    each_document(store, org_id, |doc| {
        let rel = safe_relative(&doc.path).ok_or_else(|| unsafe_path(&doc.path))?;
        if let Some(bytes) = bytes_of(store, &doc.hash)? {
            tree.write(&rel, &bytes)?;
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
