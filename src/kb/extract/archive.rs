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
                && super::office::looks_like_encrypted_ooxml(bytes)
            {
                return Err(ExtractError::Encrypted);
            }
            if super::office::looks_like_ole(bytes) {
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
    use std::io::Write;
    use zip::write::SimpleFileOptions;

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, data) in entries {
            w.start_file(*name, SimpleFileOptions::default()).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn entries_are_counted_while_read() {
        let big = vec![b'a'; 100_000];
        let bytes = zip_of(&[("a.xml", &big), ("b.xml", b"<x/>")]);
        let limits = Limits {
            entry_bytes: 50_000,
            ..Limits::DEFAULT
        };
        let mut zip = Archive::open(Format::Docx, &bytes, &limits).unwrap();
        assert!(zip.has("b.xml"));
        assert_eq!(zip.read("b.xml").unwrap().unwrap(), b"<x/>");
        assert!(zip.read("c.xml").unwrap().is_none());
        match zip.read("a.xml") {
            Err(Stop::Failed(ExtractError::ZipBomb(m))) => assert!(m.contains("a.xml"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_ratio_is_judged_past_the_floor() {
        let big = vec![b'a'; 300_000];
        let bytes = zip_of(&[("a.xml", &big)]);
        let limits = Limits {
            ratio_floor_bytes: 100_000,
            zip_ratio: 50,
            ..Limits::DEFAULT
        };
        let mut zip = Archive::open(Format::Odt, &bytes, &limits).unwrap();
        match zip.read("a.xml") {
            Err(Stop::Failed(ExtractError::ZipBomb(m))) => assert!(m.contains("50 times"), "{m}"),
            other => panic!("{other:?}"),
        }
        let limits = Limits {
            ratio_floor_bytes: 1 << 20,
            zip_ratio: 50,
            ..Limits::DEFAULT
        };
        let mut zip = Archive::open(Format::Odt, &bytes, &limits).unwrap();
        assert_eq!(zip.read("a.xml").unwrap().unwrap().len(), 300_000);
    }

    #[test]
    fn too_many_entries_are_refused_before_reading() {
        let names: Vec<String> = (0..30).map(|i| format!("{i}.xml")).collect();
        let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
        let bytes = zip_of(&entries);
        assert_eq!(declared_entries(&bytes), Some(30));
        let limits = Limits {
            zip_entries: 29,
            ..Limits::DEFAULT
        };
        let err = Archive::open(Format::Xlsx, &bytes, &limits).err().unwrap();
        assert!(matches!(err, ExtractError::ZipBomb(_)), "{err:?}");
    }
}
