//! Text extraction: turns the bytes of a stored PDF, Office, OpenDocument, RTF or EPUB file
//! into plain text for search and excerpts, bounded and safely.
//!
//! Two entry points: [`extract_in_process`] parses in the calling process (pure, no I/O; for
//! tests, benchmarks and the worker itself), and [`Extractor`] runs the same code in a child
//! process (`kennis extract-worker`) under a wall-clock limit, `RLIMIT_AS` and `RLIMIT_CPU`,
//! so a hostile file that makes a parser panic, loop or allocate without bound costs a child,
//! never the server. Inside, the structural guards of [`Limits`] still apply: input size, zip
//! entry count, uncompressed bytes per entry and in total (counted while reading, never taken
//! from the archive's own claims), the compression ratio, XML nesting depth, and the output
//! cap, at which extraction stops reading.
//!
//! The text's shape (see `docs/extraction.md`): lines separated by `\n`; a paragraph or a PDF
//! text line per line; a table or sheet row per line with cells separated by a tab; sheets in
//! order, each introduced by its name on a line; slides in order, a text box's paragraphs as
//! lines; never two empty lines in a row.

mod archive;
mod confine;
mod epub;
mod office;
mod opendocument;
mod pdf;
mod rtf;
mod sandbox;
mod sink;
mod xml;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use sandbox::{Extractor, SELFTEST_ENV, worker_main};

/// A format whose text kennis can extract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Pdf,
    Docx,
    Odt,
    Xlsx,
    Ods,
    Pptx,
    Odp,
    Rtf,
    Epub,
}

impl Format {
    /// Every format, in a fixed order.
    pub const ALL: [Format; 9] = [
        Format::Pdf,
        Format::Docx,
        Format::Odt,
        Format::Xlsx,
        Format::Ods,
        Format::Pptx,
        Format::Odp,
        Format::Rtf,
        Format::Epub,
    ];

    /// The file extension (lower case, without the dot) that names this format.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Pdf => "pdf",
            Format::Docx => "docx",
            Format::Odt => "odt",
            Format::Xlsx => "xlsx",
            Format::Ods => "ods",
            Format::Pptx => "pptx",
            Format::Odp => "odp",
            Format::Rtf => "rtf",
            Format::Epub => "epub",
        }
    }
}

/// The format of a file by its name's extension, confirmed by its first bytes: `None` when the
/// extension names no extractable format or the bytes are not of that format (random bytes
/// named `.xlsx`). An Office file encrypted with a password (an OLE container named `.docx`)
/// is confirmed, so that extracting it says [`ExtractError::Encrypted`].
pub fn format_of(path: &str, bytes: &[u8]) -> Option<Format> {
    let ext = super::path::extension(path)?;
    let format = Format::ALL.into_iter().find(|f| f.extension() == ext)?;
    let confirmed = match format {
        Format::Pdf => pdf::looks_like_pdf(bytes),
        Format::Rtf => rtf::looks_like_rtf(bytes),
        Format::Docx | Format::Xlsx | Format::Pptx => {
            archive::looks_like_zip(bytes) || archive::looks_like_encrypted_ooxml(bytes)
        }
        Format::Odt | Format::Ods | Format::Odp | Format::Epub => archive::looks_like_zip(bytes),
    };
    confirmed.then_some(format)
}

/// How far one extraction may go. [`Limits::DEFAULT`] suits the knowledge base.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock time for one extraction in the child (it is killed then); also its CPU
    /// limit (`RLIMIT_CPU`, rounded up to whole seconds).
    pub time: Duration,
    /// Text kept: the first this many bytes (on a character boundary); reading stops there.
    pub output_bytes: usize,
    /// Address space of the child (`RLIMIT_AS`).
    pub memory_bytes: u64,
    /// Largest input file.
    pub input_bytes: usize,
    /// Uncompressed bytes read from an archive, all entries together.
    pub unzipped_bytes: u64,
    /// Uncompressed bytes read from one archive entry.
    pub entry_bytes: u64,
    /// Entries an archive may list.
    pub zip_entries: usize,
    /// Largest uncompressed/compressed ratio of an entry, judged once it has given
    /// `ratio_floor_bytes`.
    pub zip_ratio: u64,
    /// Below this many uncompressed bytes an entry's ratio is not judged.
    pub ratio_floor_bytes: u64,
    /// Deepest XML element nesting (and RTF group nesting).
    pub xml_depth: usize,
}

impl Limits {
    /// The knowledge base's limits: 20 s, the first 1 MiB of text (the specification's
    /// per-document search limit), 1 GiB of address space, 100 MiB files, 512 MiB unzipped
    /// (256 MiB per entry), 10,000 entries, ratio 200 past 16 MiB, nesting 1,000.
    pub const DEFAULT: Limits = Limits {
        time: Duration::from_secs(20),
        output_bytes: super::MAX_SEARCHED_BYTES,
        memory_bytes: 1 << 30,
        input_bytes: 100 << 20,
        unzipped_bytes: 512 << 20,
        entry_bytes: 256 << 20,
        zip_entries: 10_000,
        zip_ratio: 200,
        ratio_floor_bytes: 16 << 20,
        xml_depth: 1_000,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Text taken from a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extracted {
    /// The text, lines separated by `\n`, at most `Limits::output_bytes` long.
    pub text: String,
    /// True when the text stopped at `Limits::output_bytes`.
    pub truncated: bool,
    /// Pages (PDF), sheets (XLSX, ODS) or slides (PPTX, ODP) seen; `None` for other formats.
    pub parts: Option<u32>,
}

/// Why a file's text could not be had. Each message is one sentence for an admin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum ExtractError {
    #[error("The file has no text layer — a scanned image?")]
    NoText,
    #[error("The file is protected with a password, so its text cannot be read.")]
    Encrypted,
    #[error("The file is damaged or not what its name says: {0}.")]
    Damaged(String),
    #[error("The file is too large to extract: {0}.")]
    TooLarge(String),
    #[error("The file looks like a zip bomb: {0}.")]
    ZipBomb(String),
    #[error("The file nests its structure more than {0} levels deep.")]
    TooDeep(usize),
    #[error("Extraction took longer than the time limit of {0} seconds.")]
    TimeLimit(u64),
    #[error("Extraction needed more memory than the limit of {0} MiB.")]
    MemoryLimit(u64),
    #[error("This kind of file is not supported: {0}.")]
    Unsupported(String),
    #[error("The extraction worker failed: {0}.")]
    Crashed(String),
}

impl ExtractError {
    /// A failure that says more about the moment than about the file (a busy machine, a worker
    /// that could not start): worth one more try later.
    pub fn may_pass(&self) -> bool {
        matches!(self, ExtractError::TimeLimit(_) | ExtractError::Crashed(_))
    }
}

/// Extracts the text of `bytes` as `format` in this process. Pure: no I/O, no global state;
/// bounded by `limits` except for time and memory, which only [`Extractor`] enforces.
pub fn extract_in_process(
    format: Format,
    bytes: &[u8],
    limits: &Limits,
) -> Result<Extracted, ExtractError> {
    if bytes.len() > limits.input_bytes {
        return Err(ExtractError::TooLarge(format!(
            "{} bytes, more than the limit of {}",
            bytes.len(),
            limits.input_bytes
        )));
    }
    // Parsers of hostile files may panic: that is a failed extraction, not a failed caller.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut out = sink::Sink::new(limits.output_bytes);
        let done = match format {
            Format::Pdf => pdf::extract(bytes, &mut out),
            Format::Rtf => rtf::extract(bytes, limits, &mut out),
            Format::Docx
            | Format::Xlsx
            | Format::Pptx
            | Format::Odt
            | Format::Ods
            | Format::Odp
            | Format::Epub => {
                let mut zip = archive::Archive::open(format, bytes, limits)?;
                match format {
                    Format::Docx => office::docx(&mut zip, limits, &mut out),
                    Format::Xlsx => office::xlsx(&mut zip, limits, &mut out),
                    Format::Pptx => office::pptx(&mut zip, limits, &mut out),
                    Format::Epub => epub::extract(&mut zip, limits, &mut out),
                    _ => opendocument::extract(format, &mut zip, limits, &mut out),
                }
            }
        };
        match done {
            Ok(()) | Err(sink::Stop::Full) => out.finish(),
            Err(sink::Stop::Failed(e)) => Err(e),
        }
    }));
    run.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Err(ExtractError::Crashed(format!(
            "the parser panicked ({message})"
        )))
    })
}

#[cfg(test)]
mod tests;
