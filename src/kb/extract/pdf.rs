//! PDF through `pdf-extract` (on `lopdf`): characters come in content-stream order with their
//! positions; a jump down or back to the left starts a new line, a gap wider than a tenth of
//! the font size is a space (pdf-extract's own plain-text rule), and pages are separated by an
//! empty line. Our output device writes into the [`Sink`], so extraction stops at the cap.
//! Encrypted files open with the empty password when they have one (owner-only protection);
//! else they are [`ExtractError::Encrypted`]. A file without any text is
//! [`ExtractError::NoText`] (a scan).

use pdf_extract::{Document, MediaBox, OutputDev, OutputError, Transform};

use super::ExtractError;
use super::sink::{Flow, Sink, Stop};

pub(super) fn looks_like_pdf(bytes: &[u8]) -> bool {
    let head = bytes.get(..bytes.len().min(1024)).unwrap_or(bytes);
    memchr::memmem::find(head, b"%PDF-").is_some()
}

struct Lines<'o> {
    out: &'o mut Sink,
    /// Set when the sink is full (the device then fails to stop pdf-extract).
    full: Option<Stop>,
    page_height: f64,
    last_end: f64,
    last_y: f64,
    word_start: bool,
}

impl Lines<'_> {
    fn put(&mut self, f: impl FnOnce(&mut Sink) -> Flow) -> Result<(), OutputError> {
        match f(self.out) {
            Ok(()) => Ok(()),
            Err(stop) => {
                self.full = Some(stop);
                Err(OutputError::FormatError(std::fmt::Error))
            }
        }
    }
}

impl OutputDev for Lines<'_> {
    fn begin_page(
        &mut self,
        _page: u32,
        media_box: &MediaBox,
        _art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), OutputError> {
        self.out.count_part();
        self.page_height = media_box.ury - media_box.lly;
        self.last_end = 100_000.0;
        self.last_y = 0.0;
        Ok(())
    }

    fn end_page(&mut self) -> Result<(), OutputError> {
        self.put(Sink::blank_line)
    }

    fn output_character(
        &mut self,
        trm: &Transform,
        width: f64,
        _spacing: f64,
        font_size: f64,
        text: &str,
    ) -> Result<(), OutputError> {
        // Position in page space with y growing downwards, and the font size as transformed.
        let (x, y) = (trm.m31, self.page_height - trm.m32);
        let size_x = font_size * (trm.m11 + trm.m21);
        let size_y = font_size * (trm.m12 + trm.m22);
        let size = (size_x * size_y).abs().sqrt();
        if self.word_start {
            let down = (y - self.last_y).abs();
            if down > size * 1.5 || (x < self.last_end && down > size * 0.5) {
                self.put(Sink::end_line)?;
            } else if x > self.last_end + size * 0.1 {
                self.put(|s| s.push(" "))?;
            }
        }
        self.put(|s| s.push(text))?;
        self.word_start = false;
        self.last_y = y;
        self.last_end = x + width * size;
        Ok(())
    }

    fn begin_word(&mut self) -> Result<(), OutputError> {
        self.word_start = true;
        Ok(())
    }

    fn end_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
}

pub(super) fn extract(bytes: &[u8], out: &mut Sink) -> Flow {
    if !looks_like_pdf(bytes) {
        return Err(Stop::Failed(ExtractError::Damaged(
            "a .pdf file starts with %PDF-, and this one does not".into(),
        )));
    }
    let mut doc = Document::load_mem(bytes).map_err(|e| {
        let message = e.to_string();
        if message.to_ascii_lowercase().contains("decrypt") {
            ExtractError::Encrypted
        } else {
            ExtractError::Damaged(format!("it cannot be read as a PDF ({message})"))
        }
    })?;
    if doc.is_encrypted() && doc.decrypt("").is_err() {
        return Err(Stop::Failed(ExtractError::Encrypted));
    }
    let mut lines = Lines {
        out,
        full: None,
        page_height: 0.0,
        last_end: 100_000.0,
        last_y: 0.0,
        word_start: false,
    };
    let result = pdf_extract::output_doc(&doc, &mut lines);
    if let Some(stop) = lines.full.take() {
        return Err(stop);
    }
    if let Err(e) = result {
        return Err(Stop::Failed(ExtractError::Damaged(format!(
            "its pages cannot be read ({e})"
        ))));
    }
    if lines.out.is_empty() {
        return Err(Stop::Failed(ExtractError::NoText));
    }
    Ok(())
}
