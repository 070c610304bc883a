//! Office Open XML: Word (`.docx`), PowerPoint (`.pptx`) and Excel (`.xlsx`), read as their
//! zip parts with streaming XML. Parts are found through the package relations, in the order
//! the document gives (slides as listed in the presentation, sheets as in the workbook).
//! Written on `zip` + `quick-xml` rather than with a reader crate: see `docs/extraction.md`.

use super::archive::{Archive, resolve};
use super::sink::{Flow, Sink, Stop, has_text};
use super::xml::{self, Node, attr, local, prefixed_attr};
use super::{ExtractError, Limits};

/// The relations part of `part` (`word/document.xml` → `word/_rels/document.xml.rels`).
fn rels_of(part: &str) -> String {
    match part.rsplit_once('/') {
        Some((dir, file)) => format!("{dir}/_rels/{file}.rels"),
        None => format!("_rels/{part}.rels"),
    }
}

/// A part's relations: (id, type, resolved target), in document order.
fn relations(
    zip: &mut Archive<'_>,
    part: &str,
    limits: &Limits,
) -> Result<Vec<(String, String, String)>, Stop> {
    let name = if part.is_empty() {
        "_rels/.rels".to_owned()
    } else {
        rels_of(part)
    };
    let Some(bytes) = zip.read(&name)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    xml::walk_bytes(&bytes, &name, limits.xml_depth, |n| {
        if let Node::Open(e) = n
            && local(e) == b"Relationship"
            && attr(e, b"TargetMode").as_deref() != Some("External")
        {
            let id = attr(e, b"Id").unwrap_or_default();
            let kind = attr(e, b"Type").unwrap_or_default();
            let target = attr(e, b"Target").unwrap_or_default();
            out.push((id, kind, resolve(part, &target)));
        }
        Ok(())
    })?;
    Ok(out)
}

/// The package's main part (`word/document.xml`, `ppt/presentation.xml`, `xl/workbook.xml`).
fn main_part(zip: &mut Archive<'_>, limits: &Limits, usual: &str) -> Result<String, Stop> {
    let found = relations(zip, "", limits)?
        .into_iter()
        .find(|(_, kind, _)| kind.ends_with("/officeDocument"))
        .map(|(_, _, target)| target);
    match found {
        Some(part) if zip.has(&part) => Ok(part),
        _ if zip.has(usual) => Ok(usual.to_owned()),
        _ => Err(Stop::Failed(ExtractError::Damaged(format!(
            "it has no {usual} part"
        )))),
    }
}

/// Text of Word bodies and PowerPoint slides: runs' text (`t`) in paragraphs (`p`), one line
/// each; a table row per line with cells separated by tabs (paragraphs inside a cell joined
/// by spaces); fallbacks, phonetic guides, field codes and deleted text skipped.
#[derive(Default)]
struct Paragraphs {
    in_text: bool,
    /// Depth of table cells.
    cells: usize,
}

/// Elements of Word and PowerPoint parts whose text is not the document's.
const SKIPPED: &[&[u8]] = &[b"Fallback", b"rPh", b"instrText", b"delText"];

impl Paragraphs {
    fn node(&mut self, n: Node<'_>, out: &mut Sink) -> Flow {
        match n {
            Node::Open(e) => match local(e) {
                b"t" => self.in_text = true,
                b"tab" => out.push(" ")?,
                b"br" | b"cr" if self.cells == 0 => out.end_line()?,
                b"br" | b"cr" => out.push(" ")?,
                b"tc" => self.cells += 1,
                _ => {}
            },
            Node::Close(name) => match name {
                b"t" => self.in_text = false,
                b"p" | b"tr" if self.cells == 0 => out.end_line()?,
                b"p" | b"tr" => out.push(" ")?,
                b"tc" => {
                    self.cells = self.cells.saturating_sub(1);
                    if self.cells == 0 {
                        out.tab()?;
                    } else {
                        out.push(" ")?;
                    }
                }
                _ => {}
            },
            Node::Text(t) if self.in_text => out.push(t)?,
            Node::Text(_) => {}
        }
        Ok(())
    }
}

fn paragraphs_of(zip: &mut Archive<'_>, part: &str, limits: &Limits, out: &mut Sink) -> Flow {
    let Some(entry) = zip.entry(part)? else {
        return Ok(());
    };
    let mut p = Paragraphs::default();
    xml::walk(entry, part, limits.xml_depth, SKIPPED, |n| p.node(n, out))?;
    out.end_line()
}

pub(super) fn docx(zip: &mut Archive<'_>, limits: &Limits, out: &mut Sink) -> Flow {
    let part = main_part(zip, limits, "word/document.xml")?;
    paragraphs_of(zip, &part, limits, out)
}

pub(super) fn pptx(zip: &mut Archive<'_>, limits: &Limits, out: &mut Sink) -> Flow {
    let part = main_part(zip, limits, "ppt/presentation.xml")?;
    let rels = relations(zip, &part, limits)?;
    let Some(bytes) = zip.read(&part)? else {
        return Ok(());
    };
    // The slides in the presentation's order (`sldIdLst`), by relation id.
    let mut ids = Vec::new();
    xml::walk_bytes(&bytes, &part, limits.xml_depth, |n| {
        if let Node::Open(e) = n
            && local(e) == b"sldId"
            && let Some(id) = prefixed_attr(e, b"id")
        {
            ids.push(id);
        }
        Ok(())
    })?;
    let slides: Vec<String> = ids
        .iter()
        .filter_map(|id| rels.iter().find(|(rid, _, _)| rid == id))
        .map(|(_, _, target)| target.clone())
        .collect();
    for slide in slides {
        out.count_part();
        paragraphs_of(zip, &slide, limits, out)?;
        out.blank_line()?;
    }
    Ok(())
}

/// The shared strings of a workbook, in order.
fn shared_strings(zip: &mut Archive<'_>, part: &str, limits: &Limits) -> Result<Vec<String>, Stop> {
    let Some(entry) = zip.entry(part)? else {
        return Ok(Vec::new());
    };
    let mut strings = Vec::new();
    let mut current = String::new();
    let mut in_text = false;
    xml::walk(entry, part, limits.xml_depth, &[b"rPh"], |n| {
        match n {
            Node::Open(e) if local(e) == b"t" => in_text = true,
            Node::Open(_) => {}
            Node::Close(b"t") => in_text = false,
            Node::Close(b"si") => strings.push(std::mem::take(&mut current)),
            Node::Close(_) => {}
            Node::Text(t) if in_text => current.push_str(t),
            Node::Text(_) => {}
        }
        Ok(())
    })?;
    Ok(strings)
}

/// The zero-based column of a cell reference (`C7` → 2).
fn column_of(reference: &str) -> Option<u32> {
    let letters = reference.bytes().take_while(u8::is_ascii_alphabetic);
    let mut col: u32 = 0;
    let mut any = false;
    for b in letters {
        any = true;
        col = col
            .checked_mul(26)?
            .checked_add(u32::from(b.to_ascii_uppercase() - b'A') + 1)?;
    }
    any.then(|| col - 1)
}

/// At most this many tabs stand for a run of empty cells.
const MAX_GAP: u32 = 64;

pub(super) fn xlsx(zip: &mut Archive<'_>, limits: &Limits, out: &mut Sink) -> Flow {
    let part = main_part(zip, limits, "xl/workbook.xml")?;
    let rels = relations(zip, &part, limits)?;
    let shared_part = rels
        .iter()
        .find(|(_, kind, _)| kind.ends_with("/sharedStrings"))
        .map_or_else(|| "xl/sharedStrings.xml".to_owned(), |(_, _, t)| t.clone());
    let shared = shared_strings(zip, &shared_part, limits)?;
    let Some(bytes) = zip.read(&part)? else {
        return Ok(());
    };
    let mut sheets = Vec::new();
    xml::walk_bytes(&bytes, &part, limits.xml_depth, |n| {
        if let Node::Open(e) = n
            && local(e) == b"sheet"
        {
            let name = attr(e, b"name").unwrap_or_default();
            if let Some(target) = prefixed_attr(e, b"id")
                .and_then(|id| rels.iter().find(|(rid, _, _)| *rid == id))
                .map(|(_, _, t)| t.clone())
            {
                sheets.push((name, target));
            }
        }
        Ok(())
    })?;
    for (name, target) in sheets {
        out.count_part();
        out.push(&name)?;
        out.end_line()?;
        sheet(zip, &target, &shared, limits, out)?;
        out.blank_line()?;
    }
    Ok(())
}

fn sheet(
    zip: &mut Archive<'_>,
    part: &str,
    shared: &[String],
    limits: &Limits,
    out: &mut Sink,
) -> Flow {
    let Some(entry) = zip.entry(part)? else {
        return Ok(());
    };
    // The next column of the current row, the current cell's type and value.
    let mut next_col: u32 = 0;
    let mut kind = String::new();
    let mut col: Option<u32> = None;
    let mut value = String::new();
    let mut in_value = false;
    xml::walk(entry, part, limits.xml_depth, &[b"f", b"rPh"], |n| {
        match n {
            Node::Open(e) => match local(e) {
                b"row" => next_col = 0,
                b"c" => {
                    kind = attr(e, b"t").unwrap_or_default();
                    col = attr(e, b"r").as_deref().and_then(column_of);
                    value.clear();
                }
                b"v" | b"t" => in_value = true,
                _ => {}
            },
            Node::Close(b"v" | b"t") => in_value = false,
            Node::Close(b"c") => {
                let text = match kind.as_str() {
                    "s" => value
                        .trim()
                        .parse::<usize>()
                        .ok()
                        .and_then(|i| shared.get(i))
                        .map_or("", String::as_str),
                    "b" if value.trim() == "1" => "TRUE",
                    "b" => "FALSE",
                    _ => value.as_str(),
                };
                if has_text(text) {
                    let at = col.unwrap_or(next_col);
                    for _ in 0..at.saturating_sub(next_col).min(MAX_GAP) {
                        out.tab()?;
                    }
                    out.push(text)?;
                    out.tab()?;
                    next_col = at.saturating_add(1);
                }
            }
            Node::Close(b"row") => out.end_line()?,
            Node::Close(_) => {}
            Node::Text(t) if in_value => value.push_str(t),
            Node::Text(_) => {}
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relation_targets_resolve_against_their_part() {
        assert_eq!(
            resolve("word/document.xml", "media/a.png"),
            "word/media/a.png"
        );
        assert_eq!(
            resolve("ppt/presentation.xml", "slides/slide1.xml"),
            "ppt/slides/slide1.xml"
        );
        assert_eq!(
            resolve("xl/workbook.xml", "/xl/worksheets/s.xml"),
            "xl/worksheets/s.xml"
        );
        assert_eq!(
            resolve("ppt/slides/slide1.xml", "../media/x.png"),
            "ppt/media/x.png"
        );
        assert_eq!(resolve("", "word/document.xml"), "word/document.xml");
        assert_eq!(rels_of("word/document.xml"), "word/_rels/document.xml.rels");
    }

    #[test]
    fn cell_references_give_columns() {
        assert_eq!(column_of("A1"), Some(0));
        assert_eq!(column_of("C7"), Some(2));
        assert_eq!(column_of("AA10"), Some(26));
        assert_eq!(column_of("XFD1048576"), Some(16_383));
        assert_eq!(column_of("17"), None);
        assert_eq!(column_of("ZZZZZZZZZZZZZZZ1"), None);
    }
}
