//! The knowledge-base tools over the connector: list, read, search, write, links, limits.

use serde_json::json;

use crate::fixture::{McpClient, TestServer, result_paths};

async fn setup() -> (TestServer, McpClient, crate::fixture::Seeded) {
    let t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    (t, mcp, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_rules_refuse_and_change_nothing() {
    let (mut t, mcp, _) = setup().await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/notitie.md", "content": "eerste versie"}),
    )
    .await;
    let big = "a".repeat(256 * 1024 + 1);
    let cases = [
        (
            json!({"path": "/aangeleverd/x.md", "content": "x"}),
            "invalid_input",
        ),
        (
            json!({"path": "aangeleverd/../x.md", "content": "x"}),
            "invalid_input",
        ),
        (
            json!({"path": "aangeleverd/./x.md", "content": "x"}),
            "invalid_input",
        ),
        (
            json!({"path": "aangeleverd//x.md", "content": "x"}),
            "invalid_input",
        ),
        (json!({"path": "", "content": "x"}), "invalid_input"),
        (
            json!({"path": "Aangeleverd/x.md", "content": "x"}),
            "invalid_input",
        ),
        (
            json!({"path": "aangeleverd/Sub/x.md", "content": "x"}),
            "invalid_input",
        ),
        (
            json!({"path": "aangeleverd/x\u{1}.md", "content": "x"}),
            "invalid_input",
        ),
        (json!({"path": "aangeleverd/x.md"}), "invalid_input"),
        (
            json!({"path": "aangeleverd/x.md", "content": 5}),
            "invalid_input",
        ),
        (
            json!({"path": "aangeleverd/x.md", "content": "x", "expected_version": "1"}),
            "invalid_input",
        ),
        (
            json!({"path": "handleidingen/x.md", "content": "x"}),
            "path_not_allowed",
        ),
        (json!({"path": "x.md", "content": "x"}), "path_not_allowed"),
        (
            json!({"path": "aangeleverd/x.pdf", "content": "x"}),
            "unsupported_type",
        ),
        (
            json!({"path": "aangeleverd/x.docx", "content": "x"}),
            "unsupported_type",
        ),
        (
            json!({"path": "aangeleverd/x.xlsx", "content": "x"}),
            "unsupported_type",
        ),
        (
            json!({"path": "aangeleverd/tekening.dwg", "content": "x"}),
            "unsupported_type",
        ),
        (
            json!({"path": "aangeleverd/x.md", "content": "a\u{0}b"}),
            "unsupported_type",
        ),
        (
            json!({"path": "aangeleverd/x.md", "content": big}),
            "too_large",
        ),
        (
            json!({"path": "aangeleverd/notitie.md", "content": "zonder versie"}),
            "version_conflict",
        ),
        (
            json!({"path": "aangeleverd/notitie.md", "content": "oud", "expected_version": 7}),
            "version_conflict",
        ),
        (
            json!({"path": "aangeleverd/nieuw.md", "content": "x", "expected_version": 1}),
            "version_conflict",
        ),
    ];
    for (args, code) in cases {
        let e = mcp.err("kennisbank_write", args.clone()).await;
        assert_eq!(e["code"], code, "{args}: {e}");
        assert!(!e["message"].as_str().unwrap().is_empty());
        if code == "version_conflict" && args["path"] == "aangeleverd/notitie.md" {
            assert_eq!(e["current_version"], 1, "{e}");
            assert!(e["message"].as_str().unwrap().contains('1'));
        }
    }
    // Exactly 256 KB is accepted.
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/groot.md", "content": "a".repeat(256 * 1024)}),
    )
    .await;
    let listing = mcp
        .ok("kennisbank_list", json!({"path": "aangeleverd"}))
        .await;
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["groot.md", "notitie.md"]);
    let read = mcp
        .ok("kennisbank_read", json!({"path": "aangeleverd/notitie.md"}))
        .await;
    assert_eq!(
        (read["version"].as_u64(), read["excerpt"].as_str()),
        (Some(1), Some("eerste versie"))
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_advance_and_racing_writes_let_exactly_one_win() {
    let (mut t, mcp, _) = setup().await;
    let w = mcp
        .ok(
            "kennisbank_write",
            json!({"path": "aangeleverd/sub/plan.md", "content": "v1"}),
        )
        .await;
    assert_eq!(
        (w["version"].as_u64(), w["created"].as_bool()),
        (Some(1), Some(true))
    );
    let w = mcp
        .ok(
            "kennisbank_write",
            json!({"path": "aangeleverd/sub/plan.md", "content": "v2", "expected_version": 1}),
        )
        .await;
    assert_eq!(
        (w["version"].as_u64(), w["created"].as_bool()),
        (Some(2), Some(false))
    );
    let e = mcp
        .err(
            "kennisbank_write",
            json!({"path": "aangeleverd/sub/plan.md", "content": "stale", "expected_version": 1}),
        )
        .await;
    assert_eq!(
        (e["code"].as_str(), e["current_version"].as_u64()),
        (Some("version_conflict"), Some(2))
    );

    for round in 0..5 {
        let current = 2 + round;
        let a = mcp.call("kennisbank_write", json!({"path": "aangeleverd/sub/plan.md", "content": format!("a{round}"), "expected_version": current}));
        let b = mcp.call("kennisbank_write", json!({"path": "aangeleverd/sub/plan.md", "content": format!("b{round}"), "expected_version": current}));
        let (a, b) = tokio::join!(a, b);
        let wins = [&a, &b].iter().filter(|r| r["isError"] != true).count();
        assert_eq!(wins, 1, "round {round}: {a} / {b}");
        let loser = if a["isError"] == true { &a } else { &b };
        assert_eq!(
            loser["structuredContent"]["error"]["current_version"],
            current + 1
        );
    }
    let read = mcp
        .ok(
            "kennisbank_read",
            json!({"path": "aangeleverd/sub/plan.md"}),
        )
        .await;
    assert_eq!(read["version"], 7);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_excerpts_binary_documents_and_signed_links() {
    let (mut t, mcp, s) = setup().await;
    let long: String = "é".repeat(25_000);
    // Past the size read with the async worker's other tasks handed off (400 KB).
    let large: String = "é".repeat(200_000);
    let pdf = b"%PDF-1.7\n\x00\x01binary".to_vec();
    t.import_docs(
        s.org.id,
        &[
            ("handleidingen/lang.md", long.as_bytes()),
            ("handleidingen/groot.md", large.as_bytes()),
            ("tekeningen/gevel.pdf", &pdf),
        ],
    );
    // Read side by side: each gets the whole count and its excerpt.
    let reads =
        (0..4).map(|_| mcp.ok("kennisbank_read", json!({"path": "handleidingen/groot.md"})));
    for r in futures::future::join_all(reads).await {
        assert_eq!(r["excerpt"].as_str().unwrap().chars().count(), 8000);
        assert_eq!(
            (r["truncated"].as_bool(), r["total_chars"].as_u64()),
            (Some(true), Some(200_000))
        );
    }

    let r = mcp
        .ok("kennisbank_read", json!({"path": "handleidingen/lang.md"}))
        .await;
    assert_eq!(r["excerpt"].as_str().unwrap().chars().count(), 8000);
    assert_eq!(
        (
            r["truncated"].as_bool(),
            r["total_chars"].as_u64(),
            r["kind"].as_str()
        ),
        (Some(true), Some(25_000), Some("text"))
    );
    let r = mcp
        .ok(
            "kennisbank_read",
            json!({"path": "handleidingen/lang.md", "maxChars": 20000}),
        )
        .await;
    assert_eq!(r["excerpt"].as_str().unwrap().chars().count(), 20_000);
    for bad in [json!(20001), json!(0), json!("10"), json!(1.5)] {
        let e = mcp
            .err(
                "kennisbank_read",
                json!({"path": "handleidingen/lang.md", "maxChars": bad}),
            )
            .await;
        assert_eq!(e["code"], "invalid_input", "{bad}");
    }
    assert_eq!(
        mcp.err("kennisbank_read", json!({"path": "handleidingen/nope.md"}))
            .await["code"],
        "not_found"
    );

    let r = mcp
        .ok("kennisbank_read", json!({"path": "tekeningen/gevel.pdf"}))
        .await;
    assert_eq!(
        (r["kind"].as_str(), r["content_type"].as_str()),
        (Some("binary"), Some("application/pdf"))
    );
    assert!(r.get("excerpt").is_none());
    let url = r["download_url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("{}/files/", t.base)));
    let got = t.client.get(&url).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["content-type"], "application/pdf");
    assert_eq!(got.bytes().await.unwrap().as_ref(), pdf.as_slice());

    // An altered signature, and an altered payload, are refused.
    let (head, sig) = url.rsplit_once('.').unwrap();
    let mut flipped: Vec<char> = sig.chars().collect();
    flipped[3] = if flipped[3] == 'A' { 'B' } else { 'A' };
    let bad = format!("{head}.{}", flipped.into_iter().collect::<String>());
    assert_eq!(t.client.get(&bad).send().await.unwrap().status(), 403);
    // The link expires after 15 minutes.
    t.clock.advance(jiff::SignedDuration::from_secs(15 * 60));
    assert_eq!(t.client.get(&url).send().await.unwrap().status(), 410);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_folders_then_documents() {
    let (mut t, mcp, s) = setup().await;
    t.import_docs(
        s.org.id,
        &[
            ("b.md", b"x"),
            ("map/a.md", b"yy"),
            ("map/sub/c.md", b"z"),
            ("a-map/d.md", b"z"),
        ],
    );
    let top = mcp.ok("kennisbank_list", json!({})).await;
    let entries: Vec<(String, String)> = top["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().into(),
                e["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        vec![
            ("folder".into(), "a-map".into()),
            ("folder".into(), "map".into()),
            ("document".into(), "b.md".into())
        ]
    );
    let map = mcp.ok("kennisbank_list", json!({"path": "map/"})).await;
    assert_eq!(
        map["entries"][1],
        json!({"name": "a.md", "path": "map/a.md", "kind": "document", "version": 1, "size": 2})
    );
    assert_eq!(
        mcp.err("kennisbank_list", json!({"path": "geen-map"}))
            .await["code"],
        "not_found"
    );
    assert_eq!(
        mcp.err("kennisbank_list", json!({"path": "../x"})).await["code"],
        "invalid_input"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_rules() {
    let (mut t, mcp, s) = setup().await;
    t.import_docs(
        s.org.id,
        &[
            (
                "a/kozijnen.md",
                "Houten KOZIJNEN schilderen\nelke vijf jaar".as_bytes(),
            ),
            (
                "a/cafe.md",
                "Het cafe op de hoek\nheeft een terras".as_bytes(),
            ),
            ("a/café-accent.md", "Koffie in het Café\n".as_bytes()),
            ("b/fraser.md", "Open  haard\nbij de\nschoorsteen".as_bytes()),
            ("b/ver.md", "kozijn\nx\ny\nschilderen".as_bytes()),
            ("b/binair.pdf", b"kozijn kozijn"),
        ],
    );
    let paths = |out: &serde_json::Value| -> Vec<String> {
        let mut p = result_paths(out);
        p.sort();
        p
    };
    // Substring, case, and accents both ways.
    let out = mcp
        .ok("kennisbank_search", json!({"query": "kozijn"}))
        .await;
    assert_eq!(paths(&out), vec!["a/kozijnen.md", "b/ver.md"]);
    let hit = out["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "a/kozijnen.md")
        .unwrap();
    assert_eq!(
        (hit["line"].as_u64(), hit["snippet"].as_str()),
        (Some(1), Some("Houten KOZIJNEN schilderen\nelke vijf jaar"))
    );
    assert_eq!(
        paths(&mcp.ok("kennisbank_search", json!({"query": "Café"})).await),
        vec!["a/cafe.md", "a/café-accent.md"]
    );
    assert_eq!(
        paths(&mcp.ok("kennisbank_search", json!({"query": "CAFE"})).await),
        vec!["a/cafe.md", "a/café-accent.md"]
    );
    // All terms within three lines; four lines apart is no match.
    assert_eq!(
        paths(
            &mcp.ok("kennisbank_search", json!({"query": "kozijn schilderen"}))
                .await
        ),
        vec!["a/kozijnen.md"]
    );
    // A quoted phrase is one term; white space inside it is folded.
    assert_eq!(
        paths(
            &mcp.ok(
                "kennisbank_search",
                json!({"query": "\"open haard\" schoorsteen"})
            )
            .await
        ),
        vec!["b/fraser.md"]
    );
    assert!(
        paths(
            &mcp.ok("kennisbank_search", json!({"query": "\"haard open\""}))
                .await
        )
        .is_empty()
    );
    // Scope by folder.
    assert_eq!(
        paths(
            &mcp.ok("kennisbank_search", json!({"query": "kozijn", "path": "b"}))
                .await
        ),
        vec!["b/ver.md"]
    );
    // Query limits.
    for bad in [
        json!({"query": "k"}),
        json!({"query": "a b c d e f g h i j k"}),
        json!({"query": "x".repeat(201)}),
        json!({"query": "kozijn", "limit": 51}),
        json!({"query": "kozijn", "limit": 0}),
        json!({}),
    ] {
        assert_eq!(
            mcp.err("kennisbank_search", bad.clone()).await["code"],
            "invalid_input",
            "{bad}"
        );
    }
    assert!(
        mcp.ok("kennisbank_search", json!({"query": "a b c d e f g h i j"}))
            .await["results"]
            .is_array()
    );
    assert!(
        mcp.ok("kennisbank_search", json!({"query": "x".repeat(200)}))
            .await["results"]
            .is_array()
    );
    t.stop().await;
}

/// Results come best first: a document whose title the query is, exactly, before documents
/// that only use the words more often; then BM25 with words in the title counting double.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_ranks_an_exact_title_first() {
    let (mut t, mcp, s) = setup().await;
    t.import_docs(
        s.org.id,
        &[
            (
                "a/veel.md",
                "Notities\ntabellen tabellen tabellen, tabellen en nog eens tabellen".as_bytes(),
            ),
            (
                "a/invoegen.md",
                "# Tabellen invoegen\nTabellen, tabellen: hoe u tabellen invoegt.".as_bytes(),
            ),
            (
                "a/05000000.md",
                "# Tabellen\nDit hoofdstuk gaat over het werken met lijsten, rijen en kolommen, \
                 over sorteren en filteren, en over het opmaken van cellen."
                    .as_bytes(),
            ),
            (
                "b/offerte-zeestraat.md",
                "Prijzen voor de offerte aan de Zeestraat.".as_bytes(),
            ),
            (
                "b/brief.md",
                "# Brief\nDe offerte voor de Zeestraat, de offerte voor de Zeestraat.".as_bytes(),
            ),
        ],
    );
    let order = |out: serde_json::Value| result_paths(&out);
    let search = |q: &str| mcp.ok("kennisbank_search", json!({"query": q}));
    assert_eq!(
        order(search("tabellen").await),
        vec!["a/05000000.md", "a/invoegen.md", "a/veel.md"]
    );
    // Case and accents do not matter; the words and their order do.
    assert_eq!(order(search("TABELLEN INVOEGEN").await)[0], "a/invoegen.md");
    assert_eq!(order(search("Tabéllen").await)[0], "a/05000000.md");
    // The file name is a title too.
    assert_eq!(
        order(search("offerte zeestraat").await),
        vec!["b/offerte-zeestraat.md", "b/brief.md"]
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_caps_limit_output_and_documents() {
    let (mut t, mcp, s) = setup().await;
    let line = format!("dakgoot {}\n", "lange regel ".repeat(8));
    let docs: Vec<(String, Vec<u8>)> = (0..260)
        .map(|i| {
            (
                format!("goten/{i:03}.md"),
                format!("{}\n\n\nafvoer\n", line.repeat(3)).into_bytes(),
            )
        })
        .collect();
    let refs: Vec<(&str, &[u8])> = docs
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    t.import_docs(s.org.id, &refs);
    let out = mcp
        .ok("kennisbank_search", json!({"query": "dakgoot"}))
        .await;
    assert_eq!(
        out["results"].as_array().unwrap().len(),
        20,
        "default limit"
    );
    let out = mcp
        .ok(
            "kennisbank_search",
            json!({"query": "dakgoot", "limit": 50}),
        )
        .await;
    let n = out["results"].as_array().unwrap().len();
    assert!(n < 50 && out["truncated"] == true, "output cap keeps {n}");
    let r = mcp
        .call(
            "kennisbank_search",
            json!({"query": "dakgoot", "limit": 50}),
        )
        .await;
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.chars().count() <= 12_000 + 400,
        "{}",
        text.chars().count()
    );
    // Terms that every document holds, but never within three lines: all 260 are candidates,
    // at most 200 are verified, and the reply says how many were not searched.
    let out = mcp
        .ok("kennisbank_search", json!({"query": "dakgoot afvoer"}))
        .await;
    assert_eq!(out["results"].as_array().unwrap().len(), 0);
    assert_eq!(out["searched_documents"], 200);
    assert_eq!(out["not_searched"]["documents"], 60);
    assert!(
        out["not_searched"]["reason"]
            .as_str()
            .unwrap()
            .contains("path")
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_limit_is_hourly_per_organisation() {
    let (mut t, mcp, s) = setup().await;
    for i in 0..300 {
        mcp.ok(
            "kennisbank_write",
            json!({"path": format!("aangeleverd/n{i}.md"), "content": "x"}),
        )
        .await;
    }
    // Refused calls do not count, and refusals do not use up the budget...
    let e = mcp
        .err(
            "kennisbank_write",
            json!({"path": "aangeleverd/n300.md", "content": "x"}),
        )
        .await;
    assert_eq!(e["code"], "rate_limited");
    let retry = e["retry_after_seconds"].as_u64().unwrap();
    assert!((1..=3600).contains(&retry), "{retry}");
    // ...another organisation is not affected...
    let other = t.seed("Ander BV", "bert@example.org");
    let mcp2 = t.mcp(&t.grant(&other, &["kennisbank"]));
    mcp2.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/a.md", "content": "x"}),
    )
    .await;
    // ...and once the oldest call leaves the hour the organisation may write again (with a
    // fresh token: the first one lived an hour).
    t.clock
        .advance(jiff::SignedDuration::from_secs(retry as i64));
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/n300.md", "content": "x"}),
    )
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn organisations_never_see_each_other() {
    let (mut t, mcp, s) = setup().await;
    let other = t.seed("Ander BV", "bert@example.org");
    t.import_docs(other.org.id, &[("geheim/plan.md", b"kozijn geheim")]);
    t.import_docs(s.org.id, &[("open/plan.md", b"kozijn open")]);
    let out = mcp
        .ok("kennisbank_search", json!({"query": "kozijn"}))
        .await;
    assert_eq!(out["results"].as_array().unwrap().len(), 1);
    assert_eq!(
        mcp.err("kennisbank_read", json!({"path": "geheim/plan.md"}))
            .await["code"],
        "not_found"
    );
    assert_eq!(
        mcp.err("kennisbank_list", json!({"path": "geheim"})).await["code"],
        "not_found"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_reindex_and_catching_up_after_a_crash() {
    let (mut t, _mcp, s) = setup().await;
    let data = t.data_dir().to_owned();
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("map")).unwrap();
    std::fs::write(src.path().join("map/een.md"), "kozijn een").unwrap();
    std::fs::write(src.path().join("twee.txt"), "kozijn twee").unwrap();
    std::fs::write(src.path().join("plaat.png"), [0x89u8, b'P', b'N', b'G', 0]).unwrap();
    let run = |args: Vec<String>| {
        let d = data.clone();
        tokio::task::spawn_blocking(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            crate::fixture::run_json(&d, &a, None)
        })
    };
    let srcp = src.path().to_str().unwrap().to_owned();
    let v = run(vec![
        "kb".into(),
        "import".into(),
        s.org.slug.clone(),
        srcp.clone(),
        "--prefix".into(),
        "import".into(),
        "--json".into(),
    ])
    .await
    .unwrap();
    assert_eq!(
        (v["created"].as_u64(), v["unchanged"].as_u64()),
        (Some(3), Some(0)),
        "{v}"
    );
    std::fs::write(src.path().join("twee.txt"), "kozijn twee, herzien").unwrap();
    let v = run(vec![
        "kb".into(),
        "import".into(),
        s.org.slug.clone(),
        srcp,
        "--prefix".into(),
        "import".into(),
        "--json".into(),
    ])
    .await
    .unwrap();
    assert_eq!(
        (
            v["created"].as_u64(),
            v["revised"].as_u64(),
            v["unchanged"].as_u64()
        ),
        (Some(0), Some(1), Some(2)),
        "{v}"
    );
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    let out = mcp
        .ok(
            "kennisbank_search",
            json!({"query": "kozijn", "path": "import"}),
        )
        .await;
    assert_eq!(out["results"].as_array().unwrap().len(), 2);
    let r = mcp
        .ok("kennisbank_read", json!({"path": "import/twee.txt"}))
        .await;
    assert_eq!(r["version"], 2);
    t.stop().await;

    // Documents written while no server ran (the index missed them) are found after a start.
    let write_offline = |path: &str, text: &str| {
        let store = kennis::store::Store::open(&data).unwrap();
        let now = jiff::Timestamp::now();
        kennis::kb::store_document(&store, s.org.id, path, text.as_bytes(), None, now).unwrap();
    };
    let start = || {
        TestServer::start_with(kennis::config::Settings {
            data_dir: Some(data.clone()),
            ..Default::default()
        })
    };
    write_offline("later/gemist.md", "kozijn gemist");
    let mut t2 = start().await;
    let mcp2 = t2.mcp(&t2.grant(&s, &["kennisbank"]));
    let out = mcp2
        .ok("kennisbank_search", json!({"query": "kozijn gemist"}))
        .await;
    assert_eq!(out["results"][0]["path"], "later/gemist.md");
    t2.stop().await;

    // An index whose last commit does not say how far it followed the change log (a damaged
    // payload) applies the whole log again at the start: what was written meanwhile is found,
    // nothing is found twice, and the next commit says how far it is again.
    let meta = data.join("index").join("meta.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
    assert!(m["payload"].as_str().unwrap().parse::<u64>().is_ok(), "{m}");
    m["payload"] = json!("kapot");
    std::fs::write(&meta, serde_json::to_vec(&m).unwrap()).unwrap();
    write_offline("later/hersteld.md", "kozijn hersteld");
    let mut t2b = start().await;
    let mcp2b = t2b.mcp(&t2b.grant(&s, &["kennisbank"]));
    let out = mcp2b
        .ok("kennisbank_search", json!({"query": "kozijn"}))
        .await;
    let mut paths: Vec<&str> = out["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "import/map/een.md",
            "import/twee.txt",
            "later/gemist.md",
            "later/hersteld.md"
        ]
    );
    t2b.stop().await;
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
    assert!(m["payload"].as_str().unwrap().parse::<u64>().is_ok(), "{m}");

    // `kennis reindex` rebuilds a lost index from the store (no server running).
    std::fs::remove_dir_all(data.join("index")).unwrap();
    let v = run(vec!["reindex".into(), "--json".into()]).await.unwrap();
    assert_eq!(v["documents"], 5, "{v}");
    let mut t3 = start().await;
    let mcp3 = t3.mcp(&t3.grant(&s, &["kennisbank"]));
    let out = mcp3
        .ok("kennisbank_search", json!({"query": "kozijn"}))
        .await;
    assert_eq!(out["results"].as_array().unwrap().len(), 4);
    t3.stop().await;
    drop(t);
}
