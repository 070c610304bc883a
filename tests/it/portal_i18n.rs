//! Every portal page in Dutch (issue 14): a browser that asks for Dutch gets each page — the
//! login steps (password, second factor, terms), one-time links (invitation, reset), consent,
//! the organisation's pages (knowledge base, search, documents, trash, feature requests, apps,
//! connections, tokens, triggers, runs, members, audit), refusals and error pages — with
//! `<html lang="nl">`, a Dutch phrase of that page, and none of the English words the portal
//! shows when a string is left untranslated (in the text, the title, `aria-label`, `title`,
//! `placeholder`, `alt` and `data-label`; data in `<pre>`, `<code>` and `<textarea>` aside).
//! Dates and numbers are written the Dutch way. A few pages in English say their English.

use jiff::SignedDuration;
use kennis::agents::AgentEvent;
use kennis::requests::apps::{self, AppStatus};
use kennis::requests::feature::{self, NewRequest};
use kennis::requests::{self as requests, RequestError};

use crate::fixture::{Browser, Page, Seeded, TestServer};

const DUTCH: &str = "nl-NL,nl;q=0.9,en;q=0.5";

/// Words of the portal's English that Dutch pages never use (whole words, as written).
const ENGLISH: &[&str] = &[
    "the",
    "and",
    "your",
    "with",
    "are",
    "to",
    "Save",
    "Delete",
    "Remove",
    "Cancel",
    "Search",
    "Upload",
    "Send",
    "Answer",
    "Members",
    "Knowledge",
    "Connections",
    "Feature",
    "requests",
    "request",
    "Title",
    "Description",
    "Attachments",
    "Settings",
    "Name",
    "Value",
    "Version",
    "Versions",
    "Password",
    "Email",
    "Log",
    "never",
    "yes",
    "Role",
    "Last",
    "Started",
    "Result",
    "Events",
    "Instructions",
    "Conversation",
    "Reply",
    "Filed",
    "Updated",
    "Page",
    "Older",
    "Newer",
    "All",
    "Any",
    "Only",
    "Other",
    "Size",
    "Path",
    "Type",
    "Written",
    "Saved",
    "Compare",
    "Language",
    "Second",
    "Terms",
    "Invite",
    "invitation",
    "Not",
    "found",
    "Skip",
    "content",
    "Outcome",
    "Time",
    "Assistant",
    "Person",
    "Actions",
    "Create",
    "Add",
    "New",
    "Resume",
    "Pause",
    "Renew",
    "secret",
    "Kind",
    "Executor",
    "Timeout",
    "Cooldown",
    "State",
    "Projects",
    "Rollout",
    "ready",
    "pending",
    "queued",
    "running",
    "succeeded",
    "failed",
    "completed",
    "cancelled",
    "live",
    "draft",
    "archived",
    "Step",
    "error",
    "refused",
    "Choose",
    "Fill",
    "Give",
    "Too",
    "There",
    "This",
    "No",
    "Yes",
    "Jan",
    "Feb",
    "Mar",
    "Apr",
    "May",
    "Jun",
    "Jul",
    "Aug",
    "Sep",
    "Oct",
    "Nov",
    "Dec",
    "Back",
    "Continue",
    "Accept",
    "Join",
    "Organisation",
    "Approve",
    "Deny",
    "Filter",
    "File",
    "questions",
    "Question",
    "person",
    "By",
    "Uploaded",
    "admin",
    "member",
    "Audit",
];

/// What people read on a page: its text and the attributes that are read out or shown, without
/// the data in `<pre>`, `<code>` and `<textarea>` (documents, results, commands, drafts).
fn readable(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        out.push(' ');
        let tag_end = rest[lt..].find('>').map_or(rest.len(), |e| lt + e + 1);
        let tag = &rest[lt..tag_end];
        for attr in ["aria-label", "title", "placeholder", "alt", "data-label"] {
            let needle = format!(" {attr}=\"");
            if let Some(at) = tag.find(&needle) {
                let v = &tag[at + needle.len()..];
                out.push(' ');
                out.push_str(&v[..v.find('"').unwrap_or(v.len())]);
                out.push(' ');
            }
        }
        rest = &rest[tag_end..];
        for data in ["pre", "code", "textarea"] {
            if tag.starts_with(&format!("<{data}")) && !tag.ends_with("/>") {
                let close = format!("</{data}>");
                rest = rest.find(&close).map_or("", |c| &rest[c + close.len()..]);
            }
        }
    }
    out.push_str(rest);
    out.replace("&nbsp;", " ")
}

/// Checks a Dutch page: its language, a phrase it must say, and no English word.
fn dutch(p: &Page, what: &str, says: &str) {
    assert!(
        p.body.contains("<html lang=\"nl\""),
        "{what}: not in Dutch: {}",
        p.body
    );
    assert!(p.body.contains(says), "{what}: no “{says}”: {}", p.body);
    let text = readable(&p.body);
    let found: Vec<&str> = text
        .split(|c: char| !c.is_alphanumeric() && c != ':')
        .map(|w| w.trim_end_matches(':'))
        .filter(|w| ENGLISH.contains(w))
        .collect();
    assert!(
        found.is_empty(),
        "{what}: English words {found:?} in: {text}"
    );
}

/// Posts `fields` to `path` with the session's CSRF token (for forms whose page is elsewhere).
async fn post(b: &mut Browser<'_>, path: &str, fields: &[(&str, &str)]) -> Page {
    let csrf = b.get("/portal").await.csrf();
    let mut form = vec![("csrf_token", csrf.as_str())];
    form.extend_from_slice(fields);
    b.post(path, &form).await
}

fn english(p: &Page, what: &str, says: &str) {
    assert!(p.body.contains("<html lang=\"en\""), "{what}: {}", p.body);
    assert!(p.body.contains(says), "{what}: no “{says}”: {}", p.body);
}

/// An organisation with a document of two versions, an app with a feature request with an open
/// question and an attachment, a trigger with a finished run, and a connection that made a
/// call: (the admin, the app, the request, the run).
async fn organisation(t: &TestServer) -> (Seeded, u64, u64, u64) {
    let s = t.seed("Bouw BV", "annie@example.org");
    let app = t.app();
    let now = app.clock.now();
    t.put_doc(
        &s,
        "handboek/dakgoot.md",
        "# Dakgoot\n\nDe dakgoot wordt elk voorjaar schoongemaakt.\n",
    );
    kennis::kb::write(
        &app.store,
        &app.kb_index,
        kennis::kb::NewVersion {
            org_id: s.org.id,
            path: "handboek/dakgoot.md",
            bytes: "# Dakgoot\n\nDe dakgoot wordt elk najaar schoongemaakt.\n".as_bytes(),
            expect: kennis::kb::Expect::Any,
            by: Some(s.person.id),
            now,
        },
    )
    .unwrap();
    t.put_doc(&s, "handboek/maten.txt", &"Maat 12,5 cm.\n".repeat(107));
    let planner = apps::add(&app.store, s.org.id, "Planner", AppStatus::Live, now)
        .unwrap()
        .app_id;
    let request = kennis::requests::service::create(
        app,
        s.org.id,
        s.person.id,
        &NewRequest {
            app_id: planner,
            title: "Exporteren naar CSV".into(),
            description: "Graag een export van de planning.".into(),
        },
    )
    .unwrap()
    .id;
    let question = AgentEvent::Question {
        text: "Welk scheidingsteken?".into(),
        options: vec![
            serde_json::json!({"option_id": "puntkomma", "label": "Puntkomma"}),
            serde_json::json!({"option_id": "komma", "label": "Komma"}),
        ],
        allow_other: true,
    };
    app.store
        .write(|tx| {
            let mut r = feature::get(tx, s.org.id, request)?;
            feature::apply_event(&mut r, "Bouwbot", &question, now).unwrap();
            requests::put(tx, &r)?;
            Ok::<_, RequestError>(())
        })
        .unwrap();
    kennis::requests::attachments::add(
        &app.store,
        s.org.id,
        request,
        s.person.id,
        "schets.pdf",
        Some("application/pdf"),
        &[7u8; 2_500],
        now,
    )
    .unwrap();
    let (_, run) = t.finished_run(&s.org.slug, "Vat de offerte samen.").await;
    // An assistant's call, for the audit log.
    let token = t.grant(&s, &["kennisbank"]);
    t.mcp(&token)
        .ok(
            "kennisbank_read",
            serde_json::json!({"path": "handboek/dakgoot.md"}),
        )
        .await;
    app.batch.flush();
    (s, planner, request, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_speaks_dutch_to_a_dutch_browser() {
    let mut t = TestServer::start().await;
    let (s, planner, request, run) = organisation(&t).await;
    let slug = s.org.slug.clone();
    let o = format!("/portal/o/{slug}");
    let app = t.app().clone();

    // Before logging in: the login page, a wrong password, a form from elsewhere.
    let mut guest = Browser::speaking(&t, DUTCH);
    let p = guest.get("/login").await;
    dutch(&p, "login", "Inloggen");
    let p = guest
        .submit(
            "/login",
            &[
                ("email", "annie@example.org"),
                ("password", "niet-het-goede"),
            ],
        )
        .await;
    assert_eq!(p.status, 401);
    dutch(&p, "wrong password", "Onjuist e-mailadres of wachtwoord.");
    let p = Browser::speaking(&t, DUTCH)
        .post("/login", &[("email", "a@b.nl"), ("password", "x")])
        .await;
    assert_eq!(p.status, 403);
    dutch(&p, "form from elsewhere", "Formulier verlopen");
    // The right password: the second-factor step.
    let p = guest.get("/login").await;
    let csrf = p.csrf();
    let p = guest
        .post(
            "/login",
            &[
                ("csrf_token", &csrf),
                ("email", "annie@example.org"),
                ("password", &s.password),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let p = guest.get(p.location.as_deref().unwrap()).await;
    dutch(&p, "second factor", "Tweede factor");

    // Logged in: every page of the organisation.
    let mut b = Browser::speaking(&t, DUTCH);
    let p = b.login(&s, "/portal").await;
    dutch(&p, "home", "Uw organisaties");
    for (path, what, says) in [
        (
            "/portal/account".to_owned(),
            "account",
            "Zoals mijn browser vraagt",
        ),
        (format!("{o}/kb"), "knowledge base", "Uploaden naar begin"),
        (format!("{o}/kb?path=handboek"), "folder", "1,5 kB"),
        (format!("{o}/kb?q=dakgoot"), "search", "regel 1"),
        (
            format!("{o}/kb?q=x"),
            "search refused",
            "Zoek met 2 tot 200 tekens.",
        ),
        (
            format!("{o}/kb/handboek/dakgoot.md"),
            "document",
            "Geschreven door",
        ),
        (
            format!("{o}/kb/handboek/dakgoot.md?from=1&to=2"),
            "diff",
            "Wijzigingen van versie 1 naar versie 2",
        ),
        (
            format!("{o}/kb/handboek/weg.md"),
            "no document",
            "Dit document bestaat niet.",
        ),
        (format!("{o}/members"), "members", "Laatst ingelogd"),
        (
            format!("{o}/connections"),
            "connections",
            "Wie mag koppelen",
        ),
        (format!("{o}/triggers"), "triggers", "Nieuwe taalmodelagent"),
        (format!("{o}/runs/{run}"), "run", "geslaagd"),
        (
            format!("{o}/runs/987654"),
            "no run",
            "Deze run bestaat niet.",
        ),
        (format!("{o}/requests"), "requests", "1 wens"),
        (
            format!("{o}/requests?status=klaar"),
            "requests refused",
            "“klaar” is geen status van een wens.",
        ),
        (
            format!("{o}/requests/{request}"),
            "request",
            "Vraag 1: Welk scheidingsteken? (keuzes: Puntkomma / Komma, of een ander antwoord)",
        ),
        (
            format!("{o}/requests/987654"),
            "no request",
            "Deze wens bestaat niet.",
        ),
        (format!("{o}/apps"), "apps", "in gebruik"),
        (format!("{o}/audit"), "audit", "Logboek"),
        (format!("{o}/tokens"), "tokens", "Toegangstokens"),
        (format!("{o}/trash"), "trash", "Prullenbak"),
        (
            format!("{o}/kb/handboek/dakgoot.md?lines=1"),
            "document line by line",
            "Geschreven door",
        ),
        (
            format!("{o}/triggers/00000000-0000-4000-8000-000000000000"),
            "no trigger",
            "Niet gevonden",
        ),
        (
            "/portal/o/bestaat-niet/kb".to_owned(),
            "not found",
            "Deze pagina bestaat niet.",
        ),
    ] {
        let p = b.get(&path).await;
        dutch(&p, what, says);
    }
    // An assistant asks to connect: the consent page.
    // (Registered under a name that is no English word: the client's name is data.)
    let client: serde_json::Value = t
        .client
        .post(t.url("/register"))
        .json(&serde_json::json!({
            "client_name": "Claude",
            "redirect_uris": [crate::fixture::REDIRECT],
            "token_endpoint_auth_method": "none",
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client = client["client_id"].as_str().unwrap();
    let (_, challenge) = crate::fixture::pkce();
    let p = b
        .get(&crate::fixture::authorize_path(client, &challenge, &[]))
        .await;
    assert!(p.body.contains("id=\"consent-form\""), "{}", p.body);
    dutch(&p, "consent", "Een assistent koppelen");
    // A token made: the secret shown once, and until when it works.
    let p = post(
        &mut b,
        &format!("{o}/tokens"),
        &[
            ("name", "n8n"),
            ("scope", "kennisbank"),
            ("expires_in_days", "30"),
        ],
    )
    .await;
    dutch(&p, "token made", "Toegangstokens");
    let p = b.get(&format!("{o}/triggers")).await;
    let trigger = p.body.split("/triggers/").nth(1).unwrap()[..36].to_owned();
    let p = b.get(&format!("{o}/triggers/{trigger}")).await;
    dutch(&p, "trigger", "Recente runs");

    // Dates, sizes and durations the Dutch way.
    let p = b.get(&format!("{o}/kb/handboek/dakgoot.md")).await;
    assert!(p.body.contains(" jun. 2026 "), "a Dutch date: {}", p.body);
    // Every knowledge-base page has the search box, also one that says something went wrong.
    for path in [
        "kb",
        "kb?q=dakgoot",
        "kb/handboek/dakgoot.md",
        "kb/handboek/weg.md",
        "kb?path=weg",
    ] {
        let p = b.get(&format!("{o}/{path}")).await;
        assert!(
            p.body.contains("id=\"kb-search-form\""),
            "{path}: {}",
            p.body
        );
    }
    let p = b.get(&format!("{o}/requests/{request}")).await;
    assert!(p.body.contains("2,5 kB"), "a Dutch size: {}", p.body);
    let p = b.get(&format!("{o}/audit")).await;
    let durations: Vec<&str> = p
        .body
        .split("<td class=\"num\">")
        .skip(1)
        .map(|c| &c[..c.find('<').unwrap()])
        .collect();
    assert!(
        !durations.is_empty()
            && durations
                .iter()
                .all(|d| d.contains(',') && !d.contains('.')),
        "durations with a decimal comma: {durations:?}"
    );

    // Refusals and confirmations.
    let planner = planner.to_string();
    let p = b
        .submit(
            &format!("{o}/requests"),
            &[
                ("app_id", &planner),
                ("title", " "),
                ("description", "Iets"),
            ],
        )
        .await;
    assert_eq!(p.status, 400);
    dutch(&p, "empty title", "Vul de titel in.");
    let p = post(
        &mut b,
        &format!("{o}/requests/{request}/reply"),
        &[("message", " ")],
    )
    .await;
    assert_eq!(p.status, 400);
    dutch(
        &p,
        "empty reply",
        "Schrijf een bericht of beantwoord een vraag.",
    );
    let answer = [
        ("question_id", "1"),
        ("option_ids", "komma"),
        ("other", "of een tab"),
    ];
    let p = post(&mut b, &format!("{o}/requests/{request}/reply"), &answer).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let p = b.get(&format!("{o}/requests/{request}")).await;
    dutch(
        &p,
        "answered",
        "Antwoord op “Welk scheidingsteken?”: Komma; anders: of een tab",
    );
    let me = s.person.id;
    let p = post(
        &mut b,
        &format!("{o}/members/{me}"),
        &[("action", "save"), ("role", "member")],
    )
    .await;
    assert_eq!(p.status, 409);
    dutch(
        &p,
        "last admin",
        "Een organisatie houdt minstens één beheerder",
    );
    let p = post(
        &mut b,
        &format!("{o}/members/{me}"),
        &[("action", "remove")],
    )
    .await;
    assert_eq!(p.status, 409);
    dutch(
        &p,
        "last admin removed",
        "Een organisatie houdt minstens één beheerder",
    );
    let bert_seed = t.seed("Bouw BV", "bert@example.org");
    let bert = bert_seed.person.id;
    // A member who is no admin, on an admin's page.
    kennis::identity::set_member(
        &app.store,
        &kennis::audit::Actor::Operator,
        s.org.id,
        bert,
        kennis::identity::MemberChange {
            role: Some(kennis::identity::Role::Member),
            may_connect: None,
        },
        app.clock.now(),
    )
    .unwrap();
    let mut member = Browser::speaking(&t, DUTCH);
    member.login(&bert_seed, "/portal").await;
    let p = member.get(&format!("{o}/members")).await;
    assert_eq!(p.status, 403, "{}", p.body);
    dutch(&p, "admins only", "Alleen beheerders van deze organisatie");
    let p = post(
        &mut b,
        &format!("{o}/members/{bert}"),
        &[("action", "remove")],
    )
    .await;
    dutch(&p, "confirm removal", "Lid verwijderen");
    let p = post(
        &mut b,
        &format!("{o}/members/invite"),
        &[("email", "geen-adres"), ("role", "member")],
    )
    .await;
    dutch(&p, "bad address", "“geen-adres” is geen e-mailadres.");
    let p = post(
        &mut b,
        &format!("{o}/members/invite"),
        &[("email", "nina@example.org"), ("role", "member")],
    )
    .await;
    dutch(
        &p,
        "invitation made",
        "Uitnodiging voor nina@example.org gemaakt.",
    );
    let url = p.body.split("id=\"invite-link\">").nth(1).unwrap();
    let invite = url[..url.find('<').unwrap()].trim().replace(&t.base, "");

    // The invitation in Dutch: the page, refusals, the second factor and the terms.
    let mut nina = Browser::speaking(&t, DUTCH);
    let p = nina.get(&invite).await;
    dutch(
        &p,
        "invitation",
        "U bent uitgenodigd voor Bouw BV op kennis.",
    );
    let p = nina
        .submit(
            &invite,
            &[
                ("name", "Nina"),
                ("password", "zonnebloem-42"),
                ("password_again", "zonnebloem-43"),
            ],
        )
        .await;
    dutch(&p, "passwords differ", "De twee wachtwoorden verschillen.");
    let p = nina
        .submit(
            &invite,
            &[
                ("name", "Nina"),
                ("password", "kort"),
                ("password_again", "kort"),
            ],
        )
        .await;
    dutch(
        &p,
        "weak password",
        "Het wachtwoord heeft minstens 10 tekens nodig.",
    );
    let p = nina
        .submit(
            &invite,
            &[
                ("name", "Nina"),
                ("password", "zonnebloem-kaasschaaf-7"),
                ("password_again", "zonnebloem-kaasschaaf-7"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let totp = p.location.unwrap();
    let p = nina.get(&totp).await;
    dutch(&p, "enrolment", "Stel uw tweede factor in");
    let secret = p.body.split("id=\"totp-secret\">").nth(1).unwrap();
    let secret = secret[..secret.find('<').unwrap()].to_owned();
    t.clock.advance(SignedDuration::from_secs(30));
    let code = kennis::identity::code_at(&secret, app.clock.now());
    let p = nina.submit(&totp, &[("code", &code)]).await;
    let p = nina.get(p.location.as_deref().unwrap()).await;
    dutch(&p, "terms", "Voorwaarden accepteren");
    let p = nina.get(&invite).await;
    assert_eq!(p.status, 410);
    dutch(&p, "used invitation", "Deze link is al gebruikt.");

    // A reset link, and one that does not exist.
    let p = post(&mut b, &format!("{o}/members/{me}"), &[("action", "reset")]).await;
    dutch(
        &p,
        "reset made",
        "Wachtwoordlink voor annie@example.org gemaakt.",
    );
    let url = p.body.split("id=\"reset-link\">").nth(1).unwrap();
    let reset = url[..url.find('<').unwrap()].trim().replace(&t.base, "");
    let p = guest.get(&reset).await;
    dutch(
        &p,
        "reset",
        "Kies een nieuw wachtwoord voor annie@example.org.",
    );
    let p = guest.get("/invite/kb_inv_bestaatniet").await;
    assert_eq!(p.status, 404);
    dutch(&p, "unknown link", "Deze link is niet geldig.");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_pages_speak_english_to_an_english_browser() {
    let mut t = TestServer::start().await;
    let (s, _, request, run) = organisation(&t).await;
    let o = format!("/portal/o/{}", s.org.slug);
    let mut b = Browser::speaking(&t, "en-GB,en;q=0.9");
    b.login(&s, "/portal").await;
    for (path, what, says) in [
        (format!("{o}/requests"), "requests", "1 request<"),
        (
            format!("{o}/requests/{request}"),
            "request",
            "Open questions",
        ),
        (format!("{o}/runs/{run}"), "run", "succeeded"),
        (format!("{o}/kb?path=handboek"), "folder", "1.5 kB"),
        (
            format!("{o}/kb/handboek/dakgoot.md"),
            "document",
            " Jun 2026 ",
        ),
        (format!("{o}/apps"), "apps", ">live<"),
    ] {
        let p = b.get(&path).await;
        english(&p, what, says);
    }
    t.stop().await;
}
