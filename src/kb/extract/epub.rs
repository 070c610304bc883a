//! EPUB: the XHTML documents of the spine, in reading order (container → package → spine).
//! Block elements end lines, table cells are separated by tabs; head, scripts and styles are
//! skipped.

use super::archive::{Archive, resolve};
use super::sink::{Flow, Sink, Stop};
use super::xml::{self, Node, attr, local};
use super::{ExtractError, Limits};

/// `a%20b.xhtml` → `a b.xhtml` (hrefs in the package are URLs).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `href` of an item of the package at `opf`, as an entry name.
fn join(opf: &str, href: &str) -> String {
    resolve(opf, &percent_decode(href.split('#').next().unwrap_or("")))
}

pub(super) fn extract(zip: &mut Archive<'_>, limits: &Limits, out: &mut Sink) -> Flow {
    let damaged = |m: &str| Stop::Failed(ExtractError::Damaged(m.to_owned()));
    let container = zip
        .read("META-INF/container.xml")?
        .ok_or_else(|| damaged("it has no META-INF/container.xml"))?;
    let mut opf = None;
    xml::walk_bytes(&container, "container.xml", limits.xml_depth, |n| {
        if let Node::Open(e) = n
            && local(e) == b"rootfile"
            && opf.is_none()
        {
            opf = attr(e, b"full-path");
        }
        Ok(())
    })?;
    let opf = opf.ok_or_else(|| damaged("its container names no package document"))?;
    let package = zip
        .read(&opf)?
        .ok_or_else(|| damaged("its package document is missing"))?;
    let mut items: Vec<(String, String)> = Vec::new();
    let mut spine: Vec<String> = Vec::new();
    xml::walk_bytes(&package, &opf, limits.xml_depth, |n| {
        if let Node::Open(e) = n {
            match local(e) {
                b"item" => {
                    if let (Some(id), Some(href)) = (attr(e, b"id"), attr(e, b"href")) {
                        items.push((id, href));
                    }
                }
                b"itemref" => spine.extend(attr(e, b"idref")),
                _ => {}
            }
        }
        Ok(())
    })?;
    for idref in spine {
        let Some((_, href)) = items.iter().find(|(id, _)| *id == idref) else {
            continue;
        };
        let part = join(&opf, href);
        let Some(entry) = zip.entry(&part)? else {
            continue;
        };
        let mut cells = 0usize;
        let skipped: &[&[u8]] = &[b"head", b"script", b"style"];
        xml::walk(entry, &part, limits.xml_depth, skipped, |n| {
            match n {
                Node::Open(e) => match local(e) {
                    b"td" | b"th" => cells += 1,
                    b"br" if cells == 0 => out.end_line()?,
                    b"br" => out.push(" ")?,
                    _ => {}
                },
                Node::Close(b"td" | b"th") => {
                    cells = cells.saturating_sub(1);
                    out.tab()?;
                }
                Node::Close(
                    b"p" | b"div" | b"h1" | b"h2" | b"h3" | b"h4" | b"h5" | b"h6" | b"li" | b"tr"
                    | b"blockquote" | b"pre" | b"section" | b"article" | b"dt" | b"dd"
                    | b"figcaption" | b"caption" | b"header" | b"footer",
                ) if cells == 0 => out.end_line()?,
                Node::Close(_) => {}
                Node::Text(t) => out.push(t)?,
            }
            Ok(())
        })?;
        out.blank_line()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrefs_resolve_against_the_package() {
        assert_eq!(
            join("OEBPS/content.opf", "sections/s%201.xhtml#x"),
            "OEBPS/sections/s 1.xhtml"
        );
        assert_eq!(join("content.opf", "a.xhtml"), "a.xhtml");
        assert_eq!(join("a/b/c.opf", "../d.xhtml"), "a/d.xhtml");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
