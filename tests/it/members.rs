//! Members of an organisation: the command line (`member list/set/remove`, `user invite/reset`),
//! the portal's members page, invitation and reset links (one-time, expiring, stored as hashes)
//! and the rules (the last admin stays; removal revokes grants in that organisation only).

use jiff::SignedDuration;
use kennis::identity::{self, Role};
use kennis::store::{INVITATIONS, PEOPLE, RESET_LINKS};

use crate::fixture::{Browser, Page, TestServer, run, run_json, stderr};

const PW: &str = "paard-batterij-niet\n";

fn setup_cli(d: &std::path::Path) {
    run_json(d, &["org", "create", "Kozijn BV", "--json"], None);
    for who in ["annie@example.org", "bert@example.org"] {
        run_json(
            d,
            &["user", "add", who, "--password-stdin", "--json"],
            Some(PW),
        );
    }
    run_json(
        d,
        &[
            "member",
            "add",
            "kozijn-bv",
            "annie@example.org",
            "--role",
            "admin",
            "--json",
        ],
        None,
    );
    run_json(
        d,
        &["member", "add", "kozijn-bv", "bert@example.org", "--json"],
        None,
    );
}

fn members(d: &std::path::Path) -> serde_json::Value {
    run_json(d, &["member", "list", "kozijn-bv", "--json"], None)
}

#[test]
fn member_commands_list_change_and_remove_but_keep_the_last_admin() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup_cli(d);
    let list = members(d);
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    let annie = items
        .iter()
        .find(|i| i["email"] == "annie@example.org")
        .unwrap();
    assert_eq!(annie["role"], "admin");
    assert_eq!(annie["name"], "annie");
    assert_eq!(annie["may_connect"], false);

    // The last admin can be neither demoted nor removed; nothing changes.
    let demote = [
        "member",
        "set",
        "kozijn-bv",
        "annie@example.org",
        "--role",
        "member",
    ];
    let remove = ["member", "remove", "kozijn-bv", "annie@example.org"];
    for args in [&demote[..], &remove] {
        let out = run(d, args, None);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("at least one admin"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(members(d), list, "refusals change nothing");

    // `member add` of someone already in the organisation changes nothing: repeated as it was
    // (no --role, no --may-connect) it answers the membership as it is; asking for another
    // role or right to connect is refused with a pointer to `member set`.
    let out = run(
        d,
        &["member", "add", "kozijn-bv", "annie@example.org", "--json"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["created"], false);
    assert_eq!(again["role"], "admin");
    for args in [
        &[
            "member",
            "add",
            "kozijn-bv",
            "annie@example.org",
            "--role",
            "member",
        ][..],
        &[
            "member",
            "add",
            "kozijn-bv",
            "annie@example.org",
            "--may-connect",
        ],
    ] {
        let out = run(d, args, None);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("member set"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(members(d), list, "a repeated member add changes nothing");

    // Bad usage is exit 2.
    let out = run(
        d,
        &[
            "member",
            "set",
            "kozijn-bv",
            "bert@example.org",
            "--may-connect",
            "maybe",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));

    let set = run_json(
        d,
        &[
            "member",
            "set",
            "kozijn-bv",
            "bert@example.org",
            "--role",
            "admin",
            "--may-connect",
            "true",
            "--json",
        ],
        None,
    );
    assert_eq!(set["role"], "admin");
    assert_eq!(set["may_connect"], true);
    // With a second admin, the first may step down and then go.
    run_json(
        d,
        &[
            "member",
            "set",
            "kozijn-bv",
            "annie@example.org",
            "--role",
            "member",
            "--json",
        ],
        None,
    );
    let removed = run_json(
        d,
        &[
            "member",
            "remove",
            "kozijn-bv",
            "annie@example.org",
            "--json",
        ],
        None,
    );
    assert_eq!(removed["removed"], true);
    let left = members(d);
    let emails: Vec<&str> = left["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["email"].as_str().unwrap())
        .collect();
    assert_eq!(emails, ["bert@example.org"]);
    // Removing someone who is not a member is refused.
    let out = run(
        d,
        &["member", "remove", "kozijn-bv", "annie@example.org"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a member"), "{}", stderr(&out));
    // The person still exists: removal ends only the membership.
    let users = run_json(d, &["user", "list", "--json"], None);
    assert_eq!(users["items"].as_array().unwrap().len(), 2);
}

fn token_of(url: &str, marker: &str) -> String {
    url.split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("{url}"))
        .to_owned()
}

fn path_of(t: &TestServer, url: &str) -> String {
    url.strip_prefix(&t.base)
        .unwrap_or_else(|| panic!("{url} is not on {}", t.base))
        .to_owned()
}

async fn cli(t: &TestServer, args: &[&str]) -> serde_json::Value {
    let d = t.data_dir().to_owned();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        run_json(&d, &a, None)
    })
    .await
    .unwrap()
}

/// Accepts an invitation in a fresh browser: name and password twice, second-factor enrolment
/// with the secret shown as text, terms, portal. Returns the browser and the TOTP secret.
async fn accept<'a>(t: &'a TestServer, path: &str, password: &str) -> (Browser<'a>, String) {
    let mut b = Browser::new(t);
    let p = b.get(path).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("id=\"invite-accept-form\""));
    let csrf = p.csrf();
    let p = b
        .post(
            path,
            &[
                ("csrf_token", &csrf),
                ("name", "Carla de Vries"),
                ("password", password),
                ("password_again", password),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let totp = p.location.clone().unwrap();
    assert!(totp.starts_with("/login/totp"), "{totp}");
    let p = b.get(&totp).await;
    let secret = between(&p.body, "id=\"totp-secret\">", "<");
    assert!(p.body.contains("<svg"), "QR code shown");
    t.clock.advance(SignedDuration::from_secs(30));
    let code = identity::code_at(&secret, t.app().clock.now());
    let p = b
        .post(&totp, &[("csrf_token", &p.csrf()), ("code", &code)])
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let terms = p.location.unwrap();
    assert!(terms.starts_with("/portal/terms"), "{terms}");
    let p = b.get(&terms).await;
    let p = b
        .post(&terms, &[("csrf_token", &p.csrf()), ("accept", "1")])
        .await;
    assert_eq!(p.location.as_deref(), Some("/portal"));
    (b, secret)
}

fn between(body: &str, start: &str, end: &str) -> String {
    let at = body
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in {body}"))
        + start.len();
    body[at..at + body[at..].find(end).unwrap()].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invitation_link_works_once_for_seven_days_and_is_stored_as_a_hash() {
    let mut t = TestServer::start().await;
    let s = t.seed("Kozijn BV", "annie@example.org");
    let v = cli(
        &t,
        &[
            "user",
            "invite",
            &s.org.slug,
            "carla@example.org",
            "--role",
            "member",
            "--json",
        ],
    )
    .await;
    let url = v["url"].as_str().unwrap().to_owned();
    let token = token_of(&url, "/invite/");
    assert!(token.starts_with("kb_inv_"));
    // Stored under its SHA-256 only.
    let app = t.app().clone();
    let keys: Vec<Vec<u8>> = app
        .store
        .read(|tx| tx.scan_keys(INVITATIONS, b"", 100))
        .unwrap();
    assert_eq!(keys, vec![identity::hash_secret(&token).to_vec()]);
    let raw =
        kennis::store::record::expand(&std::fs::read(t.data_dir().join("kennis.redb")).unwrap());
    assert!(
        !raw.windows(token.len()).any(|w| w == token.as_bytes()),
        "token in the database file"
    );

    // Passwords that differ: refused, nothing stored, the link still works.
    let path = path_of(&t, &url);
    let mut b = Browser::new(&t);
    let p = b
        .submit(
            &path,
            &[
                ("name", "Carla"),
                ("password", "lang-genoeg-wachtwoord"),
                ("password_again", "iets-anders-helemaal"),
            ],
        )
        .await;
    assert_eq!(p.status, 400);
    assert!(p.body.contains("differ"), "{}", p.body);
    assert!(
        app.store
            .read(|tx| identity::person_by_email(tx, "carla@example.org"))
            .unwrap()
            .is_none()
    );
    // A wrong CSRF token is refused.
    let p = b
        .post(
            &path,
            &[
                ("csrf_token", "x"),
                ("name", "C"),
                ("password", "lang-genoeg-wachtwoord"),
                ("password_again", "lang-genoeg-wachtwoord"),
            ],
        )
        .await;
    assert_eq!(p.status, 403);

    let (mut carla, _) = accept(&t, &path, "lang-genoeg-wachtwoord").await;
    let home = carla.get("/portal").await;
    assert!(home.body.contains("Kozijn BV"), "{}", home.body);
    let carla_id = app
        .store
        .read(|tx| identity::person_by_email(tx, "carla@example.org"))
        .unwrap()
        .unwrap()
        .id;
    let m = app
        .store
        .read(|tx| identity::member(tx, s.org.id, carla_id))
        .unwrap()
        .unwrap();
    assert_eq!(m.0.role, Role::Member);

    // Used: says so, and creates nothing.
    let p = Browser::new(&t).get(&path).await;
    assert_eq!(p.status, 410);
    assert!(p.body.contains("used already"), "{}", p.body);

    // Expired after 7 days.
    let v = cli(
        &t,
        &["user", "invite", &s.org.slug, "dirk@example.org", "--json"],
    )
    .await;
    let path = path_of(&t, v["url"].as_str().unwrap());
    t.clock
        .advance(SignedDuration::from_secs(7 * 24 * 3600 - 60));
    assert_eq!(
        Browser::new(&t).get(&path).await.status,
        200,
        "valid until 7 days"
    );
    t.clock.advance(SignedDuration::from_secs(61));
    let p = Browser::new(&t).get(&path).await;
    assert_eq!(p.status, 410);
    assert!(p.body.contains("expired"), "{}", p.body);
    // An unknown token says so too.
    assert_eq!(
        Browser::new(&t).get("/invite/kb_inv_nothing").await.status,
        404
    );
    // Inviting a member again is refused.
    let d = t.data_dir().to_owned();
    let slug = s.org.slug.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(&d, &["user", "invite", &slug, "carla@example.org"], None)
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    t.stop().await;
}

/// An invitation for an address that has an account already asks for that account's
/// password, and a wrong one counts as a failed login: the page cannot be used to guess it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invitation_for_an_existing_account_guesses_no_password() {
    let t = TestServer::start().await;
    let s = t.seed("Kozijn BV", "annie@example.org");
    let eva = t.seed("Dakgoot BV", "eva@example.org");
    let v = cli(
        &t,
        &["user", "invite", &s.org.slug, "eva@example.org", "--json"],
    )
    .await;
    let path = path_of(&t, v["url"].as_str().unwrap());
    let mut b = Browser::new(&t);
    let p = b.get(&path).await;
    assert_eq!(p.status, 200, "{}", p.body);
    let csrf = p.csrf();
    for _ in 0..kennis::identity::login::FAILURES_PER_WINDOW {
        let p = b
            .post(
                &path,
                &[("csrf_token", &csrf), ("password", "geraden-wachtwoord")],
            )
            .await;
        assert_eq!(p.status, 400, "{}", p.body);
        assert!(p.body.contains("id=\"error\""), "{}", p.body);
    }
    // Past the limit even the right password waits, and the link stays unused.
    let p = b
        .post(&path, &[("csrf_token", &csrf), ("password", &eva.password)])
        .await;
    assert_eq!(p.status, 429, "{}", p.body);
    assert!(p.headers.contains_key("retry-after"), "{:?}", p.headers);
    assert!(
        t.app()
            .store
            .read(|tx| identity::member(tx, s.org.id, eva.person.id))
            .unwrap()
            .is_none()
    );
    // The same limit holds at the login form.
    let login = b.get("/login").await;
    let p = b
        .post(
            "/login",
            &[
                ("csrf_token", &login.csrf()),
                ("email", "eva@example.org"),
                ("password", &eva.password),
            ],
        )
        .await;
    assert_eq!(p.status, 429, "{}", p.body);
    // A window later the right password accepts the invitation.
    t.clock.advance(SignedDuration::from_mins(15));
    let p = b
        .post(&path, &[("csrf_token", &csrf), ("password", &eva.password)])
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(
        t.app()
            .store
            .read(|tx| identity::member(tx, s.org.id, eva.person.id))
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_link_ends_sessions_requires_a_new_second_factor_and_works_once_for_a_day() {
    let mut t = TestServer::start().await;
    let s = t.seed("Kozijn BV", "annie@example.org");
    let mut old = Browser::new(&t);
    let p = old.login(&s, "/portal").await;
    assert_eq!(p.status, 200);
    let v = cli(&t, &["user", "reset", "annie@example.org", "--json"]).await;
    let url = v["url"].as_str().unwrap().to_owned();
    let token = token_of(&url, "/reset/");
    let app = t.app().clone();
    let keys: Vec<Vec<u8>> = app
        .store
        .read(|tx| tx.scan_keys(RESET_LINKS, b"", 10))
        .unwrap();
    assert_eq!(keys, vec![identity::hash_secret(&token).to_vec()]);
    // Issuing the link ended the session.
    let p = old.get("/portal").await;
    assert_eq!(p.status, 303);
    assert!(p.location.unwrap().starts_with("/login"));

    let path = path_of(&t, &url);
    let mut b = Browser::new(&t);
    let p = b.get(&path).await;
    assert_eq!(p.status, 200);
    let p = b
        .post(
            &path,
            &[
                ("csrf_token", &p.csrf()),
                ("password", "kort"),
                ("password_again", "kort"),
            ],
        )
        .await;
    assert_eq!(p.status, 400, "weak password refused");
    let before: identity::Person = app
        .store
        .read(|tx| tx.get(PEOPLE, &kennis::store::key::id(s.person.id)))
        .unwrap()
        .unwrap();
    assert!(
        before.has_second_factor(),
        "a refused reset changes nothing"
    );
    let p = b
        .submit(
            &path,
            &[
                ("password", "nieuw-lang-wachtwoord"),
                ("password_again", "nieuw-lang-wachtwoord"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let after = identity::find_person(&app.store, "annie@example.org").unwrap();
    assert!(after.totp.is_none(), "a new second factor is required");
    assert!(
        identity::verify_login(&app.store, "annie@example.org", "nieuw-lang-wachtwoord").is_ok()
    );
    // The next step is enrolment with a new secret shown as text.
    let p = b.get(p.location.as_deref().unwrap()).await;
    assert!(p.body.contains("id=\"totp-secret\""), "{}", p.body);
    assert_ne!(between(&p.body, "id=\"totp-secret\">", "<"), s.totp_secret);

    // Once only.
    let p = Browser::new(&t).get(&path).await;
    assert_eq!(p.status, 410);
    // 24 hours only.
    let v = cli(&t, &["user", "reset", "annie@example.org", "--json"]).await;
    let path = path_of(&t, v["url"].as_str().unwrap());
    t.clock.advance(SignedDuration::from_secs(24 * 3600));
    let p = Browser::new(&t).get(&path).await;
    assert_eq!(p.status, 410);
    assert!(p.body.contains("expired"));
    t.stop().await;
}

async fn connector_status(t: &TestServer, token: &str) -> u16 {
    t.client
        .post(t.url("/mcp/kennisbank"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn row_form<'p>(page: &'p Page, email: &str) -> &'p str {
    let at = page
        .body
        .find(&format!("data-email=\"{email}\""))
        .unwrap_or_else(|| panic!("{email} not listed: {}", page.body));
    &page.body[at..]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_in_the_portal_revokes_grants_in_that_organisation_only() {
    let mut t = TestServer::start().await;
    let admin = t.seed("Kozijn BV", "annie@example.org");
    let bert = t.seed("Tweede BV", "bert@example.org");
    let app = t.app().clone();
    let now = app.clock.now();
    identity::add_member(
        &app.store,
        &admin.org.slug,
        "bert@example.org",
        Role::Member,
        true,
        now,
    )
    .unwrap();
    let here = t
        .grant_pair(admin.org.id, bert.person.id, &["kennisbank"])
        .access_token;
    let there = t.grant(&bert, &["kennisbank"]);
    assert_eq!(connector_status(&t, &here).await, 200);
    let mut bert_browser = Browser::new(&t);
    bert_browser.login(&bert, "/portal").await;

    let mut b = Browser::new(&t);
    let members_path = format!("/portal/o/{}/members", admin.org.slug);
    let p = b.login(&admin, &members_path).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("id=\"invite-form\""));
    let row = row_form(&p, "bert@example.org");
    assert!(row.contains("name=\"action\" value=\"remove\""));
    // The row says the role, the right to connect, the second factor, the last login and the
    // person's connections here (the assistant's name; the other organisation's is not listed).
    let row = &row[..row.find("</tr>").unwrap()];
    for (label, says) in [
        ("Role", "member"),
        ("May connect", "yes"),
        ("Second factor", "yes"),
    ] {
        assert!(
            row.contains(&format!("data-label=\"{label}\">{says}"))
                || row.contains(&format!(
                    "data-label=\"{label}\"><span class=\"badge ok\">{says}"
                )),
            "{label}: {row}"
        );
    }
    assert!(row.contains("<time datetime="), "last login: {row}");
    assert_eq!(row.matches("<li>test-client</li>").count(), 1, "{row}");
    let action = format!("/portal/o/{}/members/{}", admin.org.slug, bert.person.id);
    // The first press asks for confirmation and changes nothing.
    let confirm = b
        .post(&action, &[("csrf_token", &p.csrf()), ("action", "remove")])
        .await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains("name=\"confirm\" value=\"yes\""));
    assert_eq!(connector_status(&t, &here).await, 200);
    let done = b
        .post(
            &action,
            &[
                ("csrf_token", &p.csrf()),
                ("action", "remove"),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(
        connector_status(&t, &here).await,
        401,
        "grant in the organisation revoked"
    );
    assert_eq!(
        connector_status(&t, &there).await,
        200,
        "other organisation untouched"
    );
    assert_eq!(
        bert_browser.get("/portal").await.status,
        200,
        "sessions untouched"
    );
    let grants = app
        .store
        .read(|tx| kennis::oauth::grants_of_org(tx, admin.org.id))
        .unwrap();
    assert!(grants.iter().all(|(g, _)| g.revoked_at.is_some()));
    let p = b.get(&members_path).await;
    assert!(
        !p.body.contains("data-email=\"bert@example.org\""),
        "{}",
        p.body
    );

    // The last admin cannot be removed or demoted from the page either: refused at once, not
    // after the confirmation step, and refused with the confirmation too.
    let own = format!("/portal/o/{}/members/{}", admin.org.slug, admin.person.id);
    let csrf = p.csrf();
    let p = b
        .post(&own, &[("csrf_token", &csrf), ("action", "remove")])
        .await;
    assert_eq!(p.status, 409, "{}", p.body);
    assert!(!p.body.contains("name=\"confirm\""), "{}", p.body);
    let p = b
        .post(
            &own,
            &[
                ("csrf_token", &csrf),
                ("action", "remove"),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(p.status, 409, "{}", p.body);
    let p2 = b.get(&members_path).await;
    let p = b
        .post(
            &own,
            &[
                ("csrf_token", &p2.csrf()),
                ("action", "save"),
                ("role", "member"),
            ],
        )
        .await;
    assert_eq!(p.status, 409);
    assert!(
        app.store
            .read(|tx| identity::member(tx, admin.org.id, admin.person.id))
            .unwrap()
            .unwrap()
            .0
            .role
            == Role::Admin
    );

    // Inviting from the page shows the one-time link.
    let p = b
        .post(
            &format!("{members_path}/invite"),
            &[
                ("csrf_token", &p2.csrf()),
                ("email", "dirk@example.org"),
                ("role", "admin"),
            ],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    let link = between(&p.body, "id=\"invite-link\">", "<");
    assert!(
        link.starts_with(&format!("{}/invite/kb_inv_", t.base)),
        "{link}"
    );

    // Changing a role and the right to connect from the page.
    identity::add_member(
        &app.store,
        &admin.org.slug,
        "bert@example.org",
        Role::Member,
        false,
        app.clock.now(),
    )
    .unwrap();
    let p = b
        .post(
            &action,
            &[
                ("csrf_token", &p2.csrf()),
                ("action", "save"),
                ("role", "admin"),
                ("may_connect", "true"),
            ],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let m = app
        .store
        .read(|tx| identity::member(tx, admin.org.id, bert.person.id))
        .unwrap()
        .unwrap()
        .0;
    assert_eq!((m.role, m.may_connect), (Role::Admin, true));

    // Members may not see the page.
    let mut other = Browser::new(&t);
    other.login(&bert, "/portal").await;
    identity::set_member(
        &app.store,
        &kennis::audit::Actor::Operator,
        admin.org.id,
        bert.person.id,
        identity::MemberChange {
            role: Some(Role::Member),
            may_connect: None,
        },
        app.clock.now(),
    )
    .unwrap();
    assert_eq!(other.get(&members_path).await.status, 403);
    t.stop().await;
}

/// What a claim ends, as the portal passes it: every session, connection and token.
fn end_all(
    tx: &mut kennis::store::WriteTx,
    person_id: u64,
    now: jiff::Timestamp,
) -> Result<(), kennis::store::StoreError> {
    kennis::oauth::revoke_person_credentials_in(tx, person_id, None, now).map(|_| ())
}

/// An account whose password came through a link (an invitation opened as a new account, a
/// reset link) is claimable: whoever held the link may have chosen that password. A claim
/// (what a provider's sign-in for the address does) replaces the password, clears the second
/// factor, ends the connections and is audited; an account made otherwise is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_set_through_a_link_is_shut_out_when_the_address_is_claimed() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "admin@example.org");
    let app = t.app();
    let now = app.clock.now();
    let by = kennis::audit::Actor::person(s.person.id, &s.person.email);
    assert!(!s.person.claimable, "an account the operator made");
    let (_, link) = identity::invite(
        &app.store,
        &by,
        s.org.id,
        "invitee@example.org",
        Role::Member,
        now,
    )
    .unwrap();
    // The admin opens the link as the new account, with a password of their choosing.
    let chosen = "een-wachtwoord-van-de-beheerder";
    let made = identity::accept_invitation(&app.store, &link, "Ivy", chosen, now).unwrap();
    assert!(made.claimable);
    assert!(identity::verify_login(&app.store, "invitee@example.org", chosen).is_ok());
    // … enrols a second factor of their own, accepts the terms and connects an assistant.
    let enrol = identity::reset_totp(&app.store, "invitee@example.org").unwrap();
    let code = identity::code_at(&enrol.secret, now);
    identity::verify_totp(&app.store, made.id, &code, now).unwrap();
    identity::accept_terms(&app.store, made.id, &app.config.terms_version).unwrap();
    let grant = t
        .grant_pair(s.org.id, made.id, &["kennisbank"])
        .access_token;
    assert_eq!(kennis::oauth::check_bearer(app, &grant).err(), None);

    let nobodys = identity::hash_password("niemand-kent-dit-wachtwoord-123");
    let claimed = identity::claim(&app.store, made.id, nobodys, end_all, now).unwrap();
    assert!(!claimed.claimable);
    assert!(claimed.totp.is_none());
    assert!(identity::verify_login(&app.store, "invitee@example.org", chosen).is_err());
    assert_eq!(
        kennis::oauth::check_bearer(app, &grant),
        Err(kennis::oauth::BearerError::Revoked)
    );
    let audited = |action: &str| {
        app.store
            .read(|tx| kennis::audit::records(tx, s.org.id, None))
            .unwrap()
            .into_iter()
            .filter(|r| r.action.as_deref() == Some(action))
            .count()
    };
    assert_eq!(audited("account.claim"), 1);

    // An unknown person: refused, nothing written.
    let unknown = identity::claim(
        &app.store,
        999_999,
        identity::hash_password("nog-een-ander-wachtwoord-456"),
        end_all,
        now,
    );
    assert!(matches!(
        unknown,
        Err(identity::IdentityError::UnknownPerson(_))
    ));
    assert_eq!(audited("account.claim"), 1);
    // Nothing is left to claim: a second claim changes nothing.
    let stored = identity::find_person(&app.store, "invitee@example.org").unwrap();
    let again = identity::claim(
        &app.store,
        made.id,
        identity::hash_password("nog-een-ander-wachtwoord-456"),
        end_all,
        now,
    )
    .unwrap();
    assert_eq!(again, stored);
    assert_eq!(audited("account.claim"), 1);
    // The seeded admin is not claimable either: a claim leaves their password.
    identity::claim(
        &app.store,
        s.person.id,
        identity::hash_password("nog-een-ander-wachtwoord-456"),
        end_all,
        now,
    )
    .unwrap();
    assert!(
        identity::verify_login(
            &app.store,
            "admin@example.org",
            crate::fixture::SEED_PASSWORD
        )
        .is_ok()
    );

    // A reset link passes through hands too: the password it sets is claimable again.
    let reset = kennis::oauth::issue_reset(
        &app.store,
        &kennis::audit::Actor::Operator,
        None,
        "invitee@example.org",
        now,
    )
    .unwrap();
    let p = kennis::oauth::use_reset(&app.store, &reset, "een-nieuw-lang-wachtwoord", now).unwrap();
    assert!(p.claimable);
}
