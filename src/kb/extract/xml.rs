//! Streaming XML (quick-xml, no DOM, no DTD: entities other than XML's own and character
//! references are never expanded) with a nesting-depth guard. Extractors see a flat series of
//! [`Node`]s and keep only the state they need.

use std::io::{BufRead, BufReader};

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

use super::ExtractError;
use super::archive::Entry;
use super::sink::{Flow, Stop};

/// One thing read from an XML document.
pub(super) enum Node<'x> {
    /// An element starts (an empty element gives `Open` then `Close`).
    Open(&'x BytesStart<'x>),
    /// An element ends: its local name.
    Close(&'x [u8]),
    /// Character data, references resolved.
    Text(&'x str),
}

/// The local name of an element (without its namespace prefix).
pub(super) fn local<'x>(e: &'x BytesStart<'_>) -> &'x [u8] {
    let name = e.name().into_inner();
    match name.iter().position(|b| *b == b':') {
        Some(i) => name.get(i + 1..).unwrap_or(name),
        None => name,
    }
}

/// The value of the attribute whose local name is `name`.
pub(super) fn attr(e: &BytesStart<'_>, name: &[u8]) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == name)
        .and_then(|a| {
            a.normalized_value(XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

/// The value of the attribute with a namespace prefix whose local name is `name` (`r:id`, not
/// a plain `id` beside it).
pub(super) fn prefixed_attr(e: &BytesStart<'_>, name: &[u8]) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.prefix().is_some() && a.key.local_name().as_ref() == name)
        .and_then(|a| {
            a.normalized_value(XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

/// Walks the entry, handing each node to `f`, except the elements named in `skip` (local
/// names) and everything inside them.
pub(super) fn walk(
    entry: Entry<'_, '_>,
    name: &str,
    depth: usize,
    skip: &[&[u8]],
    f: impl FnMut(Node<'_>) -> Flow,
) -> Flow {
    let mut reader = Reader::from_reader(BufReader::with_capacity(64 * 1024, entry));
    match run(&mut reader, name, depth, skip, f) {
        Ok(()) => Ok(()),
        Err(Halt::Stop(s)) => Err(s),
        Err(Halt::Io(message)) => Err(Stop::Failed(reader.get_mut().get_mut().error(&message))),
    }
}

/// Walks a document held in memory.
pub(super) fn walk_bytes(
    bytes: &[u8],
    name: &str,
    depth: usize,
    f: impl FnMut(Node<'_>) -> Flow,
) -> Flow {
    let mut reader = Reader::from_reader(bytes);
    match run(&mut reader, name, depth, &[], f) {
        Ok(()) => Ok(()),
        Err(Halt::Stop(s)) => Err(s),
        Err(Halt::Io(message)) => Err(Stop::Failed(ExtractError::Damaged(message))),
    }
}

enum Halt {
    Stop(Stop),
    Io(String),
}

impl From<Stop> for Halt {
    fn from(s: Stop) -> Self {
        Halt::Stop(s)
    }
}

fn bad_xml(name: &str, e: impl std::fmt::Display) -> Halt {
    Halt::Stop(Stop::Failed(ExtractError::Damaged(format!(
        "part {name} is not well-formed XML ({e})"
    ))))
}

fn run<R: BufRead>(
    reader: &mut Reader<R>,
    name: &str,
    max_depth: usize,
    skip: &[&[u8]],
    mut f: impl FnMut(Node<'_>) -> Flow,
) -> Result<(), Halt> {
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut depth = 0usize;
    // Depth inside a skipped element (0: not in one).
    let mut skipping = 0usize;
    let too_deep = || Halt::Stop(Stop::Failed(ExtractError::TooDeep(max_depth)));
    loop {
        buf.clear();
        let event = match reader.read_event_into(&mut buf) {
            Ok(e) => e,
            Err(quick_xml::Error::Io(e)) => return Err(Halt::Io(e.to_string())),
            Err(e) => return Err(bad_xml(name, e)),
        };
        match event {
            Event::Start(e) => {
                depth += 1;
                if depth > max_depth {
                    return Err(too_deep());
                }
                if skipping > 0 || skip.contains(&local(&e)) {
                    skipping += 1;
                    continue;
                }
                f(Node::Open(&e))?;
            }
            Event::Empty(e) => {
                if depth + 1 > max_depth {
                    return Err(too_deep());
                }
                if skipping > 0 || skip.contains(&local(&e)) {
                    continue;
                }
                f(Node::Open(&e))?;
                f(Node::Close(local(&e)))?;
            }
            Event::End(e) => {
                depth = depth.saturating_sub(1);
                if skipping > 0 {
                    skipping -= 1;
                    continue;
                }
                let name = e.name().into_inner();
                let local = match name.iter().position(|b| *b == b':') {
                    Some(i) => name.get(i + 1..).unwrap_or(name),
                    None => name,
                };
                f(Node::Close(local))?;
            }
            Event::Text(_) | Event::CData(_) | Event::GeneralRef(_) if skipping > 0 => {}
            Event::Text(t) => {
                let s = t.decode().map_err(|e| bad_xml(name, e))?;
                f(Node::Text(&s))?;
            }
            Event::CData(t) => {
                let s = t.decode().map_err(|e| bad_xml(name, e))?;
                f(Node::Text(&s))?;
            }
            Event::GeneralRef(r) => {
                let text = if r.is_char_ref() {
                    r.resolve_char_ref()
                        .map_err(|e| bad_xml(name, e))?
                        .map(String::from)
                } else {
                    let name: &[u8] = &r;
                    match name {
                        b"amp" => Some("&".into()),
                        b"lt" => Some("<".into()),
                        b"gt" => Some(">".into()),
                        b"quot" => Some("\"".into()),
                        b"apos" => Some("'".into()),
                        // XHTML's entities are undeclared in XML: a space keeps words apart.
                        _ => Some(" ".into()),
                    }
                };
                if let Some(text) = text {
                    f(Node::Text(&text))?;
                }
            }
            Event::Eof => return Ok(()),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(xml: &str, depth: usize) -> Result<String, Stop> {
        texts_skipping(xml, depth, &[])
    }

    fn texts_skipping(xml: &str, depth: usize, skip: &[&[u8]]) -> Result<String, Stop> {
        let mut out = String::new();
        let mut reader = Reader::from_reader(xml.as_bytes());
        let halt = run(&mut reader, "t.xml", depth, skip, |n| {
            match n {
                Node::Open(e) => out.push_str(&format!("<{}>", String::from_utf8_lossy(local(e)))),
                Node::Close(n) => out.push_str(&format!("</{}>", String::from_utf8_lossy(n))),
                Node::Text(t) => out.push_str(t),
            }
            Ok(())
        });
        match halt {
            Ok(()) => Ok(out),
            Err(Halt::Stop(s)) => Err(s),
            Err(Halt::Io(m)) => panic!("{m}"),
        }
    }

    #[test]
    fn skipped_elements_and_their_content_are_not_seen() {
        let got =
            texts_skipping("<p>a<del>b<x>c</x><del/></del><del/>d</p>", 10, &[b"del"]).unwrap();
        assert_eq!(got, "<p>ad</p>");
    }

    #[test]
    fn references_resolve_and_prefixes_drop() {
        let got = texts("<w:p a='1'>a &amp; b &#8364;<w:br/>&nbsp;</w:p>", 10).unwrap();
        assert_eq!(got, "<p>a & b €<br></br> </p>");
    }

    #[test]
    fn nesting_beyond_the_limit_is_refused() {
        let deep = format!("{}{}", "<a>".repeat(50), "</a>".repeat(50));
        assert!(texts(&deep, 50).is_ok());
        assert!(matches!(
            texts(&deep, 49),
            Err(Stop::Failed(ExtractError::TooDeep(49)))
        ));
    }

    #[test]
    fn broken_xml_is_damage() {
        assert!(matches!(
            texts("<a><b></a>", 10),
            Err(Stop::Failed(ExtractError::Damaged(_)))
        ));
    }
}
