//! The portal: login, second-factor enrolment, terms, CSRF, framing, connections.

use jiff::SignedDuration;
use kennis::identity::{self, NewPerson, Role};
use kennis::oauth::{self, BearerError};

use crate::fixture::Browser;
use crate::fixture::{SEED_PASSWORD, TestServer};

fn grant_for(t: &TestServer, org_id: u64, person_id: u64) -> oauth::TokenPair {
    t.grant_pair(org_id, person_id, &["kennisbank"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_login_enrols_the_second_factor_and_asks_for_terms() {
    let t = TestServer::start().await;
    let app = t.app().clone();
    let now = app.clock.now();
    identity::create_org(&app.store, "Acme", now).unwrap();
    identity::add_person(
        &app.store,
        NewPerson {
            email: "new@example.org",
            name: None,
            password: SEED_PASSWORD,
        },
        now,
    )
    .unwrap();
    identity::add_member(
        &app.store,
        "acme",
        "new@example.org",
        Role::Member,
        false,
        now,
    )
    .unwrap();
    let mut b = Browser::new(&t);
    // Protected pages send people to the login, remembering where they were going.
    let p = b.get("/portal/account").await;
    assert_eq!(p.status, 303);
    assert_eq!(
        p.location.as_deref(),
        Some("/login?next=%2Fportal%2Faccount")
    );
    let p = b.get("/login?next=%2Fportal%2Faccount").await;
    let csrf = p.csrf();
    // Without the CSRF token the login is refused, even with the right password.
    let p = b
        .post(
            "/login?next=%2Fportal%2Faccount",
            &[("email", "new@example.org"), ("password", SEED_PASSWORD)],
        )
        .await;
    assert_eq!(p.status, 403);
    let p = b
        .post(
            "/login?next=%2Fportal%2Faccount",
            &[
                ("csrf_token", &csrf),
                ("email", "new@example.org"),
                ("password", SEED_PASSWORD),
            ],
        )
        .await;
    assert_eq!(p.status, 303);
    let session = b.cookies["kb_session"].clone();
    assert!(session.starts_with("kb_sess_"));
    let set_cookie = p.headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Lax"), "{set_cookie}");
    // A session without the second factor is not a login.
    let p = b.get("/portal/account").await;
    assert_eq!(p.status, 303);
    assert!(p.location.unwrap().starts_with("/login/totp"));
    // First time: the page shows a QR code (SVG) and the key.
    let totp = b.get("/login/totp?next=%2Fportal%2Faccount").await;
    assert!(totp.body.contains("<svg"), "{}", totp.body);
    assert!(totp.body.contains("id=\"totp-form\""));
    let person = identity::find_person(&app.store, "new@example.org").unwrap();
    let secret = person.totp.as_ref().unwrap().secret.clone();
    assert!(totp.body.contains(&secret));
    assert!(!person.has_second_factor());
    // Reloading shows the same secret until it is confirmed.
    let again = b.get("/login/totp?next=%2Fportal%2Faccount").await;
    assert!(again.body.contains(&secret));
    let csrf = totp.csrf();
    let p = b
        .post(
            "/login/totp?next=%2Fportal%2Faccount",
            &[("csrf_token", &csrf), ("code", "000000")],
        )
        .await;
    assert_eq!(p.status, 401);
    let code = identity::code_at(&secret, app.clock.now());
    let p = b
        .post(
            "/login/totp?next=%2Fportal%2Faccount",
            &[("csrf_token", &csrf), ("code", &code)],
        )
        .await;
    assert_eq!(p.status, 303);
    assert!(
        identity::find_person(&app.store, "new@example.org")
            .unwrap()
            .has_second_factor()
    );
    // Terms not accepted yet.
    let to = p.location.unwrap();
    assert!(to.starts_with("/portal/terms"), "{to}");
    let terms = b.get(&to).await;
    assert!(terms.body.contains("id=\"terms-form\""));
    assert!(terms.body.contains("name=\"accept\""));
    let p = b
        .post(&to, &[("csrf_token", &terms.csrf()), ("accept", "1")])
        .await;
    assert_eq!(p.status, 303);
    assert_eq!(p.location.as_deref(), Some("/portal/account"));
    let account = b.get("/portal/account").await;
    assert_eq!(account.status, 200);
    assert!(account.body.contains("new@example.org"));
    assert_eq!(account.headers["x-frame-options"], "DENY");
    // Logging out ends the session on the server.
    let p = b.post("/logout", &[("csrf_token", &account.csrf())]).await;
    assert_eq!(p.status, 303);
    let n = app
        .store
        .read(|tx| tx.count(kennis::store::SESSIONS))
        .unwrap();
    assert_eq!(n, 0);
    b.cookies.insert("kb_session".into(), session);
    assert_eq!(b.get("/portal/account").await.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_are_limited_per_account() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "max@example.org");
    let mut b = Browser::new(&t);
    let csrf = b.get("/login").await.csrf();
    for _ in 0..10 {
        let p = b
            .post(
                "/login",
                &[
                    ("csrf_token", &csrf),
                    ("email", "max@example.org"),
                    ("password", "wrong-password-1"),
                ],
            )
            .await;
        assert_eq!(p.status, 401);
    }
    let p = b
        .post(
            "/login",
            &[
                ("csrf_token", &csrf),
                ("email", "MAX@example.org"),
                ("password", "wrong-password-1"),
            ],
        )
        .await;
    assert_eq!(p.status, 429);
    assert!(p.headers.contains_key("retry-after"));
    // Even the right password waits now; another account does not.
    let p = b
        .post(
            "/login",
            &[
                ("csrf_token", &csrf),
                ("email", "max@example.org"),
                ("password", &s.password),
            ],
        )
        .await;
    assert_eq!(p.status, 429);
    let p = b
        .post(
            "/login",
            &[
                ("csrf_token", &csrf),
                ("email", "other@example.org"),
                ("password", "x-y-z-w-v"),
            ],
        )
        .await;
    assert_eq!(p.status, 401);
    t.clock.advance(SignedDuration::from_secs(15 * 60));
    let p = b
        .post(
            "/login",
            &[
                ("csrf_token", &csrf),
                ("email", "max@example.org"),
                ("password", &s.password),
            ],
        )
        .await;
    assert_eq!(p.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_list_and_revoke_own_grants_and_admins_set_policy() {
    let t = TestServer::start().await;
    let admin = t.seed("Acme", "ada@example.org");
    let member = t.seed("Acme", "mo@example.org");
    let app = t.app().clone();
    identity::add_member(
        &app.store,
        "acme",
        "mo@example.org",
        Role::Member,
        false,
        app.clock.now(),
    )
    .unwrap();
    let outsider = t.seed("Other", "out@example.org");
    let g_admin = grant_for(&t, admin.org.id, admin.person.id);
    let g_member = grant_for(&t, member.org.id, member.person.id);
    assert!(oauth::check_bearer(&app, &g_member.access_token).is_ok());

    // The member sees only their own grant and can revoke it, not the admin's.
    let mut mb = Browser::new(&t);
    let page = mb.login(&member, "/portal/o/acme/connections").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains(&format!("/connections/{}/revoke", g_member.grant_id))
    );
    assert!(
        !page
            .body
            .contains(&format!("/connections/{}/revoke", g_admin.grant_id))
    );
    assert!(!page.body.contains("id=\"policy-form\""));
    let csrf = page.csrf();
    let p = mb
        .post(
            &format!("/portal/o/acme/connections/{}/revoke", g_admin.grant_id),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(p.status, 400);
    assert!(oauth::check_bearer(&app, &g_admin.access_token).is_ok());
    // CSRF: a revoke without the token changes nothing.
    let p = mb
        .post(
            &format!("/portal/o/acme/connections/{}/revoke", g_member.grant_id),
            &[],
        )
        .await;
    assert_eq!(p.status, 403);
    assert!(oauth::check_bearer(&app, &g_member.access_token).is_ok());
    let p = mb
        .post(
            &format!("/portal/o/acme/connections/{}/revoke", g_member.grant_id),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(p.status, 303);
    assert_eq!(
        oauth::check_bearer(&app, &g_member.access_token),
        Err(BearerError::Revoked)
    );
    // Members cannot change the policy.
    let p = mb
        .post(
            "/portal/o/acme/policy",
            &[("csrf_token", &csrf), ("connector_access", "nobody")],
        )
        .await;
    assert_eq!(p.status, 403);
    // Outsiders do not even learn the organisation exists.
    let mut ob = Browser::new(&t);
    let p = ob.login(&outsider, "/portal/o/acme/connections").await;
    assert_eq!(p.status, 404);

    // The admin sees all grants and members, and sets who may connect.
    let mut ab = Browser::new(&t);
    let page = ab.login(&admin, "/portal/o/acme/connections").await;
    assert!(page.body.contains("id=\"policy-form\""));
    assert!(page.body.contains("mo@example.org"));
    let csrf = page.csrf();
    let p = ab
        .post(
            "/portal/o/acme/policy",
            &[("csrf_token", &csrf), ("connector_access", "everyone")],
        )
        .await;
    assert_eq!(p.status, 400);
    let p = ab
        .post(
            "/portal/o/acme/policy",
            &[
                ("csrf_token", &csrf),
                ("connector_access", "selected_members"),
            ],
        )
        .await;
    assert_eq!(p.status, 303);
    // Admin was seeded with may_connect; the member was not.
    let g2 = grant_for(&t, member.org.id, member.person.id);
    assert_eq!(
        oauth::check_bearer(&app, &g2.access_token)
            .unwrap_err()
            .reason(),
        "connecting not allowed"
    );
    let p = ab
        .post(
            &format!("/portal/o/acme/members/{}/may-connect", member.person.id),
            &[("csrf_token", &csrf), ("may_connect", "true")],
        )
        .await;
    assert_eq!(p.status, 303);
    assert!(oauth::check_bearer(&app, &g2.access_token).is_ok());
    let p = ab
        .post(
            &format!("/portal/o/acme/connections/{}/revoke", g2.grant_id),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(p.status, 303);
    assert_eq!(
        oauth::check_bearer(&app, &g2.access_token),
        Err(BearerError::Revoked)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_changes_password_and_resets_the_second_factor() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "pat@example.org");
    let app = t.app().clone();
    let g = grant_for(&t, s.org.id, s.person.id);
    let mut b = Browser::new(&t);
    let account = b.login(&s, "/portal/account").await;
    assert!(account.body.contains("id=\"password-form\""));
    let csrf = account.csrf();
    let p = b
        .post(
            "/portal/account/password",
            &[
                ("csrf_token", &csrf),
                ("current_password", "not-the-password"),
                ("new_password", "nieuw-wachtwoord-lang"),
            ],
        )
        .await;
    assert_eq!(p.status, 401);
    let p = b
        .post(
            "/portal/account/password",
            &[
                ("csrf_token", &csrf),
                ("current_password", SEED_PASSWORD),
                ("new_password", "short"),
            ],
        )
        .await;
    assert_eq!(p.status, 400);
    assert!(identity::verify_login(&app.store, "pat@example.org", SEED_PASSWORD).is_ok());
    let p = b
        .post(
            "/portal/account/password",
            &[
                ("current_password", SEED_PASSWORD),
                ("new_password", "nieuw-wachtwoord-lang"),
            ],
        )
        .await;
    assert_eq!(p.status, 403);
    let p = b
        .post(
            "/portal/account/password",
            &[
                ("csrf_token", &csrf),
                ("current_password", SEED_PASSWORD),
                ("new_password", "nieuw-wachtwoord-lang"),
            ],
        )
        .await;
    assert_eq!(p.status, 200);
    assert!(identity::verify_login(&app.store, "pat@example.org", "nieuw-wachtwoord-lang").is_ok());
    // The new password ended the connections made before it.
    assert_eq!(
        oauth::check_bearer(&app, &g.access_token),
        Err(BearerError::Revoked)
    );
    let g = grant_for(&t, s.org.id, s.person.id);
    // Resetting the second factor: the session must pass it again, and the connector refuses
    // until the new one is confirmed.
    let p = b
        .post("/portal/account/totp-reset", &[("csrf_token", &csrf)])
        .await;
    assert_eq!(p.status, 303);
    assert!(p.location.unwrap().starts_with("/login/totp"));
    assert_eq!(
        oauth::check_bearer(&app, &g.access_token)
            .unwrap_err()
            .reason(),
        "second factor required"
    );
    assert_eq!(b.get("/portal/account").await.status, 303);
    let totp = b.get("/login/totp?next=%2Fportal%2Faccount").await;
    assert!(totp.body.contains("<svg"));
    let secret = identity::find_person(&app.store, "pat@example.org")
        .unwrap()
        .totp
        .unwrap()
        .secret;
    assert_ne!(secret, s.totp_secret);
    let code = identity::code_at(&secret, app.clock.now());
    let p = b
        .post(
            "/login/totp?next=%2Fportal%2Faccount",
            &[("csrf_token", &totp.csrf()), ("code", &code)],
        )
        .await;
    assert_eq!(p.location.as_deref(), Some("/portal/account"));
    assert!(oauth::check_bearer(&app, &g.access_token).is_ok());
}
