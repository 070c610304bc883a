//! Text-extraction throughput per format, in process and through the sandbox (a
//! `kennis extract-worker` child per file, so the per-file process cost shows).
//! `cargo bench --bench extraction`.
//!
//! Inputs: the LibreOffice-made files of `tests/fixtures/extract/`, scaled up — the document
//! body of the main XML part repeated to 32 MB (8 MB for XLSX) (the words of each copy's text nodes
//! replaced by others, so the parts do not compress unlike real ones), the RTF body repeated,
//! the PDF's page copied (with lopdf) to many pages. Throughput is counted in input bytes and
//! in extracted text; the output cap is lifted so the whole document is read, and the
//! default limits' time is shown too (the cap stops reading at 1 MiB of text).
//! `KENNIS_EXTRACT_RUNS` (default 5) runs per file; the median is reported.

use std::io::{Cursor, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kennis::kb::extract::{Extractor, Format, Limits, extract_in_process};
use pdf_extract::{Document, Object};
use zip::write::SimpleFileOptions;

const WORDS: &[&str] = &[
    "aannemer",
    "balken",
    "begroting",
    "bestek",
    "betonvloer",
    "dakgoot",
    "dakpannen",
    "dorpel",
    "fundering",
    "gevel",
    "glaslat",
    "hoekprofiel",
    "isolatie",
    "kozijn",
    "ladder",
    "leverancier",
    "loods",
    "metselwerk",
    "oplevering",
    "opdrachtgever",
    "planning",
    "plint",
    "regels",
    "schilder",
    "spouwmuur",
    "steiger",
    "stucwerk",
    "tegels",
    "termijn",
    "timmerman",
    "trapgat",
    "vergunning",
    "voegwerk",
    "vloerverwarming",
    "werkbon",
    "zolder",
];

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/extract")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `unit` with each ASCII word of 4+ letters in its text nodes replaced by another word,
/// chosen by the copy number and position (RTF is repeated as it is).
fn vary(unit: &str, copy: usize, xml: bool) -> String {
    if !xml {
        return unit.to_owned();
    }
    let mut out = String::with_capacity(unit.len());
    let mut in_tag = false;
    let mut word = String::new();
    let mut k = 0usize;
    let flush = |word: &mut String, out: &mut String, k: &mut usize| {
        if word.len() >= 4 {
            *k += 1;
            let h = (copy.wrapping_mul(2_654_435_761) ^ k.wrapping_mul(40_503)) % WORDS.len();
            out.push_str(WORDS[h]);
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in unit.chars() {
        if c == '<' {
            flush(&mut word, &mut out, &mut k);
            in_tag = true;
        }
        if in_tag || !c.is_ascii_alphabetic() {
            flush(&mut word, &mut out, &mut k);
            out.push(c);
        } else {
            word.push(c);
        }
        if c == '>' {
            in_tag = false;
        }
    }
    flush(&mut word, &mut out, &mut k);
    out
}

/// Repeats the part of `text` between `start` and `end` until the whole is about `size`.
fn repeat_body(text: &str, start: usize, end: usize, size: usize, xml: bool) -> String {
    let (head, unit, tail) = (&text[..start], &text[start..end], &text[end..]);
    let copies = (size / unit.len().max(1)).max(1);
    let mut out = String::with_capacity(size + text.len());
    out.push_str(head);
    for i in 0..copies {
        out.push_str(&vary(unit, i, xml));
    }
    out.push_str(tail);
    out
}

/// Where the repeated unit of a format's main part starts and ends.
fn unit_of(format: Format, xml: &str) -> (&'static str, usize, usize) {
    let after = |s: &str| xml.find(s).map(|i| i + s.len()).unwrap();
    let before_last = |s: &str| xml.rfind(s).unwrap();
    let after_last = |s: &str| xml.rfind(s).map(|i| i + s.len()).unwrap();
    match format {
        Format::Docx => (
            "word/document.xml",
            after("<w:body>"),
            before_last("<w:sectPr"),
        ),
        Format::Odt => (
            "content.xml",
            after("</text:sequence-decls>"),
            before_last("</office:text>"),
        ),
        Format::Ods => (
            "content.xml",
            xml.find("<table:table ").unwrap(),
            after_last("</table:table>"),
        ),
        Format::Odp => (
            "content.xml",
            xml.find("<draw:page ").unwrap(),
            after_last("</draw:page>"),
        ),
        Format::Xlsx => (
            "xl/worksheets/sheet1.xml",
            after("<sheetData>"),
            before_last("</sheetData>"),
        ),
        Format::Pptx => (
            "ppt/slides/slide1.xml",
            after("</p:grpSpPr>"),
            before_last("</p:spTree>"),
        ),
        Format::Epub => {
            let body = xml.find("<body").unwrap();
            let start = body + xml[body..].find('>').unwrap() + 1;
            (
                "OEBPS/sections/section0001.xhtml",
                start,
                before_last("</body>"),
            )
        }
        Format::Pdf | Format::Rtf => unreachable!(),
    }
}

fn part_name(format: Format) -> &'static str {
    match format {
        Format::Docx => "word/document.xml",
        Format::Odt | Format::Ods | Format::Odp => "content.xml",
        Format::Xlsx => "xl/worksheets/sheet1.xml",
        Format::Pptx => "ppt/slides/slide1.xml",
        Format::Epub => "OEBPS/sections/section0001.xhtml",
        Format::Pdf | Format::Rtf => unreachable!(),
    }
}

/// The zip file with its main part's body repeated to about `size` bytes.
fn scale_zip(bytes: &[u8], format: Format, size: usize) -> Vec<u8> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        let name = f.name().to_owned();
        let mut data = Vec::new();
        f.read_to_end(&mut data).unwrap();
        if name == part_name(format) {
            let text = String::from_utf8(data).unwrap();
            let (_, start, end) = unit_of(format, &text);
            data = repeat_body(&text, start, end, size, true).into_bytes();
        }
        w.start_file(name, SimpleFileOptions::default()).unwrap();
        w.write_all(&data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// The RTF with its body (from the first `\pard` to the closing brace) repeated.
fn scale_rtf(bytes: &[u8], size: usize) -> Vec<u8> {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let start = text.find("\\pard").unwrap();
    let end = text.rfind('}').unwrap();
    repeat_body(&text, start, end, size, false).into_bytes()
}

/// The PDF with its first page copied (content stream included) `pages` times.
fn scale_pdf(bytes: &[u8], pages: usize) -> Vec<u8> {
    let mut doc = Document::load_mem(bytes).unwrap();
    let (_, page_id) = doc.get_pages().into_iter().next().unwrap();
    let page = doc.get_object(page_id).unwrap().as_dict().unwrap().clone();
    let contents = page.get(b"Contents").unwrap().as_reference().unwrap();
    let stream = doc.get_object(contents).unwrap().clone();
    let parent = page.get(b"Parent").unwrap().as_reference().unwrap();
    let mut kids = vec![Object::Reference(page_id)];
    for _ in 1..pages {
        let sid = doc.add_object(stream.clone());
        let mut p = page.clone();
        p.set("Contents", Object::Reference(sid));
        kids.push(Object::Reference(doc.add_object(p)));
    }
    let tree = doc.get_object_mut(parent).unwrap().as_dict_mut().unwrap();
    tree.set("Count", Object::Integer(kids.len() as i64));
    tree.set("Kids", Object::Array(kids));
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

fn main() {
    let runs: usize = std::env::var("KENNIS_EXTRACT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let whole = Limits {
        output_bytes: 1 << 30,
        time: Duration::from_secs(600),
        ..Limits::DEFAULT
    };
    let sandbox = Extractor::new(PathBuf::from(env!("CARGO_BIN_EXE_kennis")), whole.clone());
    let capped = Extractor::new(PathBuf::from(env!("CARGO_BIN_EXE_kennis")), Limits::DEFAULT);
    // Main parts of 32 MB (XLSX 8 MB: its rows hold only numbers and shared-string indexes,
    // which compress past the ratio guard beyond 16 MiB).
    let size = 32 << 20;
    let inputs: Vec<(&str, Format, Vec<u8>)> = vec![
        (
            "text.pdf",
            Format::Pdf,
            scale_pdf(&fixture("text.pdf"), 1500),
        ),
        (
            "text.docx",
            Format::Docx,
            scale_zip(&fixture("text.docx"), Format::Docx, size),
        ),
        (
            "text.odt",
            Format::Odt,
            scale_zip(&fixture("text.odt"), Format::Odt, size),
        ),
        (
            "sheet.xlsx",
            Format::Xlsx,
            scale_zip(&fixture("sheet.xlsx"), Format::Xlsx, 8 << 20),
        ),
        (
            "sheet.ods",
            Format::Ods,
            scale_zip(&fixture("sheet.ods"), Format::Ods, size),
        ),
        (
            "slides.pptx",
            Format::Pptx,
            scale_zip(&fixture("slides.pptx"), Format::Pptx, size),
        ),
        (
            "slides.odp",
            Format::Odp,
            scale_zip(&fixture("slides.odp"), Format::Odp, size),
        ),
        (
            "text.rtf",
            Format::Rtf,
            scale_rtf(&fixture("text.rtf"), size),
        ),
        (
            "text.epub",
            Format::Epub,
            scale_zip(&fixture("text.epub"), Format::Epub, size),
        ),
    ];
    println!(
        "extraction: {runs} runs per file, median; input MB/s and text MB/s, whole document\n"
    );
    println!(
        "| file (scaled) | input MB | text MB | in process ms | in process MB/s (input / text) | sandbox ms | sandbox MB/s (input / text) | sandbox, 1 MiB cap, ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, format, bytes) in &inputs {
        let mut text_len = 0;
        let mut inproc = Vec::new();
        let mut child = Vec::new();
        let mut cut = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let e = extract_in_process(*format, bytes, &whole).unwrap();
            inproc.push(t.elapsed());
            text_len = e.text.len();
            let t = Instant::now();
            let s = sandbox.extract(*format, bytes).unwrap();
            child.push(t.elapsed());
            assert_eq!(
                s.text.len(),
                text_len,
                "{name}: sandbox and in process differ"
            );
            let t = Instant::now();
            let c = capped.extract(*format, bytes).unwrap();
            cut.push(t.elapsed());
            assert!(c.text.len() <= 1 << 20);
        }
        let (i, c, k) = (median(inproc), median(child), median(cut));
        println!(
            "| {name} | {:.1} | {:.1} | {:.0} | {:.1} / {:.1} | {:.0} | {:.1} / {:.1} | {:.0} |",
            mb(bytes.len()),
            mb(text_len),
            i.as_secs_f64() * 1e3,
            mb(bytes.len()) / i.as_secs_f64(),
            mb(text_len) / i.as_secs_f64(),
            c.as_secs_f64() * 1e3,
            mb(bytes.len()) / c.as_secs_f64(),
            mb(text_len) / c.as_secs_f64(),
            k.as_secs_f64() * 1e3,
        );
    }
    // The fixed cost of a child: a small file in process and through the sandbox.
    let small = fixture("text.docx");
    let mut inproc = Vec::new();
    let mut child = Vec::new();
    for _ in 0..runs.max(20) {
        let t = Instant::now();
        extract_in_process(Format::Docx, &small, &Limits::DEFAULT).unwrap();
        inproc.push(t.elapsed());
        let t = Instant::now();
        capped.extract(Format::Docx, &small).unwrap();
        child.push(t.elapsed());
    }
    println!(
        "\nper-file process cost: text.docx ({} bytes) in process {:.2} ms, through the sandbox {:.2} ms",
        small.len(),
        median(inproc).as_secs_f64() * 1e3,
        median(child).as_secs_f64() * 1e3
    );
}
