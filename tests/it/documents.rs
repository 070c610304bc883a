//! Documents as organisations have them (issue 15), through the real server and CLI: PDF,
//! Office and OpenDocument files (made by LibreOffice, `tests/fixtures/extract/`) become
//! searchable and readable after a portal upload, a `kb import` or a `reindex`; hostile files
//! stay binary documents with their reason shown to admins; `[kb] extract_text = false` is the
//! specification's rule 8; the store is compressed, migrates from schema 1, and compacts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kennis::config::{KbSettings, Settings};
use kennis::kb::index::SearchIndex;
use kennis::store::Store;
use serde_json::{Value, json};

use crate::fixture::{Browser, Seeded, TestServer, run, run_json};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/extract")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fixtures and a word each one's text holds.
const FILES: &[(&str, &str)] = &[
    ("text.pdf", "Zeestraat"),
    ("columns.pdf", "bouwteam"),
    ("text.docx", "Meranti"),
    ("text.odt", "Meranti"),
    ("text.rtf", "Meranti"),
    ("text.epub", "Meranti"),
    ("sheet.xlsx", "dorpel"),
    ("sheet.ods", "dorpel"),
    ("slides.pptx", "Ωmega"),
    ("slides.odp", "Ωmega"),
];

async fn upload(b: &mut Browser<'_>, slug: &str, folder: &str, files: &[(&str, Vec<u8>)]) {
    let csrf = b.get(&format!("/portal/o/{slug}/kb")).await.csrf();
    let files: Vec<(&str, &str, &[u8])> = files
        .iter()
        .map(|(n, bytes)| (*n, "application/octet-stream", bytes.as_slice()))
        .collect();
    let p = b
        .multipart(
            &format!("/portal/o/{slug}/kb/upload"),
            &[("csrf_token", &csrf), ("folder", folder)],
            &files,
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
}

/// Waits (at most 60 s) until the background extraction has tried every given document.
pub(crate) async fn wait_extracted(t: &TestServer, org_id: u64, paths: &[String]) {
    let started = Instant::now();
    loop {
        let app = t.app().clone();
        let paths = paths.to_vec();
        let done = tokio::task::spawn_blocking(move || {
            app.store
                .read(|tx| {
                    let mut all = true;
                    for p in &paths {
                        let doc = kennis::kb::get_document(tx, org_id, p)?.expect("stored");
                        all &= kennis::kb::extracted::outcome(tx, &doc.hash)?.is_some();
                    }
                    Ok::<_, kennis::store::StoreError>(all)
                })
                .unwrap()
        })
        .await
        .unwrap();
        if done {
            // The index takes the text in right after the outcome is stored.
            t.app().kb_index.catch_up(&t.app().store).unwrap();
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "extraction did not finish"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A ready person of a fresh organisation who uploaded `offertes/text.pdf` in the portal.
pub(crate) async fn upload_offer(t: &TestServer) -> Seeded {
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let mut b = Browser::new(t);
    b.login(&s, &format!("/portal/o/{slug}/kb")).await;
    upload(
        &mut b,
        &slug,
        "offertes",
        &[("text.pdf", fixture("text.pdf"))],
    )
    .await;
    s
}

fn paths_of(s: &Seeded, folder: &str, names: &[&str]) -> (u64, Vec<String>) {
    (
        s.org.id,
        names.iter().map(|n| format!("{folder}/{n}")).collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploaded_pdf_and_office_files_are_searched_and_read() {
    let t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let mut b = Browser::new(&t);
    b.login(&s, &format!("/portal/o/{slug}/kb")).await;
    let files: Vec<(&str, Vec<u8>)> = FILES.iter().map(|(n, _)| (*n, fixture(n))).collect();
    upload(&mut b, &slug, "offertes", &files).await;
    t.put_doc(
        &s,
        "offertes/notities.md",
        "# Notities\nMeranti kozijnen bestellen\n",
    );
    let names: Vec<&str> = FILES.iter().map(|(n, _)| *n).collect();
    let (org, paths) = paths_of(&s, "offertes", &names);
    wait_extracted(&t, org, &paths).await;

    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    for (name, word) in FILES {
        let out = mcp
            .ok(
                "kennisbank_search",
                json!({"query": word, "path": "offertes"}),
            )
            .await;
        let hit = out["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["path"] == format!("offertes/{name}"))
            .unwrap_or_else(|| panic!("{name} not found for {word}: {out}"));
        assert_eq!(hit["extracted"], true, "{hit}");
        assert!(
            hit["snippet"].as_str().unwrap().contains(word),
            "{name}: {hit}"
        );
        assert!(hit["line"].as_u64().unwrap() >= 1);
    }
    // A text document's result has no `extracted`; both kinds are found together.
    let out = mcp
        .ok("kennisbank_search", json!({"query": "meranti kozijn"}))
        .await;
    let results = out["results"].as_array().unwrap();
    let md = results
        .iter()
        .find(|r| r["path"] == "offertes/notities.md")
        .expect("the Markdown note");
    assert!(md.get("extracted").is_none(), "{md}");
    assert!(
        results.iter().any(|r| r["path"] == "offertes/text.docx"),
        "{out}"
    );
    // Letters beyond Latin-1 in a PDF, found with case and accents folded as in any text.
    for query in ["ZAZOLC gesla", "καλημερα κοσμε", "zluťoučký"] {
        let out = mcp.ok("kennisbank_search", json!({"query": query})).await;
        assert!(
            out["results"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["path"] == "offertes/text.pdf" && r["extracted"] == true),
            "{query}: {out}"
        );
    }
    // The line is counted in the extracted text: the snippet starts at that line.
    let out = mcp
        .ok(
            "kennisbank_search",
            json!({"query": "\"Offerte kozijnen Zeestraat\""}),
        )
        .await;
    let hit = out["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "offertes/text.pdf")
        .unwrap_or_else(|| panic!("{out}"));
    let read = mcp
        .ok(
            "kennisbank_read",
            json!({"path": "offertes/text.pdf", "maxChars": 20000}),
        )
        .await;
    let line = hit["line"].as_u64().unwrap() as usize;
    let excerpt_line = read["excerpt"].as_str().unwrap().split('\n').nth(line - 1);
    assert!(
        excerpt_line.is_some_and(|l| l.contains("Offerte kozijnen Zeestraat")),
        "line {line} of {read}"
    );

    // kennisbank_read: still a binary document with its link, plus the excerpt.
    assert_eq!(read["kind"], "binary");
    assert_eq!(read["extracted"], true);
    assert_eq!(read["content_type"], "application/pdf");
    assert!(read["download_url"].as_str().unwrap().contains("/files/"));
    let epub = mcp
        .ok("kennisbank_read", json!({"path": "offertes/text.epub"}))
        .await;
    assert_eq!(
        (&epub["content_type"], &epub["extracted"]),
        (&json!("application/epub+zip"), &json!(true)),
        "{epub}"
    );
    let total = read["total_chars"].as_u64().unwrap();
    assert!(total > 30, "{read}");
    assert_eq!(read["truncated"], false);
    let short = mcp
        .ok(
            "kennisbank_read",
            json!({"path": "offertes/text.pdf", "maxChars": 10}),
        )
        .await;
    assert_eq!(short["excerpt"].as_str().unwrap().chars().count(), 10);
    assert_eq!(short["truncated"], true);
    assert_eq!(short["total_chars"].as_u64().unwrap(), total);
    let call = mcp
        .call(
            "kennisbank_read",
            json!({"path": "offertes/text.pdf", "maxChars": 10}),
        )
        .await;
    let text = call["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("text taken from it"), "{text}");
    // Binary files stay refused for writing.
    let e = mcp
        .err(
            "kennisbank_write",
            json!({"path": "aangeleverd/x.pdf", "content": "%PDF-1.4 nep"}),
        )
        .await;
    assert_eq!(e["code"], "unsupported_type", "{e}");

    // The portal shows the extracted text on the document page and marks search results.
    let page = b
        .get(&format!("/portal/o/{slug}/kb/offertes/text.pdf"))
        .await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("id=\"kb-extracted-note\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("Offerte kozijnen Zeestraat"));
    let page = b.get(&format!("/portal/o/{slug}/kb?q=Zeestraat")).await;
    assert!(page.body.contains("offertes/text.pdf"), "{}", page.body);
    assert!(page.body.contains("badge extracted"), "{}", page.body);
}

/// A zip bomb named `.docx`: one entry of 40 MiB of one letter, packed to a few dozen KiB.
fn zip_bomb_docx() -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    w.start_file("[Content_Types].xml", opts).unwrap();
    w.write_all(br#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#).unwrap();
    w.start_file("_rels/.rels", opts).unwrap();
    w.write_all(br#"<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#).unwrap();
    w.start_file("word/document.xml", opts).unwrap();
    w.write_all(br#"<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>"#).unwrap();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..40 {
        w.write_all(&chunk).unwrap();
    }
    w.write_all(b"</w:t></w:r></w:p></w:body></w:document>")
        .unwrap();
    w.finish().unwrap().into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_files_stay_binary_and_admins_see_why() {
    let t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let mut b = Browser::new(&t);
    b.login(&s, &format!("/portal/o/{slug}/kb")).await;
    let pdf = fixture("text.pdf");
    let noise: Vec<u8> = (0..20_000).map(|_| rand::random::<u8>()).collect();
    let bomb = zip_bomb_docx();
    assert!(bomb.len() < 300_000, "{}", bomb.len());
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("scan.pdf", fixture("scan.pdf")),
        ("half.pdf", pdf[..pdf.len() / 2].to_vec()),
        ("bom.docx", bomb),
        ("ruis.xlsx", noise),
        ("slot.pdf", fixture("encrypted.pdf")),
    ];
    upload(&mut b, &slug, "vreemd", &files).await;
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    let (org, paths) = paths_of(&s, "vreemd", &names);
    wait_extracted(&t, org, &paths).await;

    let expected = [
        ("scan.pdf", "no_text", "geen tekstlaag"),
        ("half.pdf", "damaged", "beschadigd"),
        ("bom.docx", "zip_bomb", "zipbom"),
        ("ruis.xlsx", "damaged", "beschadigd"),
        ("slot.pdf", "encrypted", "wachtwoord"),
    ];
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    let mut dutch = Browser::speaking(&t, "nl");
    dutch.login(&s, &format!("/portal/o/{slug}/kb")).await;
    for (name, kind, dutch_reason) in expected {
        let path = format!("vreemd/{name}");
        let outcome = outcome_of(&t.app().store, org, &path).unwrap();
        let error = serde_json::to_value(outcome.error.as_ref().expect("failed")).unwrap();
        assert_eq!(error["kind"], kind, "{name}: {error}");
        // An ordinary binary document: details and a link, no excerpt.
        let read = mcp.ok("kennisbank_read", json!({"path": path})).await;
        assert_eq!(read["kind"], "binary");
        assert!(
            read.get("excerpt").is_none() && read.get("extracted").is_none(),
            "{read}"
        );
        // The admin's page says why, in the admin's language.
        let page = b.get(&format!("/portal/o/{slug}/kb/{path}")).await;
        assert!(
            page.body.contains("id=\"kb-extraction-failed\""),
            "{name}: {}",
            page.body
        );
        let page = dutch.get(&format!("/portal/o/{slug}/kb/{path}")).await;
        assert!(page.body.contains(dutch_reason), "{name}: {}", page.body);
    }
    // Nothing of them is searched, and the server carries on: a text upload is found.
    let out = mcp.ok("kennisbank_search", json!({"query": "aaaa"})).await;
    assert_eq!(out["results"], json!([]), "{out}");
    upload(
        &mut b,
        &slug,
        "vreemd",
        &[("daarna.md", b"Alles werkt nog\n".to_vec())],
    )
    .await;
    let out = mcp
        .ok("kennisbank_search", json!({"query": "werkt nog"}))
        .await;
    assert_eq!(out["results"][0]["path"], "vreemd/daarna.md", "{out}");

    // A member who is not an admin is not shown the reason.
    let other = t.seed("Bouw BV", "bert@example.org");
    kennis::identity::set_member(
        &t.app().store,
        &kennis::audit::Actor::Operator,
        s.org.id,
        other.person.id,
        kennis::identity::MemberChange {
            role: Some(kennis::identity::Role::Member),
            may_connect: None,
        },
        t.app().clock.now(),
    )
    .unwrap();
    let mut member = Browser::new(&t);
    member.login(&other, &format!("/portal/o/{slug}/kb")).await;
    let page = member
        .get(&format!("/portal/o/{slug}/kb/vreemd/scan.pdf"))
        .await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("kb-extraction-failed"), "{}", page.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extract_text_false_is_rule_8() {
    let t = TestServer::start_with(extracting(false)).await;
    let s = upload_offer(&t).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    let out = mcp
        .ok("kennisbank_search", json!({"query": "Zeestraat"}))
        .await;
    assert_eq!(out["results"], json!([]), "{out}");
    let read = mcp
        .ok("kennisbank_read", json!({"path": "offertes/text.pdf"}))
        .await;
    assert!(
        read.get("excerpt").is_none() && read.get("extracted").is_none(),
        "{read}"
    );
    // The tools describe what the server does: no text of PDF or Office files.
    let (_, list) = mcp.rpc("tools/list", json!({})).await;
    let description = |name: &str| -> String {
        list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["description"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for tool in ["kennisbank_read", "kennisbank_search"] {
        assert!(!description(tool).contains("extracted"), "{list}");
    }
    assert!(
        description("kennisbank_search").contains("PDF and Office documents are not searched"),
        "{list}"
    );
    assert_eq!(
        outcome_of(&t.app().store, s.org.id, "offertes/text.pdf"),
        None,
        "nothing was extracted"
    );
}

/// Settings with `[kb] extract_text` on or off.
fn extracting(on: bool) -> Settings {
    Settings {
        kb: Some(KbSettings {
            extract_text: Some(on),
        }),
        ..Settings::default()
    }
}

/// What extracting `path`'s content gave, if it was tried.
fn outcome_of(store: &Store, org: u64, path: &str) -> Option<kennis::kb::extracted::Extraction> {
    store
        .read(|tx| {
            let doc = kennis::kb::get_document(tx, org, path)?.unwrap();
            kennis::kb::extracted::outcome(tx, &doc.hash)
        })
        .unwrap()
}

/// A store and search index in a fresh directory, without a server.
fn offline() -> (tempfile::TempDir, Store, SearchIndex) {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).unwrap();
    let index = SearchIndex::open(&data.path().join("index"), true).unwrap();
    (data, store, index)
}

/// The extractor the server uses: `kennis extract-worker` children with the default limits.
fn worker() -> kennis::kb::extract::Extractor {
    kennis::kb::extract::Extractor::new(
        PathBuf::from(env!("CARGO_BIN_EXE_kennis")),
        kennis::kb::extract::Limits::DEFAULT,
    )
}

fn search_offline(data_dir: &Path, org_id: u64, query: &str) -> Vec<(String, bool)> {
    let store = Store::open(data_dir).unwrap();
    let index = SearchIndex::open(&data_dir.join("index"), true).unwrap();
    found(&store, &index, org_id, query)
}

/// (path, extracted) of what a search finds, after the index has caught up with the store.
fn found(store: &Store, index: &SearchIndex, org_id: u64, query: &str) -> Vec<(String, bool)> {
    index.catch_up(store).unwrap();
    let out = kennis::kb::search::search_text(store, index, org_id, query, None, 50).unwrap();
    assert!(out.not_searched.is_none(), "{out:?}");
    out.results
        .into_iter()
        .map(|h| (h.path, h.extracted))
        .collect()
}

#[test]
fn import_extracts_and_reindex_extracts_what_was_stored_before() {
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let org = run_json(d, &["org", "create", "Bouw BV", "--json"], None);
    let org_id = org["id"].as_u64().unwrap();
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("offertes")).unwrap();
    for name in ["text.pdf", "text.docx", "sheet.ods", "scan.pdf"] {
        std::fs::write(src.path().join("offertes").join(name), fixture(name)).unwrap();
    }
    std::fs::write(src.path().join("lees.md"), "# Lees mij\nMeranti\n").unwrap();
    let dir = src.path().to_str().unwrap();

    // Imported with extraction off (an older kennis, or the switch): rule 8, nothing found.
    let out = crate::fixture::kennis(d)
        .env("KENNIS_EXTRACT_TEXT", "false")
        .args(["kb", "import", "bouw-bv", dir, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::fixture::stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["created"].as_u64(), v["extracted"].as_u64()),
        (Some(5), Some(0)),
        "{v}"
    );
    // The index took in each new document, and the import says so.
    assert_eq!(v["index_updates"], 5, "{v}");
    assert!(search_offline(d, org_id, "Zeestraat").is_empty());

    // `reindex` extracts what was stored before, and the text is searched.
    let v = run_json(d, &["reindex", "--json"], None);
    assert_eq!(v["extracted"], 3, "{v}");
    assert_eq!(v["extraction_failed"], 1, "the scan: {v}");
    assert_eq!(v["documents"], 5, "{v}");
    let found = search_offline(d, org_id, "Zeestraat");
    assert!(
        found.contains(&("offertes/text.pdf".to_owned(), true)),
        "{found:?}"
    );
    assert!(
        found.contains(&("offertes/text.docx".to_owned(), true)),
        "{found:?}"
    );

    // An import with extraction on extracts on the way and says so; unchanged files are
    // not tried again.
    std::fs::write(
        src.path().join("offertes/tweede.pdf"),
        fixture("columns.pdf"),
    )
    .unwrap();
    let out = run(d, &["kb", "import", "bouw-bv", dir, "--json"], None);
    assert!(out.status.success(), "{}", crate::fixture::stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["created"].as_u64(),
            v["unchanged"].as_u64(),
            v["extracted"].as_u64()
        ),
        (Some(1), Some(5), Some(1)),
        "{v}"
    );
    assert_eq!(v["index_updates"], 1, "only the new document: {v}");
    // Progress goes to stderr as lines when it is not a terminal.
    let err = crate::fixture::stderr(&out);
    assert!(err.contains("importing files: 6 of 6"), "{err}");
    let found = search_offline(d, org_id, "bouwteam");
    assert_eq!(found, vec![("offertes/tweede.pdf".to_owned(), true)]);

    // Hostile files never break an import: each is stored as a binary document, counted, and
    // named with its reason.
    let pdf = fixture("text.pdf");
    let vreemd = src.path().join("vreemd");
    std::fs::create_dir_all(&vreemd).unwrap();
    let noise: Vec<u8> = (0..20_000).map(|_| rand::random::<u8>()).collect();
    std::fs::write(vreemd.join("half.pdf"), &pdf[..pdf.len() / 2]).unwrap();
    std::fs::write(vreemd.join("bom.docx"), zip_bomb_docx()).unwrap();
    std::fs::write(vreemd.join("ruis.xlsx"), noise).unwrap();
    let out = run(d, &["kb", "import", "bouw-bv", dir, "--json"], None);
    assert!(out.status.success(), "{}", crate::fixture::stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["created"].as_u64(), v["extraction_failed"].as_u64()),
        (Some(3), Some(3)),
        "{v}"
    );
    let failures: Vec<(String, String)> = v["extraction_failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let reason = |path: &str| -> String {
        failures
            .iter()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("{path} not in {failures:?}"))
            .1
            .clone()
    };
    assert!(
        reason("vreemd/ruis.xlsx").contains("not a xlsx file"),
        "{failures:?}"
    );
    assert!(
        reason("vreemd/bom.docx").contains("zip bomb"),
        "{failures:?}"
    );
    assert!(!reason("vreemd/half.pdf").is_empty());
    // People read the counts too: nothing changed, so the index took in nothing.
    let out = run(d, &["kb", "import", "bouw-bv", dir], None);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(" 0 created, 0 revised, 9 unchanged, 0 skipped;")
            && said.contains("; 0 index updates"),
        "{said}"
    );
    // The scan failed before, in `reindex`, which names it too.
    let v = run_json(d, &["reindex", "--json"], None);
    let named: Vec<&str> = v["extraction_failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(named.contains(&"offertes/scan.pdf"), "{v}");
    // People read the same, a line each.
    let out = run(d, &["reindex"], None);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("no text: vreemd/ruis.xlsx: "), "{said}");
    // Each is an ordinary binary document; the rest is still found.
    let found = search_offline(d, org_id, "bouwteam");
    assert_eq!(found, vec![("offertes/tweede.pdf".to_owned(), true)]);
}

/// `text.docx` with a photo of `mb` megabytes of its own (random bytes, stored as they are):
/// a large file with little text, as scanned appendices or pictures make them.
fn docx_with_a_photo(mb: usize) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut from = zip::ZipArchive::new(std::io::Cursor::new(fixture("text.docx"))).unwrap();
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for i in 0..from.len() {
        let mut entry = from.by_index(i).unwrap();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        w.start_file(entry.name(), zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(&bytes).unwrap();
    }
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("word/media/foto.bin", stored).unwrap();
    let photo: Vec<u8> = (0..mb << 20).map(|_| rand::random::<u8>()).collect();
    w.write_all(&photo).unwrap();
    w.finish().unwrap().into_inner()
}

/// A search pays for the text it verifies: large files with little text do not use up its
/// 8 MB budget (they used to count at their file size, up to 1 MB each).
#[test]
fn large_files_with_little_text_are_all_searched() {
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let org = run_json(d, &["org", "create", "Bouw BV", "--json"], None);
    let org_id = org["id"].as_u64().unwrap();
    let src = tempfile::tempdir().unwrap();
    for i in 0..12 {
        std::fs::write(
            src.path().join(format!("bijlage-{i:02}.docx")),
            docx_with_a_photo(2),
        )
        .unwrap();
    }
    let v = run_json(
        d,
        &[
            "kb",
            "import",
            "bouw-bv",
            src.path().to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert_eq!(v["extracted"], 12, "{v}");
    // Every one found, none left unsearched.
    assert_eq!(search_offline(d, org_id, "Meranti").len(), 12);
}

/// A failure that says more about the moment than the file (a time limit on a busy machine)
/// is tried once more when the server starts; one that is the file's own (no text) is not.
#[test]
fn passing_failures_are_tried_again_at_the_next_start() {
    use kennis::kb::extract::ExtractError;
    use kennis::kb::extracted::{self, Backlog};
    let (_data, store, index) = offline();
    let now = jiff::Timestamp::now();
    let failed = [
        ("a/traag.docx", "text.docx", ExtractError::TimeLimit(20)),
        ("a/leeg.odt", "text.odt", ExtractError::NoText),
    ];
    for (path, file, error) in &failed {
        let bytes = fixture(file);
        kennis::kb::store_document(&store, 1, path, &bytes, None, now).unwrap();
        let hash = blake3::hash(&bytes).to_hex().to_string();
        store
            .write(|tx| extracted::record(tx, &hash, &Err(error.clone()), now))
            .unwrap();
    }
    let outcome = |path: &str| outcome_of(&store, 1, path).unwrap();
    let x = worker();
    let mut backlog = Backlog::start(&store).unwrap();
    while backlog.step(&store, &index, &x, now).unwrap() {}
    assert!(outcome("a/traag.docx").chars.is_some_and(|n| n > 0));
    assert_eq!(outcome("a/leeg.odt").error, Some(ExtractError::NoText));
    assert_eq!(
        found(&store, &index, 1, "Meranti"),
        vec![("a/traag.docx".to_owned(), true)]
    );
}

/// `[kb] extract_text` switched off and on again on a data directory a server uses: off is rule
/// 8 at once (the index is rebuilt without the text); on again gives the same text back without
/// extracting anew (what was extracted is kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extract_text_switched_off_and_on_again() {
    let mut t = TestServer::start().await;
    let s = upload_offer(&t).await;
    let (org, paths) = paths_of(&s, "offertes", &["text.pdf"]);
    wait_extracted(&t, org, &paths).await;
    let hits = |out: &Value| out["results"].as_array().unwrap().len();
    let search = json!({"query": "Zeestraat"});
    let read = json!({"path": "offertes/text.pdf"});
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    assert_eq!(hits(&mcp.ok("kennisbank_search", search.clone()).await), 1);
    let extracted_at = |t: &TestServer| {
        outcome_of(&t.app().store, org, "offertes/text.pdf")
            .unwrap()
            .at
    };
    let first = extracted_at(&t);

    // (A restart listens on a new port: tokens are bound to the connector's address.)
    t.restart_with(extracting(false)).await;
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    assert_eq!(hits(&mcp.ok("kennisbank_search", search.clone()).await), 0);
    let r = mcp.ok("kennisbank_read", read.clone()).await;
    assert!(
        r.get("excerpt").is_none() && r.get("extracted").is_none(),
        "{r}"
    );

    t.clock.advance(jiff::SignedDuration::from_hours(2));
    t.restart_with(extracting(true)).await;
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    assert_eq!(hits(&mcp.ok("kennisbank_search", search).await), 1);
    let r = mcp.ok("kennisbank_read", read).await;
    assert_eq!(r["extracted"], true, "{r}");
    assert_eq!(extracted_at(&t), first, "not extracted anew");
    t.stop().await;
}

/// A file stored before its text was taken (a portal upload the background task has not
/// reached) and then imported unchanged: the import extracts it, and the index hears of it.
#[test]
fn an_unchanged_import_that_extracts_reaches_the_index() {
    use kennis::kb::{Expect, NewVersion, Writer};
    let (_data, store, index) = offline();
    let now = jiff::Timestamp::now();
    let bytes = fixture("text.docx");
    kennis::kb::store_document(&store, 1, "a/offerte.docx", &bytes, None, now).unwrap();
    assert!(found(&store, &index, 1, "Meranti").is_empty());
    let x = worker();
    let mut writer = Writer::new(&store, &index).extracting(&x);
    let out = writer
        .put(NewVersion {
            org_id: 1,
            path: "a/offerte.docx",
            bytes: &bytes,
            expect: Expect::Any,
            by: None,
            now,
        })
        .unwrap();
    assert!(!out.changed, "the same content");
    writer.finish().unwrap();
    assert_eq!(
        found(&store, &index, 1, "Meranti"),
        vec![("a/offerte.docx".to_owned(), true)]
    );
}

#[test]
fn compact_gives_space_back_and_keeps_everything() {
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let org = run_json(d, &["org", "create", "Bouw BV", "--json"], None);
    let org_id = org["id"].as_u64().unwrap();
    let src = tempfile::tempdir().unwrap();
    // Two imports of 400 documents; the second replaces every one, leaving free pages.
    let write_docs = |round: u32| {
        for i in 0..400 {
            let text = format!(
                "# Document {i}\nronde-{round}-kozijn-{i}-eind\n{}\n",
                "tekst ".repeat(400 + i)
            );
            std::fs::write(src.path().join(format!("d{i:03}.md")), text).unwrap();
        }
    };
    write_docs(1);
    let dir = src.path().to_str().unwrap();
    run_json(d, &["kb", "import", "bouw-bv", dir, "--json"], None);
    write_docs(2);
    run_json(d, &["kb", "import", "bouw-bv", dir, "--json"], None);
    let v = run_json(d, &["compact", "--json"], None);
    let (before, after) = (
        v["bytes_before"].as_u64().unwrap(),
        v["bytes_after"].as_u64().unwrap(),
    );
    assert!(after <= before, "{v}");
    let found = search_offline(d, org_id, "ronde-2-kozijn-17-eind");
    assert_eq!(found, vec![("d017.md".to_owned(), false)]);
    assert!(search_offline(d, org_id, "ronde-1").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_1_data_directory_is_migrated_and_searched() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let text = "# Onderhoud\nDe kozijnen worden elk voorjaar geschilderd.\n".repeat(20);
    t.put_doc(&s, "handboek/onderhoud.md", &text);
    // The content by its hash, as this kennis keeps it.
    let rows: Vec<(Vec<u8>, Vec<u8>)> = t
        .app()
        .store
        .read(|tx| {
            tx.scan_keys(kennis::store::KB_CONTENT, b"", usize::MAX)?
                .into_iter()
                .map(|k| {
                    let bytes = tx
                        .get_blob(kennis::store::KB_CONTENT, &k)?
                        .unwrap_or_default();
                    Ok((k, bytes))
                })
                .collect::<Result<_, kennis::store::StoreError>>()
        })
        .unwrap();
    assert!(!rows.is_empty());
    t.stop().await;
    // Make it what the previous kennis wrote: raw content under its hash, a folded copy,
    // schema 1, and an index of the old format.
    {
        use redb::TableDefinition;
        const CONTENT: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kb_content");
        const CONTENT_DATA: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kb_content_data");
        const FOLDED: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kb_folded");
        const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("meta");
        let db = redb::Database::create(t.data_dir().join("kennis.redb")).unwrap();
        let w = db.begin_write().unwrap();
        w.delete_table(CONTENT_DATA).unwrap();
        for (k, raw) in rows {
            w.open_table(CONTENT)
                .unwrap()
                .insert(k.as_slice(), raw.as_slice())
                .unwrap();
            w.open_table(FOLDED)
                .unwrap()
                .insert(k.as_slice(), raw.to_ascii_lowercase().as_slice())
                .unwrap();
        }
        w.open_table(META)
            .unwrap()
            .insert(&b"schema_version"[..], &b"1"[..])
            .unwrap();
        w.commit().unwrap();
        std::fs::write(t.data_dir().join("index/FORMAT"), "kennis-index-1").unwrap();
    }
    t.restart().await;
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    let out = mcp
        .ok(
            "kennisbank_search",
            json!({"query": "voorjaar geschilderd"}),
        )
        .await;
    assert_eq!(out["results"][0]["path"], "handboek/onderhoud.md", "{out}");
    let read = mcp
        .ok(
            "kennisbank_read",
            json!({"path": "handboek/onderhoud.md", "maxChars": 20000}),
        )
        .await;
    assert_eq!(read["excerpt"], text);
}

/// The paths the index proposes for `term` in `org` (no verification against the store).
fn proposed(index: &SearchIndex, org: u64, term: &str) -> Vec<String> {
    let (found, _) = index.candidates(org, None, &[term.to_owned()], 50).unwrap();
    let mut paths: Vec<String> = found.into_iter().map(|c| c.path).collect();
    paths.sort();
    paths
}

#[test]
fn texts_handed_to_the_index_are_used_only_when_they_are_the_content() {
    use kennis::store::KB_CONTENT;
    let (_data, store, index) = offline();
    let (org, now) = (7, jiff::Timestamp::now());
    let put = |path: &str, text: &str| {
        kennis::kb::store_document(&store, org, path, text.as_bytes(), None, now).unwrap();
    };
    put("een.md", "kozijn aanwezig");
    put("twee.md", "kozijn opgeslagen");
    put("plaat.png", "kozijn\u{0}binair");
    put("ruis.txt", "kozijn\u{0}ruis");
    // Handed as an import hands them: prepared (hashed once) from the bytes read.
    let handed = |path: &str, text: &str| {
        let mut prepared =
            kennis::kb::prepare(&store, org, vec![(path, text.as_bytes().to_vec())]).unwrap();
        (org, path.to_owned(), prepared.remove(0))
    };
    assert_eq!(
        index.hand([
            // The very bytes stored.
            handed("een.md", "kozijn aanwezig"),
            // Other bytes than the document's content: not to be believed.
            handed("twee.md", "kozijn verzonnen"),
            // A binary document's bytes are no text, whatever they hold: not even held.
            handed("plaat.png", "kozijn\u{0}binair"),
            // Binary by its content, not its name: held, and not believed by the index.
            handed("ruis.txt", "kozijn\u{0}ruis"),
        ]),
        3
    );
    // een.md's content is taken out of the store: only the handed text can index it now.
    store
        .write(|tx| tx.delete_blob(KB_CONTENT, blake3::hash(b"kozijn aanwezig").as_bytes()))
        .unwrap();
    index.catch_up(&store).unwrap();
    assert_eq!(proposed(&index, org, "aanwezig"), ["een.md"]);
    assert_eq!(proposed(&index, org, "opgeslagen"), ["twee.md"]);
    assert!(proposed(&index, org, "verzonnen").is_empty());
    assert!(proposed(&index, org, "binair").is_empty());
    assert!(proposed(&index, org, "ruis").is_empty());
    // Everything handed was taken as its change was applied: nothing is held on to.
    assert_eq!(index.handed_bytes(), 0);
}

#[test]
fn an_import_skips_a_file_too_large_and_stores_the_rest() {
    let data = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    // A byte over 256 MB, without writing it: the import must not read it.
    std::fs::File::create(src.path().join("groot.bin"))
        .unwrap()
        .set_len((256 << 20) + 1)
        .unwrap();
    for i in 0..40 {
        std::fs::write(
            src.path().join(format!("d{i:02}.md")),
            format!("kozijn nummer{i}"),
        )
        .unwrap();
    }
    let org = run_json(data.path(), &["org", "create", "Groot", "--json"], None);
    let slug = org["slug"].as_str().unwrap();
    let v = run_json(
        data.path(),
        &["kb", "import", slug, src.path().to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(
        (v["files"].as_u64(), v["created"].as_u64()),
        (Some(41), Some(40)),
        "{v}"
    );
    assert_eq!(v["skipped"], json!(["groot.bin: larger than 256 MB"]));
    let org_id = org["id"].as_u64().unwrap();
    let store = Store::open(data.path()).unwrap();
    let index = SearchIndex::open(&data.path().join("index"), true).unwrap();
    assert_eq!(
        found(&store, &index, org_id, "nummer17"),
        [("d17.md".to_owned(), false)]
    );
    assert!(
        store
            .read(|tx| kennis::kb::get_document(tx, org_id, "groot.bin"))
            .unwrap()
            .is_none()
    );
}

#[test]
fn content_prepared_outside_the_transaction_is_stored_as_its_own() {
    use kennis::kb::{Expect, NewVersion, Writer};
    let (_data, store, index) = offline();
    let (org, now) = (7, jiff::Timestamp::now());
    let long = "kozijn en deur ".repeat(300);
    let long = long.as_bytes();
    fn version<'a>(
        org_id: u64,
        path: &'a str,
        bytes: &'a [u8],
        now: jiff::Timestamp,
    ) -> NewVersion<'a> {
        NewVersion {
            org_id,
            path,
            bytes,
            expect: Expect::Any,
            by: None,
            now,
        }
    }
    let version = |path, bytes| version(org, path, bytes, now);
    let docs = || {
        vec![
            ("lang.md", long.to_vec()),
            ("kort.md", b"kozijn kort".to_vec()),
        ]
    };
    // The prepared content is what is written: the same memory, hashed once.
    let prepared = kennis::kb::prepare(&store, org, docs()).unwrap();
    assert!(prepared.iter().all(|p| p.encoded()));
    let batch = [
        version("lang.md", prepared[0].bytes()),
        version("kort.md", prepared[1].bytes()),
    ];
    let mut writer = Writer::new(&store, &index);
    let out = writer.put_many_prepared(&batch, &prepared).unwrap();
    assert!(out.iter().all(|o| o.as_ref().is_ok_and(|o| o.created)));
    let content = |path: &str| {
        store
            .read(|tx| {
                let doc = kennis::kb::get_document(tx, org, path)?.unwrap();
                kennis::kb::content(tx, &doc.hash)
            })
            .unwrap()
            .unwrap()
    };
    assert_eq!(content("lang.md"), long);
    assert_eq!(content("kort.md"), b"kozijn kort");

    // Unchanged content is not compressed again for a second import; written from equal bytes
    // elsewhere in memory (hashed again), it is still found unchanged.
    let again = kennis::kb::prepare(&store, org, docs()).unwrap();
    assert!(!again.iter().any(|p| p.encoded()));
    let copies = [version("lang.md", long), version("kort.md", b"kozijn kort")];
    let out = writer.put_many_prepared(&copies, &again).unwrap();
    assert!(out.iter().all(|o| o.as_ref().is_ok_and(|o| !o.changed)));

    // Prepared from other bytes (or for another batch): neither its hash nor its stored form
    // is used, the bytes given are stored under their own hash.
    let other =
        kennis::kb::prepare(&store, org, vec![("lang.md", b"iets anders".to_vec())]).unwrap();
    let swapped = [version("kort.md", b"kozijn herzien")];
    let out = writer.put_many_prepared(&swapped, &other).unwrap();
    assert!(out[0].as_ref().is_ok_and(|o| o.changed && o.version == 2));
    assert_eq!(content("kort.md"), b"kozijn herzien");
    // A path the write will refuse is prepared all the same: refusing it is the write's.
    let bad = kennis::kb::prepare(&store, org, vec![("../uit", b"x".to_vec())]).unwrap();
    assert!(bad[0].encoded());
    let refused = writer
        .put_many_prepared(&[version("../uit", b"x")], &bad)
        .unwrap();
    assert!(
        matches!(refused[0], Err(kennis::kb::KbError::InvalidInput(_))),
        "{refused:?}"
    );
    writer.finish().unwrap();
    assert_eq!(
        found(&store, &index, org, "herzien"),
        [("kort.md".to_owned(), false)]
    );
}
