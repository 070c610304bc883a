//! The extractors in process, on the LibreOffice-made files of `tests/fixtures/extract/`
//! (see its `make.sh`) and on hostile archives made here with the `zip` crate.

use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;

use super::*;

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            &include_bytes!(concat!("../../../tests/fixtures/extract/", $name))[..],
        )
    };
}

fn extract(file: (&str, &[u8])) -> Result<Extracted, ExtractError> {
    let (name, bytes) = file;
    let format = format_of(name, bytes).unwrap_or_else(|| panic!("{name}: no format"));
    assert_eq!(format.extension(), name.rsplit('.').next().unwrap());
    extract_in_process(format, bytes, &Limits::DEFAULT)
}

fn text(file: (&str, &[u8])) -> String {
    let e = extract(file).unwrap_or_else(|e| panic!("{}: {e}", file.0));
    assert!(!e.truncated);
    assert!(!e.text.contains("\n\n\n"), "{}: {:?}", file.0, e.text);
    assert!(!e.text.starts_with('\n') && !e.text.ends_with('\n'));
    e.text
}

const SPECIAL: &str = "Bijzondere tekens: Zażółć gęślą jaźń, Příliš žluťoučký kůň, Καλημέρα κόσμε, ĳzerhandel, prijs € 12,50.";

/// The lines every rendering of `src/text.fodt` has: heading, paragraphs, the table's rows.
fn assert_text_document(name: &str, text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    for want in [
        "Offerte kozijnen Zeestraat",
        "Geachte heer Verbeek, hierbij ontvangt u onze offerte voor het vervangen van de houten kozijnen aan de voorgevel.",
        SPECIAL,
        "Met vriendelijke groet, Timmerbedrijf Van Dalen.",
    ] {
        assert!(
            lines.contains(&want),
            "{name}: no line {want:?} in {text:?}"
        );
    }
    let heading = lines
        .iter()
        .position(|l| *l == "Offerte kozijnen Zeestraat");
    let last = lines
        .iter()
        .position(|l| l.starts_with("Met vriendelijke groet"));
    assert!(heading < last, "{name}: order");
}

#[test]
fn word_processor_files_give_paragraph_lines_and_table_rows() {
    for file in [
        fixture!("text.docx"),
        fixture!("text.odt"),
        fixture!("text.rtf"),
        fixture!("text.epub"),
    ] {
        let text = text(file);
        assert_text_document(file.0, &text);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.contains(&"Onderdeel\tAantal\tPrijs"),
            "{}: {text:?}",
            file.0
        );
        assert!(
            lines.contains(&"Meranti kozijn\t4\t1.250,00"),
            "{}: {text:?}",
            file.0
        );
    }
}

#[test]
fn pdf_text_lines_keep_non_latin_letters() {
    let e = extract(fixture!("text.pdf")).unwrap();
    assert_eq!(e.parts, Some(1));
    let text = e.text;
    assert!(text.contains("Offerte kozijnen Zeestraat"), "{text:?}");
    assert!(text.contains("Zażółć gęślą jaźń"), "{text:?}");
    assert!(text.contains("Příliš žluťoučký kůň"), "{text:?}");
    assert!(text.contains("Καλημέρα κόσμε"), "{text:?}");
    assert!(text.contains("€ 12,50"), "{text:?}");
    assert!(text.contains("Met vriendelijke groet"), "{text:?}");
}

/// Each column's paragraph comes out whole and in reading order: the left column's text
/// before the right column's, never interleaved line by line.
#[test]
fn pdf_columns_come_out_in_reading_order() {
    let text = extract(fixture!("columns.pdf")).unwrap().text;
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let left = "De linkerkolom vertelt over de nieuwe steigers die het bouwteam in maart heeft gekocht, over de keuring door de leverancier en over de planning van de eerste klussen waarbij de steigers nodig zijn.";
    let right = "De rechterkolom gaat over de kantine in de loods, waar vanaf april elke vrijdag soep wordt geserveerd en waar de koffiemachine eindelijk is vervangen door een exemplaar dat wel werkt.";
    let l = flat.find(left);
    let r = flat.find(right);
    assert!(l.is_some() && r.is_some(), "{text:?}");
    assert!(l < r);
}

#[test]
fn spreadsheets_give_sheet_names_then_tab_separated_rows() {
    for file in [fixture!("sheet.xlsx"), fixture!("sheet.ods")] {
        let e = extract(file).unwrap();
        assert_eq!(e.parts, Some(2), "{}", file.0);
        let lines: Vec<&str> = e.text.lines().collect();
        let want = [
            "Offerte",
            "Omschrijving\tAantal\tStukprijs\tTotaal",
            "Hardhouten dorpel\t3\t85\t255",
            "Glaslatten grenen\t\t\top nacalculatie",
            "",
            "Planning",
            "Week 12\tSteigers plaatsen bij Żółkiewski",
            "Week 13\tKozijnen monteren, ĳzerwerk € 40",
        ];
        assert_eq!(lines, want, "{}", file.0);
    }
}

#[test]
fn presentations_give_slides_in_order() {
    for file in [fixture!("slides.pptx"), fixture!("slides.odp")] {
        let e = extract(file).unwrap();
        assert_eq!(e.parts, Some(3), "{}", file.0);
        let want = "Planning voorjaar\nSteigers plaatsen in week twaalf\nKozijnen leveren in week dertien\n\n\
                    Begroting\nMateriaal kost € 4.300, arbeid Ωmega-tarief\n\n\
                    Vragen aan de opdrachtgever";
        assert_eq!(e.text, want, "{}", file.0);
    }
}

#[test]
fn a_scan_has_no_text_and_a_password_protects() {
    assert_eq!(extract(fixture!("scan.pdf")), Err(ExtractError::NoText));
    assert_eq!(
        extract(fixture!("encrypted.pdf")),
        Err(ExtractError::Encrypted)
    );
    assert!(
        ExtractError::NoText.to_string().contains("scanned image"),
        "{}",
        ExtractError::NoText
    );
}

#[test]
fn a_truncated_pdf_is_damaged_or_gives_what_is_there() {
    let (_, bytes) = fixture!("text.pdf");
    let half = bytes.get(..bytes.len() / 2).unwrap();
    match extract_in_process(Format::Pdf, half, &Limits::DEFAULT) {
        Err(ExtractError::Damaged(m)) => assert!(!m.is_empty()),
        Ok(e) => assert!(e.text.contains("Offerte"), "{e:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn names_are_confirmed_by_bytes() {
    let (_, docx) = fixture!("text.docx");
    assert_eq!(format_of("a/b/Offerte.DOCX", docx), Some(Format::Docx));
    assert_eq!(format_of("offerte.docx.bak", docx), None);
    assert_eq!(format_of("offerte.txt", docx), None);
    assert_eq!(format_of("offerte.pdf", docx), None);
    let random: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert_eq!(format_of("lijst.xlsx", &random), None);
    match extract_in_process(Format::Xlsx, &random, &Limits::DEFAULT) {
        Err(ExtractError::Damaged(m)) => assert!(m.contains("zip"), "{m}"),
        other => panic!("{other:?}"),
    }
}

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in entries {
        w.start_file(*name, SimpleFileOptions::default()).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// A minimal Word file (content types, package relation, body) around `body`.
pub(super) fn docx_with(body: &[u8]) -> Vec<u8> {
    let mut doc = br#"<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>"#.to_vec();
    doc.extend_from_slice(body);
    doc.extend_from_slice(b"</w:body></w:document>");
    zip_of(&[
        ("[Content_Types].xml", br#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#),
        ("_rels/.rels", br#"<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#),
        ("word/document.xml", &doc),
    ])
}

#[test]
fn the_output_cap_stops_reading_on_a_character_boundary() {
    let para = "<w:p><w:r><w:t>Één regel met ĳs en € erin</w:t></w:r></w:p>".repeat(20_000);
    let bytes = docx_with(para.as_bytes());
    let limits = Limits {
        output_bytes: 1000,
        ..Limits::DEFAULT
    };
    let e = extract_in_process(Format::Docx, &bytes, &limits).unwrap();
    assert!(e.truncated);
    assert!(
        e.text.len() <= 1000 && e.text.len() > 950,
        "{}",
        e.text.len()
    );
    assert!(e.text.starts_with("Één regel met ĳs en € erin\nÉén"));
    let all = extract_in_process(Format::Docx, &bytes, &Limits::DEFAULT).unwrap();
    assert!(!all.truncated);
    assert_eq!(all.text.lines().count(), 20_000);
}

#[test]
fn zip_bombs_named_docx_are_refused() {
    // One highly compressible entry: valid XML that would extract without the guard.
    let mut body = b"<w:p><w:r><w:t>".to_vec();
    body.resize(body.len() + (40 << 20), b'a');
    body.extend_from_slice(b"</w:t></w:r></w:p>");
    let bomb = docx_with(&body);
    assert!(bomb.len() < 200_000, "{}", bomb.len());
    match extract_in_process(Format::Docx, &bomb, &Limits::DEFAULT) {
        Err(ExtractError::ZipBomb(m)) => assert!(m.contains("word/document.xml"), "{m}"),
        other => panic!("{other:?}"),
    }
    // The same under a per-entry limit below the ratio's floor.
    let limits = Limits {
        entry_bytes: 1 << 20,
        ..Limits::DEFAULT
    };
    assert!(matches!(
        extract_in_process(Format::Docx, &bomb, &limits),
        Err(ExtractError::ZipBomb(_))
    ));
    // Very many entries.
    let names: Vec<String> = (0..20_000).map(|i| format!("word/media/{i}.xml")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
    let many = zip_of(&entries);
    match extract_in_process(Format::Docx, &many, &Limits::DEFAULT) {
        Err(ExtractError::ZipBomb(m)) => assert!(m.contains("20000 entries"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn deeply_nested_xml_is_refused() {
    let body = format!(
        "{}<w:t>tief</w:t>{}",
        "<w:p>".repeat(100_000),
        "</w:p>".repeat(100_000)
    );
    let bytes = docx_with(body.as_bytes());
    assert_eq!(
        extract_in_process(Format::Docx, &bytes, &Limits::DEFAULT),
        Err(ExtractError::TooDeep(1_000))
    );
}

#[test]
fn oversized_input_is_refused_before_parsing() {
    let limits = Limits {
        input_bytes: 10,
        ..Limits::DEFAULT
    };
    assert!(matches!(
        extract_in_process(Format::Pdf, b"%PDF-1.4 and more", &limits),
        Err(ExtractError::TooLarge(_))
    ));
}

#[test]
fn every_error_reads_as_one_sentence() {
    for e in [
        ExtractError::NoText,
        ExtractError::Encrypted,
        ExtractError::Damaged("x".into()),
        ExtractError::TooLarge("x".into()),
        ExtractError::ZipBomb("x".into()),
        ExtractError::TooDeep(3),
        ExtractError::TimeLimit(3),
        ExtractError::MemoryLimit(3),
        ExtractError::Unsupported("x".into()),
        ExtractError::Crashed("x".into()),
    ] {
        let s = e.to_string();
        assert!(
            s.starts_with(char::is_uppercase) && s.ends_with(['.', '?']),
            "{s}"
        );
        assert!(!s.contains('\n'), "{s}");
    }
}
