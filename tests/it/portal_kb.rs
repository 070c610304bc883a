//! The knowledge base and audit log in the portal: browse, upload (text and binary), version
//! history, downloads, and who may see what.

use crate::fixture::TestServer;
use crate::fixture::{Browser, Page};

/// A knowledge-base upload as the portal's form sends it.
async fn upload(
    b: &mut Browser<'_>,
    slug: &str,
    csrf: &str,
    folder: &str,
    name: &str,
    bytes: &[u8],
) -> Page {
    b.multipart(
        &format!("/portal/o/{slug}/kb/upload"),
        &[("csrf_token", csrf), ("folder", folder)],
        &[(name, "application/octet-stream", bytes)],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browse_upload_versions_and_download() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let mut b = Browser::new(&t);
    let p = b.login(&s, &format!("/portal/o/{slug}/kb")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("id=\"upload-form\"") && p.body.contains("/mcp/kennisbank"),
        "{}",
        p.body
    );
    let csrf = p.csrf();

    // Without the CSRF token nothing is stored.
    let bad = upload(&mut b, &slug, "forged", "docs", "x.md", b"x").await;
    assert_eq!(bad.status, 403, "{}", bad.body);

    let pdf = b"%PDF-1.4 \x00\x01\x02 tekening";
    let up = upload(&mut b, &slug, &csrf, "docs", "gevel.pdf", pdf).await;
    assert_eq!(up.status, 303, "{}", up.body);
    assert_eq!(
        up.location.as_deref(),
        Some(format!("/portal/o/{slug}/kb?path=docs").as_str())
    );
    for content in [
        "Kozijnen bestellen bij Noord",
        "Kozijnen bestellen bij Zuid",
    ] {
        let up = upload(
            &mut b,
            &slug,
            &csrf,
            "docs",
            "notitie.md",
            content.as_bytes(),
        )
        .await;
        assert_eq!(up.status, 303, "{}", up.body);
    }
    let listing = b.get(&format!("/portal/o/{slug}/kb?path=docs")).await;
    assert!(
        listing.body.contains("gevel.pdf") && listing.body.contains("notitie.md"),
        "{}",
        listing.body
    );

    let doc = b.get(&format!("/portal/o/{slug}/kb/docs/notitie.md")).await;
    assert_eq!(doc.status, 200);
    assert!(doc.body.contains("Zuid"), "{}", doc.body);
    let versions = &doc.body[doc.body.find("id=\"versions\"").unwrap()..];
    let links: Vec<&str> = versions
        .match_indices("href=\"/files/")
        .map(|(i, _)| {
            let rest = &versions[i + 6..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    assert_eq!(links.len(), 2, "one download per version");
    // Newest first: the second link is version 1.
    let v1 = t
        .client
        .get(t.url(links[1]))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(v1, "Kozijnen bestellen bij Noord");

    // What the portal stores, the connector searches.
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    let found = mcp
        .ok(
            "kennisbank_search",
            serde_json::json!({"query": "kozijnen zuid"}),
        )
        .await;
    assert_eq!(found["results"][0]["path"], "docs/notitie.md");
    let read = mcp
        .ok(
            "kennisbank_read",
            serde_json::json!({"path": "docs/gevel.pdf"}),
        )
        .await;
    assert_eq!(read["kind"], "binary");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outsiders_get_404_and_members_no_audit_log() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let other = t.seed("Ander BV", "bert@example.org");
    let slug = s.org.slug.clone();
    {
        let mut b = Browser::new(&t);
        b.login(&other, "/portal").await;
        assert_eq!(b.get(&format!("/portal/o/{slug}/kb")).await.status, 404);
        assert_eq!(b.get(&format!("/portal/o/{slug}/audit")).await.status, 404);
    }
    // A plain member sees the knowledge base but not the audit log.
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
    b.login(&other, "/portal").await;
    assert_eq!(b.get(&format!("/portal/o/{slug}/kb")).await.status, 200);
    assert_eq!(b.get(&format!("/portal/o/{slug}/audit")).await.status, 403);
    // An admin sees the audit log with the calls made (before any, only the admin actions:
    // the operator added the member).
    let mut admin = Browser::new(&t);
    let p = admin.login(&s, &format!("/portal/o/{slug}/audit")).await;
    assert!(p.body.contains("member.add") && !p.body.contains("kennisbank_list"));
    let mcp = t.mcp(&t.grant(&s, &["kennisbank"]));
    mcp.ok("kennisbank_list", serde_json::json!({})).await;
    app.batch.flush();
    let p = admin.get(&format!("/portal/o/{slug}/audit")).await;
    assert_eq!(p.status, 200);
    assert!(
        p.body.contains("id=\"audit\"") && p.body.contains("kennisbank_list"),
        "{}",
        p.body
    );
    // Which assistant made the call: the client's name (here its id: it never registered).
    let row = &p.body[p.body.find("<tbody>").unwrap()..];
    assert!(row.contains("<td>test-client</td>"), "{row}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_read_markdown_safely_compare_versions_and_upload_several_files() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let mut b = Browser::new(&t);
    let p = b.login(&s, &format!("/portal/o/{slug}/kb")).await;
    assert!(p.body.contains("id=\"kb-search-form\""), "{}", p.body);
    let csrf = p.csrf();
    // Two files in one upload.
    let md = b"# Kozijnen\n\nHet **kozijn** is van hout.\n\n<script>alert(1)</script>\n\n[x](javascript:alert(2))\n";
    let p = b
        .multipart(
            &format!("/portal/o/{slug}/kb/upload"),
            &[("csrf_token", &csrf), ("folder", "handboek")],
            &[
                ("kozijn.md", "text/markdown", md),
                (
                    "notities.txt",
                    "text/plain",
                    b"eerste regel\nkozijnmaat 120 <b>cm</b>\n",
                ),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);

    // The connector's search, with the line and snippet.
    let p = b.get(&format!("/portal/o/{slug}/kb?q=kozijnmaat")).await;
    assert_eq!(p.status, 200);
    assert!(p.body.contains("id=\"kb-search-form\""));
    assert!(p.body.contains("handboek/notities.txt"), "{}", p.body);
    assert!(
        p.body.contains("/kb/handboek/notities.txt#L2\""),
        "line of the hit: {}",
        p.body
    );
    // The matched words are marked in the snippet, the rest stays escaped text.
    assert!(
        p.body
            .contains("<mark>kozijnmaat</mark> 120 &lt;b&gt;cm&lt;/b&gt;"),
        "marked snippet: {}",
        p.body
    );
    // A hit in Markdown leads to its text line by line, where the line is.
    let p = b.get(&format!("/portal/o/{slug}/kb?q=hout")).await;
    assert!(
        p.body.contains("/kb/handboek/kozijn.md?lines=1#L3\""),
        "{}",
        p.body
    );
    let p = b
        .get(&format!("/portal/o/{slug}/kb/handboek/kozijn.md?lines=1"))
        .await;
    assert!(
        p.body
            .contains("<span class=\"line\" id=\"L3\">Het **kozijn** is van hout."),
        "{}",
        p.body
    );
    assert!(!p.body.contains("<script") && p.body.contains("&lt;script&gt;"));
    // Only in a folder, when asked: a folder's page offers it, unticked.
    t.put_doc(&s, "elders/maten.txt", "kozijnmaat 90 cm\n");
    let p = b.get(&format!("/portal/o/{slug}/kb?path=handboek")).await;
    assert!(
        p.body.contains("name=\"path\" value=\"handboek\"")
            && !p.body.contains("value=\"handboek\" checked"),
        "{}",
        p.body
    );
    let p = b.get(&format!("/portal/o/{slug}/kb?q=kozijnmaat")).await;
    assert!(p.body.contains("elders/maten.txt") && p.body.contains("handboek/notities.txt"));
    let p = b
        .get(&format!("/portal/o/{slug}/kb?q=kozijnmaat&path=handboek"))
        .await;
    assert!(
        p.body.contains("handboek/notities.txt") && !p.body.contains("elders/maten.txt"),
        "{}",
        p.body
    );
    assert!(
        p.body.contains("name=\"path\" value=\"handboek\" checked"),
        "{}",
        p.body
    );
    let p = b.get(&format!("/portal/o/{slug}/kb?q=x")).await;
    assert!(
        p.body.contains("id=\"error\""),
        "too short a query is explained"
    );

    // Markdown rendered; raw HTML and script links never reach the page.
    let p = b
        .get(&format!("/portal/o/{slug}/kb/handboek/kozijn.md"))
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("<strong>kozijn</strong>"), "{}", p.body);
    assert!(!p.body.contains("<script"), "{}", p.body);
    assert!(p.body.contains("&lt;script&gt;"));
    assert!(!p.body.contains("javascript:"));
    assert!(p.body.contains("id=\"kb-search-form\""));
    // Plain text stays text.
    let p = b
        .get(&format!("/portal/o/{slug}/kb/handboek/notities.txt"))
        .await;
    assert!(p.body.contains("&lt;b&gt;cm&lt;/b&gt;"), "{}", p.body);
    assert!(p.body.contains("id=\"L2\">kozijnmaat"), "{}", p.body);
    // The old address still leads there.
    let p = b
        .get(&format!(
            "/portal/o/{slug}/kb/doc?path=handboek/notities.txt"
        ))
        .await;
    assert_eq!(
        p.location.as_deref(),
        Some(format!("/portal/o/{slug}/kb/handboek/notities.txt").as_str())
    );

    // A second version; who wrote each, and the diff.
    let p = b
        .multipart(
            &format!("/portal/o/{slug}/kb/upload"),
            &[("csrf_token", &csrf), ("folder", "handboek")],
            &[(
                "notities.txt",
                "text/plain",
                b"eerste regel\nkozijnmaat 140 cm\n",
            )],
        )
        .await;
    assert_eq!(p.status, 303);
    let p = b
        .get(&format!(
            "/portal/o/{slug}/kb/handboek/notities.txt?from=1&to=2"
        ))
        .await;
    assert!(p.body.contains(&s.person.email), "author shown: {}", p.body);
    assert!(
        p.body.contains("- kozijnmaat 120 &lt;b&gt;cm&lt;/b&gt;"),
        "{}",
        p.body
    );
    assert!(p.body.contains("+ kozijnmaat 140 cm"), "{}", p.body);

    // Styles come from the one stylesheet; the CSP allows nothing inline.
    let csp = p.headers["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.starts_with("default-src 'none'; style-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    // No page needs a script, and none may run one.
    assert!(!csp.contains("script-src"), "{csp}");
    assert!(!p.body.contains("<script"), "{}", p.body);
    assert!(!p.body.contains("<style") && !p.body.contains("style=\""));
    let css = t
        .client
        .get(t.url("/portal/assets/style.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_speak_dutch_when_asked_and_the_person_can_choose() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let login = |lang: &'static str| {
        t.client
            .get(t.url("/login"))
            .header("accept-language", lang)
            .send()
    };
    let nl = login("nl-NL,nl;q=0.9,en;q=0.5")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        nl.contains("<html lang=\"nl\"") && nl.contains("Inloggen"),
        "{nl}"
    );
    let en = login("en-GB").await.unwrap().text().await.unwrap();
    assert!(
        en.contains("<html lang=\"en\"") && en.contains("Log in"),
        "{en}"
    );

    // The person's choice wins over the browser.
    let mut b = Browser::new(&t);
    let p = b.login(&s, "/portal/account").await;
    assert!(p.body.contains("id=\"language-form\""), "{}", p.body);
    let p = b
        .post(
            "/portal/account/language",
            &[("csrf_token", &p.csrf()), ("language", "nl")],
        )
        .await;
    assert_eq!(p.status, 303);
    let p = b.get("/portal").await;
    assert!(
        p.body.contains("<html lang=\"nl\"") && p.body.contains("Uw organisaties"),
        "{}",
        p.body
    );
    let p = b
        .post(
            "/portal/account/language",
            &[("csrf_token", &p.csrf()), ("language", "xx")],
        )
        .await;
    assert_eq!(p.status, 400, "unknown language refused");
    let p = b.get("/portal").await;
    assert!(
        p.body.contains("<html lang=\"nl\""),
        "unchanged after a refusal"
    );
    t.stop().await;
}
