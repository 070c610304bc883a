//! RTF: the text of the document's groups, skipping destinations that are not body text
//! (font and colour tables, styles, pictures, headers, field instructions, `\*` groups).
//! Written by hand — RTF text is a small token language; the one crate for it builds a whole
//! document model first (see `docs/extraction.md`). `\'hh` bytes are decoded in the
//! document's `\ansicpg` code page, `\uN` characters replace their `\ucN` fallbacks.

use encoding_rs::{Encoding, WINDOWS_1252};

use super::sink::{Flow, Sink, Stop};
use super::{ExtractError, Limits};

pub(super) fn looks_like_rtf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"{\\rtf")
}

/// Destinations whose text is not part of the document's body.
const SKIPPED: &[&[u8]] = &[
    b"fonttbl",
    b"colortbl",
    b"stylesheet",
    b"info",
    b"pict",
    b"object",
    b"header",
    b"headerl",
    b"headerr",
    b"headerf",
    b"footer",
    b"footerl",
    b"footerr",
    b"footerf",
    b"footnote",
    b"fldinst",
    b"themedata",
    b"colorschememapping",
    b"datastore",
    b"latentstyles",
    b"listtable",
    b"listoverridetable",
    b"rsidtbl",
    b"generator",
    b"xmlnstbl",
    b"mmathPr",
    b"pgdsctbl",
    b"filetbl",
    b"revtbl",
    b"bkmkstart",
    b"bkmkend",
    b"xe",
    b"tc",
];

fn code_page(n: i32) -> &'static Encoding {
    let label = match n {
        874 => "windows-874".to_owned(),
        932 => "shift_jis".to_owned(),
        936 => "gbk".to_owned(),
        949 => "euc-kr".to_owned(),
        950 => "big5".to_owned(),
        10000 => "macintosh".to_owned(),
        1250..=1258 => format!("windows-{n}"),
        _ => return WINDOWS_1252,
    };
    Encoding::for_label(label.as_bytes()).unwrap_or(WINDOWS_1252)
}

#[derive(Clone, Copy)]
struct Group {
    skip: bool,
    /// Fallback characters after a `\uN`.
    uc: u32,
}

struct Parser<'o> {
    out: &'o mut Sink,
    encoding: &'static Encoding,
    /// Bytes waiting to be decoded (a multi-byte character may span several `\'hh`).
    pending: Vec<u8>,
    group: Group,
    /// Fallback characters still to skip.
    to_skip: u32,
}

impl Parser<'_> {
    fn flush(&mut self) -> Flow {
        if self.pending.is_empty() {
            return Ok(());
        }
        let (text, _) = self.encoding.decode_without_bom_handling(&self.pending);
        let text = text.into_owned();
        self.pending.clear();
        self.out.push(&text)
    }

    fn byte(&mut self, b: u8) {
        if self.to_skip > 0 {
            self.to_skip -= 1;
        } else if !self.group.skip {
            self.pending.push(b);
        }
    }

    fn text(&mut self, s: &str) -> Flow {
        if self.group.skip {
            return Ok(());
        }
        self.flush()?;
        self.out.push(s)
    }

    fn word(&mut self, name: &[u8], param: Option<i32>) -> Flow {
        if self.to_skip > 0 && name != b"u" {
            self.to_skip -= 1;
            return Ok(());
        }
        if SKIPPED.contains(&name) {
            self.group.skip = true;
            return Ok(());
        }
        match name {
            b"ansicpg" => {
                self.flush()?;
                self.encoding = code_page(param.unwrap_or(1252));
            }
            b"uc" => self.group.uc = param.unwrap_or(1).clamp(0, 16).unsigned_abs(),
            b"u" => {
                let v = param.unwrap_or(0);
                let v = if v < 0 { v + 65_536 } else { v };
                let c = u32::try_from(v)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or('\u{fffd}');
                self.text(c.encode_utf8(&mut [0; 4]))?;
                self.to_skip = self.group.uc;
            }
            b"par" | b"line" | b"sect" | b"page" | b"row" if !self.group.skip => {
                self.flush()?;
                self.out.end_line()?;
            }
            b"cell" if !self.group.skip => {
                self.flush()?;
                self.out.tab()?;
            }
            b"tab" | b"emspace" | b"enspace" => self.text(" ")?,
            b"emdash" => self.text("—")?,
            b"endash" => self.text("–")?,
            b"bullet" => self.text("•")?,
            b"lquote" => self.text("‘")?,
            b"rquote" => self.text("’")?,
            b"ldblquote" => self.text("“")?,
            b"rdblquote" => self.text("”")?,
            _ => {}
        }
        Ok(())
    }
}

pub(super) fn extract(bytes: &[u8], limits: &Limits, out: &mut Sink) -> Flow {
    if !looks_like_rtf(bytes) {
        return Err(Stop::Failed(ExtractError::Damaged(
            "an .rtf file starts with {\\rtf, and this one does not".into(),
        )));
    }
    let mut p = Parser {
        out,
        encoding: WINDOWS_1252,
        pending: Vec::new(),
        group: Group { skip: false, uc: 1 },
        to_skip: 0,
    };
    let mut stack: Vec<Group> = Vec::new();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        i += 1;
        match b {
            b'{' => {
                p.flush()?;
                stack.push(p.group);
                if stack.len() > limits.xml_depth {
                    return Err(Stop::Failed(ExtractError::TooDeep(limits.xml_depth)));
                }
            }
            b'}' => {
                p.flush()?;
                if let Some(g) = stack.pop() {
                    p.group = g;
                }
            }
            b'\r' | b'\n' => {}
            b'\\' => {
                let Some(&c) = bytes.get(i) else { break };
                if c.is_ascii_alphabetic() {
                    let start = i;
                    while bytes.get(i).is_some_and(u8::is_ascii_alphabetic) && i - start < 32 {
                        i += 1;
                    }
                    let name = bytes.get(start..i).unwrap_or_default();
                    let num_start = i;
                    if bytes.get(i) == Some(&b'-') {
                        i += 1;
                    }
                    while bytes.get(i).is_some_and(u8::is_ascii_digit) && i - num_start < 11 {
                        i += 1;
                    }
                    let param = bytes
                        .get(num_start..i)
                        .and_then(|d| std::str::from_utf8(d).ok())
                        .and_then(|d| d.parse::<i64>().ok())
                        .map(|v| v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32);
                    if bytes.get(i) == Some(&b' ') {
                        i += 1;
                    }
                    if name == b"bin" {
                        // Binary data: skip it whole.
                        i = i.saturating_add(param.unwrap_or(0).max(0) as usize);
                        continue;
                    }
                    p.word(name, param)?;
                    continue;
                }
                i += 1;
                match c {
                    b'\'' => {
                        let hex = bytes
                            .get(i..i + 2)
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| u8::from_str_radix(h, 16).ok());
                        if let Some(v) = hex {
                            i += 2;
                            p.byte(v);
                        }
                    }
                    b'*' => p.group.skip = true,
                    b'~' => p.text(" ")?,
                    b'_' => p.text("-")?,
                    b'{' | b'}' | b'\\' => p.byte(c),
                    b'\r' | b'\n' if !p.group.skip => {
                        p.flush()?;
                        p.out.end_line()?;
                    }
                    _ => {}
                }
            }
            other => p.byte(other),
        }
    }
    p.flush()?;
    p.out.end_line()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(rtf: &str) -> String {
        let mut out = Sink::new(1 << 20);
        extract(rtf.as_bytes(), &Limits::DEFAULT, &mut out).unwrap();
        out.finish().unwrap().text
    }

    #[test]
    fn destinations_skip_and_code_pages_decode() {
        let got = text(
            r"{\rtf1\ansi\ansicpg1250{\fonttbl{\f0 Arial;}}{\*\generator x;}Za\'9ftek \u8364\'80 5\par{\info{\title T}}Tab\tab na\cell B\cell\row}",
        );
        assert_eq!(got, "Zaźtek € 5\nTab na\tB");
    }

    #[test]
    fn deep_groups_are_refused() {
        let deep = format!("{{\\rtf1{}", "{".repeat(2_000));
        let mut out = Sink::new(1 << 20);
        assert!(matches!(
            extract(deep.as_bytes(), &Limits::DEFAULT, &mut out),
            Err(Stop::Failed(ExtractError::TooDeep(_)))
        ));
    }
}
