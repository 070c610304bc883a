//! OpenDocument text (`.odt`), spreadsheets (`.ods`) and presentations (`.odp`): the body of
//! `content.xml`, streamed. Spreadsheet rows are buffered so repeated cells and rows (how
//! OpenDocument stores runs of equal cells) come out repeated, bounded by the output cap;
//! runs of empty cells become at most a few tabs.

use super::archive::Archive;
use super::sink::{Flow, Sink, Stop, has_text};
use super::xml::{self, Node, attr, local};
use super::{ExtractError, Format, Limits};

/// At most this many tabs stand for a run of empty cells.
const MAX_GAP: u32 = 64;

pub(super) fn extract(
    format: Format,
    zip: &mut Archive<'_>,
    limits: &Limits,
    out: &mut Sink,
) -> Flow {
    if let Some(manifest) = zip.read("META-INF/manifest.xml")?
        && memchr::memmem::find(&manifest, b"encryption-data").is_some()
    {
        return Err(Stop::Failed(ExtractError::Encrypted));
    }
    let Some(entry) = zip.entry("content.xml")? else {
        return Err(Stop::Failed(ExtractError::Damaged(
            "it has no content.xml part".into(),
        )));
    };
    let mut w = Walker {
        sheets: format == Format::Ods,
        slides: format == Format::Odp,
        ..Walker::default()
    };
    xml::walk(entry, "content.xml", limits.xml_depth, SKIPPED, |n| {
        w.node(n, out)
    })?;
    out.end_line()
}

/// Elements whose text is not the document's body: comments, tracked deletions, speaker
/// notes, footnote marks, shape descriptions, forms, declarations, scripts.
const SKIPPED: &[&[u8]] = &[
    b"annotation",
    b"tracked-changes",
    b"notes",
    b"note-citation",
    b"desc",
    b"title",
    b"forms",
    b"table-source",
    b"sequence-decls",
    b"variable-decls",
    b"user-field-decls",
    b"event-listeners",
    b"script",
];

#[derive(Default)]
struct Walker {
    sheets: bool,
    slides: bool,
    in_body: bool,
    /// Depth of table cells.
    cells: usize,
    /// Spreadsheets: the current row's cells (text, repeat), the row's repeat, the current
    /// cell's text and its value attribute.
    row: Vec<(String, u32)>,
    row_repeat: u32,
    cell: String,
    cell_repeat: u32,
    cell_value: Option<String>,
}

fn repeat(e: &quick_xml::events::BytesStart<'_>, name: &[u8]) -> u32 {
    attr(e, name)
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1)
}

impl Walker {
    /// Text goes into the current spreadsheet cell, or straight out.
    fn text(&mut self, t: &str, out: &mut Sink) -> Flow {
        if self.sheets && self.cells > 0 {
            self.cell.push_str(t);
            Ok(())
        } else {
            out.push(t)
        }
    }

    fn node(&mut self, n: Node<'_>, out: &mut Sink) -> Flow {
        match n {
            Node::Open(e) => match local(e) {
                b"body" => self.in_body = true,
                b"s" => {
                    let n = repeat(e, b"c").min(8);
                    for _ in 0..n {
                        self.text(" ", out)?;
                    }
                }
                b"tab" => self.text(" ", out)?,
                b"line-break" if self.cells == 0 => out.end_line()?,
                b"line-break" => self.text(" ", out)?,
                b"table" if self.sheets && self.in_body => {
                    out.count_part();
                    out.push(&attr(e, b"name").unwrap_or_default())?;
                    out.end_line()?;
                }
                b"page" if self.slides => out.count_part(),
                b"table-row" => {
                    self.row.clear();
                    self.row_repeat = repeat(e, b"number-rows-repeated");
                }
                b"table-cell" | b"covered-table-cell" => {
                    self.cells += 1;
                    if self.cells == 1 {
                        self.cell.clear();
                        self.cell_repeat = repeat(e, b"number-columns-repeated");
                        self.cell_value = attr(e, b"value")
                            .or_else(|| attr(e, b"date-value"))
                            .or_else(|| attr(e, b"boolean-value"));
                    }
                }
                _ => {}
            },
            Node::Close(name) => match name {
                b"p" | b"h" if self.cells > 0 => self.text(" ", out)?,
                b"p" | b"h" | b"frame" => out.end_line()?,
                b"table-cell" | b"covered-table-cell" => {
                    self.cells = self.cells.saturating_sub(1);
                    if self.cells > 0 {
                        self.text(" ", out)?;
                    } else if self.sheets {
                        let mut text = std::mem::take(&mut self.cell);
                        if !has_text(&text) {
                            text = self.cell_value.take().unwrap_or_default();
                        }
                        self.row.push((text, self.cell_repeat));
                    } else {
                        out.tab()?;
                    }
                }
                b"table-row" if self.sheets => self.write_row(out)?,
                b"table-row" => out.end_line()?,
                b"table" if self.sheets => out.blank_line()?,
                b"page" if self.slides => out.blank_line()?,
                _ => {}
            },
            Node::Text(t) if self.in_body => self.text(t, out)?,
            Node::Text(_) => {}
        }
        Ok(())
    }

    /// Writes a spreadsheet row as often as it repeats; an empty row not at all.
    fn write_row(&mut self, out: &mut Sink) -> Flow {
        let row = std::mem::take(&mut self.row);
        let last = row.iter().rposition(|(t, _)| has_text(t));
        let Some(last) = last else {
            return Ok(());
        };
        for _ in 0..self.row_repeat {
            for (text, times) in row.iter().take(last + 1) {
                let times = if !has_text(text) {
                    (*times).min(MAX_GAP)
                } else {
                    *times
                };
                for _ in 0..times {
                    out.push(text)?;
                    out.tab()?;
                }
            }
            out.end_line()?;
        }
        Ok(())
    }
}
