//! Text extraction. In process: the guards against hostile archives (made here with the
//! `zip` crate) and the output cap. Through the sandbox for real (`Extractor` starts the built
//! `kennis extract-worker` for each file): every format; hostile files give their error, never
//! a hang; the memory and time limits stop a child; parallel calls do not mix.

use std::io::{Cursor, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kennis::kb::extract::{ExtractError, Extractor, Format, Limits, extract_in_process, format_of};
use zip::write::SimpleFileOptions;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/extract")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn extractor(limits: Limits) -> Extractor {
    Extractor::new(PathBuf::from(env!("CARGO_BIN_EXE_kennis")), limits)
}

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in entries {
        w.start_file(*name, SimpleFileOptions::default()).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// A Word file whose body is `body` (content types, package relation, document part).
fn docx_with(body: &[u8]) -> Vec<u8> {
    let mut doc = br#"<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>"#.to_vec();
    doc.extend_from_slice(body);
    doc.extend_from_slice(b"</w:body></w:document>");
    zip_of(&[
        ("[Content_Types].xml", br#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#),
        ("_rels/.rels", br#"<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#),
        ("word/document.xml", &doc),
    ])
}

/// A body of `size` bytes of one letter in one text run: valid XML that extracts without the
/// guards.
fn one_long_run(size: usize) -> Vec<u8> {
    let mut body = b"<w:p><w:r><w:t>".to_vec();
    body.resize(body.len() + size, b'a');
    body.extend_from_slice(b"</w:t></w:r></w:p>");
    body
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
fn zip_bombs_named_docx_are_refused_in_process() {
    // One highly compressible entry (40 MiB in a few dozen KiB): the ratio guard.
    let bomb = docx_with(&one_long_run(40 << 20));
    assert!(bomb.len() < 200_000, "{}", bomb.len());
    match extract_in_process(Format::Docx, &bomb, &Limits::DEFAULT) {
        Err(ExtractError::ZipBomb(m)) => {
            assert!(
                m.contains("word/document.xml") && m.contains("200 times"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Without the ratio guard: the per-entry limit, then the total.
    let limits = Limits {
        zip_ratio: u64::MAX,
        entry_bytes: 8 << 20,
        ..Limits::DEFAULT
    };
    match extract_in_process(Format::Docx, &bomb, &limits) {
        Err(ExtractError::ZipBomb(m)) => assert!(m.contains("8388608 bytes"), "{m}"),
        other => panic!("{other:?}"),
    }
    let limits = Limits {
        zip_ratio: u64::MAX,
        unzipped_bytes: 4 << 20,
        ..Limits::DEFAULT
    };
    match extract_in_process(Format::Docx, &bomb, &limits) {
        Err(ExtractError::ZipBomb(m)) => assert!(m.contains("entries read"), "{m}"),
        other => panic!("{other:?}"),
    }
    // With every guard lifted the same file extracts (so the guards are what refused it).
    let limits = Limits {
        zip_ratio: u64::MAX,
        ..Limits::DEFAULT
    };
    let e = extract_in_process(Format::Docx, &bomb, &limits).unwrap();
    assert!(e.truncated && e.text.len() == 1 << 20);
    // Very many entries.
    let names: Vec<String> = (0..20_000).map(|i| format!("word/media/{i}.xml")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
    match extract_in_process(Format::Docx, &zip_of(&entries), &Limits::DEFAULT) {
        Err(ExtractError::ZipBomb(m)) => assert!(m.contains("20000 entries"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn deeply_nested_xml_is_refused_in_process() {
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

/// An OpenDocument spreadsheet whose one sheet has `rows` as its rows.
fn ods_with(rows: &str) -> Vec<u8> {
    let content = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:spreadsheet><table:table table:name="Blad1">{rows}</table:table></office:spreadsheet></office:body></office:document-content>"#
    );
    zip_of(&[
        (
            "mimetype",
            b"application/vnd.oasis.opendocument.spreadsheet",
        ),
        ("content.xml", content.as_bytes()),
    ])
}

/// OpenDocument stores runs of equal cells and rows once with a count: a million rows of
/// 16,384 cells come out until the cap and no further; cells of nothing printable (white
/// space, control characters) repeated as often give nothing, at once.
#[test]
fn repeated_cells_and_rows_are_bounded_by_the_cap() {
    let cells = |text: &str| {
        format!(
            r#"<table:table-row table:number-rows-repeated="1000000"><table:table-cell table:number-columns-repeated="16384" office:value-type="string"><text:p>{text}</text:p></table:table-cell></table:table-row>"#
        )
    };
    let started = Instant::now();
    let full = extract_in_process(Format::Ods, &ods_with(&cells("x")), &Limits::DEFAULT).unwrap();
    assert!(full.truncated);
    assert!(full.text.starts_with("Blad1\nx\tx\tx"));
    let blank = ods_with(&format!("{}{}", cells("\u{1} \u{7f}"), cells("")));
    let none = extract_in_process(Format::Ods, &blank, &Limits::DEFAULT).unwrap();
    assert_eq!(none.text, "Blad1");
    assert!(!none.truncated);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// What each fixture must give through the child: a line it contains.
const EXPECTED: &[(&str, &str)] = &[
    ("text.pdf", "Offerte kozijnen Zeestraat"),
    ("columns.pdf", "Nieuwsbrief bouwteam"),
    ("text.docx", "Meranti kozijn\t4\t1.250,00"),
    ("text.odt", "Meranti kozijn\t4\t1.250,00"),
    ("text.rtf", "Meranti kozijn\t4\t1.250,00"),
    ("text.epub", "Meranti kozijn\t4\t1.250,00"),
    ("sheet.xlsx", "Hardhouten dorpel\t3\t85\t255"),
    ("sheet.ods", "Hardhouten dorpel\t3\t85\t255"),
    ("slides.pptx", "Materiaal kost € 4.300, arbeid Ωmega-tarief"),
    ("slides.odp", "Materiaal kost € 4.300, arbeid Ωmega-tarief"),
];

#[test]
fn every_format_through_the_worker() {
    let x = extractor(Limits::DEFAULT);
    let mut seen = Vec::new();
    for (name, line) in EXPECTED {
        let bytes = fixture(name);
        let format = format_of(name, &bytes).unwrap_or_else(|| panic!("{name}: no format"));
        let got = x
            .extract(format, &bytes)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            got.text.lines().any(|l| l == *line),
            "{name}: no line {line:?} in {:?}",
            got.text
        );
        seen.push(format);
    }
    for f in Format::ALL {
        assert!(seen.contains(&f), "{f:?} not covered");
    }
}

#[test]
fn hostile_files_give_their_error_through_the_worker() {
    let x = extractor(Limits::DEFAULT);
    let started = Instant::now();
    assert_eq!(
        x.extract(Format::Pdf, &fixture("scan.pdf")),
        Err(ExtractError::NoText)
    );
    assert_eq!(
        x.extract(Format::Pdf, &fixture("encrypted.pdf")),
        Err(ExtractError::Encrypted)
    );
    let pdf = fixture("text.pdf");
    match x.extract(Format::Pdf, &pdf[..pdf.len() / 2]) {
        Err(ExtractError::Damaged(_)) => {}
        Ok(e) => assert!(e.text.contains("Offerte"), "{e:?}"),
        other => panic!("truncated PDF: {other:?}"),
    }
    let random: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    assert_eq!(format_of("prijzen.xlsx", &random), None);
    assert!(matches!(
        x.extract(Format::Xlsx, &random),
        Err(ExtractError::Damaged(_))
    ));
    let bomb = docx_with(&one_long_run(40 << 20));
    assert_eq!(format_of("bom.docx", &bomb), Some(Format::Docx));
    assert!(matches!(
        x.extract(Format::Docx, &bomb),
        Err(ExtractError::ZipBomb(_))
    ));
    let names: Vec<String> = (0..20_000).map(|i| format!("{i}.xml")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
    assert!(matches!(
        x.extract(Format::Docx, &zip_of(&entries)),
        Err(ExtractError::ZipBomb(_))
    ));
    let deep = format!("{}x{}", "<w:p>".repeat(100_000), "</w:p>".repeat(100_000));
    assert_eq!(
        x.extract(Format::Docx, &docx_with(deep.as_bytes())),
        Err(ExtractError::TooDeep(1_000))
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// A document whose one text run is 256 MiB (a 256 KiB file; the zip guards lifted) makes the
/// XML reader allocate past the child's address-space limit: the child dies, the caller gets
/// `MemoryLimit`.
#[test]
fn a_child_is_stopped_by_the_memory_limit() {
    let file = docx_with(&one_long_run(256 << 20));
    let limits = Limits {
        memory_bytes: 128 << 20,
        unzipped_bytes: 1 << 30,
        entry_bytes: 1 << 30,
        zip_ratio: u64::MAX,
        time: Duration::from_secs(60),
        ..Limits::DEFAULT
    };
    assert_eq!(
        extractor(limits).extract(Format::Docx, &file),
        Err(ExtractError::MemoryLimit(128))
    );
    assert!(
        ExtractError::MemoryLimit(128)
            .to_string()
            .contains("128 MiB")
    );
}

/// A large document with a 300 ms limit: the child is killed at the deadline and the call
/// returns soon after, with `TimeLimit`.
#[test]
fn a_child_is_stopped_by_the_time_limit() {
    let para =
        "<w:p><w:r><w:t>Regel met een paar woorden over kozijnen en steigers</w:t></w:r></w:p>"
            .repeat(400_000);
    let file = docx_with(para.as_bytes());
    let limits = Limits {
        time: Duration::from_millis(300),
        output_bytes: 1 << 30,
        ..Limits::DEFAULT
    };
    let started = Instant::now();
    assert_eq!(
        extractor(limits).extract(Format::Docx, &file),
        Err(ExtractError::TimeLimit(1))
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The same file within the default limits: the text, cut at 1 MiB.
    let got = extractor(Limits::DEFAULT)
        .extract(Format::Docx, &file)
        .unwrap();
    assert!(got.truncated);
    assert!(got.text.len() <= 1 << 20 && got.text.len() > (1 << 20) - 100);
}

#[test]
fn parallel_extractions_each_get_their_own_text() {
    let x = extractor(Limits::DEFAULT);
    std::thread::scope(|s| {
        let handles: Vec<_> = EXPECTED
            .iter()
            .chain(EXPECTED)
            .map(|(name, line)| {
                let x = &x;
                s.spawn(move || {
                    let bytes = fixture(name);
                    let format = format_of(name, &bytes).unwrap();
                    let got = x.extract(format, &bytes).unwrap();
                    assert!(got.text.lines().any(|l| l == *line), "{name}");
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

#[test]
fn a_missing_worker_program_is_a_readable_failure() {
    let x = Extractor::new(PathBuf::from("/nonexistent/kennis"), Limits::DEFAULT);
    match x.extract(Format::Pdf, &fixture("text.pdf")) {
        Err(ExtractError::Crashed(m)) => {
            assert!(m.contains("cannot be started"), "{m}");
            // Shown to an organisation's admins: not the server's paths.
            assert!(!m.contains("/nonexistent"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_worker_command_is_hidden_from_help() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kennis"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("reindex"), "{help}");
    assert!(!help.contains("extract-worker"), "{help}");
}

/// A temporary folder with the files `program` makes by running the script
/// `tests/fixtures/extract/<script>` on it; `hint` says what to check when it fails.
fn made_by(program: &str, script: &str, hint: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/extract")
        .join(script);
    let status = std::process::Command::new(program)
        .arg(&script)
        .arg(dir.path())
        .status()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(status.success(), "{} failed ({hint})", script.display());
    dir
}

/// Files made now by the installed LibreOffice (`make.sh` into a temporary folder) extract
/// like the committed ones. Needs `soffice` (`.ci/run` installs it).
#[test]
#[ignore = "needs LibreOffice (soffice); .ci/run installs it"]
fn fresh_libreoffice_files_extract() {
    let dir = made_by("bash", "make.sh", "is LibreOffice installed?");
    let x = extractor(Limits::DEFAULT);
    for (name, line) in EXPECTED {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        let format = format_of(name, &bytes).unwrap_or_else(|| panic!("{name}: no format"));
        let got = x
            .extract(format, &bytes)
            .unwrap_or_else(|e| panic!("fresh {name}: {e}"));
        assert!(
            got.text.lines().any(|l| l == *line),
            "fresh {name}: no line {line:?} in {:?}",
            got.text
        );
    }
    let scan = std::fs::read(dir.path().join("scan.pdf")).unwrap();
    assert_eq!(x.extract(Format::Pdf, &scan), Err(ExtractError::NoText));
    let locked = std::fs::read(dir.path().join("encrypted.pdf")).unwrap();
    assert_eq!(
        x.extract(Format::Pdf, &locked),
        Err(ExtractError::Encrypted)
    );
    let restricted = std::fs::read(dir.path().join("restricted.pdf")).unwrap();
    let got = x.extract(Format::Pdf, &restricted).unwrap();
    assert!(got.text.contains("Offerte kozijnen Zeestraat"), "{got:?}");
}

/// Files from writers other than LibreOffice extract too: Chromium's PDF printer (CID fonts,
/// two columns), reportlab (a standard font and an embedded TrueType one), python-docx,
/// openpyxl and python-pptx. Needs `chromium` and python3 with those packages (`.ci/run`
/// installs them).
#[test]
#[ignore = "needs chromium and python3 with reportlab, python-docx, openpyxl, python-pptx; run by .ci/run"]
fn files_from_other_writers_extract() {
    let dir = made_by("python3", "other/make.py", "are its packages installed?");
    let html = dir.path().join("brief.html");
    std::fs::write(
        &html,
        "<!doctype html><html lang=\"nl\"><meta charset=\"utf-8\"><body>\
         <h1>Brief over de dakkapel</h1>\
         <p>De dakkapel aan de Kerkweg krijgt nieuwe boeidelen, ook in Łódź en Θεσσαλονίκη.</p>\
         <div style=\"column-count:2\"><p>De linkerkolom gaat over de steigers op het plein.</p>\
         <p>De rechterkolom gaat over het afval en de container.</p></div></body></html>",
    )
    .unwrap();
    let pdf = dir.path().join("chromium.pdf");
    let status = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-pdf-header-footer",
        ])
        .arg(format!("--print-to-pdf={}", pdf.display()))
        .arg(format!("file://{}", html.display()))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("chromium");
    assert!(status.success() && pdf.exists(), "chromium printed no PDF");
    let x = extractor(Limits::DEFAULT);
    let expected: &[(&str, &[&str])] = &[
        (
            "chromium.pdf",
            &[
                "Brief over de dakkapel",
                "ook in Łódź en Θεσσαλονίκη",
                "De linkerkolom gaat over de steigers op het plein.",
            ],
        ),
        (
            "reportlab.pdf",
            &[
                "Werkbon schilderwerk Dorpsstraat: twee lagen grondverf.",
                "Łódź, Brno en Θεσσαλονίκη leveren € 7,25 per meter.",
            ],
        ),
        (
            "python-docx.docx",
            &["Werkbon schilderwerk", "Kozijnen schuren\t6"],
        ),
        (
            "openpyxl.xlsx",
            &["Uren", "Kozijnen schuren\t6", "Grondverf\tŁódź-groen"],
        ),
        (
            "python-pptx.pptx",
            &["Planning schilderwerk", "Grondverf in week negen"],
        ),
    ];
    for (name, lines) in expected {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        let format = format_of(name, &bytes).unwrap_or_else(|| panic!("{name}: no format"));
        let got = x
            .extract(format, &bytes)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // Line breaks inside a paragraph depend on the page layout; compare words.
        let flat = got.text.split_whitespace().collect::<Vec<_>>().join(" ");
        for line in *lines {
            let want = line.split_whitespace().collect::<Vec<_>>().join(" ");
            let tabbed = line.contains('\t') && got.text.lines().any(|l| l == *line);
            assert!(
                tabbed || (!line.contains('\t') && flat.contains(&want)),
                "{name}: no {line:?} in {:?}",
                got.text
            );
        }
    }
}

/// Runs `kennis extract-worker` as the server starts it (empty environment, `/`) with the
/// self-test probe list `probes`; its JSON report.
fn worker_selftest(probes: &serde_json::Value) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kennis"))
        .arg("extract-worker")
        .env_clear()
        .env(kennis::kb::extract::SELFTEST_ENV, probes.to_string())
        .current_dir("/")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::fixture::stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `(probe, outcome)` of the report's `before` or `after` list.
fn outcomes(report: &serde_json::Value, when: &str) -> Vec<(String, String)> {
    report[when]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["probe"].as_str().unwrap().to_owned(),
                o["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The sandbox, for real: a running server's data directory holds `secret.key` and a loopback
/// TCP and UDP listener wait. The worker, started as the server starts it with the self-test
/// probe list, first shows that the probes work (it reads the key and reaches both listeners
/// before it confines itself), then confines itself exactly as for an extraction and tries
/// again: reading the key, listing the data directory, planting a file, connecting and sending
/// are all denied; the listeners see the one contact from before and nothing after; the key's
/// content never appears in the output. Then each layer alone: landlock denies the files and
/// the TCP connection by itself (`EACCES`), the seccomp filter all of it (`EPERM`).
#[tokio::test]
async fn the_worker_cannot_read_the_data_directory_or_reach_the_network() {
    use std::net::{TcpListener, UdpSocket};
    let t = crate::fixture::TestServer::start().await;
    let data = t.data_dir().to_owned();
    let secret = data.join("secret.key");
    let key = std::fs::read(&secret).expect("the server wrote secret.key");
    let planted = data.join("planted");
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let probes = serde_json::json!({
        "read": [secret, data],
        "write": [planted],
        "connect": [tcp.local_addr().unwrap().to_string()],
        "udp": [udp.local_addr().unwrap().to_string()],
    });
    let report = worker_selftest(&probes);
    let text = report.to_string();
    let sandbox = &report["sandbox"]["Ok"];
    assert_eq!(sandbox["seccomp"], true, "{report:#}");
    // This kernel (and CI's) has landlock: its layer is in force too.
    let landlock = sandbox["landlock"].as_str().unwrap();
    assert!(landlock.starts_with("enforced"), "{report:#}");
    let (before, after) = (outcomes(&report, "before"), outcomes(&report, "after"));
    assert_eq!(before.len(), 4, "{report:#}");
    for (probe, outcome) in &before {
        assert_eq!(outcome, "allowed", "before the sandbox: {probe}");
    }
    assert_eq!(after.len(), 5, "{report:#}");
    for (probe, outcome) in &after {
        assert!(
            outcome.starts_with("denied"),
            "inside the sandbox {probe} was {outcome}"
        );
    }
    assert!(!planted.exists());
    assert!(memchr::memmem::find(text.as_bytes(), &key).is_none());
    // One connection and one datagram (from before the sandbox), nothing after.
    tcp.set_nonblocking(true).unwrap();
    assert!(
        tcp.accept().is_ok(),
        "the probe before the sandbox connected"
    );
    assert_eq!(
        tcp.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    udp.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    assert!(udp.recv_from(&mut buf).is_ok());
    assert_eq!(
        udp.recv_from(&mut buf).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );

    // Each layer by itself (UDP is left out: landlock handles it only from ABI 10).
    for (only, errno) in [("landlock", "os error 13)"), ("seccomp", "os error 1)")] {
        let probes = serde_json::json!({
            "only": only,
            "read": [data.join("secret.key"), data],
            "write": [data.join("planted")],
            "connect": [tcp.local_addr().unwrap().to_string()],
        });
        let report = worker_selftest(&probes);
        let after = outcomes(&report, "after");
        assert_eq!(after.len(), 4, "{report:#}");
        for (probe, outcome) in &after {
            assert!(
                outcome.starts_with("denied") && outcome.ends_with(&format!("({errno}")),
                "{only} alone: {probe} was {outcome}"
            );
        }
        assert!(!data.join("planted").exists());
        assert!(tcp.accept().is_ok(), "only the probe before the sandbox");
        assert_eq!(
            tcp.accept().unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
    }

    // A bad probe list is refused, not ignored.
    for bad in [r#"{"exec": []}"#, r#"{"only": "nothing"}"#] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kennis"))
            .arg("extract-worker")
            .env_clear()
            .env(kennis::kb::extract::SELFTEST_ENV, bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(out.stdout.is_empty());
    }
}

/// A worker cannot signal any other process — the server that started it, say — by any
/// system call that sends signals: not `kill` alone, but `tkill`, `tgkill`, `rt_sigqueueinfo`,
/// `rt_tgsigqueueinfo` and `pidfd_send_signal` too, with both layers and with the seccomp
/// filter alone (landlock scopes signals only from ABI 6, Linux 6.12). The probes send signal
/// 0, which delivers nothing; before the sandbox each of them is allowed.
#[test]
fn the_worker_cannot_signal_other_processes() {
    let parent = std::process::id();
    for only in [None, Some("seccomp")] {
        let mut probes = serde_json::json!({ "signal": [parent] });
        if let Some(only) = only {
            probes["only"] = only.into();
        }
        let report = worker_selftest(&probes);
        assert_eq!(report["sandbox"]["Ok"]["seccomp"], true, "{report:#}");
        let (before, after) = (outcomes(&report, "before"), outcomes(&report, "after"));
        assert_eq!(before.len(), 6, "{report:#}");
        for (probe, outcome) in &before {
            assert_eq!(outcome, "allowed", "before the sandbox: {probe}");
        }
        assert_eq!(after.len(), 6, "{report:#}");
        for (probe, outcome) in &after {
            assert!(
                outcome.starts_with("denied"),
                "{only:?}: inside the sandbox {probe} was {outcome}"
            );
        }
    }
}
