//! Removing for good (issue 24): `kennis org delete` leaves nothing of the organisation in any
//! table, the index or the data directory's files (after `kennis compact`), keeps what another
//! organisation shares, and survives SIGKILL; `kennis user disable | enable | delete`.

use std::path::Path;
use std::process::Stdio;

use redb::{ReadableDatabase, ReadableTable, TableHandle};
use serde_json::json;

use crate::fixture::{Browser, Seeded, TestServer, kennis, run, run_json, stderr};
use kennis::identity::{self, Role};
use kennis::kb;

const SCOPE: &[&str] = &["kennisbank"];

/// Every (table, key, value) of the store file, read raw.
fn raw_rows(data: &Path) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let db = redb::Database::open(data.join(kennis::store::DB_FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let mut out = Vec::new();
    for t in kennis::store::ALL_TABLES {
        let table = txn.open_table(*t).unwrap();
        for row in table.iter().unwrap() {
            let (k, v) = row.unwrap();
            let v = v.value();
            // Records as the JSON they hold (stored compressed).
            let v = kennis::store::record::json(v)
                .map(|j| j.into_owned())
                .unwrap_or_else(|_| v.to_vec());
            out.push((t.name().to_owned(), k.value().to_vec(), v));
        }
    }
    out
}

/// The same, read through a running server's store.
fn live_rows(store: &kennis::store::Store) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for t in kennis::store::ALL_TABLES {
        store
            .read(|tx| {
                for k in tx.scan_keys(*t, b"", usize::MAX)? {
                    let v = tx.get_raw(*t, &k)?.unwrap_or_default();
                    // Records as the JSON they hold (stored compressed).
                    let v = kennis::store::record::json(&v)
                        .map(|j| j.into_owned())
                        .unwrap_or(v);
                    out.push((t.name().to_owned(), k, v));
                }
                Ok::<_, kennis::store::StoreError>(())
            })
            .unwrap();
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether a JSON record names `"org_id":id` (and not an id that merely starts the same).
fn names_org(v: &[u8], id: u64) -> bool {
    let needle = format!("\"org_id\":{id}");
    let n = needle.as_bytes();
    v.windows(n.len() + 1)
        .any(|w| &w[..n.len()] == n && !w[n.len()].is_ascii_digit())
        || v.ends_with(n)
}

/// Every regular file below `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file()
                && contains(
                    // With the JSON of every compressed record in the file.
                    &kennis::store::record::expand(&std::fs::read(&p).unwrap_or_default()),
                    needle,
                )
            {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

fn write_doc(t: &TestServer, s: &Seeded, path: &str, bytes: &[u8], expect: kb::Expect) {
    let app = t.app();
    kb::write(
        &app.store,
        &app.kb_index,
        kb::NewVersion {
            org_id: s.org.id,
            path,
            bytes,
            expect,
            by: Some(s.person.id),
            now: app.clock.now(),
        },
    )
    .unwrap();
}

async fn search_paths(t: &TestServer, token: &str, query: &str) -> String {
    t.mcp(token)
        .ok("kennisbank_search", json!({"query": query}))
        .await
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn org_delete_leaves_nothing_of_it_and_touches_no_other_organisation() {
    // Callback URLs on loopback, for a run whose callback is still pending.
    let mut t = TestServer::start_with(kennis::config::Settings {
        triggers: Some(kennis::config::TriggerSettings {
            callback_allow_http_loopback: Some(true),
        }),
        ..kennis::config::Settings::default()
    })
    .await;
    let gone = t.seed("Verdwijnt Bouw", "vera@verdwijnt.nl");
    let stays = t.seed("Blijft Bouw", "bert@blijft.nl");
    let app = t.app().clone();
    let now = app.clock.now();

    // Every kind of record. Short texts are stored as they are (not compressed), so the
    // markers can be looked for in the files themselves.
    let shared = "Gedeelde offerte: kozijnen van meranti, dezelfde tekst bij beide bedrijven.";
    write_doc(
        &t,
        &gone,
        "zqxgeheim/notitie.md",
        b"ZQXMARKER kozijn",
        kb::Expect::Create,
    );
    write_doc(
        &t,
        &gone,
        "zqxgeheim/notitie.md",
        b"ZQXMARKER kozijn v2",
        kb::Expect::Version(1),
    );
    write_doc(
        &t,
        &gone,
        "zqxgeheim/gedeeld.md",
        shared.as_bytes(),
        kb::Expect::Create,
    );
    let binary = [0u8, 159, 146, 150, b'Z', b'Q', b'X', 0, 1, 2];
    write_doc(
        &t,
        &gone,
        "zqxgeheim/tekening.bin",
        &binary,
        kb::Expect::Create,
    );
    // Long and incompressible: kept as it is, in parts (rows of their own after its hash).
    let mut x = 27u64;
    let mut long: Vec<u8> = (0..6000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect();
    long[3000..3011].copy_from_slice(b"ZQXLANGDEEL");
    write_doc(&t, &gone, "zqxgeheim/scan.bin", &long, kb::Expect::Create);
    write_doc(
        &t,
        &stays,
        "blijft/gedeeld.md",
        shared.as_bytes(),
        kb::Expect::Create,
    );
    write_doc(
        &t,
        &stays,
        "blijft/eigen.md",
        b"BLIJFTMARKER kozijn",
        kb::Expect::Create,
    );
    let (_trigger, run_id) = t.finished_run(&gone.org.slug, "Verwerk ZQXMARKER").await;
    let shop = kennis::requests::apps::add_by_slug(
        &app.store,
        &gone.org.slug,
        "ZQX Webshop",
        kennis::requests::apps::AppStatus::Live,
        now,
    )
    .unwrap();
    let request = kennis::requests::service::create(
        &app,
        gone.org.id,
        gone.person.id,
        &kennis::requests::feature::NewRequest {
            app_id: shop.app_id,
            title: "ZQX filter".into(),
            description: "Filter op ZQXMARKER".into(),
        },
    )
    .unwrap();
    kennis::requests::attachments::add(
        &app.store,
        gone.org.id,
        request.id,
        gone.person.id,
        "schets.txt",
        Some("text/plain"),
        b"ZQXATTACHMENT",
        now,
    )
    .unwrap();
    identity::invite(
        &app.store,
        &kennis::audit::Actor::Operator,
        gone.org.id,
        "nieuw@verdwijnt.nl",
        Role::Member,
        now,
    )
    .unwrap();
    // A document in the trash, with content of its own.
    write_doc(
        &t,
        &gone,
        "zqxgeheim/weg.md",
        b"ZQXTRASHED prullenbak",
        kb::Expect::Create,
    );
    kb::trash::delete(
        &app.store,
        &app.kb_index,
        gone.org.id,
        "zqxgeheim/weg.md",
        &kennis::audit::Actor::Operator,
        now,
    )
    .unwrap();
    // A personal access token.
    let (_, gone_pat) = kennis::oauth::pats::create(
        &app.store,
        &kennis::audit::Actor::Operator,
        kennis::oauth::pats::NewToken {
            org_id: gone.org.id,
            person_id: gone.person.id,
            name: "ZQX script".into(),
            scopes: vec![],
            expires_in_days: None,
        },
        now,
    )
    .unwrap();
    // A run whose result callback is pending (nobody listens at its URL yet).
    let agent = kennis::roster::add_agent(
        &app.store,
        &gone.org.slug,
        &crate::fixture::echo_agent(),
        now,
    )
    .unwrap();
    let project = kennis::roster::add_project(
        &app.store,
        &gone.org.slug,
        "ZQX site",
        kennis::roster::Rollout::Ready,
        now,
    )
    .unwrap();
    let port = crate::fixture::free_port();
    let with_callback = kennis::triggers::add_by(
        &app.store,
        &kennis::audit::Actor::Operator,
        &gone.org.slug,
        &kennis::triggers::NewTrigger {
            name: "ZQX callback".into(),
            agent_id: agent.id,
            project_id: project.id,
            instructions: "Meld ZQXMARKER terug".into(),
            cooldown_secs: Some(0),
            callback_url: Some(format!("http://127.0.0.1:{port}/zqx")),
        },
        true,
        now,
    )
    .unwrap();
    let r = t
        .client
        .post(t.url(&format!("/api/hooks/events/{}", with_callback.trigger.id)))
        .bearer_auth(&with_callback.secret)
        .json(&json!({"zqx": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let called: u64 = r.json::<serde_json::Value>().await.unwrap()["featureRequestId"]
        .as_u64()
        .unwrap();
    let mut pending = false;
    for _ in 0..200 {
        let cb = app
            .store
            .read(|tx| kennis::requests::callback::get(tx, called))
            .unwrap();
        if cb.is_some_and(|c| !c.attempts.is_empty() && c.next_at.is_some()) {
            pending = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(pending, "the callback was not tried and kept pending");
    let gone_token = t.grant(&gone, SCOPE);
    let stays_token = t.grant(&stays, SCOPE);
    assert_eq!(t.mcp(&gone_pat).rpc("tools/list", json!({})).await.0, 200);
    assert!(
        search_paths(&t, &gone_token, "kozijn")
            .await
            .contains("zqxgeheim/notitie.md")
    );
    assert!(
        search_paths(&t, &stays_token, "kozijn")
            .await
            .contains("blijft/eigen.md")
    );
    app.batch.flush();
    let hash = |b: &[u8]| blake3::hash(b).as_bytes().to_vec();
    let before = live_rows(&app.store);
    let tables_with_gone: std::collections::BTreeSet<String> = before
        .iter()
        .filter(|(_, k, v)| names_org(v, gone.org.id) || k.starts_with(&gone.org.id.to_be_bytes()))
        .map(|(t, _, _)| t.clone())
        .collect();
    for table in [
        "kb_docs",
        "kb_versions",
        "kb_changes",
        "audit",
        "requests",
        "apps",
        "feature_requests",
        "agents",
        "projects",
        "triggers",
        "oauth_grants",
        "invitations",
        "memberships",
        "orgs",
        "kb_trash",
        "personal_tokens",
        "run_callbacks",
        "run_callbacks_due",
    ] {
        assert!(
            tables_with_gone.contains(table),
            "no {table} record was made: {tables_with_gone:?}"
        );
    }
    // Its agents, projects, triggers, grants and tokens are listed under it.
    let listed = |rows: &[(String, Vec<u8>, Vec<u8>)]| {
        rows.iter()
            .filter(|(t, k, _)| {
                t == "by_org" && k.get(1..9) == Some(&gone.org.id.to_be_bytes()[..])
            })
            .count()
    };
    assert!(listed(&before) >= 5, "{}", listed(&before));
    assert!(!files_holding(t.data_dir(), b"ZQXMARKER kozijn").is_empty());
    let long_key = blake3::hash(&long).as_bytes().to_vec();
    // Its content is kept in kb_content_data, in parts, under the number its location under
    // its hash names.
    let long_at = before
        .iter()
        .find(|(t, k, _)| t == "kb_content" && *k == long_key)
        .and_then(|(_, _, v)| v.get(1..9))
        .expect("the long document's content is located")
        .to_vec();
    let parts = |rows: &[(String, Vec<u8>, Vec<u8>)]| {
        rows.iter()
            .filter(|(t, k, _)| t == "kb_content_data" && k.starts_with(&long_at))
            .count()
    };
    assert!(parts(&before) > 2, "{}", parts(&before));
    // The index's files hold its paths too (so looking for them there after compaction means
    // something).
    assert!(!files_holding(&t.data_dir().join("index"), b"zqxgeheim/notitie.md").is_empty());

    // Without --yes nothing happens.
    let out = run(t.data_dir(), &["org", "delete", &gone.org.slug], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    assert!(identity::find_org(&app.store, &gone.org.slug).is_ok());

    let v = run_json(
        t.data_dir(),
        &["org", "delete", &gone.org.slug, "--yes", "--json"],
        None,
    );
    assert_eq!(v["slug"], gone.org.slug.as_str());
    assert_eq!(v["content_kept"], 1, "{v}");
    assert!(v["content_removed"].as_u64().unwrap() >= 3, "{v}");

    // Nothing of it is found by a tool, a command or a page.
    let (status, _) = t.mcp(&gone_token).rpc("tools/list", json!({})).await;
    assert_eq!(status, 401);
    let (status, _) = t.mcp(&gone_pat).rpc("tools/list", json!({})).await;
    assert_eq!(status, 401);
    let orgs = run_json(t.data_dir(), &["org", "list", "--json"], None);
    assert!(!orgs.to_string().contains(&gone.org.slug), "{orgs}");
    let out = run(t.data_dir(), &["audit", "export", &gone.org.slug], None);
    assert_eq!(out.status.code(), Some(1));
    let mut b = Browser::new(&t);
    b.login(&gone, "/portal").await;
    let p = b.get(&format!("/portal/o/{}", gone.org.slug)).await;
    assert!(!p.body.contains("zqxgeheim"), "{}", p.body);
    assert_ne!(p.status, 200);
    // The person stays a person.
    assert!(identity::find_person(&app.store, &gone.person.email).is_ok());
    // The index holds nothing of it (asked directly, past the verifier).
    let terms = vec!["kozijn".to_owned()];
    let (found, _) = app
        .kb_index
        .candidates(gone.org.id, None, &terms, 10)
        .unwrap();
    assert!(found.is_empty(), "{found:?}");
    // The other organisation is untouched: read, listed and found.
    let text = app
        .store
        .read(|tx| {
            let d = kb::get_document(tx, stays.org.id, "blijft/gedeeld.md")?.unwrap();
            kb::content(tx, &d.hash)
        })
        .unwrap()
        .unwrap();
    assert_eq!(text, shared.as_bytes());
    let hits = search_paths(&t, &stays_token, "kozijn").await;
    assert!(
        hits.contains("blijft/eigen.md") && hits.contains("blijft/gedeeld.md"),
        "{hits}"
    );
    let members = run_json(
        t.data_dir(),
        &["member", "list", &stays.org.slug, "--json"],
        None,
    );
    assert_eq!(members["items"][0]["email"], "bert@blijft.nl");
    let _ = run_id;

    // No table holds a record of it: raw bytes, every table.
    drop(app);
    t.stop().await;
    let after = raw_rows(t.data_dir());
    let gone_key = gone.org.id.to_be_bytes();
    for (table, k, v) in &after {
        let why = format!(
            "{table}: {} => {}",
            String::from_utf8_lossy(k),
            String::from_utf8_lossy(v)
        );
        assert!(!names_org(v, gone.org.id), "{why}");
        for marker in [
            &b"ZQX"[..],
            gone.org.slug.as_bytes(),
            b"Verdwijnt Bouw",
            b"nieuw@verdwijnt.nl",
        ] {
            assert!(!contains(k, marker) && !contains(v, marker), "{why}");
        }
        let org_keyed = [
            "memberships",
            "audit",
            "kb_docs",
            "kb_versions",
            "feature_requests",
            "apps",
            "kb_trash",
            "run_callbacks_due",
        ];
        assert!(
            !(org_keyed.contains(&table.as_str()) && k.starts_with(&gone_key)),
            "{why}"
        );
        if table == "memberships_by_person" {
            assert_ne!(&k[8..16], &gone_key[..], "{why}");
        }
        if table == "by_org" {
            assert_ne!(&k[1..9], &gone_key[..], "{why}");
        }
        if table == "kb_content" {
            assert_ne!(k, &hash(b"ZQXTRASHED prullenbak"), "{why}");
            assert_ne!(k, &hash(b"ZQXMARKER kozijn"), "{why}");
            assert_ne!(k, &hash(&binary), "{why}");
            assert!(!k.starts_with(&long_key), "{why}");
        }
        if table == "kb_content_data" {
            assert!(!k.starts_with(&long_at), "{why}");
        }
    }
    assert!(
        after
            .iter()
            .any(|(t, k, _)| t == "kb_content" && *k == hash(shared.as_bytes()))
    );
    assert!(
        after
            .iter()
            .any(|(t, _, v)| t == "people" && contains(v, b"vera@verdwijnt.nl"))
    );
    assert!(!after.iter().any(|(t, _, _)| t == "erasing"));
    // Only records of other organisations (and of no organisation) are left.
    let left: usize = after
        .iter()
        .filter(|(t, k, _)| t == "kb_docs" && k.starts_with(&stays.org.id.to_be_bytes()))
        .count();
    assert_eq!(left, 2);

    // After compaction no file of the data directory holds its content any more.
    let out = run(t.data_dir(), &["compact"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    for marker in [
        &b"ZQXMARKER"[..],
        b"ZQXTRASHED",
        b"zqxgeheim/notitie.md",
        gone.org.slug.as_bytes(),
        b"ZQXATTACHMENT",
        b"ZQXLANGDEEL",
    ] {
        let holding = files_holding(t.data_dir(), marker);
        assert!(
            holding.is_empty(),
            "{} still in {holding:?}",
            String::from_utf8_lossy(marker)
        );
    }
    assert!(!files_holding(t.data_dir(), b"BLIJFTMARKER").is_empty());
    t.restart().await;
    let hits = search_paths(&t, &t.grant(&stays, SCOPE), "kozijn").await;
    assert!(hits.contains("blijft/eigen.md"), "{hits}");
}

/// SIGKILL in the middle of a large organisation's removal: the store opens, the organisation
/// stays invisible, the other one is whole, and `org delete` again finishes the removal.
#[test]
fn org_delete_killed_midway_finishes_when_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let now: jiff::Timestamp = "2026-06-01T09:00:00Z".parse().unwrap();
    const DOCS: usize = 20_000;
    let (big, other) = {
        let store = kennis::store::Store::open(&data).unwrap();
        let index =
            kb::index::SearchIndex::open(&data.join(kennis::app::INDEX_DIR), false).unwrap();
        let big = identity::create_org(&store, "Groot Archief", now).unwrap();
        let other = identity::create_org(&store, "Ander Bedrijf", now).unwrap();
        let mut w = kb::Writer::new(&store, &index);
        let texts: Vec<(String, String)> = (0..DOCS)
            .map(|i| {
                (
                    format!("archief/{:02}/doc-{i}.md", i % 50),
                    format!("Archiefstuk {i} over kozijnen"),
                )
            })
            .collect();
        for chunk in texts.chunks(1000) {
            let batch: Vec<kb::NewVersion> = chunk
                .iter()
                .map(|(p, text)| kb::NewVersion {
                    org_id: big.id,
                    path: p,
                    bytes: text.as_bytes(),
                    expect: kb::Expect::Any,
                    by: None,
                    now,
                })
                .collect();
            w.put_many(&batch).unwrap();
        }
        w.put(kb::NewVersion {
            org_id: other.id,
            path: "blijft.md",
            bytes: b"Archiefstuk 7 over kozijnen",
            expect: kb::Expect::Any,
            by: None,
            now,
        })
        .unwrap();
        w.finish().unwrap();
        (big, other)
    };

    let mut child = kennis(&data)
        .args(["org", "delete", &big.slug, "--yes"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        // The first batch of records is gone: the removal is under way.
        loop {
            let line = lines.next().expect("progress on stderr").unwrap();
            if line.starts_with("removing records") {
                break;
            }
        }
        child.kill().unwrap();
    }
    child.wait().unwrap();

    let left = |store: &kennis::store::Store| {
        store
            .read(|tx| tx.scan_keys(kennis::store::KB_DOCS, &big.id.to_be_bytes(), usize::MAX))
            .unwrap()
            .len()
    };
    {
        let store = kennis::store::Store::open(&data).expect("the store opens after SIGKILL");
        assert!(
            identity::find_org(&store, &big.slug).is_err(),
            "still visible"
        );
        assert!(
            identity::list_orgs(&store)
                .unwrap()
                .iter()
                .all(|o| o.id != big.id)
        );
        let n = left(&store);
        assert!(
            n > 0 && n < DOCS + 1,
            "killed before or after the removal: {n} documents left"
        );
        // The slug stays taken while the removal is unfinished.
        assert!(identity::create_org(&store, "Groot Archief", now).is_err());
        let doc = store
            .read(|tx| kb::get_document(tx, other.id, "blijft.md"))
            .unwrap();
        assert!(doc.is_some());
    }

    let out = run(
        &data,
        &["org", "delete", &big.slug, "--yes", "--json"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let store = kennis::store::Store::open(&data).unwrap();
    assert_eq!(left(&store), 0);
    assert_eq!(
        store.read(|tx| tx.count(kennis::store::ERASING)).unwrap(),
        0
    );
    assert_eq!(
        store
            .read(|tx| tx.count(kennis::store::KB_VERSIONS))
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .read(|tx| tx.count(kennis::store::KB_CONTENT))
            .unwrap(),
        1
    );
    let text = store
        .read(|tx| {
            let d = kb::get_document(tx, other.id, "blijft.md")?.unwrap();
            kb::content(tx, &d.hash)
        })
        .unwrap()
        .unwrap();
    assert_eq!(text, b"Archiefstuk 7 over kozijnen");
    let index = kb::index::SearchIndex::open(&data.join(kennis::app::INDEX_DIR), false).unwrap();
    index.catch_up(&store).unwrap();
    let terms = vec!["archiefstuk".to_owned()];
    assert!(
        index
            .candidates(big.id, None, &terms, 10)
            .unwrap()
            .0
            .is_empty()
    );
    let (found, _) = index.candidates(other.id, None, &terms, 10).unwrap();
    assert_eq!(found.len(), 1);
    // The slug is free again.
    assert!(identity::create_org(&store, "Groot Archief", now).is_ok());
}

async fn login_status(t: &TestServer, s: &Seeded) -> (u16, String) {
    let mut b = Browser::new(t);
    let p = b.get("/login").await;
    let csrf = p.csrf();
    let p = b
        .post(
            "/login",
            &[
                ("csrf_token", &csrf),
                ("email", &s.person.email),
                ("password", &s.password),
            ],
        )
        .await;
    (p.status, p.body)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disabled_person_cannot_sign_in_and_an_enabled_one_can_again() {
    let t = TestServer::start().await;
    let s = t.seed("Bouw BV", "dirk@bouw.nl");
    let token = t.grant(&s, SCOPE);
    assert_eq!(t.mcp(&token).rpc("tools/list", json!({})).await.0, 200);
    let mut signed_in = Browser::new(&t);
    assert_eq!(signed_in.login(&s, "/portal").await.status, 200);

    let v = run_json(
        t.data_dir(),
        &["user", "disable", "dirk@bouw.nl", "--json"],
        None,
    );
    assert_eq!(v["disabled"], true);
    assert_eq!(v["grants_revoked"], 1);
    assert!(v["sessions_ended"].as_u64().unwrap() >= 1, "{v}");
    // The connector token gets 401 at once; the portal session is gone; the login is refused.
    assert_eq!(t.mcp(&token).rpc("tools/list", json!({})).await.0, 401);
    let p = signed_in.get("/portal").await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(p.location.unwrap().starts_with("/login"));
    let (status, body) = login_status(&t, &s).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("disabled"), "{body}");
    // A grant made now (as if through an old consent) is refused too.
    let fresh = t.grant(&s, SCOPE);
    assert_eq!(t.mcp(&fresh).rpc("tools/list", json!({})).await.0, 401);
    let list = run_json(t.data_dir(), &["user", "list", "--json"], None);
    assert_eq!(list["items"][0]["disabled"], true);

    let v = run_json(
        t.data_dir(),
        &["user", "enable", "dirk@bouw.nl", "--json"],
        None,
    );
    assert_eq!(v["disabled"], false);
    assert_eq!(Browser::new(&t).login(&s, "/portal").await.status, 200);
    // Revoked connections stay revoked: the assistant connects anew.
    assert_eq!(t.mcp(&token).rpc("tools/list", json!({})).await.0, 401);
    let again = t.grant(&s, SCOPE);
    assert_eq!(t.mcp(&again).rpc("tools/list", json!({})).await.0, 200);

    let out = run(t.data_dir(), &["user", "disable", "niemand@bouw.nl"], None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_person_is_erased_and_the_audit_names_a_pseudonym() {
    let mut t = TestServer::start().await;
    let admin = t.seed("Bouw BV", "anna@bouw.nl");
    let leaver = t.seed("Bouw BV", "lex@bouw.nl");
    let app = t.app().clone();
    identity::set_member(
        &app.store,
        &kennis::audit::Actor::Operator,
        admin.org.id,
        leaver.person.id,
        identity::MemberChange {
            role: Some(Role::Member),
            may_connect: None,
        },
        app.clock.now(),
    )
    .unwrap();
    let token = t.grant(&leaver, SCOPE);
    t.mcp(&token).ok("kennisbank_list", json!({})).await;
    // A feature request with a message of theirs: the conversation names its author.
    let shop = kennis::requests::apps::add_by_slug(
        &app.store,
        &admin.org.slug,
        "Webshop",
        kennis::requests::apps::AppStatus::Live,
        app.clock.now(),
    )
    .unwrap();
    let filed = kennis::requests::service::create(
        &app,
        admin.org.id,
        leaver.person.id,
        &kennis::requests::feature::NewRequest {
            app_id: shop.app_id,
            title: "Filter".into(),
            description: "Filter op merk".into(),
        },
    )
    .unwrap();
    kennis::requests::service::reply(
        &app,
        admin.org.id,
        leaver.person.id,
        filed.id,
        Some("Graag snel"),
        &[],
    )
    .unwrap();
    let author = |app: &kennis::app::App| {
        let r = app
            .store
            .read(|tx| kennis::requests::get(tx, filed.id))
            .unwrap()
            .unwrap();
        r.conversation
            .iter()
            .find(|m| m.text == "Graag snel")
            .unwrap()
            .author
            .clone()
    };
    assert_eq!(author(&app), "lex");
    t.mcp(&t.grant(&admin, SCOPE))
        .ok("kennisbank_list", json!({}))
        .await;
    app.batch.flush();

    // The last admin is refused, and nothing changes.
    let out = run(
        t.data_dir(),
        &["user", "delete", "anna@bouw.nl", "--yes"],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("last admin"), "{}", stderr(&out));
    assert_eq!(Browser::new(&t).login(&admin, "/portal").await.status, 200);
    let members = run_json(
        t.data_dir(),
        &["member", "list", &admin.org.slug, "--json"],
        None,
    );
    assert_eq!(members["items"].as_array().unwrap().len(), 2);
    // Without --yes nothing happens.
    let out = run(t.data_dir(), &["user", "delete", "lex@bouw.nl"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(identity::find_person(&app.store, "lex@bouw.nl").is_ok());

    let v = run_json(
        t.data_dir(),
        &["user", "delete", "lex@bouw.nl", "--yes", "--json"],
        None,
    );
    let alias = format!("deleted-{}", leaver.person.id);
    assert_eq!(v["pseudonym"], alias.as_str());
    assert_eq!(t.mcp(&token).rpc("tools/list", json!({})).await.0, 401);
    let (status, body) = login_status(&t, &leaver).await;
    assert_eq!(status, 401, "{body}");
    let members = run_json(
        t.data_dir(),
        &["member", "list", &admin.org.slug, "--json"],
        None,
    );
    assert_eq!(members["items"].as_array().unwrap().len(), 1);
    // The audit keeps the record, naming the pseudonym; the admin's records name her.
    let out = run(t.data_dir(), &["audit", "export", &admin.org.slug], None);
    let lines = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        lines.contains(&format!("\"person\":\"{alias}\"")),
        "{lines}"
    );
    assert!(lines.contains("\"person\":\"anna@bouw.nl\""), "{lines}");
    assert!(!lines.contains("lex@bouw.nl"), "{lines}");
    assert_eq!(author(&app), alias);
    // The portal's audit page names the pseudonym too.
    let mut b = Browser::new(&t);
    b.login(&admin, "/portal").await;
    let page = b.get(&format!("/portal/o/{}/audit", admin.org.slug)).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&alias), "{}", page.body);
    assert!(!page.body.contains("lex@bouw.nl"));
    // The address is free again.
    let v = run_json(
        t.data_dir(),
        &["user", "add", "lex@bouw.nl", "--password-stdin", "--json"],
        Some("een-heel-nieuw-wachtwoord\n"),
    );
    assert_ne!(v["id"], leaver.person.id);

    // Nothing of the person is left in the store but the new account.
    drop(app);
    t.stop().await;
    for (table, k, v) in raw_rows(t.data_dir()) {
        if table == "people" || table == "people_by_email" {
            continue;
        }
        assert!(
            !contains(&k, b"lex@bouw.nl") && !contains(&v, b"lex@bouw.nl"),
            "{table}: {}",
            String::from_utf8_lossy(&v)
        );
    }
}

/// A removal whose first transaction committed before the process died is finished by the
/// next start of the server.
#[tokio::test(flavor = "multi_thread")]
async fn the_next_start_finishes_an_interrupted_removal() {
    let mut t = TestServer::start().await;
    let gone = t.seed("Half Weg", "hanna@halfweg.nl");
    let stays = t.seed("Heel Gebleven", "henk@heel.nl");
    write_doc(
        &t,
        &gone,
        "half/weg.md",
        b"HALFWEG tekst",
        kb::Expect::Create,
    );
    write_doc(&t, &stays, "heel.md", b"HEEL tekst", kb::Expect::Create);
    t.stop().await;
    {
        // What `org delete` leaves when killed right after its first transaction.
        let store = kennis::store::Store::open(t.data_dir()).unwrap();
        let mut k = vec![b'o'];
        k.extend_from_slice(&gone.org.id.to_be_bytes());
        store
            .write(|tx| {
                tx.put(kennis::store::ERASING, &k, &json!({"org": gone.org}))?;
                tx.delete(kennis::store::ORGS, &gone.org.id.to_be_bytes())
            })
            .unwrap();
    }
    t.restart().await;
    let store = t.app().store.clone();
    let mut pending = u64::MAX;
    for _ in 0..200 {
        pending = store.read(|tx| tx.count(kennis::store::ERASING)).unwrap();
        if pending == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(pending, 0, "the removal was not finished at start");
    let docs = |org: u64| {
        store
            .read(|tx| tx.scan_keys(kennis::store::KB_DOCS, &org.to_be_bytes(), 10))
            .unwrap()
            .len()
    };
    assert_eq!(docs(gone.org.id), 0);
    assert_eq!(docs(stays.org.id), 1);
    // Its slug is free again; the other organisation's members are untouched.
    let v = run_json(t.data_dir(), &["org", "create", "Half Weg", "--json"], None);
    assert_eq!(v["slug"], gone.org.slug.as_str());
    assert_ne!(v["id"], gone.org.id);
    let members = run_json(
        t.data_dir(),
        &["member", "list", &stays.org.slug, "--json"],
        None,
    );
    assert_eq!(members["items"].as_array().unwrap().len(), 1);
}

/// Every key of `table` that starts with organisation `id`.
fn keys_of_org(store: &kennis::store::Store, table: kennis::store::Table, id: u64) -> usize {
    store
        .read(|tx| tx.scan_keys(table, &id.to_be_bytes(), usize::MAX))
        .unwrap()
        .len()
}

/// A connector call that passed its checks before `org delete` and runs its tool after the
/// removal swept the organisation's tables (the call in flight, made here with the context
/// its bearer check gave): it is refused, and neither its write nor its audit record (which
/// goes through the batch writer) outlives the organisation.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_in_flight_during_org_delete_leaves_no_record() {
    use kennis::store::{AUDIT, KB_DOCS, KB_VERSIONS};
    use kennis::tools::{self, Caller};
    let mut t = TestServer::start().await;
    let gone = t.seed("Verdwijnt Bouw", "vera@verdwijnt.nl");
    let stays = t.seed("Blijft Bouw", "bert@blijft.nl");
    let app = t.app().clone();
    let token = t.grant(&gone, SCOPE);
    let access = kennis::oauth::check_bearer(&app, &token).unwrap();
    let caller = Caller::person(
        access.org_id,
        access.person_id,
        access.grant_id,
        access.scopes.clone(),
    );
    let write = tools::tool_for(&caller, "kennisbank_write").unwrap();
    let args: tools::args::Args = serde_json::from_value(json!({
        "path": "aangeleverd/laat.md",
        "content": "ZQXLATE te laat"
    }))
    .unwrap();

    run_json(
        t.data_dir(),
        &["org", "delete", &gone.org.slug, "--yes", "--json"],
        None,
    );
    let caller2 = caller.clone();
    let args2 = args.clone();
    let result = app
        .blocking(move |app| tools::call(app, &caller2, write, &args2).map(|ok| ok.target))
        .await;
    let err = result.unwrap_err();
    assert_eq!(err.code(), "not_found", "{err}");
    app.batch.flush();
    for table in [AUDIT, KB_DOCS, KB_VERSIONS] {
        assert_eq!(
            keys_of_org(&app.store, table, gone.org.id),
            0,
            "{}",
            table.name()
        );
    }
    assert!(
        !live_rows(&app.store)
            .iter()
            .any(|(_, k, v)| contains(k, b"ZQXLATE") || contains(v, b"ZQXLATE")),
        "the late write is stored"
    );
    // Another organisation's calls go on and are recorded.
    let other = t.grant(&stays, SCOPE);
    t.mcp(&other).ok("kennisbank_list", json!({})).await;
    app.batch.flush();
    assert!(keys_of_org(&app.store, AUDIT, stays.org.id) > 0);
    drop(app);
    t.stop().await;
}

/// Another organisation writes content the removed one also has and deletes that document
/// again while the removal runs, after it listed what to remove: the content stays, for the
/// trashed document, which comes back whole. (The write and the delete happen at the
/// removal's progress report that comes between its listing and its deletions.)
#[tokio::test(flavor = "multi_thread")]
async fn content_another_organisation_writes_and_trashes_during_org_delete_stays() {
    let mut t = TestServer::start().await;
    let gone = t.seed("Verdwijnt Bouw", "vera@verdwijnt.nl");
    let stays = t.seed("Blijft Bouw", "bert@blijft.nl");
    let app = t.app().clone();
    let text = b"Gedeelde tekst die later ook bij Blijft Bouw komt.";
    write_doc(&t, &gone, "eigen/tekst.md", text, kb::Expect::Create);
    let mut acted = false;
    let mut on_progress = |p: kennis::progress::Progress| {
        if !acted && p.line().contains("contents to remove") {
            acted = true;
            write_doc(&t, &stays, "later/tekst.md", text, kb::Expect::Create);
            kb::trash::delete(
                &app.store,
                &app.kb_index,
                stays.org.id,
                "later/tekst.md",
                &kennis::audit::Actor::Operator,
                app.clock.now(),
            )
            .unwrap();
        }
    };
    let removed = kennis::erase::delete_org(
        &app.store,
        &app.kb_index,
        &gone.org.slug,
        &|_| {},
        &|id| app.close_org(id),
        &mut on_progress,
    )
    .unwrap();
    assert!(acted, "the removal reported no content step");
    assert_eq!((removed.content_removed, removed.content_kept), (0, 1));
    let hash = blake3::hash(text);
    assert!(
        app.store
            .read(|tx| tx.get_raw(kennis::store::KB_CONTENT, hash.as_bytes()))
            .unwrap()
            .is_some(),
        "content of a trashed document of another organisation removed"
    );
    kb::trash::restore(
        &app.store,
        &app.kb_index,
        stays.org.id,
        "later/tekst.md",
        &kennis::audit::Actor::Operator,
        app.clock.now(),
    )
    .unwrap();
    let back = app
        .store
        .read(|tx| {
            let d = kb::get_document(tx, stays.org.id, "later/tekst.md")?.unwrap();
            kb::content(tx, &d.hash)
        })
        .unwrap();
    assert_eq!(back.as_deref(), Some(&text[..]));
    drop(app);
    t.stop().await;
}
