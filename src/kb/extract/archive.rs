//! Zip containers (Office Open XML, OpenDocument, EPUB) read under guard: the entry count is
//! checked before the central directory is parsed, and every entry is read through a counting
//! reader that stops at the per-entry and total uncompressed limits and at the compression
//! ratio limit — the sizes an archive declares are never trusted. Only named parts are read;
//! archives inside the archive are never opened.

use std::io::{self, Cursor, Read};

use zip::ZipArchive;
use zip::result::ZipError;

use super::sink::Stop;
use super::{ExtractError, Format, Limits};

pub(super) fn looks_like_zip(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04")
}

const OLE_MAGIC: &[u8] = b"\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1";

/// An OLE compound file: old binary Office formats, and the wrapper of encrypted new ones.
pub(super) fn looks_like_ole(bytes: &[u8]) -> bool {
    bytes.starts_with(OLE_MAGIC)
}

/// A password-protected Word, Excel or PowerPoint file: an OLE container with an
/// `EncryptedPackage` stream instead of a zip archive.
pub(super) fn looks_like_encrypted_ooxml(bytes: &[u8]) -> bool {
    let name: Vec<u8> = "EncryptedPackage"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    looks_like_ole(bytes) && memchr::memmem::find(bytes, &name).is_some()
}

/// The entry a reference `target` made from the entry `from` names: relative to `from`'s
/// folder (`.` and `..` resolved), or from the root when it starts with `/`.
pub(super) fn resolve(from: &str, target: &str) -> String {
    if let Some(absolute) = target.strip_prefix('/') {
        return absolute.to_owned();
    }
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for seg in target.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

pub(super) struct Archive<'a> {
    zip: ZipArchive<Cursor<&'a [u8]>>,
    limits: Limits,
    /// Uncompressed bytes read so far, all entries together.
    total: u64,
}

/// The entry count the end-of-central-directory record claims (`None` when there is no such
/// record, which the zip reader then reports as damage). Read by hand because the zip reader
/// allocates for every entry while it opens the archive; checked again after opening.
fn declared_entries(bytes: &[u8]) -> Option<u64> {
    // The record is 22 bytes plus a comment of at most 65,535 bytes, at the very end.
    let from = bytes.len().saturating_sub(22 + 65_535);
    let tail = bytes.get(from..)?;
    let at = tail.windows(4).rposition(|w| w == b"PK\x05\x06")?;
    let count = tail.get(at + 10..at + 12)?;
    Some(u64::from(u16::from_le_bytes([
        *count.first()?,
        *count.get(1)?,
    ])))
}

fn damaged(e: ZipError) -> ExtractError {
    match e {
        ZipError::UnsupportedArchive(m) if m.contains("assword") => ExtractError::Encrypted,
        ZipError::UnsupportedArchive(m) => {
            ExtractError::Damaged(format!("unsupported zip archive ({m})"))
        }
        other => ExtractError::Damaged(format!("a broken zip archive ({other})")),
    }
}

impl<'a> Archive<'a> {
    pub(super) fn open(
        format: Format,
        bytes: &'a [u8],
        limits: &Limits,
    ) -> Result<Self, ExtractError> {
        if !looks_like_zip(bytes) {
            if matches!(format, Format::Docx | Format::Xlsx | Format::Pptx)
                && looks_like_encrypted_ooxml(bytes)
            {
                return Err(ExtractError::Encrypted);
            }
            if looks_like_ole(bytes) {
                return Err(ExtractError::Unsupported(format!(
                    "an old binary Office file (.doc, .xls or .ppt) named .{}",
                    format.extension()
                )));
            }
            return Err(ExtractError::Damaged(format!(
                "a .{} file is a zip archive, and this is not one",
                format.extension()
            )));
        }
        let too_many = |n: u64| {
            ExtractError::ZipBomb(format!(
                "{n} entries, more than the limit of {}",
                limits.zip_entries
            ))
        };
        if let Some(n) = declared_entries(bytes)
            && n > limits.zip_entries as u64
        {
            return Err(too_many(n));
        }
        let zip = ZipArchive::new(Cursor::new(bytes)).map_err(damaged)?;
        if zip.len() > limits.zip_entries {
            return Err(too_many(zip.len() as u64));
        }
        Ok(Archive {
            zip,
            limits: limits.clone(),
            total: 0,
        })
    }

    pub(super) fn has(&self, name: &str) -> bool {
        self.zip.index_for_name(name).is_some()
    }

    /// A guarded reader of the entry `name`, or `None` when there is none.
    pub(super) fn entry(&mut self, name: &str) -> Result<Option<Entry<'_, 'a>>, ExtractError> {
        let Some(index) = self.zip.index_for_name(name) else {
            return Ok(None);
        };
        let file = self.zip.by_index(index).map_err(damaged)?;
        if file.is_dir() {
            return Ok(None);
        }
        let compressed = file.compressed_size();
        Ok(Some(Entry {
            name: name.to_owned(),
            file,
            read: 0,
            compressed,
            total: &mut self.total,
            limits: &self.limits,
            tripped: None,
        }))
    }

    /// The whole entry `name` (for small parts: relations, manifests, shared strings).
    pub(super) fn read(&mut self, name: &str) -> Result<Option<Vec<u8>>, Stop> {
        let Some(mut entry) = self.entry(name)? else {
            return Ok(None);
        };
        let mut out = Vec::new();
        match entry.read_to_end(&mut out) {
            Ok(_) => Ok(Some(out)),
            Err(e) => Err(Stop::Failed(entry.error(&e.to_string()))),
        }
    }
}

/// One entry being read; counts what it gives and refuses to give more than the limits.
pub(super) struct Entry<'z, 'a> {
    name: String,
    file: zip::read::ZipFile<'z, Cursor<&'a [u8]>>,
    read: u64,
    compressed: u64,
    total: &'z mut u64,
    limits: &'z Limits,
    /// The limit this entry hit, if it hit one.
    tripped: Option<ExtractError>,
}

impl Entry<'_, '_> {
    /// What a read error of this entry means: a limit it hit, else damage.
    pub(super) fn error(&mut self, message: &str) -> ExtractError {
        if let Some(limit) = self.tripped.take() {
            return limit;
        }
        if message.contains("assword") {
            return ExtractError::Encrypted;
        }
        ExtractError::Damaged(format!("entry {} cannot be read ({message})", self.name))
    }

    fn check(&self) -> Option<ExtractError> {
        let l = self.limits;
        if self.read > l.entry_bytes {
            return Some(ExtractError::ZipBomb(format!(
                "entry {} unpacks to more than {} bytes",
                self.name, l.entry_bytes
            )));
        }
        if *self.total > l.unzipped_bytes {
            return Some(ExtractError::ZipBomb(format!(
                "the entries read unpack to more than {} bytes",
                l.unzipped_bytes
            )));
        }
        if self.read > l.ratio_floor_bytes
            && self.read > self.compressed.saturating_mul(l.zip_ratio)
        {
            return Some(ExtractError::ZipBomb(format!(
                "entry {} unpacks to more than {} times its packed size",
                self.name, l.zip_ratio
            )));
        }
        None
    }
}

impl Read for Entry<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = &self.tripped {
            return Err(io::Error::other(e.to_string()));
        }
        let n = self.file.read(buf)?;
        self.read += n as u64;
        *self.total += n as u64;
        if let Some(e) = self.check() {
            let message = e.to_string();
            self.tripped = Some(e);
            return Err(io::Error::other(message));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_against_their_entry() {
        assert_eq!(
            resolve("word/document.xml", "media/a.png"),
            "word/media/a.png"
        );
        assert_eq!(
            resolve("ppt/slides/slide1.xml", "../media/x.png"),
            "ppt/media/x.png"
        );
        assert_eq!(
            resolve("xl/workbook.xml", "/xl/worksheets/s.xml"),
            "xl/worksheets/s.xml"
        );
        assert_eq!(resolve("", "word/document.xml"), "word/document.xml");
        assert_eq!(
            resolve("OEBPS/content.opf", "./s/a.xhtml"),
            "OEBPS/s/a.xhtml"
        );
    }

    #[test]
    fn the_entry_count_is_read_from_the_end_record() {
        let mut bytes = b"PK\x03\x04 entries would be here".to_vec();
        // End of central directory: signature, disk numbers, 30 000 entries here and in all.
        bytes.extend_from_slice(b"PK\x05\x06\0\0\0\0\x30\x75\x30\x75");
        bytes.extend_from_slice(&[0; 10]);
        assert_eq!(declared_entries(&bytes), Some(30_000));
        assert_eq!(declared_entries(b"PK\x03\x04 no end record"), None);
    }
}
