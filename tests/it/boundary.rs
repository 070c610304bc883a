//! The boundary between organisations on one server (DESIGN "Trust between organisations"):
//! an organisation's admin acts only inside it — written as attacks by B's admin on A's people
//! and objects —, a password reset or change ends the person's grants and sessions, and every
//! admin action, portal or command line, is an audit record with its actor.

use serde_json::{Value, json};

use kennis::identity::{self, Role};
use kennis::requests::apps::{self, AppStatus};
use kennis::store::RESET_LINKS;

use crate::fixture::{
    Browser, SEED_PASSWORD, Seeded, TestServer, code_for, exchange, run_json, token,
};

/// The command line against the running server's data directory.
async fn cli(t: &TestServer, args: &[&str]) -> Value {
    let d = t.data_dir().to_owned();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        run_json(&d, &a, None)
    })
    .await
    .unwrap()
}

/// `kennis audit export ORG`: one JSON record a line.
async fn export(t: &TestServer, org: &str) -> Vec<Value> {
    t.app().batch.flush();
    let d = t.data_dir().to_owned();
    let org = org.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        crate::fixture::run(&d, &["audit", "export", &org], None)
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", crate::fixture::stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The admin records of an export with this action.
fn actions<'a>(records: &'a [Value], action: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["action"] == action).collect()
}

/// The status of a connector call with this access token.
async fn connector(t: &TestServer, access: &str) -> u16 {
    t.mcp(access).rpc("tools/list", json!({})).await.0
}

/// A refresh at `/token`: (status, error code).
async fn refresh(t: &TestServer, client_id: &str, refresh_token: &str) -> (u16, Option<String>) {
    let (st, v) = token(
        t,
        &[
            ("grant_type", "refresh_token"),
            ("client_id", client_id),
            ("refresh_token", refresh_token),
        ],
    )
    .await;
    (st, v["error"].as_str().map(str::to_owned))
}

/// A personal access token of `s`, made with `kennis token create`: its secret.
async fn personal_token(t: &TestServer, s: &Seeded) -> String {
    let made = cli(
        t,
        &[
            "token",
            "create",
            &s.org.slug,
            &s.person.email,
            "--name",
            "ci",
            "--json",
        ],
    )
    .await;
    made["token"].as_str().unwrap().to_owned()
}

/// A connection made through the real consent flow: (client id, access, refresh).
async fn connect(t: &TestServer, s: &Seeded) -> (String, String, String) {
    let (client_id, verifier, code) = code_for(t, s, &["kennisbank"]).await;
    let (st, tok) = exchange(t, &client_id, &verifier, &code).await;
    assert_eq!(st, 200, "{tok}");
    (
        client_id,
        tok["access_token"].as_str().unwrap().to_owned(),
        tok["refresh_token"].as_str().unwrap().to_owned(),
    )
}

/// Adds an existing person to an organisation (the operator's `member add`).
fn add_member(t: &TestServer, org: &str, email: &str, role: Role) {
    let app = t.app();
    identity::add_member(&app.store, org, email, role, true, app.clock.now()).unwrap();
}

/// A person with an account (password [`SEED_PASSWORD`]), in no organisation yet.
fn person(t: &TestServer, email: &str) -> identity::Person {
    let app = t.app();
    identity::add_person(
        &app.store,
        identity::NewPerson {
            email,
            name: None,
            password: SEED_PASSWORD,
        },
        app.clock.now(),
    )
    .unwrap()
}

/// The admin actions of an export.
fn admin_records(records: Vec<Value>) -> Vec<Value> {
    records
        .into_iter()
        .filter(|r| r.get("action").is_some())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_org_admin_cannot_reset_the_password_of_someone_who_is_also_in_another_org() {
    let mut t = TestServer::start().await;
    let a = t.seed("Org A", "anna@example.org");
    let b = t.seed("Org B", "bob@example.org");
    // Anna, admin of A, is also a member of B.
    add_member(&t, &b.org.slug, &a.person.email, Role::Member);
    let anna_token = t.grant(&a, &["kennisbank"]);
    let mut anna = Browser::new(&t);
    assert_eq!(anna.login(&a, "/portal").await.status, 200);

    // The attack: B's admin asks for a reset link for Anna, to set her password and log in
    // as her into A.
    let members = format!("/portal/o/{}/members", b.org.slug);
    let target = format!("{members}/{}", a.person.id);
    let mut bob = Browser::new(&t);
    let page = bob.login(&b, &members).await;
    let p = bob
        .post(
            &target,
            &[("csrf_token", &page.csrf()), ("action", "reset")],
        )
        .await;
    assert_eq!(p.status, 403, "{}", p.body);
    assert!(
        p.body
            .contains("also belongs to another organisation, so a new password would open"),
        "{}",
        p.body
    );
    assert!(!p.body.contains("id=\"reset-link\""));
    // In Dutch too.
    let mut bob_nl = Browser::speaking(&t, "nl");
    let page = bob_nl.login(&b, &members).await;
    let p = bob_nl
        .post(
            &target,
            &[("csrf_token", &page.csrf()), ("action", "reset")],
        )
        .await;
    assert_eq!(p.status, 403);
    assert!(
        p.body
            .contains("Deze persoon hoort ook bij een andere organisatie"),
        "{}",
        p.body
    );
    // Nothing changed: no link stored, Anna's session, connection and password as they were,
    // and no reset audited.
    let app = t.app().clone();
    let links = app
        .store
        .read(|tx| tx.scan_keys(RESET_LINKS, b"", 10))
        .unwrap();
    assert!(links.is_empty());
    assert_eq!(anna.get("/portal").await.status, 200);
    assert_eq!(connector(&t, &anna_token).await, 200);
    assert!(identity::verify_login(&app.store, &a.person.email, &a.password).is_ok());
    assert!(actions(&export(&t, &b.org.slug).await, "member.reset").is_empty());

    // Someone only in B: B's admin may reset them.
    let carl = person(&t, "carl@example.org");
    add_member(&t, &b.org.slug, &carl.email, Role::Member);
    let page = bob.get(&members).await;
    let p = bob
        .post(
            &format!("{members}/{}", carl.id),
            &[("csrf_token", &page.csrf()), ("action", "reset")],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("id=\"reset-link\""));
    let b_records = export(&t, &b.org.slug).await;
    let resets = actions(&b_records, "member.reset");
    assert_eq!(resets.len(), 1, "{b_records:?}");
    assert_eq!(
        (&resets[0]["actor"], &resets[0]["target"]),
        (&json!("bob@example.org"), &json!("carl@example.org"))
    );

    // The operator still resets anyone; it is audited in each of the person's organisations.
    let v = cli(&t, &["user", "reset", &a.person.email, "--json"]).await;
    assert!(v["url"].as_str().unwrap().contains("/reset/kb_rst_"), "{v}");
    assert_eq!(connector(&t, &anna_token).await, 401);
    for org in [&a.org.slug, &b.org.slug] {
        let records = export(&t, org).await;
        let by_operator: Vec<_> = actions(&records, "member.reset")
            .into_iter()
            .filter(|r| r["actor"] == "operator")
            .collect();
        assert_eq!(by_operator.len(), 1, "{org}: {records:?}");
        assert_eq!(by_operator[0]["target"], "anna@example.org");
        assert_eq!(by_operator[0]["tool"], "admin");
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_reset_revokes_grants_and_sessions() {
    let mut t = TestServer::start().await;
    let s = t.seed("Acme", "fay@example.org");
    let (client_id, access, refresh_token) = connect(&t, &s).await;
    assert_eq!(connector(&t, &access).await, 200);
    let mut session = Browser::new(&t);
    assert_eq!(session.login(&s, "/portal").await.status, 200);

    // Issuing the link ends everything at once.
    let v = cli(&t, &["user", "reset", &s.person.email, "--json"]).await;
    assert_eq!(connector(&t, &access).await, 401);
    assert_eq!(
        refresh(&t, &client_id, &refresh_token).await,
        (400, Some("invalid_grant".into()))
    );
    let p = session.get("/portal").await;
    assert_eq!(p.status, 303);
    assert!(p.location.unwrap().starts_with("/login"));

    // A connection made after the link was issued (the old password still works until the
    // link is used) ends when it is used.
    let (client_id, access, refresh_token) = connect(&t, &s).await;
    assert_eq!(connector(&t, &access).await, 200);
    let pat = personal_token(&t, &s).await;
    assert_eq!(connector(&t, &pat).await, 200);
    let mut other = Browser::new(&t);
    assert_eq!(other.login(&s, "/portal").await.status, 200);
    let path = v["url"].as_str().unwrap().replace(&t.base, "");
    let mut b = Browser::new(&t);
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
    assert_eq!(connector(&t, &access).await, 401);
    assert_eq!(
        connector(&t, &pat).await,
        401,
        "personal access tokens end too"
    );
    assert_eq!(
        refresh(&t, &client_id, &refresh_token).await,
        (400, Some("invalid_grant".into()))
    );
    assert_eq!(other.get("/portal").await.status, 303);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_change_revokes_grants_and_the_other_sessions() {
    let mut t = TestServer::start().await;
    let s = t.seed("Acme", "fay@example.org");
    let (client_id, access, refresh_token) = connect(&t, &s).await;
    let pat = personal_token(&t, &s).await;
    assert_eq!(connector(&t, &pat).await, 200);
    let mut me = Browser::new(&t);
    let page = me.login(&s, "/portal/account").await;
    let mut other = Browser::new(&t);
    assert_eq!(other.login(&s, "/portal").await.status, 200);

    // A wrong current password changes nothing.
    let p = me
        .post(
            "/portal/account/password",
            &[
                ("csrf_token", &page.csrf()),
                ("current_password", "niet-het-wachtwoord"),
                ("new_password", "nieuw-lang-wachtwoord"),
            ],
        )
        .await;
    assert_eq!(p.status, 401);
    assert_eq!(connector(&t, &access).await, 200);
    assert_eq!(connector(&t, &pat).await, 200);
    assert_eq!(other.get("/portal").await.status, 200);

    let p = me
        .post(
            "/portal/account/password",
            &[
                ("csrf_token", &page.csrf()),
                ("current_password", &s.password),
                ("new_password", "nieuw-lang-wachtwoord"),
            ],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(connector(&t, &access).await, 401);
    assert_eq!(
        connector(&t, &pat).await,
        401,
        "personal access tokens end too"
    );
    assert_eq!(
        refresh(&t, &client_id, &refresh_token).await,
        (400, Some("invalid_grant".into()))
    );
    assert_eq!(other.get("/portal").await.status, 303);
    assert_eq!(
        me.get("/portal").await.status,
        200,
        "the changing session stays"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_org_admin_reaches_nothing_of_another_org_by_id() {
    let mut t = TestServer::start().await;
    let a = t.seed("Org A", "anna@example.org");
    let b = t.seed("Org B", "bob@example.org");
    let app = t.app().clone();
    // A's things: a trigger with its agent, project and a finished run, an app, a connection.
    let (trigger, run) = t.finished_run(&a.org.slug, "Doe iets").await;
    let app_a = apps::add(
        &app.store,
        a.org.id,
        "Planner",
        AppStatus::Live,
        app.clock.now(),
    )
    .unwrap();
    let pair = t.grant_pair(a.org.id, a.person.id, &["kennisbank"]);
    let (anna_pat, anna_secret) = kennis::oauth::pats::create(
        &app.store,
        &kennis::audit::Actor::Operator,
        kennis::oauth::pats::NewToken {
            org_id: a.org.id,
            person_id: a.person.id,
            name: "annas-geheime-sleutel".into(),
            scopes: vec![],
            expires_in_days: None,
        },
        app.clock.now(),
    )
    .unwrap();
    let triggers_before = kennis::triggers::list(&app.store, &a.org.slug).unwrap();
    let a_before = admin_records(export(&t, &a.org.slug).await);

    let bo = format!("/portal/o/{}", b.org.slug);
    let ao = format!("/portal/o/{}", a.org.slug);
    let mut bob = Browser::new(&t);
    let page = bob.login(&b, &format!("{bo}/members")).await;
    let csrf = page.csrf();
    let csrf = ("csrf_token", csrf.as_str());

    // Anna's membership through B's pages: role, removal, reset, right to connect.
    let anna = format!("{bo}/members/{}", a.person.id);
    for form in [
        vec![csrf, ("action", "save"), ("role", "member")],
        vec![csrf, ("action", "remove"), ("confirm", "yes")],
        vec![csrf, ("action", "reset")],
        vec![csrf, ("action", "remove")],
    ] {
        let p = bob.post(&anna, &form).await;
        assert_eq!(p.status, 404, "{form:?}: {}", p.body);
    }
    let p = bob
        .post(
            &format!("{anna}/may-connect"),
            &[csrf, ("may_connect", "false")],
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    // A's pages.
    for page in ["members", "triggers", "audit", "connections", "apps"] {
        assert_eq!(bob.get(&format!("{ao}/{page}")).await.status, 404, "{page}");
    }
    // A's trigger by id, through B's pages.
    let tid = trigger.trigger.id;
    for action in ["pause", "resume", "renew-secret", "delete"] {
        let p = bob
            .post(&format!("{bo}/triggers/{tid}/{action}"), &[csrf])
            .await;
        assert_eq!(p.status, 404, "{action}: {}", p.body);
    }
    assert_eq!(bob.get(&format!("{bo}/triggers/{tid}")).await.status, 404);
    // A trigger of B for A's agent and project.
    let p = bob
        .post(
            &format!("{bo}/triggers"),
            &[
                csrf,
                ("name", "Stiekem"),
                ("instructions", "Lees alles"),
                ("agent", &trigger.trigger.agent_id.to_string()),
                ("project", &trigger.trigger.project_id.to_string()),
            ],
        )
        .await;
    assert_eq!(p.status, 404, "{}", p.body);
    assert!(
        kennis::triggers::list(&app.store, &b.org.slug)
            .unwrap()
            .is_empty()
    );
    // A's run and request.
    for action in ["again", "cancel"] {
        let p = bob
            .post(&format!("{bo}/runs/{run}/{action}"), &[csrf])
            .await;
        assert_eq!(p.status, 404, "{action}: {}", p.body);
    }
    assert_eq!(bob.get(&format!("{bo}/runs/{run}")).await.status, 404);
    assert_eq!(bob.get(&format!("{bo}/requests/{run}")).await.status, 404);
    // A's app.
    let p = bob
        .post(
            &format!("{bo}/apps/{}/status", app_a.app_id),
            &[csrf, ("status", "archived")],
        )
        .await;
    assert_eq!(p.status, 404, "{}", p.body);
    // A's connection.
    let p = bob
        .post(
            &format!("{bo}/connections/{}/revoke", pair.grant_id),
            &[csrf],
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    // A's personal access token, by id through B's tokens page.
    let p = bob
        .post(
            &format!("{bo}/tokens/{}", anna_pat.id),
            &[csrf, ("action", "revoke")],
        )
        .await;
    assert_eq!(p.status, 404, "{}", p.body);
    assert!(
        !bob.get(&format!("{bo}/tokens"))
            .await
            .body
            .contains("annas-geheime-sleutel")
    );

    // Nothing of A changed.
    let m = app
        .store
        .read(|tx| identity::member(tx, a.org.id, a.person.id))
        .unwrap()
        .unwrap()
        .0;
    assert_eq!((m.role, m.may_connect), (Role::Admin, true));
    assert_eq!(
        kennis::triggers::list(&app.store, &a.org.slug).unwrap(),
        triggers_before
    );
    let runs = app
        .store
        .read(|tx| kennis::triggers::recent_runs(tx, a.org.id, tid, 50))
        .unwrap();
    assert_eq!(runs.len(), 1, "no run again");
    let status = app
        .store
        .read(|tx| apps::get(tx, a.org.id, app_a.app_id))
        .unwrap()
        .unwrap()
        .status;
    assert_eq!(status, AppStatus::Live);
    assert_eq!(connector(&t, &pair.access_token).await, 200);
    assert_eq!(connector(&t, &anna_secret).await, 200);
    assert!(identity::verify_login(&app.store, &a.person.email, &a.password).is_ok());
    assert!(
        app.store
            .read(|tx| tx.scan_keys(RESET_LINKS, b"", 10))
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        admin_records(export(&t, &a.org.slug).await),
        a_before,
        "nothing audited in A"
    );

    // An invitation to B for Anna's existing account gives Bob nothing of it: accepting needs
    // her password.
    let dora = person(&t, "dora@example.org");
    add_member(&t, &a.org.slug, &dora.email, Role::Member);
    let page = bob.get(&format!("{bo}/members")).await;
    let p = bob
        .post(
            &format!("{bo}/members/invite"),
            &[
                ("csrf_token", &page.csrf()),
                ("email", "dora@example.org"),
                ("role", "admin"),
            ],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    let link = p.body.split("id=\"invite-link\">").nth(1).unwrap();
    let link = link[..link.find('<').unwrap()].trim().replace(&t.base, "");
    let mut guest = Browser::new(&t);
    let p = guest
        .submit(
            &link,
            &[("name", "Bob"), ("password", "bobs-eigen-wachtwoord")],
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("Wrong password."), "{}", p.body);
    assert!(
        app.store
            .read(|tx| identity::member(tx, b.org.id, dora.id))
            .unwrap()
            .is_none()
    );
    assert!(identity::verify_login(&app.store, "dora@example.org", SEED_PASSWORD).is_ok());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_portal_admin_action_is_audited_with_the_admin_as_actor() {
    // The operator offers one model endpoint; its key never appears in the audit.
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("operator.key");
    std::fs::write(&key_file, "sk-operator-geheim").unwrap();
    let mut t = TestServer::start_with(kennis::config::Settings {
        llm: Some(kennis::config::LlmTable {
            endpoints: Some(vec![kennis::config::LlmEndpoint {
                id: "huis".into(),
                url: "http://127.0.0.1:9/v1".into(),
                api_key_env: None,
                api_key_file: Some(key_file.clone()),
                orgs: vec!["*".into()],
            }]),
            ..kennis::config::LlmTable::default()
        }),
        ..kennis::config::Settings::default()
    })
    .await;
    let b = t.seed("Org B", "bob@example.org");
    let app = t.app().clone();
    let now = app.clock.now();
    let dave = person(&t, "dave@example.org");
    add_member(&t, &b.org.slug, &dave.email, Role::Member);
    let dave_grant = t.grant_pair(b.org.id, dave.id, &["kennisbank"]);
    let messenger = kennis::roster::NewAgent {
        name: "Boodschapper".into(),
        ..crate::fixture::echo_agent()
    };
    let echo = kennis::roster::add_agent(&app.store, &b.org.slug, &messenger, now).unwrap();
    let project = kennis::roster::add_project(
        &app.store,
        &b.org.slug,
        "Site",
        kennis::roster::Rollout::Ready,
        now,
    )
    .unwrap();
    let bo = format!("/portal/o/{}", b.org.slug);
    let mut bob = Browser::new(&t);
    let page = bob.login(&b, &format!("{bo}/members")).await;
    let csrf = page.csrf();
    let csrf = ("csrf_token", csrf.as_str());
    let dave_path = format!("{bo}/members/{}", dave.id);
    let ok = |p: &crate::fixture::Page, what: &str| {
        assert!(
            p.status == 200 || p.status == 303,
            "{what}: {} {}",
            p.status,
            p.body
        );
    };

    let p = bob
        .post(
            &format!("{bo}/members/invite"),
            &[csrf, ("email", "erik@example.org"), ("role", "member")],
        )
        .await;
    ok(&p, "invite");
    let p = bob
        .post(
            &dave_path,
            &[
                csrf,
                ("action", "save"),
                ("role", "admin"),
                ("may_connect", "true"),
            ],
        )
        .await;
    ok(&p, "role");
    let p = bob
        .post(
            &format!("{dave_path}/may-connect"),
            &[csrf, ("may_connect", "false")],
        )
        .await;
    ok(&p, "may connect");
    let p = bob
        .post(
            &format!("{bo}/connections/{}/revoke", dave_grant.grant_id),
            &[csrf],
        )
        .await;
    ok(&p, "revoke");
    let p = bob.post(&dave_path, &[csrf, ("action", "reset")]).await;
    ok(&p, "reset");
    let p = bob
        .post(
            &dave_path,
            &[csrf, ("action", "remove"), ("confirm", "yes")],
        )
        .await;
    ok(&p, "remove");
    let p = bob
        .post(
            &format!("{bo}/policy"),
            &[csrf, ("connector_access", "selected_members")],
        )
        .await;
    ok(&p, "policy");
    let p = bob
        .post(
            &format!("{bo}/agents"),
            &[
                csrf,
                ("name", "Model"),
                ("exec", "llm"),
                ("kind", "generic"),
                ("endpoint", "huis"),
                ("model", "m"),
            ],
        )
        .await;
    ok(&p, "agent");
    let p = bob
        .post(
            &format!("{bo}/triggers"),
            &[
                csrf,
                ("name", "Offerte"),
                ("instructions", "Kijk"),
                ("agent", &echo.id.to_string()),
                ("project", &project.id.to_string()),
            ],
        )
        .await;
    ok(&p, "trigger");
    let tid = kennis::triggers::list(&app.store, &b.org.slug).unwrap()[0].id;
    for action in ["pause", "resume", "renew-secret", "delete"] {
        let p = bob
            .post(&format!("{bo}/triggers/{tid}/{action}"), &[csrf])
            .await;
        ok(&p, action);
    }
    let p = bob
        .post(
            &format!("{bo}/apps"),
            &[csrf, ("name", "Uren"), ("status", "draft")],
        )
        .await;
    ok(&p, "app");
    let app_id = app.store.read(|tx| apps::list(tx, b.org.id)).unwrap()[0].app_id;
    let p = bob
        .post(
            &format!("{bo}/apps/{app_id}/status"),
            &[csrf, ("status", "live")],
        )
        .await;
    ok(&p, "app status");
    // A token made and revoked, then tokens denied for the organisation.
    let tokens = format!("{bo}/tokens");
    let p = bob
        .post(
            &tokens,
            &[
                csrf,
                ("name", "n8n"),
                ("scope", "kennisbank"),
                ("expires_in_days", "7"),
            ],
        )
        .await;
    ok(&p, "token");
    let token_id = app
        .store
        .read(|tx| kennis::oauth::pats::list(tx, b.org.id, None))
        .unwrap()[0]
        .token
        .id;
    let p = bob
        .post(
            &format!("{tokens}/{token_id}"),
            &[csrf, ("action", "revoke")],
        )
        .await;
    ok(&p, "token revoke");
    let p = bob
        .post(
            &format!("{tokens}/setting"),
            &[csrf, ("personal_tokens", "deny")],
        )
        .await;
    ok(&p, "personal tokens");
    // A document moved, deleted and restored.
    t.put_doc(&b, "notities/oud.md", "oud");
    let p = bob
        .post(
            &format!("{bo}/kb/notities/oud.md"),
            &[csrf, ("action", "move"), ("to", "archief/oud.md")],
        )
        .await;
    ok(&p, "move");
    let p = bob
        .post(
            &format!("{bo}/kb/archief/oud.md"),
            &[csrf, ("action", "delete")],
        )
        .await;
    ok(&p, "delete");
    let p = bob
        .post(
            &format!("{bo}/trash"),
            &[csrf, ("action", "restore"), ("path", "archief/oud.md")],
        )
        .await;
    ok(&p, "restore");

    // A run again.
    let (_, run) = t.finished_run(&b.org.slug, "Nog eens").await;
    let p = bob.post(&format!("{bo}/runs/{run}/again"), &[csrf]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let again: u64 = p
        .location
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();

    // A run cancelled while it runs (an agent that only sleeps).
    let sleeper = kennis::roster::NewAgent {
        name: "Slaper".into(),
        exec: "command".into(),
        program: Some("/bin/sleep".into()),
        args: vec!["30".into()],
        ..crate::fixture::echo_agent()
    };
    let sleeper = kennis::roster::add_agent(&app.store, &b.org.slug, &sleeper, now).unwrap();
    let slow = kennis::triggers::add(
        &app.store,
        &b.org.slug,
        &kennis::triggers::NewTrigger {
            name: "Traag".into(),
            agent_id: sleeper.id,
            project_id: project.id,
            instructions: "Wacht".into(),
            cooldown_secs: Some(0),
            callback_url: None,
        },
        now,
    )
    .unwrap();
    let r = t
        .client
        .post(t.url(&format!("/api/hooks/events/{}", slow.trigger.id)))
        .bearer_auth(&slow.secret)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let slow_run = r.json::<Value>().await.unwrap()["featureRequestId"]
        .as_u64()
        .unwrap();
    let p = bob
        .post(&format!("{bo}/runs/{slow_run}/cancel"), &[csrf])
        .await;
    assert_eq!(p.status, 303, "{}", p.body);

    let records = export(&t, &b.org.slug).await;
    for (action, target) in [
        ("run.cancel", format!("run {slow_run}")),
        ("run.again", format!("run {run} again as run {again}")),
        ("member.invite", "erik@example.org role=member".to_owned()),
        (
            "member.set",
            "dave@example.org role=admin may_connect=true".into(),
        ),
        (
            "member.set",
            "dave@example.org role=admin may_connect=false".into(),
        ),
        (
            "connection.revoke",
            format!(
                "grant {} of dave@example.org (test-client)",
                dave_grant.grant_id
            ),
        ),
        ("member.reset", "dave@example.org".into()),
        ("member.remove", "dave@example.org".into()),
        (
            "org.set",
            "connector_access=selected_members require_second_factor=true".into(),
        ),
        ("agent.add", "exec=llm endpoint=huis model=m".into()),
        ("trigger.add", format!("trigger {tid} Offerte")),
        ("trigger.pause", format!("trigger {tid} Offerte")),
        ("trigger.resume", format!("trigger {tid} Offerte")),
        ("trigger.renew_secret", format!("trigger {tid} Offerte")),
        ("trigger.delete", format!("trigger {tid} Offerte")),
        ("app.add", format!("app {app_id} Uren status=draft")),
        ("app.status", format!("app {app_id} Uren status=live")),
        (
            "token.create",
            format!("token {token_id} n8n of bob@example.org scopes=kennisbank expires_at="),
        ),
        (
            "token.revoke",
            format!("token {token_id} n8n of bob@example.org"),
        ),
        ("org.set", "personal_tokens=deny".into()),
        ("kb.move", "notities/oud.md to archief/oud.md".into()),
        ("kb.delete", "archief/oud.md version 1".into()),
        ("kb.restore", "archief/oud.md version 1".into()),
    ] {
        let found = records.iter().any(|r| {
            r["action"] == action
                && r["actor"] == "bob@example.org"
                && r["person_id"] == b.person.id
                && r["tool"] == "admin"
                && r["outcome"] == "ok"
                && r["at"].as_str().is_some_and(|at| !at.is_empty())
                && r["target"].as_str().is_some_and(|t| t.contains(&target))
        });
        assert!(found, "{action} {target}: {records:#?}");
    }
    // The organisation's audit page shows them beside the connector calls.
    let p = bob.get(&format!("{bo}/audit")).await;
    assert_eq!(p.status, 200);
    let table = &p.body[p.body.find("id=\"audit\"").unwrap()..];
    for shown in [
        "member.invite",
        "trigger.renew_secret",
        "bob@example.org",
        "Administration",
    ] {
        assert!(table.contains(shown), "{shown}: {table}");
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_line_admin_action_is_audited_as_the_operator() {
    let mut t = TestServer::start().await;
    let pw = Some("paard-batterij-niet\n");
    let d = t.data_dir().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        run_json(&d, &["org", "create", "Org C", "--json"], None);
        run_json(
            &d,
            &[
                "org",
                "set",
                "org-c",
                "--connector-access",
                "nobody",
                "--json",
            ],
            None,
        );
        run_json(
            &d,
            &[
                "user",
                "add",
                "eve@example.org",
                "--password-stdin",
                "--json",
            ],
            pw,
        );
        run_json(
            &d,
            &["member", "add", "org-c", "eve@example.org", "--json"],
            None,
        );
        run_json(
            &d,
            &[
                "member",
                "set",
                "org-c",
                "eve@example.org",
                "--may-connect",
                "true",
                "--json",
            ],
            None,
        );
        run_json(
            &d,
            &["user", "invite", "org-c", "fien@example.org", "--json"],
            None,
        );
        run_json(&d, &["user", "reset", "eve@example.org", "--json"], None);
        run_json(&d, &["user", "totp", "eve@example.org", "--json"], None);
        run_json(
            &d,
            &[
                "user",
                "passwd",
                "eve@example.org",
                "--password-stdin",
                "--json",
            ],
            Some("nog-een-lang-wachtwoord\n"),
        );
        let agent = run_json(
            &d,
            &[
                "agent",
                "add",
                "org-c",
                "Model",
                "--kind",
                "generic",
                "--exec",
                "llm",
                "--url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "--json",
            ],
            None,
        );
        let echo = run_json(
            &d,
            &[
                "agent", "add", "org-c", "E", "--kind", "generic", "--exec", "echo", "--json",
            ],
            None,
        );
        let project = run_json(
            &d,
            &["project", "add", "org-c", "P", "--ready", "--json"],
            None,
        );
        let trig = run_json(
            &d,
            &[
                "trigger",
                "add",
                "org-c",
                "T",
                "--agent",
                &echo["id"].to_string(),
                "--project",
                &project["id"].to_string(),
                "--instructions",
                "Go",
                "--json",
            ],
            None,
        );
        let id = trig["id"].as_str().unwrap().to_owned();
        for action in ["pause", "resume", "renew-secret", "delete"] {
            run_json(&d, &["trigger", action, &id, "--json"], None);
        }
        run_json(&d, &["app", "add", "org-c", "Uren", "--json"], None);
        // Tokens and their organisation setting.
        let token = run_json(
            &d,
            &[
                "token",
                "create",
                "org-c",
                "eve@example.org",
                "--name",
                "ci",
                "--json",
            ],
            None,
        );
        let token = token["id"].to_string();
        run_json(&d, &["token", "revoke", &token, "--json"], None);
        run_json(
            &d,
            &["org", "set", "org-c", "--personal-tokens", "deny", "--json"],
            None,
        );
        // A document imported, moved, deleted and restored.
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.md"), "alfa").unwrap();
        run_json(
            &d,
            &[
                "kb",
                "import",
                "org-c",
                src.path().to_str().unwrap(),
                "--json",
            ],
            None,
        );
        run_json(&d, &["kb", "move", "org-c", "a.md", "b.md", "--json"], None);
        run_json(&d, &["kb", "delete", "org-c", "b.md", "--json"], None);
        run_json(&d, &["kb", "restore", "org-c", "b.md", "--json"], None);
        // A person disabled, enabled, and another one erased.
        run_json(&d, &["user", "disable", "eve@example.org", "--json"], None);
        run_json(&d, &["user", "enable", "eve@example.org", "--json"], None);
        let gus = run_json(
            &d,
            &[
                "user",
                "add",
                "gus@example.org",
                "--password-stdin",
                "--json",
            ],
            Some("gus-zijn-lange-wachtwoord\n"),
        );
        run_json(
            &d,
            &["member", "add", "org-c", "gus@example.org", "--json"],
            None,
        );
        run_json(
            &d,
            &["user", "delete", "gus@example.org", "--yes", "--json"],
            None,
        );
        run_json(
            &d,
            &["member", "remove", "org-c", "eve@example.org", "--json"],
            None,
        );
        (agent, id, token, gus["id"].clone())
    })
    .await
    .unwrap();
    let (agent, tid, token, gus) = out;
    let records = export(&t, "org-c").await;
    for (action, target) in [
        ("org.create", "org-c".to_owned()),
        (
            "org.set",
            "connector_access=nobody require_second_factor=true".into(),
        ),
        (
            "member.add",
            "eve@example.org role=member may_connect=false".into(),
        ),
        (
            "member.set",
            "eve@example.org role=member may_connect=true".into(),
        ),
        ("member.invite", "fien@example.org role=member".into()),
        ("member.reset", "eve@example.org".into()),
        ("user.password", "eve@example.org".into()),
        ("user.totp_reset", "eve@example.org".into()),
        (
            "agent.add",
            format!(
                "agent {} Model exec=llm url=http://127.0.0.1:9/v1 model=m",
                agent["id"]
            ),
        ),
        ("project.add", "P".into()),
        ("trigger.add", format!("trigger {tid} T")),
        ("trigger.pause", format!("trigger {tid} T")),
        ("trigger.resume", format!("trigger {tid} T")),
        ("trigger.renew_secret", format!("trigger {tid} T")),
        ("trigger.delete", format!("trigger {tid} T")),
        ("app.add", "Uren status=live".into()),
        (
            "token.create",
            format!("token {token} ci of eve@example.org scopes=kennisbank expires_at="),
        ),
        (
            "token.revoke",
            format!("token {token} ci of eve@example.org"),
        ),
        ("org.set", "personal_tokens=deny".into()),
        ("user.disable", "eve@example.org".into()),
        ("user.enable", "eve@example.org".into()),
        ("user.delete", format!("deleted-{gus}")),
        ("kb.move", "a.md to b.md".into()),
        ("kb.delete", "b.md version 1".into()),
        ("kb.restore", "b.md version 1".into()),
        ("member.remove", "eve@example.org".into()),
    ] {
        let found = records.iter().any(|r| {
            r["action"] == action
                && r["actor"] == "operator"
                && r["person_id"] == 0
                && r["tool"] == "admin"
                && r["target"].as_str().is_some_and(|t| t.contains(&target))
        });
        assert!(found, "{action} {target}: {records:#?}");
    }
    // `org set --personal-tokens` alone records that setting only.
    assert_eq!(actions(&records, "org.set").len(), 2, "{records:#?}");
    // The erased person is named by the pseudonym only.
    assert!(
        !records
            .iter()
            .any(|r| r.to_string().contains("gus@example.org")),
        "{records:#?}"
    );
    // In time order, each with its time.
    let times: Vec<&str> = records.iter().map(|r| r["at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // A refused action is no record: nothing changed.
    let d = t.data_dir().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        crate::fixture::run(
            &d,
            &["member", "remove", "org-c", "nobody@example.org"],
            None,
        )
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(export(&t, "org-c").await.len(), records.len());
    t.stop().await;
}

#[test]
fn audit_records_written_before_admin_actions_were_audited_still_read() {
    // A tool call's record as older versions stored it: no `actor`, no `action`.
    let old = json!({
        "at": "2026-01-01T00:00:00Z", "org_id": 1, "person_id": 2, "grant_id": 3,
        "tool": "kennisbank_list", "target": null, "outcome": "ok", "error": null,
        "duration_ms": 1.5,
    });
    let r: kennis::audit::AuditRecord = serde_json::from_value(old).unwrap();
    assert_eq!((r.actor, r.action), (None, None));
    assert_eq!(r.tool, "kennisbank_list");
}

/// An authorization code not yet exchanged is a way in too: whoever held the person's session
/// (or password) for a moment can ask for one and keep it, then exchange it for a fresh grant
/// once the person has ended everything. Revoking all connections, changing the password and
/// disabling the account each void the person's codes, so such a code gets `invalid_grant`
/// and no grant; a code asked for afterwards works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_persons_credentials_voids_their_unexchanged_codes() {
    let mut t = TestServer::start().await;
    let mut s = t.seed("Acme", "gus@example.org");
    let grants = |t: &TestServer| {
        t.app()
            .store
            .read(|tx| tx.count(kennis::store::OAUTH_GRANTS))
            .unwrap()
    };
    let tick = |t: &TestServer| t.clock.advance(jiff::SignedDuration::from_secs(31));

    // 1. "Revoke all" on the account page.
    let (client, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    tick(&t);
    let mut me = Browser::new(&t);
    let page = me.login(&s, "/portal/account").await;
    let p = me
        .post(
            "/portal/account/revoke-all",
            &[("csrf_token", &page.csrf())],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    let before = grants(&t);
    let (st, tok) = exchange(&t, &client, &verifier, &code).await;
    assert_eq!((st, &tok["error"]), (400, &json!("invalid_grant")), "{tok}");
    assert_eq!(grants(&t), before, "no grant was made");

    // 2. A password change.
    tick(&t);
    let (client, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    tick(&t);
    let page = me.get("/portal/account").await;
    let p = me
        .post(
            "/portal/account/password",
            &[
                ("csrf_token", &page.csrf()),
                ("current_password", &s.password),
                ("new_password", "nieuw-lang-wachtwoord"),
            ],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    s.password = "nieuw-lang-wachtwoord".into();
    let (st, tok) = exchange(&t, &client, &verifier, &code).await;
    assert_eq!((st, &tok["error"]), (400, &json!("invalid_grant")), "{tok}");

    // 3. `user disable` (and `user enable` before the code comes back).
    tick(&t);
    let (client, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    cli(&t, &["user", "disable", "gus@example.org", "--json"]).await;
    cli(&t, &["user", "enable", "gus@example.org", "--json"]).await;
    let (st, tok) = exchange(&t, &client, &verifier, &code).await;
    assert_eq!((st, &tok["error"]), (400, &json!("invalid_grant")), "{tok}");
    assert_eq!(grants(&t), before, "no grant was made");

    // A code asked for now is exchanged as usual.
    tick(&t);
    let (client, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    let (st, tok) = exchange(&t, &client, &verifier, &code).await;
    assert_eq!(st, 200, "{tok}");
    assert_eq!(
        connector(&t, tok["access_token"].as_str().unwrap()).await,
        200
    );
    t.stop().await;
}
