//! The extractors in process, on the LibreOffice-made files of `tests/fixtures/extract/` (see
//! its `make.sh`). Hostile archives, made with the `zip` crate, are in `tests/it/extract.rs`.

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
fn a_pdf_with_only_a_permissions_password_opens() {
    let text = text(fixture!("restricted.pdf"));
    assert!(
        text.contains(SPECIAL.split(" Καλημέρα").next().unwrap()),
        "{text:?}"
    );
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
