//! The life of a document (issue 24): to the trash and back, move and rename, export as files
//! and as a zip, and retention purging old runs, audit records and trashed documents. Through
//! the portal, the CLI and the connector's tools, on the real server.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::fixture::{
    Browser, McpClient, Seeded, TestServer, result_paths, run, run_json, sorted_keys, stderr,
};

async fn setup() -> (TestServer, McpClient, Seeded) {
    let t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    (t, mcp, s)
}

fn listed(list: &Value) -> Vec<String> {
    list["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect()
}

/// The stored versions of a document: (version, hash, created_at).
fn versions(t: &TestServer, org: u64, path: &str) -> Vec<(u64, String, String)> {
    let app = t.app();
    app.store
        .read(|tx| kennis::kb::versions(tx, org, path))
        .unwrap()
        .into_iter()
        .map(|v| (v.version, v.hash, v.created_at.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_documents_vanish_everywhere_and_come_back_whole() {
    let (mut t, mcp, s) = setup().await;
    let slug = s.org.slug.clone();
    let path = "aangeleverd/kozijn.md";
    mcp.ok(
        "kennisbank_write",
        json!({"path": path, "content": "Meranti kozijnen, eerste versie"}),
    )
    .await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": path, "content": "Meranti kozijnen, tweede versie", "expected_version": 1}),
    )
    .await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/deur.md", "content": "Eiken deur"}),
    )
    .await;
    let before = versions(&t, s.org.id, path);
    assert_eq!(before.len(), 2);

    // The admin deletes it from its page.
    let mut b = Browser::new(&t);
    let doc_page = format!("/portal/o/{slug}/kb/{path}");
    let p = b.login(&s, &doc_page).await;
    assert!(
        p.body.contains("id=\"delete-form\"") && p.body.contains("id=\"move-form\""),
        "{}",
        p.body
    );
    // A download link handed out before the deletion.
    let at = p.body.find("/files/").unwrap();
    let link = p.body[at..at + p.body[at..].find('"').unwrap()].to_owned();
    assert_eq!(b.get_bytes(&link).await.0, 200);
    let p = b.submit(&doc_page, &[("action", "delete")]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_ne!(
        b.get_bytes(&link).await.0,
        200,
        "the link no longer gives it"
    );

    // Gone from list, read and search (the index at once), in the tools and the portal.
    let list = mcp
        .ok("kennisbank_list", json!({"path": "aangeleverd"}))
        .await;
    assert_eq!(listed(&list), vec!["aangeleverd/deur.md"]);
    assert_eq!(
        mcp.err("kennisbank_read", json!({"path": path})).await["code"],
        "not_found"
    );
    let found = mcp
        .ok("kennisbank_search", json!({"query": "meranti"}))
        .await;
    assert!(result_paths(&found).is_empty(), "{found}");
    // ChatGPT's `search` and `fetch` too.
    let found = mcp.ok("search", json!({"query": "meranti"})).await;
    assert_eq!(found, json!({"results": []}));
    assert_eq!(
        mcp.err("fetch", json!({"id": path})).await["code"],
        "not_found"
    );
    assert_eq!(b.get(&doc_page).await.status, 404);
    let p = b.get(&format!("/portal/o/{slug}/kb?q=meranti")).await;
    assert!(!p.body.contains("kozijn.md"), "{}", p.body);
    // The tools have no way to delete.
    let tools = mcp.tool_names().await;
    assert!(tools.iter().all(|n| !n.contains("delete")), "{tools:?}");

    // The trash lists it (portal and CLI), with who deleted it.
    let p = b.get(&format!("/portal/o/{slug}/trash")).await;
    assert_eq!(p.status, 200);
    assert!(
        p.body.contains(path) && p.body.contains("name=\"action\" value=\"restore\""),
        "{}",
        p.body
    );
    let mut nl = Browser::speaking(&t, "nl");
    nl.login(&s, "/portal").await;
    let p = nl.get(&format!("/portal/o/{slug}/trash")).await;
    assert!(
        p.body.contains("Prullenbak") && p.body.contains("Terugzetten"),
        "{}",
        p.body
    );
    let v = run_json(t.data_dir(), &["kb", "trash", &slug, "--json"], None);
    assert_eq!(sorted_keys(&v), ["items"], "{v}");
    assert_eq!(
        sorted_keys(&v["items"][0]),
        ["deleted_at", "deleted_by", "path", "version"],
        "{v}"
    );
    assert_eq!(v["items"][0]["path"], path, "{v}");
    assert_eq!(v["items"][0]["version"], 2, "{v}");
    assert_eq!(v["items"][0]["deleted_by"], "annie@example.org", "{v}");
    assert!(v["items"][0]["deleted_at"].is_string(), "{v}");

    // A write to the path makes a new document; restoring is refused while it lives.
    let w = mcp
        .ok(
            "kennisbank_write",
            json!({"path": path, "content": "nieuw"}),
        )
        .await;
    assert_eq!(w["version"], 1, "{w}");
    let out = run(t.data_dir(), &["kb", "restore", &slug, path], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("live document"), "{}", stderr(&out));
    let p = b
        .submit(
            &format!("/portal/o/{slug}/trash"),
            &[("action", "restore"), ("path", path)],
        )
        .await;
    assert_eq!(p.status, 409, "{}", p.body);
    assert_eq!(
        versions(&t, s.org.id, path).len(),
        1,
        "the new one untouched"
    );
    let v = run_json(t.data_dir(), &["kb", "trash", &slug, "--json"], None);
    assert_eq!(
        v["items"].as_array().unwrap().len(),
        1,
        "still in the trash: {v}"
    );

    // The new one moved aside, the old one comes back with the same versions.
    run_json(
        t.data_dir(),
        &[
            "kb",
            "move",
            &slug,
            path,
            "aangeleverd/kozijn-nieuw.md",
            "--json",
        ],
        None,
    );
    let p = b
        .submit(
            &format!("/portal/o/{slug}/trash"),
            &[("action", "restore"), ("path", path)],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(versions(&t, s.org.id, path), before);
    let read = mcp.ok("kennisbank_read", json!({"path": path})).await;
    assert_eq!(
        (read["version"].as_u64(), read["excerpt"].as_str()),
        (Some(2), Some("Meranti kozijnen, tweede versie"))
    );
    let found = mcp
        .ok("kennisbank_search", json!({"query": "meranti"}))
        .await;
    assert_eq!(result_paths(&found), vec![path]);
    let found = mcp.ok("search", json!({"query": "meranti"})).await;
    assert_eq!(found["results"][0]["id"], path, "{found}");
    let fetched = mcp.ok("fetch", json!({"id": path})).await;
    assert_eq!(
        (&fetched["text"], &fetched["metadata"]["version"]),
        (&json!("Meranti kozijnen, tweede versie"), &json!(2))
    );
    let p = b.get(&format!("/portal/o/{slug}/trash")).await;
    assert!(p.body.contains("id=\"trash-empty\""), "{}", p.body);

    // The operator deletes and restores from the command line.
    let v = run_json(
        t.data_dir(),
        &[
            "kb",
            "delete",
            &slug,
            "aangeleverd/kozijn-nieuw.md",
            "--json",
        ],
        None,
    );
    assert_eq!(v["version"], 1, "{v}");
    let v = run_json(t.data_dir(), &["kb", "trash", &slug, "--json"], None);
    assert_eq!(
        v["items"][0]["deleted_by"],
        Value::Null,
        "the operator: {v}"
    );
    let out = run(
        t.data_dir(),
        &["kb", "restore", &slug, "aangeleverd/kozijn-nieuw.md"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        mcp.ok(
            "kennisbank_read",
            json!({"path": "aangeleverd/kozijn-nieuw.md"})
        )
        .await["excerpt"],
        "nieuw"
    );
    let out = run(t.data_dir(), &["kb", "restore", &slug, path], None);
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing of that path in the trash"
    );
    let out = run(t.data_dir(), &["kb", "delete", &slug, "nergens.md"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_admins_delete_move_and_export() {
    let (mut t, mcp, s) = setup().await;
    let slug = s.org.slug.clone();
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/a.md", "content": "alfa"}),
    )
    .await;
    let other = t.seed("Ander BV", "bert@example.org");
    let app = t.app().clone();
    kennis::identity::add_member(
        &app.store,
        &slug,
        &other.person.email,
        kennis::identity::Role::Member,
        false,
        app.clock.now(),
    )
    .unwrap();
    let mut b = Browser::new(&t);
    let p = b
        .login(&other, &format!("/portal/o/{slug}/kb/aangeleverd/a.md"))
        .await;
    assert_eq!(p.status, 200);
    assert!(!p.body.contains("id=\"delete-form\""), "{}", p.body);
    // Posting the form anyway is refused and deletes nothing.
    let csrf = p.csrf();
    let p = b
        .post(
            &format!("/portal/o/{slug}/kb/aangeleverd/a.md"),
            &[("csrf_token", &csrf), ("action", "delete")],
        )
        .await;
    assert_eq!(p.status, 403);
    assert_eq!(b.get(&format!("/portal/o/{slug}/trash")).await.status, 403);
    assert_eq!(b.get(&format!("/portal/o/{slug}/export")).await.status, 403);
    mcp.ok("kennisbank_read", json!({"path": "aangeleverd/a.md"}))
        .await;
    // Without the CSRF token an admin's post changes nothing either.
    let mut admin = Browser::new(&t);
    admin.login(&s, "/portal").await;
    let p = admin
        .post(
            &format!("/portal/o/{slug}/kb/aangeleverd/a.md"),
            &[("action", "delete")],
        )
        .await;
    assert_eq!(p.status, 403);
    mcp.ok("kennisbank_read", json!({"path": "aangeleverd/a.md"}))
        .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_documents_keep_their_history_and_are_found_at_once() {
    let (mut t, mcp, s) = setup().await;
    let slug = s.org.slug.clone();
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/concept/plan.md", "content": "Dakkapel plaatsen"}),
    )
    .await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/concept/plan.md", "content": "Dakkapel plaatsen in mei", "expected_version": 1}),
    )
    .await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/bezet.md", "content": "bezet"}),
    )
    .await;
    let before = versions(&t, s.org.id, "aangeleverd/concept/plan.md");

    // Refused: a live document at the target, an invalid path, a missing source; nothing moves.
    for (to, says) in [
        ("aangeleverd/bezet.md", "live document"),
        ("../buiten.md", ".."),
        ("/absoluut.md", "slash"),
    ] {
        let out = run(
            t.data_dir(),
            &["kb", "move", &slug, "aangeleverd/concept/plan.md", to],
            None,
        );
        assert_eq!(out.status.code(), Some(1), "{to}");
        assert!(stderr(&out).contains(says), "{to}: {}", stderr(&out));
    }
    let out = run(t.data_dir(), &["kb", "move", &slug, "weg.md", "x.md"], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        versions(&t, s.org.id, "aangeleverd/concept/plan.md"),
        before
    );
    assert_eq!(
        mcp.ok("kennisbank_read", json!({"path": "aangeleverd/bezet.md"}))
            .await["excerpt"],
        "bezet"
    );

    // The CLI renames it: history kept, the old path gone, the new one found at once.
    let v = run_json(
        t.data_dir(),
        &[
            "kb",
            "move",
            &slug,
            "aangeleverd/concept/plan.md",
            "definitief/plan.md",
            "--json",
        ],
        None,
    );
    assert_eq!(v["to"], "definitief/plan.md", "{v}");
    assert_eq!(versions(&t, s.org.id, "definitief/plan.md"), before);
    assert!(versions(&t, s.org.id, "aangeleverd/concept/plan.md").is_empty());
    assert_eq!(
        mcp.err(
            "kennisbank_read",
            json!({"path": "aangeleverd/concept/plan.md"})
        )
        .await["code"],
        "not_found"
    );
    let found = mcp
        .ok("kennisbank_search", json!({"query": "dakkapel"}))
        .await;
    assert_eq!(result_paths(&found), vec!["definitief/plan.md"]);
    let found = mcp.ok("search", json!({"query": "dakkapel"})).await;
    let ids: Vec<&str> = found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["definitief/plan.md"]);
    assert_eq!(
        mcp.err("fetch", json!({"id": "aangeleverd/concept/plan.md"}))
            .await["code"],
        "not_found"
    );
    assert_eq!(
        mcp.ok("fetch", json!({"id": "definitief/plan.md"})).await["text"],
        "Dakkapel plaatsen in mei"
    );
    let list = mcp.ok("kennisbank_list", json!({})).await;
    assert_eq!(listed(&list), vec!["aangeleverd", "definitief"]);

    // The portal's move form does the same.
    let mut b = Browser::new(&t);
    let page = format!("/portal/o/{slug}/kb/definitief/plan.md");
    b.login(&s, &page).await;
    let p = b
        .submit(&page, &[("action", "move"), ("to", "archief/plan-2026.md")])
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(
        p.location.as_deref(),
        Some(format!("/portal/o/{slug}/kb/archief/plan-2026.md").as_str())
    );
    let found = mcp
        .ok("kennisbank_search", json!({"query": "dakkapel"}))
        .await;
    assert_eq!(result_paths(&found), vec!["archief/plan-2026.md"]);
    let read = mcp
        .ok("kennisbank_read", json!({"path": "archief/plan-2026.md"}))
        .await;
    assert_eq!(read["version"], 2);
    let p = b
        .submit(
            &format!("/portal/o/{slug}/kb/archief/plan-2026.md"),
            &[("action", "move"), ("to", "aangeleverd/bezet.md")],
        )
        .await;
    assert_eq!(p.status, 409, "{}", p.body);
    t.stop().await;
}

/// Every file under `dir` with its bytes, by relative path.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_gives_back_the_imported_bytes() {
    let (mut t, _mcp, s) = setup().await;
    let slug = s.org.slug.clone();
    let src = tempfile::tempdir().unwrap();
    let noise: Vec<u8> = (0..300_000).map(|_| rand::random::<u8>()).collect();
    std::fs::create_dir_all(src.path().join("tekeningen/2026")).unwrap();
    std::fs::write(src.path().join("tekeningen/2026/gevel.png"), &noise).unwrap();
    std::fs::write(
        src.path().join("offerte.md"),
        "# Offerte\n\nKozijnen van meranti.\n".repeat(500),
    )
    .unwrap();
    std::fs::write(src.path().join("leeg.txt"), "").unwrap();
    std::fs::write(src.path().join("café notities.txt"), "naïef\n").unwrap();
    let v = run_json(
        t.data_dir(),
        &[
            "kb",
            "import",
            &slug,
            src.path().to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert_eq!(v["created"], 4, "{v}");
    let expected = tree(src.path());

    // Into a folder that does not exist yet: the same bytes back, nothing else.
    let out_root = tempfile::tempdir().unwrap();
    let dest = out_root.path().join("export");
    let out = run(
        t.data_dir(),
        &["kb", "export", &slug, dest.to_str().unwrap(), "--json"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sorted_keys(&v), ["bytes", "documents"], "{v}");
    let total: usize = expected.values().map(Vec::len).sum();
    assert_eq!(
        (v["documents"].as_u64(), v["bytes"].as_u64()),
        (Some(4), Some(total as u64)),
        "{v}"
    );
    assert!(
        stderr(&out).contains("exporting documents: 4 of 4"),
        "progress: {}",
        stderr(&out)
    );
    assert_eq!(tree(&dest), expected);

    // A trashed document is not exported.
    run_json(
        t.data_dir(),
        &["kb", "delete", &slug, "leeg.txt", "--json"],
        None,
    );
    let empty = out_root.path().join("leeg");
    std::fs::create_dir(&empty).unwrap();
    let v = run_json(
        t.data_dir(),
        &["kb", "export", &slug, empty.to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(v["documents"], 3, "{v}");
    assert!(!empty.join("leeg.txt").exists());

    // A folder that is not empty is refused and left as it was.
    let out = run(
        t.data_dir(),
        &["kb", "export", &slug, dest.to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not empty"), "{}", stderr(&out));
    assert_eq!(tree(&dest), expected);

    // The portal's zip for admins holds the same bytes.
    let mut b = Browser::new(&t);
    let p = b.login(&s, &format!("/portal/o/{slug}/kb")).await;
    assert!(
        p.body.contains(&format!("/portal/o/{slug}/export")),
        "{}",
        p.body
    );
    let (status, headers, body) = b.get_bytes(&format!("/portal/o/{slug}/export")).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/zip");
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(body)).unwrap();
    let mut got = BTreeMap::new();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut bytes).unwrap();
        got.insert(f.name().to_owned(), bytes);
    }
    let mut live = expected.clone();
    live.remove("leeg.txt");
    assert_eq!(got, live);
    t.stop().await;
}

/// Delivers to `trigger` once more and waits for the run to end; its id.
async fn run_again(t: &TestServer, trigger: &kennis::triggers::Created) -> u64 {
    let r = t
        .client
        .post(t.url(&format!("/api/hooks/events/{}", trigger.trigger.id)))
        .bearer_auth(&trigger.secret)
        .json(&json!({"offerte": 18}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: Value = r.json().await.unwrap();
    let run = v["featureRequestId"].as_u64().expect("run id");
    for _ in 0..200 {
        let done = t
            .app()
            .store
            .read(|tx| kennis::requests::get(tx, run))
            .unwrap()
            .is_some_and(|r| r.status.is_final());
        if done {
            return run;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("run {run} did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_old_runs_audit_and_trash_with_their_content() {
    use kennis::config::{RetentionSettings, Settings};
    let mut t = TestServer::start_with(Settings {
        retention: Some(RetentionSettings {
            audit_days: Some(100),
            ..RetentionSettings::default()
        }),
        ..Settings::default()
    })
    .await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    let app = t.app().clone();
    let hash = |text: &str| blake3::hash(text.as_bytes());
    let has_content = |h: blake3::Hash| {
        app.store
            .read(|tx| tx.get_raw(kennis::store::KB_CONTENT, h.as_bytes()))
            .unwrap()
            .is_some()
    };
    let audit_count = || {
        app.batch.flush();
        app.store
            .read(|tx| kennis::audit::records(tx, s.org.id, None))
            .unwrap()
            .len()
    };

    // Day 0: a run, audit records, a trashed document with its own content and one whose
    // content a live document shares.
    let (trigger, old_run) = t.finished_run(&slug, "oud").await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/oud.md", "content": "alleen oud"}),
    )
    .await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/gedeeld.md", "content": "gedeeld"}),
    )
    .await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/blijft.md", "content": "gedeeld"}),
    )
    .await;
    run_json(
        t.data_dir(),
        &["kb", "delete", &slug, "aangeleverd/oud.md", "--json"],
        None,
    );
    run_json(
        t.data_dir(),
        &["kb", "delete", &slug, "aangeleverd/gedeeld.md", "--json"],
        None,
    );
    let old_audit = audit_count();
    assert!(old_audit >= 3);

    // Day 95: newer ones of each.
    t.clock.advance(jiff::SignedDuration::from_hours(95 * 24));
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    let new_run = run_again(&t, &trigger).await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/nieuw.md", "content": "alleen nieuw"}),
    )
    .await;
    run_json(
        t.data_dir(),
        &["kb", "delete", &slug, "aangeleverd/nieuw.md", "--json"],
        None,
    );
    let all_audit = audit_count();

    // Day 101: runs (90 days), audit (100 days here) and trash (30 days) past their time go.
    t.clock.advance(jiff::SignedDuration::from_hours(6 * 24));
    let r = app.blocking(kennis::housekeeping::retain).await.unwrap();
    assert_eq!((r.runs, r.documents, r.contents), (1, 2, 1), "{r:?}");
    assert_eq!(r.audit, old_audit, "{r:?}");
    let run_of = |id| app.store.read(|tx| kennis::requests::get(tx, id)).unwrap();
    assert!(run_of(old_run).is_none());
    assert!(run_of(new_run).is_some());
    assert_eq!(audit_count(), all_audit - old_audit);
    let v = run_json(t.data_dir(), &["kb", "trash", &slug, "--json"], None);
    let trashed: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    assert_eq!(trashed, vec!["aangeleverd/nieuw.md"]);
    assert!(!has_content(hash("alleen oud")), "orphaned content purged");
    assert!(has_content(hash("gedeeld")), "shared with a live document");
    assert!(has_content(hash("alleen nieuw")), "still in the trash");
    let out = run(
        t.data_dir(),
        &["kb", "restore", &slug, "aangeleverd/oud.md"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let (status, body) = {
        let r = t.client.get(t.url("/metrics")).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(status, 200);
    for line in [
        "kennis_records_purged_total{kind=\"run\"} 1".to_owned(),
        format!("kennis_records_purged_total{{kind=\"audit\"}} {old_audit}"),
        "kennis_records_purged_total{kind=\"document\"} 2".to_owned(),
    ] {
        assert!(body.contains(&line), "{line} in {body}");
    }
    // A second round finds nothing more.
    let r = app.blocking(kennis::housekeeping::retain).await.unwrap();
    assert_eq!(r, kennis::housekeeping::Retained::default());
    t.stop().await;
}

/// Exporting into a folder others can write to: a symbolic link planted in the export's tree
/// while it runs (before the first document, or between documents) is refused, not followed,
/// and nothing is written where it points; an export folder that is itself a symbolic link is
/// refused at once. The links are planted from the export's progress callback, so the moment
/// is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_refuses_symbolic_links_planted_in_its_folder() {
    use std::os::unix::fs::symlink;
    let (mut t, _mcp, s) = setup().await;
    let slug = s.org.slug.clone();
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("a")).unwrap();
    for i in 0..30 {
        std::fs::write(src.path().join(format!("a/{i:02}.md")), "tekst\n").unwrap();
    }
    std::fs::create_dir_all(src.path().join("b/c")).unwrap();
    std::fs::write(src.path().join("b/c/d.md"), "geheim\n").unwrap();
    let v = run_json(
        t.data_dir(),
        &[
            "kb",
            "import",
            &slug,
            src.path().to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert_eq!(v["created"], 31, "{v}");
    let app = t.app().clone();
    let work = tempfile::tempdir().unwrap();

    // (folder linked, documents done when it is planted)
    for (n, (linked, at)) in [("a", 0), ("b", 25)].into_iter().enumerate() {
        let dest = work.path().join(format!("export{n}"));
        let outside = work.path().join(format!("outside{n}"));
        std::fs::create_dir(&outside).unwrap();
        let err = kennis::kb::export::export_dir(&app.store, s.org.id, &dest, &mut |done, _| {
            if done == at {
                symlink(&outside, dest.join(linked)).unwrap();
            }
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("symbolic link"),
            "{linked} at {at}: {err}"
        );
        assert_eq!(
            tree(&outside),
            BTreeMap::new(),
            "{linked} at {at}: written through the link"
        );
    }

    // The export folder itself a link (to an empty folder): refused, nothing written there.
    let target = work.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let link = work.path().join("link");
    symlink(&target, &link).unwrap();
    let out = run(
        t.data_dir(),
        &["kb", "export", &slug, link.to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert_eq!(tree(&target), BTreeMap::new());
    // The same export into a plain new folder works.
    let dest = work.path().join("plain");
    let v = run_json(
        t.data_dir(),
        &["kb", "export", &slug, dest.to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(v["documents"], 31, "{v}");
    assert_eq!(tree(&dest), tree(src.path()));
    t.stop().await;
}

/// A crash after the trash purge removed expired entries but before their content went: the
/// next housekeeping round removes that content although no more trash has expired, and keeps
/// what a live or trashed document still refers to. Extracted text whose content is gone goes
/// too. The crash is the purge's first step done by hand (removing the trash records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_left_by_a_crash_after_the_trash_purge_goes_next_round() {
    use kennis::store::{KB_CONTENT, KB_CONTENT_DATA, KB_TEXT, KB_TRASH, StoreError};
    let (mut t, mcp, s) = setup().await;
    let slug = s.org.slug.clone();
    let app = t.app().clone();
    let has = |table, h: blake3::Hash| {
        app.store
            .read(|tx| tx.get_raw(table, h.as_bytes()))
            .unwrap()
            .is_some()
    };
    let hash = |text: &str| blake3::hash(text.as_bytes());
    // Long enough to be kept in parts: the sweep removes every one of them.
    let mut x = 35u64;
    let oud: String = (0..1500)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            format!("oud{} ", x >> 44)
        })
        .collect();
    // Content is kept in kb_content_data under a number its location (under its hash) names.
    let located = |h: blake3::Hash| {
        let here = app
            .store
            .read(|tx| tx.get_raw(KB_CONTENT, h.as_bytes()))
            .unwrap()
            .unwrap();
        here.get(1..9).unwrap().to_vec()
    };
    let rows = |at: &[u8]| {
        app.store
            .read(|tx| tx.scan_keys(KB_CONTENT_DATA, at, usize::MAX))
            .unwrap()
            .len()
    };
    for (path, text) in [
        ("aangeleverd/oud.md", oud.as_str()),
        ("aangeleverd/blijft.md", "blijft"),
    ] {
        mcp.ok("kennisbank_write", json!({"path": path, "content": text}))
            .await;
    }
    run_json(
        t.data_dir(),
        &["kb", "delete", &slug, "aangeleverd/oud.md", "--json"],
        None,
    );
    // Day 31: the trash entry expired; a newer document is in the trash.
    t.clock.advance(jiff::SignedDuration::from_hours(31 * 24));
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/nieuw.md", "content": "alleen nieuw"}),
    )
    .await;
    run_json(
        t.data_dir(),
        &["kb", "delete", &slug, "aangeleverd/nieuw.md", "--json"],
        None,
    );
    // The crash: the purge said the sweep is due and removed the expired trash record, and
    // its content stayed.
    kennis::kb::trash::mark_content_sweep_due(&app.store).unwrap();
    let cutoff = app.clock.now() - jiff::SignedDuration::from_hours(30 * 24);
    app.store
        .write(|tx| {
            for (k, trashed) in tx.scan::<kennis::kb::trash::Trashed>(KB_TRASH, b"")? {
                if trashed.deleted_at < cutoff {
                    tx.delete(KB_TRASH, &k)?;
                }
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
    // Text extracted for content that is gone (an extraction that ended after its removal).
    let stray = hash("verdwenen");
    app.store
        .write(|tx| tx.put_raw(KB_TEXT, stray.as_bytes(), b"tekst"))
        .unwrap();
    assert!(has(KB_CONTENT, hash(&oud)));
    let oud_at = located(hash(&oud));
    assert!(rows(&oud_at) > 3, "{}", rows(&oud_at));

    let r = app.blocking(kennis::housekeeping::retain).await.unwrap();
    assert_eq!((r.documents, r.contents), (0, 1), "{r:?}");
    assert!(!has(KB_CONTENT, hash(&oud)), "left content removed");
    assert_eq!(rows(&oud_at), 0, "and its parts");
    assert!(!has(KB_TEXT, stray), "stray extracted text removed");
    assert!(has(KB_CONTENT, hash("blijft")), "a live document's");
    assert!(has(KB_CONTENT, hash("alleen nieuw")), "still in the trash");
    let metrics = t.metrics().await;
    assert!(
        metrics.contains("kennis_records_purged_total{kind=\"content\"} 1"),
        "{metrics}"
    );
    let r = app.blocking(kennis::housekeeping::retain).await.unwrap();
    assert_eq!(r, kennis::housekeeping::Retained::default());

    // Sweeping reads every version while holding the writer, so it runs only when due: content
    // without a document appearing by itself (which nothing in kennis does) stays until a
    // purge makes the sweep due — or always, on a store that never recorded it (from before).
    let planted = hash("geplant");
    app.store
        .write(|tx| tx.put_raw(KB_CONTENT, planted.as_bytes(), b"geplant"))
        .unwrap();
    let r = app.blocking(kennis::housekeeping::retain).await.unwrap();
    assert_eq!(r.contents, 0, "swept while not due");
    assert!(has(KB_CONTENT, planted));
    app.store
        .write(|tx| tx.delete(kennis::store::META, kennis::store::CONTENT_SWEEP_DUE))
        .unwrap();
    let r = app.blocking(kennis::housekeeping::retain).await.unwrap();
    assert_eq!(r.contents, 1, "a store from before is swept once");
    assert!(!has(KB_CONTENT, planted));
    t.stop().await;
}

/// `0` keeps for ever: with every retention setting at 0, nothing is purged however old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_zero_keeps_everything() {
    use kennis::config::{RetentionSettings, Settings};
    let mut t = TestServer::start_with(Settings {
        retention: Some(RetentionSettings {
            runs_days: Some(0),
            audit_days: Some(0),
            trash_days: Some(0),
        }),
        ..Settings::default()
    })
    .await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    let (_, run_id) = t.finished_run(&slug, "oud").await;
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/oud.md", "content": "alleen oud"}),
    )
    .await;
    run_json(
        t.data_dir(),
        &["kb", "delete", &slug, "aangeleverd/oud.md", "--json"],
        None,
    );
    let app = t.app().clone();
    app.batch.flush();
    let audit = || {
        app.store
            .read(|tx| kennis::audit::records(tx, s.org.id, None))
            .unwrap()
            .len()
    };
    let before = audit();
    assert!(before > 0);
    t.clock.advance(jiff::SignedDuration::from_hours(3650 * 24));
    let r = app.blocking(kennis::housekeeping::retain).await.unwrap();
    assert_eq!(r, kennis::housekeeping::Retained::default());
    assert!(
        app.store
            .read(|tx| kennis::requests::get(tx, run_id))
            .unwrap()
            .is_some()
    );
    assert_eq!(audit(), before);
    let v = run_json(t.data_dir(), &["kb", "trash", &slug, "--json"], None);
    assert_eq!(v["items"][0]["path"], "aangeleverd/oud.md", "{v}");
    t.stop().await;
}

/// SIGKILL of the server in the middle of a large export (which the server runs, the command
/// going through its admin socket) leaves the store whole: after a restart every document is
/// there and exports byte for byte, and the half-written folder is refused, not mixed into.
#[test]
fn sigkill_during_an_export_leaves_the_store_consistent() {
    use crate::fixture::ServeProcess;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let src = dir.path().join("bron");
    for i in 0..300 {
        let folder = src.join(format!("map-{:02}", i % 12));
        std::fs::create_dir_all(&folder).unwrap();
        let bytes: Vec<u8> = (0..128 * 1024).map(|_| rand::random::<u8>()).collect();
        std::fs::write(folder.join(format!("tekening-{i:03}.bin")), bytes).unwrap();
    }
    let expected = tree(&src);
    let server = ServeProcess::spawn(&data, &[], None);
    let org = run_json(&data, &["org", "create", "Groot BV", "--json"], None);
    let slug = org["slug"].as_str().unwrap().to_owned();
    let v = run_json(
        &data,
        &["kb", "import", &slug, src.to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(v["created"], 300, "{v}");

    let half = dir.path().join("half");
    let mut export = crate::fixture::kennis(&data)
        .args(["kb", "export", &slug, half.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !half.join("map-00").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    server.kill9();
    let status = export.wait().unwrap();
    let written = if half.exists() { tree(&half).len() } else { 0 };
    eprintln!("export killed after {written} of 300 files (exit {status})");

    // The next start succeeds; every document is there and exports whole.
    let server = ServeProcess::spawn(&data, &[], None);
    let full = dir.path().join("full");
    let v = run_json(
        &data,
        &["kb", "export", &slug, full.to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(v["documents"], 300, "{v}");
    assert_eq!(tree(&full), expected);
    if written > 0 {
        let out = run(
            &data,
            &["kb", "export", &slug, half.to_str().unwrap()],
            None,
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "a half-written folder is refused"
        );
    }
    // The store still takes writes and moves.
    let v = run_json(
        &data,
        &[
            "kb",
            "move",
            &slug,
            "map-00/tekening-000.bin",
            "archief/0.bin",
            "--json",
        ],
        None,
    );
    assert_eq!(v["to"], "archief/0.bin");
    server.terminate();
}

/// Documents named `upload` and `doc` at the top share their page's address with the upload
/// form and the old document address: their pages open, and their delete and move forms reach
/// them, while the upload form still uploads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_named_like_portal_routes_can_be_moved_and_deleted() {
    let (t, mcp, s) = setup().await;
    let slug = s.org.slug.clone();
    // Written by the operator (the connector writes only under `aangeleverd/`).
    let app = t.app().clone();
    for name in ["upload", "doc"] {
        let text = format!("ZQXROUTE {name}");
        kennis::kb::store_document(
            &app.store,
            s.org.id,
            name,
            text.as_bytes(),
            None,
            app.clock.now(),
        )
        .unwrap();
    }
    app.kb_index.catch_up(&app.store).unwrap();
    let mut b = Browser::new(&t);
    let upload_page = format!("/portal/o/{slug}/kb/upload");
    let p = b.login(&s, &upload_page).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("ZQXROUTE upload"), "{}", p.body);
    let p = b.submit(&upload_page, &[("action", "delete")]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(
        mcp.err("kennisbank_read", json!({"path": "upload"})).await["code"],
        "not_found"
    );

    let doc_page = format!("/portal/o/{slug}/kb/doc");
    let p = b.get(&doc_page).await;
    assert!(p.body.contains("ZQXROUTE doc"), "{}", p.body);
    let p = b
        .submit(
            &doc_page,
            &[("action", "move"), ("to", "verplaatst/doc.md")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let read = mcp
        .ok("kennisbank_read", json!({"path": "verplaatst/doc.md"}))
        .await;
    assert!(read.to_string().contains("ZQXROUTE doc"), "{read}");

    // The upload form still uploads.
    let p = b.get(&format!("/portal/o/{slug}/kb")).await;
    let csrf = p.csrf();
    let p = b
        .multipart(
            &upload_page,
            &[("csrf_token", &csrf), ("folder", "geladen")],
            &[("nieuw.md", "text/markdown", b"ZQXROUTE geladen".as_slice())],
        )
        .await;
    assert!(
        p.status == 303 || p.status == 200,
        "{} {}",
        p.status,
        p.body
    );
    let read = mcp
        .ok("kennisbank_read", json!({"path": "geladen/nieuw.md"}))
        .await;
    assert!(read.to_string().contains("ZQXROUTE geladen"), "{read}");
    drop(t);
}
