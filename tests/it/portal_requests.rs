//! Apps and feature requests in the portal: apps (admins change them, members look), filing a
//! request, a request's page with conversation, questions, replies, attachments and settings,
//! and an outsider who learns nothing even with the right ids.

use kennis::agents::AgentEvent;
use kennis::requests::apps::{self, AppStatus};
use kennis::requests::feature::{self, Filter, NewRequest};
use kennis::requests::{self as requests, Request, RequestError, Role};

use crate::fixture::{Browser, Page};
use crate::fixture::{Seeded, TestServer};

/// A multipart POST as a browser sends it: text fields, then at most one file.
async fn multipart(
    b: &mut Browser<'_>,
    path: &str,
    fields: &[(&str, &str)],
    file: Option<(&str, &str, &[u8])>,
) -> Page {
    let files: Vec<(&str, &str, &[u8])> = file.into_iter().collect();
    b.multipart(path, fields, &files).await
}

/// A GET returning the raw bytes (downloads).
async fn get_bytes(b: &Browser<'_>, path: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    b.get_bytes(path).await
}

fn add_plain_member(t: &TestServer, org: &Seeded, who: &Seeded) {
    let app = t.app();
    kennis::identity::add_member(
        &app.store,
        &org.org.slug,
        &who.person.email,
        kennis::identity::Role::Member,
        false,
        app.clock.now(),
    )
    .unwrap();
}

fn add_app(t: &TestServer, s: &Seeded, name: &str, status: AppStatus) -> u64 {
    let app = t.app();
    apps::add(&app.store, s.org.id, name, status, app.clock.now())
        .unwrap()
        .app_id
}

fn file_request(t: &TestServer, s: &Seeded, app_id: u64, title: &str, description: &str) -> u64 {
    kennis::requests::service::create(
        t.app(),
        s.org.id,
        s.person.id,
        &NewRequest {
            app_id,
            title: title.into(),
            description: description.into(),
        },
    )
    .unwrap()
    .id
}

fn stored(t: &TestServer, s: &Seeded, id: u64) -> Request {
    t.app()
        .store
        .read(|tx| feature::get(tx, s.org.id, id))
        .unwrap()
}

fn total(t: &TestServer, s: &Seeded) -> usize {
    t.app()
        .store
        .read(|tx| {
            feature::list(
                tx,
                s.org.id,
                &Filter {
                    page: 1,
                    ..Filter::default()
                },
            )
        })
        .unwrap()
        .total
}

fn app_statuses(t: &TestServer, s: &Seeded) -> Vec<(String, AppStatus)> {
    t.app()
        .store
        .read(|tx| apps::list(tx, s.org.id))
        .unwrap()
        .into_iter()
        .map(|a| (a.name, a.status))
        .collect()
}

/// Applies agent events to a request as the agent runtime would.
fn agent_says(t: &TestServer, s: &Seeded, id: u64, events: &[AgentEvent]) {
    let app = t.app();
    let now = app.clock.now();
    app.store
        .write(|tx| {
            let mut r = feature::get(tx, s.org.id, id)?;
            for e in events {
                feature::apply_event(&mut r, "Bouwbot", e, now).unwrap();
            }
            requests::put(tx, &r)?;
            Ok::<_, RequestError>(())
        })
        .unwrap();
}

/// The part of a page from `<form id="…"` to its closing tag.
fn form_of<'p>(body: &'p str, id: &str) -> &'p str {
    let start = body
        .find(&format!("<form id=\"{id}\""))
        .unwrap_or_else(|| panic!("no form #{id} in {body}"));
    let rest = &body[start..];
    &rest[..rest.find("</form>").unwrap()]
}

fn id_from_location(p: &Page) -> u64 {
    let loc = p.location.as_deref().expect("a redirect");
    loc.rsplit('/').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_add_apps_and_change_their_status_members_only_look() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let other = t.seed("Ander BV", "bert@example.org");
    let slug = s.org.slug.clone();
    let base = format!("/portal/o/{slug}/apps");
    let mut admin = Browser::new(&t);
    let p = admin.login(&s, &base).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("id=\"app-form\""), "{}", p.body);
    assert!(
        p.body
            .contains(&format!("href=\"/portal/o/{slug}/requests\"")),
        "navigation links the requests"
    );
    let csrf = p.csrf();

    let no_csrf = admin
        .post(&base, &[("name", "Planner"), ("status", "live")])
        .await;
    assert_eq!(no_csrf.status, 403);
    assert!(
        app_statuses(&t, &s).is_empty(),
        "nothing stored without CSRF"
    );

    for (name, status) in [("Planner", "live"), ("Concept", "draft")] {
        let p = admin
            .post(
                &base,
                &[("csrf_token", &csrf), ("name", name), ("status", status)],
            )
            .await;
        assert_eq!(p.status, 303, "{}", p.body);
        assert_eq!(p.location.as_deref(), Some(base.as_str()));
    }
    for (name, status, says) in [
        ("", "live", "an app name of 1 to 100 characters"),
        ("Kassa", "retired", "Choose live, draft or archived."),
        ("planner", "live", "already has an app named"),
    ] {
        let p = admin
            .post(
                &base,
                &[("csrf_token", &csrf), ("name", name), ("status", status)],
            )
            .await;
        assert_eq!(p.status, 400, "{name}: {}", p.body);
        assert!(p.body.contains(says), "{name}: {}", p.body);
    }
    assert_eq!(
        app_statuses(&t, &s),
        vec![
            ("Planner".to_owned(), AppStatus::Live),
            ("Concept".to_owned(), AppStatus::Draft)
        ]
    );

    let p = admin.get(&base).await;
    let table = &p.body[p.body.find("id=\"apps\"").unwrap()..];
    assert!(
        table.contains("Planner") && table.contains("Concept") && table.contains(">yes<"),
        "{}",
        p.body
    );
    let planner = t.app().store.read(|tx| apps::list(tx, s.org.id)).unwrap()[0].app_id;
    let p = admin
        .post(
            &format!("{base}/{planner}/status"),
            &[("csrf_token", &csrf), ("status", "archived")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(app_statuses(&t, &s)[0].1, AppStatus::Archived);
    let p = admin
        .post(
            &format!("{base}/{planner}/status"),
            &[("csrf_token", &csrf), ("status", "gone")],
        )
        .await;
    assert_eq!(p.status, 400);
    assert_eq!(app_statuses(&t, &s)[0].1, AppStatus::Archived);

    // Another organisation's app id is "no such app" here.
    let foreign = add_app(&t, &other, "Vreemd", AppStatus::Live);
    let p = admin
        .post(
            &format!("{base}/{foreign}/status"),
            &[("csrf_token", &csrf), ("status", "archived")],
        )
        .await;
    assert_eq!(p.status, 404, "{}", p.body);
    assert_eq!(app_statuses(&t, &other)[0].1, AppStatus::Live);

    // An outsider gets 404 for everything.
    let mut outsider = Browser::new(&t);
    let op = outsider.login(&other, "/portal").await;
    let ocsrf = op.csrf();
    assert_eq!(outsider.get(&base).await.status, 404);
    let p = outsider
        .post(
            &base,
            &[
                ("csrf_token", &ocsrf),
                ("name", "Inbraak"),
                ("status", "live"),
            ],
        )
        .await;
    assert_eq!(p.status, 404);

    // A plain member sees the apps but may not change them.
    add_plain_member(&t, &s, &other);
    let p = outsider.get(&base).await;
    assert_eq!(p.status, 200);
    assert!(p.body.contains("Concept") && !p.body.contains("id=\"app-form\""));
    let p = outsider
        .post(
            &base,
            &[
                ("csrf_token", &ocsrf),
                ("name", "Inbraak"),
                ("status", "live"),
            ],
        )
        .await;
    assert_eq!(p.status, 403);
    let p = outsider
        .post(
            &format!("{base}/{planner}/status"),
            &[("csrf_token", &ocsrf), ("status", "live")],
        )
        .await;
    assert_eq!(p.status, 403);
    assert_eq!(app_statuses(&t, &s).len(), 2);
    assert_eq!(app_statuses(&t, &s)[0].1, AppStatus::Archived);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filing_listing_filtering_and_refusals() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let colleague = t.seed("Ander BV", "bert@example.org");
    add_plain_member(&t, &s, &colleague);
    let slug = s.org.slug.clone();
    let base = format!("/portal/o/{slug}/requests");
    let live = add_app(&t, &s, "Planner", AppStatus::Live);
    let draft = add_app(&t, &s, "Concept", AppStatus::Draft);
    let archived = add_app(&t, &s, "Oud", AppStatus::Archived);

    let mut b = Browser::new(&t);
    let p = b.login(&s, &base).await;
    assert_eq!(p.status, 200, "{}", p.body);
    let form = form_of(&p.body, "request-form");
    assert!(form.contains(&format!("value=\"{live}\"")));
    assert!(
        !form.contains(&format!("value=\"{draft}\""))
            && !form.contains(&format!("value=\"{archived}\"")),
        "only live apps are offered: {form}"
    );
    let csrf = p.csrf();

    // Refusals: nothing stored, the form keeps what was typed.
    for (app_id, title, status, says) in [
        (draft, "Exporteren".to_owned(), 409, "is a draft"),
        (archived, "Exporteren".to_owned(), 409, "is archived"),
        (live, "x".repeat(201), 400, "at most 200"),
        (live, "  ".to_owned(), 400, "Fill in the title."),
        (987_654, "Exporteren".to_owned(), 400, "Choose one of"),
    ] {
        let p = b
            .post(
                &base,
                &[
                    ("csrf_token", &csrf),
                    ("app_id", &app_id.to_string()),
                    ("title", &title),
                    ("description", "Graag een CSV-export"),
                ],
            )
            .await;
        assert_eq!(p.status, status, "{title}: {}", p.body);
        assert!(p.body.contains(says), "{says}: {}", p.body);
        assert!(p.body.contains("Graag een CSV-export"), "draft kept");
    }
    let p = b
        .post(
            &base,
            &[
                ("app_id", &live.to_string()),
                ("title", "Zonder token"),
                ("description", "x"),
            ],
        )
        .await;
    assert_eq!(p.status, 403);
    assert_eq!(total(&t, &s), 0, "no refusal stored anything");

    let p = b
        .post(
            &base,
            &[
                ("csrf_token", &csrf),
                ("app_id", &live.to_string()),
                ("title", &"T".repeat(200)),
                ("description", "Exporteer de planning naar CSV"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let first = id_from_location(&p);
    assert_eq!(
        p.location.as_deref(),
        Some(format!("{base}/{first}").as_str())
    );
    let r = stored(&t, &s, first);
    assert_eq!(r.author_id, Some(s.person.id));
    assert_eq!(r.app_id, Some(live));
    assert_eq!(r.status.as_str(), "pending", "no feature agent: it waits");

    // 26 more by the admin, one by the colleague: 28 in all, two pages.
    for i in 0..26 {
        file_request(&t, &s, live, &format!("Verzoek {i}"), "Iets anders");
    }
    let theirs = file_request(
        &t,
        &colleague_in(&s, &colleague),
        live,
        "Ćafé-modus",
        "Donker thema",
    );
    let p = b.get(&base).await;
    assert!(p.body.contains("28 requests"), "{}", p.body);
    let rows = |body: &str| {
        body.matches("<tr><td class=\"num\" data-label=\"No.\">")
            .count()
    };
    assert_eq!(rows(&p.body), 25, "25 per page");
    let newest = p.body.find(&format!(">{theirs}<")).unwrap();
    let older = p.body.find(">Verzoek 25<").unwrap();
    assert!(newest < older, "newest first");
    assert!(p.body.contains("rel=\"next\""), "{}", p.body);
    let p2 = b.get(&format!("{base}?page=2")).await;
    assert_eq!(rows(&p2.body), 3);
    assert!(p2.body.contains(&format!(">{first}<")) && !p2.body.contains("rel=\"next\""));
    assert!(p2.body.contains("rel=\"prev\""));

    let p = b.get(&format!("{base}?search=cafe")).await;
    assert!(
        p.body.contains("1 request<") && p.body.contains("Ćafé-modus"),
        "{}",
        p.body
    );
    let p = b.get(&format!("{base}?mine=1&search=cafe")).await;
    assert!(p.body.contains("0 requests"), "{}", p.body);
    let p = b.get(&format!("{base}?status=pending&app_id={live}")).await;
    assert!(p.body.contains("28 requests"), "{}", p.body);
    let p = b.get(&format!("{base}?status=completed")).await;
    assert!(p.body.contains("0 requests"), "{}", p.body);
    for (q, status, says) in [
        (
            "status=queued",
            400,
            "“queued” is not a status of a feature request.",
        ),
        ("page=0", 400, "the pages run from 1 to 1,000"),
        ("page=1001", 400, "the pages run from 1 to 1,000"),
        ("app_id=abc", 400, "“abc” is not an app’s number."),
        (
            &format!("search={}", "z".repeat(201)),
            400,
            "Too long: the search has 201 characters; at most 200 are allowed.",
        ),
    ] {
        let p = b.get(&format!("{base}?{q}")).await;
        assert_eq!(p.status, status, "{q}: {}", p.body);
        assert!(p.body.contains(says), "{q}: {}", p.body);
    }
    // The colleague's "mine" holds their one request.
    let mut c = Browser::new(&t);
    let p = c.login(&colleague, &format!("{base}?mine=1")).await;
    assert!(
        p.body.contains("1 request<") && p.body.contains("Ćafé-modus"),
        "{}",
        p.body
    );
    t.stop().await;
}

/// `who` acting inside `org`'s organisation.
fn colleague_in(org: &Seeded, who: &Seeded) -> Seeded {
    Seeded {
        org: org.org.clone(),
        person: who.person.clone(),
        password: who.password.clone(),
        totp_secret: who.totp_secret.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_page_shows_the_conversation_and_takes_answers_and_replies() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let live = add_app(&t, &s, "Planner", AppStatus::Live);
    let id = file_request(
        &t,
        &s,
        live,
        "Export <naar> CSV",
        "Alle <b>taken</b> exporteren",
    );
    agent_says(
        &t,
        &s,
        id,
        &[
            AgentEvent::Message {
                text: "Ik kijk ernaar <script>alert(1)</script>".into(),
            },
            AgentEvent::Question {
                text: "Welk scheidingsteken?".into(),
                options: vec![
                    serde_json::json!({"option_id": "komma", "label": "Komma"}),
                    serde_json::json!({"option_id": "puntkomma", "label": "Puntkomma"}),
                ],
                allow_other: true,
            },
        ],
    );
    let page_url = format!("/portal/o/{slug}/requests/{id}");
    let mut b = Browser::new(&t);
    let p = b.login(&s, &page_url).await;
    assert_eq!(p.status, 200, "{}", p.body);
    for want in [
        "Export &lt;naar&gt; CSV",
        "Alle &lt;b&gt;taken&lt;/b&gt; exporteren",
        "Ik kijk ernaar &lt;script&gt;",
        "Bouwbot",
        "clarifying",
        "Planner",
        "id=\"answer-1\"",
        "name=\"option_ids\" value=\"puntkomma\"",
        "name=\"other\"",
        "id=\"reply-form\"",
    ] {
        assert!(p.body.contains(want), "{want}: {}", p.body);
    }
    assert!(!p.body.contains("<script>alert"));
    let csrf = p.csrf();
    let reply = format!("{page_url}/reply");

    // Refused answers change nothing.
    for (form, says) in [
        (
            vec![("question_id", "1"), ("option_ids", "tab")],
            "has no option “tab”",
        ),
        (
            vec![("question_id", "9"), ("option_ids", "komma")],
            "has no question 9",
        ),
        (
            vec![("question_id", "1")],
            "Choose an answer to question 1.",
        ),
        (
            vec![("message", "   ")],
            "Write a message or answer a question.",
        ),
    ] {
        let mut f = vec![("csrf_token", csrf.as_str())];
        f.extend(form);
        let p = b.post(&reply, &f).await;
        assert_eq!(p.status, 400, "{says}: {}", p.body);
        assert!(p.body.contains(says), "{says}: {}", p.body);
    }
    let p = b
        .post(&reply, &[("question_id", "1"), ("option_ids", "komma")])
        .await;
    assert_eq!(p.status, 403, "no CSRF token");
    let r = stored(&t, &s, id);
    assert_eq!(r.open_questions().count(), 1);
    assert_eq!(r.conversation.len(), 2);

    // The question's own form answers it.
    let p = b
        .post(
            &reply,
            &[
                ("csrf_token", &csrf),
                ("question_id", "1"),
                ("option_ids", "puntkomma"),
                ("other", "of een tab"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let r = stored(&t, &s, id);
    assert_eq!(r.open_questions().count(), 0);
    assert_eq!(r.answers[0].option_ids, vec!["puntkomma"]);
    assert_eq!(r.answers[0].other.as_deref(), Some("of een tab"));
    let p = b.get(&page_url).await;
    assert!(!p.body.contains("id=\"answer-1\""), "answered: {}", p.body);
    assert!(
        p.body.contains("Puntkomma; other: of een tab"),
        "{}",
        p.body
    );

    // The reply form: a message.
    let p = b
        .post(
            &reply,
            &[("csrf_token", &csrf), ("message", "Graag ook <Excel>")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let r = stored(&t, &s, id);
    let last = r.conversation.last().unwrap();
    let annie = t
        .app()
        .store
        .read(|tx| kennis::requests::service::person_label(tx, s.person.id))
        .unwrap();
    assert_eq!(
        (last.role, last.text.as_str(), last.author.as_str()),
        (Role::Person, "Graag ook <Excel>", annie.as_str())
    );
    let p = b.get(&page_url).await;
    assert!(p.body.contains("Graag ook &lt;Excel&gt;"), "{}", p.body);

    // A second question, answered together with a message through the reply form.
    agent_says(
        &t,
        &s,
        id,
        &[AgentEvent::Question {
            text: "Welke kolommen?".into(),
            options: vec![
                serde_json::json!({"option_id": "naam", "label": "Naam"}),
                serde_json::json!({"option_id": "datum", "label": "Datum"}),
            ],
            allow_other: false,
        }],
    );
    let p = b.get(&page_url).await;
    let form = form_of(&p.body, "reply-form");
    assert!(
        form.contains("value=\"datum\"") && !form.contains("name=\"other\""),
        "{form}"
    );
    let p = b
        .post(
            &reply,
            &[
                ("csrf_token", &csrf),
                ("message", "Beide graag"),
                ("question_id", "2"),
                ("option_ids", "naam"),
                ("option_ids", "datum"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let r = stored(&t, &s, id);
    assert_eq!(r.open_questions().count(), 0);
    assert_eq!(r.answers[1].option_ids, vec!["naam", "datum"]);
    assert!(r.conversation.iter().any(|m| m.text == "Beide graag"));

    // A completed request takes no more replies.
    agent_says(
        &t,
        &s,
        id,
        &[
            AgentEvent::Status {
                status: "implementing".into(),
            },
            AgentEvent::Status {
                status: "completed".into(),
            },
        ],
    );
    let p = b.get(&page_url).await;
    assert!(
        p.body.contains("completed") && !p.body.contains("id=\"reply-form\""),
        "{}",
        p.body
    );
    let p = b
        .post(&reply, &[("csrf_token", &csrf), ("message", "Nog iets")])
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("takes no more replies"), "{}", p.body);
    assert!(
        !stored(&t, &s, id)
            .conversation
            .iter()
            .any(|m| m.text == "Nog iets")
    );
    t.stop().await;
}

/// An upload that cannot be read is refused on the request's page (400, saying so); when the
/// request cannot be read either, because the store fails, that failure is the answer (500),
/// not "no such request".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_upload_is_refused_and_a_failing_store_is_not_a_missing_request() {
    use kennis::store::{REQUESTS, key};
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let live = add_app(&t, &s, "Planner", AppStatus::Live);
    let id = file_request(&t, &s, live, "Export", "CSV");
    let page_url = format!("/portal/o/{}/requests/{id}", s.org.slug);
    let upload_url = format!("{page_url}/attachments");
    let mut b = Browser::new(&t);
    assert_eq!(b.login(&s, &page_url).await.status, 200);
    // A part that never ends: the body breaks off before its closing boundary.
    let cut_short = || {
        b"--X\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.pdf\"\r\n\r\n%PDF"
            .to_vec()
    };
    let multipart = "multipart/form-data; boundary=X";
    let p = b.post_raw(&upload_url, multipart, cut_short()).await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(
        p.body.contains("The upload could not be read"),
        "{}",
        p.body
    );
    let k = key::id(id);
    let kept = t.damage_record(REQUESTS, &k);
    let p = b.post_raw(&upload_url, multipart, cut_short()).await;
    assert_eq!(p.status, 500, "{}", p.body);
    assert!(!p.body.contains("No such"), "{}", p.body);
    t.restore_record(REQUESTS, &k, &kept);
    assert_eq!(b.get(&page_url).await.status, 200);
    // Neither upload stored anything.
    let attachments = t
        .app()
        .store
        .read(|tx| kennis::requests::attachments::list(tx, s.org.id, id))
        .unwrap();
    assert!(attachments.is_empty(), "{attachments:?}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_upload_download_limit_delete_and_isolation() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let other = t.seed("Ander BV", "bert@example.org");
    let slug = s.org.slug.clone();
    let live = add_app(&t, &s, "Planner", AppStatus::Live);
    let id = file_request(&t, &s, live, "Export", "CSV");
    let page_url = format!("/portal/o/{slug}/requests/{id}");
    let upload_url = format!("{page_url}/attachments");
    let count = |t: &TestServer| {
        t.app()
            .store
            .read(|tx| kennis::requests::attachments::list(tx, s.org.id, id))
            .unwrap()
            .len()
    };

    let mut b = Browser::new(&t);
    let p = b.login(&s, &page_url).await;
    assert!(p.body.contains("id=\"attachment-form\""), "{}", p.body);
    assert!(p.body.contains("enctype=\"multipart/form-data\""));
    let csrf = p.csrf();

    let pdf: &[u8] = b"%PDF-1.4 \x00\x01\xff schets";
    let p = multipart(
        &mut b,
        &upload_url,
        &[("csrf_token", "vervalst")],
        Some(("schets.pdf", "application/pdf", pdf)),
    )
    .await;
    assert_eq!(p.status, 403);
    assert_eq!(count(&t), 0);

    let p = multipart(
        &mut b,
        &upload_url,
        &[("csrf_token", &csrf)],
        Some(("../tmp/plan één.pdf", "application/pdf", pdf)),
    )
    .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let p = b.get(&page_url).await;
    let at = p.body.find(&format!("href=\"{upload_url}/")).unwrap();
    let rest = &p.body[at + 6..];
    let link = rest[..rest.find('"').unwrap()].to_owned();
    assert!(p.body.contains(">plan één.pdf<"), "{}", p.body);

    let (status, headers, bytes) = get_bytes(&b, &link).await;
    assert_eq!(status, 200);
    assert_eq!(bytes, pdf);
    assert_eq!(headers["content-type"], "application/pdf");
    assert_eq!(
        headers["content-disposition"],
        "attachment; filename=\"plan __n.pdf\"; filename*=UTF-8''plan%20%C3%A9%C3%A9n.pdf"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("sandbox")
    );
    assert_eq!(headers["x-frame-options"], "DENY");

    // Exactly 10 MiB is accepted, one byte more is refused with a clear error.
    let max = kennis::requests::attachments::MAX_BYTES;
    let big = vec![b'a'; max + 1];
    let p = multipart(
        &mut b,
        &upload_url,
        &[("csrf_token", &csrf)],
        Some(("groot.bin", "application/octet-stream", &big)),
    )
    .await;
    assert_eq!(p.status, 413, "{}", &p.body[..p.body.len().min(2000)]);
    assert!(p.body.contains("larger than 10 MiB"), "{}", p.body);
    assert_eq!(count(&t), 1);
    // Past the route's body limit the answer is the same.
    let huge = vec![b'a'; max + 200 * 1024];
    let p = multipart(
        &mut b,
        &upload_url,
        &[("csrf_token", &csrf)],
        Some(("enorm.bin", "application/octet-stream", &huge)),
    )
    .await;
    assert_eq!(p.status, 413, "{}", &p.body[..p.body.len().min(2000)]);
    assert!(p.body.contains("larger than 10 MiB"), "{}", p.body);
    let p = multipart(
        &mut b,
        &upload_url,
        &[("csrf_token", &csrf)],
        Some(("precies.bin", "application/octet-stream", &big[..max])),
    )
    .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(count(&t), 2);
    let p = multipart(&mut b, &upload_url, &[("csrf_token", &csrf)], None).await;
    assert_eq!(p.status, 400);
    assert!(p.body.contains("Choose a file"), "{}", p.body);

    // Another organisation's person gets 404 for everything, by either slug.
    let mut o = Browser::new(&t);
    let op = o.login(&other, "/portal").await;
    let ocsrf = op.csrf();
    let own = format!("/portal/o/{}/requests/{id}", other.org.slug);
    let att = link.rsplit('/').next().unwrap().to_owned();
    for path in [
        page_url.clone(),
        link.clone(),
        own.clone(),
        format!("{own}/attachments/{att}"),
    ] {
        let (status, _, bytes) = get_bytes(&o, &path).await;
        assert_eq!(status, 404, "{path}");
        assert!(!bytes.windows(6).any(|w| w == b"schets"), "{path}");
    }
    for path in [upload_url.clone(), format!("{own}/attachments")] {
        let p = multipart(
            &mut o,
            &path,
            &[("csrf_token", &ocsrf)],
            Some(("x.txt", "text/plain", b"inbraak")),
        )
        .await;
        assert_eq!(p.status, 404, "{path}: {}", p.body);
    }
    for (path, form) in [
        (format!("{own}/reply"), vec![("message", "hallo")]),
        (
            format!("{own}/settings"),
            vec![("name", "x"), ("value", "y")],
        ),
        (format!("{own}/attachments/{att}/delete"), vec![]),
    ] {
        let mut f = vec![("csrf_token", ocsrf.as_str())];
        f.extend(form);
        assert_eq!(o.post(&path, &f).await.status, 404, "{path}");
    }
    assert_eq!(count(&t), 2);
    let r = stored(&t, &s, id);
    assert!(r.conversation.is_empty() && r.settings.is_empty());

    // Delete: without CSRF refused; with it the download is gone.
    let delete = format!("{link}/delete");
    assert_eq!(b.post(&delete, &[]).await.status, 403);
    assert_eq!(count(&t), 2);
    let p = b.post(&delete, &[("csrf_token", &csrf)]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(count(&t), 1);
    assert_eq!(get_bytes(&b, &link).await.0, 404);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_set_removed_and_checked() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let colleague = t.seed("Ander BV", "bert@example.org");
    add_plain_member(&t, &s, &colleague);
    let slug = s.org.slug.clone();
    let live = add_app(&t, &s, "Planner", AppStatus::Live);
    let id = file_request(&t, &s, live, "Export", "CSV");
    let page_url = format!("/portal/o/{slug}/requests/{id}");
    let settings = format!("{page_url}/settings");

    // Any member of the organisation may set them, not only admins.
    let mut b = Browser::new(&t);
    let p = b.login(&colleague, &page_url).await;
    assert!(p.body.contains("id=\"setting-form\""), "{}", p.body);
    let csrf = p.csrf();
    let p = b
        .post(
            &settings,
            &[("name", "deploy.target"), ("value", "staging")],
        )
        .await;
    assert_eq!(p.status, 403);
    assert!(stored(&t, &s, id).settings.is_empty());

    let p = b
        .post(
            &settings,
            &[
                ("csrf_token", &csrf),
                ("name", "deploy.target"),
                ("value", "staging <eu>"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(
        stored(&t, &s, id)
            .settings
            .get("deploy.target")
            .map(String::as_str),
        Some("staging <eu>")
    );
    let p = b.get(&page_url).await;
    assert!(
        p.body.contains("deploy.target") && p.body.contains("staging &lt;eu&gt;"),
        "{}",
        p.body
    );

    for (name, value) in [("Deploy Target", "x"), ("", "x"), ("ok", &"v".repeat(2001))] {
        let p = b
            .post(
                &settings,
                &[("csrf_token", &csrf), ("name", name), ("value", value)],
            )
            .await;
        assert_eq!(p.status, 400, "{name}: {}", p.body);
        assert!(p.body.contains("id=\"error\""), "{}", p.body);
    }
    assert_eq!(stored(&t, &s, id).settings.len(), 1);

    let p = b
        .post(
            &settings,
            &[
                ("csrf_token", &csrf),
                ("name", "deploy.target"),
                ("value", ""),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(stored(&t, &s, id).settings.is_empty());
    t.stop().await;
}
