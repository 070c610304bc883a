//! Sign-in with an OpenID Connect provider (`[[oidc]]`).
//!
//! The sign-in itself runs against a real OpenID Provider: the npm package `oidc-provider`
//! (a certified OpenID Provider), started per test by `tests/node/oidc-provider.mjs` on
//! 127.0.0.1. Those tests are `#[ignore]`d (they need Node and `npm ci` in tests/node; `.ci/run`
//! runs them) and fail — never skip — when Node or the package is missing. The cases the
//! provider would never produce on its own come from the same real provider, set up for them:
//! a wrong `nonce` is the test changing the nonce in the authorization request kennis sent
//! (the provider then signs that nonce); an ID token signed by another key is the provider's
//! `/jwks` serving a different public key under the same key id (`OIDC_JWKS=other`); an
//! expired one is a provider whose ID tokens live 60 seconds while kennis's clock is moved
//! on by three minutes. No stand-in replaces the provider.
//!
//! The fast tests (run by `cargo test`) cover what needs no provider: configuration refusals,
//! the login and invitation pages' buttons, the callback's refusals before any provider is
//! asked, its per-address limit, an unreachable provider, and the portal actions that revoke
//! all of a person's connections.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kennis::config::{OAuthSettings, OidcProvider, Settings};

use crate::fixture::{Browser, KillOnDrop, Page, Seeded, TestServer, free_port};

/// Invites `email` into `admin`'s organisation as a member, by that admin, at the clock's now;
/// the invitation link's token.
fn invite(t: &TestServer, admin: &Seeded, email: &str) -> String {
    let app = t.app();
    let by = kennis::audit::Actor::person(admin.person.id, &admin.person.email);
    let role = kennis::identity::Role::Member;
    kennis::identity::invite(&app.store, &by, admin.org.id, email, role, app.clock.now())
        .unwrap()
        .1
}

const CLIENT_ID: &str = "kennis-test";
const CLIENT_SECRET: &str = "test-client-secret-7f3a";

fn provider(id: &str, issuer: &str, secret_file: Option<PathBuf>) -> OidcProvider {
    OidcProvider {
        id: id.into(),
        name: "Test IdP".into(),
        issuer: issuer.into(),
        client_id: CLIENT_ID.into(),
        client_secret_env: None,
        client_secret_file: secret_file,
        scopes: kennis::config::DEFAULT_OIDC_SCOPES.into(),
        skip_second_factor: false,
    }
}

fn settings(providers: Vec<OidcProvider>) -> Settings {
    Settings {
        oauth: Some(OAuthSettings {
            oidc_allow_http_loopback: Some(true),
            ..Default::default()
        }),
        oidc: Some(providers),
        ..Default::default()
    }
}

/// kennis with one provider `idp` at `http://127.0.0.1:<idp_port>` (its client secret in a
/// file), its clock at the wall clock's time (the provider's tokens carry real times).
async fn kennis_for(idp_port: u16, change: impl FnOnce(&mut OidcProvider)) -> TestServer {
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), format!("{CLIENT_SECRET}\n")).unwrap();
    let (_, path) = secret.keep().unwrap();
    let mut p = provider(
        "idp",
        &format!("http://127.0.0.1:{idp_port}"),
        Some(path.clone()),
    );
    change(&mut p);
    let t = TestServer::start_with(settings(vec![p])).await;
    t.clock.set(Timestamp::now());
    t
}

/// The test provider, killed when dropped.
struct Idp {
    _child: KillOnDrop,
    issuer: String,
}

/// Starts `tests/node/oidc-provider.mjs` on `port` with the client whose redirect URI is
/// kennis's, the accounts below, and `env` (see the script). Fails the test when Node or the
/// package is missing.
async fn start_idp(t: &TestServer, port: u16, env: &[(&str, &str)]) -> Idp {
    let accounts = serde_json::json!({
        "alice": {"email": "Alice@Example.ORG", "email_verified": true, "name": "Alice A."},
        "unverified": {"email": "unverified@example.org", "email_verified": false},
        "stranger": {"email": "stranger@example.org", "email_verified": true},
        "disabled": {"email": "disabled@example.org", "email_verified": true},
        "invitee": {"email": "invitee@example.org", "email_verified": true, "name": "Ivy Invitee"},
        "noemail": {"name": "No Email"},
    });
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node");
    let log = t.data_dir().join("oidc-provider.log");
    let mut cmd = Command::new("node");
    cmd.arg("oidc-provider.mjs")
        .current_dir(&dir)
        .env("OIDC_PORT", port.to_string())
        .env("OIDC_REDIRECT_URI", t.url("/login/oidc/idp/callback"))
        .env("OIDC_CLIENT_ID", CLIENT_ID)
        .env("OIDC_CLIENT_SECRET", CLIENT_SECRET)
        .env("OIDC_ACCOUNTS", accounts.to_string())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut child = cmd
        .spawn()
        .expect("node runs (is Node installed and `npm ci` done in tests/node?)");
    let stdout = child.stdout.take().unwrap();
    let child = KillOnDrop(child);
    // The first line is the address; the rest is read (and dropped) for as long as the
    // provider runs, so that its later output never meets a closed pipe.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next().and_then(Result::ok).unwrap_or_default());
        for _ in lines {}
    });
    let line = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("the provider started in time");
    let started: serde_json::Value = serde_json::from_str(line.trim()).unwrap_or_else(|_| {
        panic!(
            "oidc-provider did not start (is `npm ci` done in tests/node?): {line}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    Idp {
        _child: child,
        issuer: started["issuer"].as_str().unwrap().to_owned(),
    }
}

fn unescape(s: &str) -> String {
    s.replace("&amp;", "&").replace("&quot;", "\"")
}

/// The `href` of the link with this id on a page.
fn link(page: &Page, id: &str) -> String {
    let at = page
        .body
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} on the page: {}", page.body));
    let rest = &page.body[at..];
    let href = &rest[rest.find("href=\"").unwrap() + 6..];
    unescape(&href[..href.find('"').unwrap()])
}

fn has_session(b: &Browser<'_>) -> bool {
    b.cookies.contains_key("kb_session")
}

/// Clicks the provider's button on the login page (to go on to `next`), has the provider
/// sign in `account` (`login_hint`, after `tamper` may change the authorization request),
/// and follows the redirects until the provider sends the browser back: that URL, not yet
/// opened.
async fn to_callback(
    t: &TestServer,
    b: &mut Browser<'_>,
    start: &str,
    account: &str,
    tamper: impl FnOnce(&mut url::Url),
) -> String {
    let p = b.get(start).await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(b.cookies.contains_key("kb_oidc"), "the flow cookie is set");
    let mut auth = url::Url::parse(p.location.as_deref().unwrap()).unwrap();
    let q: std::collections::HashMap<String, String> = auth.query_pairs().into_owned().collect();
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["client_id"], CLIENT_ID);
    assert_eq!(q["redirect_uri"], t.url("/login/oidc/idp/callback"));
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["code_challenge"].len(), 43);
    assert!(q["state"].len() >= 43 && q["nonce"].len() >= 43);
    assert_ne!(q["state"], q["nonce"]);
    assert_eq!(q["scope"], "openid email profile");
    auth.query_pairs_mut().append_pair("login_hint", account);
    tamper(&mut auth);
    let mut at = auth.to_string();
    for _ in 0..10 {
        if at.starts_with(&t.url("/login/oidc/")) {
            return at;
        }
        let p = b.get(&at).await;
        assert!(
            (300..400).contains(&p.status),
            "{at} answered {}: {}",
            p.status,
            p.body
        );
        let next = p.location.unwrap();
        at = url::Url::parse(&at)
            .unwrap()
            .join(&next)
            .unwrap()
            .to_string();
    }
    panic!("the provider did not send the browser back");
}

/// A sign-in from the login page with `account`, to the page the callback answers.
async fn sign_in(t: &TestServer, b: &mut Browser<'_>, account: &str, next: &str) -> Page {
    let q = form_urlencoded::Serializer::new(String::new())
        .append_pair("next", next)
        .finish();
    let login = b.get(&format!("/login?{q}")).await;
    let start = link(&login, "oidc-idp");
    let callback = to_callback(t, b, &start, account, |_| {}).await;
    b.get(&callback).await
}

/// A refused sign-in: the status, a page saying why, no session, the flow cookie cleared.
fn assert_refused(b: &Browser<'_>, p: &Page, status: u16, words: &str) {
    assert_eq!(p.status, status, "{}", p.body);
    assert!(p.body.contains("id=\"error\""), "{}", p.body);
    assert!(p.body.contains(words), "`{words}` not in: {}", p.body);
    assert!(
        !p.headers
            .get_all("set-cookie")
            .iter()
            .any(|c| c.to_str().unwrap().starts_with("kb_session=")),
        "no session cookie"
    );
    assert!(!has_session(b), "no session");
    assert!(
        !b.cookies.contains_key("kb_oidc"),
        "the flow cookie is cleared"
    );
}

/// The second factor after a sign-in that asked for it; ends where the login continues.
async fn second_factor(t: &TestServer, b: &mut Browser<'_>, s: &Seeded, at: &str) -> Page {
    assert!(at.starts_with("/login/totp"), "{at}");
    let p = b.get(at).await;
    assert!(p.body.contains("id=\"totp-form\""), "{}", p.body);
    let csrf = p.csrf();
    t.clock.advance(SignedDuration::from_secs(30));
    let code = kennis::identity::code_at(&s.totp_secret, t.app().clock.now());
    let p = b.post(at, &[("csrf_token", &csrf), ("code", &code)]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node (oidc-provider); run by .ci/run"]
async fn a_provider_sign_in_with_the_second_factor_ends_in_a_portal_session() {
    let port = free_port();
    let t = kennis_for(port, |_| {}).await;
    let _idp = start_idp(&t, port, &[]).await;
    // The provider says `Alice@Example.ORG`: matched case-insensitively.
    let s = t.seed("Acme", "alice@example.org");
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "alice", "/portal").await;
    // The provider's claims came from its userinfo endpoint (not in the ID token here).
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(has_session(&b));
    assert!(!b.cookies.contains_key("kb_oidc"));
    let at = p.location.unwrap();
    // Not logged in yet: the portal still wants the second factor.
    let portal = b.get("/portal").await;
    assert_eq!(portal.status, 303);
    let p = second_factor(&t, &mut b, &s, &at).await;
    assert_eq!(p.location.as_deref(), Some("/portal"));
    let portal = b.get("/portal").await;
    assert_eq!(portal.status, 200, "{}", portal.body);
    assert!(portal.body.contains("alice@example.org"));
    assert!(portal.body.contains("Acme"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node (oidc-provider); run by .ci/run"]
async fn a_provider_sign_in_continues_an_authorization_to_a_code() {
    use crate::fixture::{REDIRECT, approve, authorize_path, pkce, query_of, register_public};
    let port = free_port();
    let t = kennis_for(port, |_| {}).await;
    // Claims in the ID token itself this time (no userinfo request).
    let _idp = start_idp(&t, port, &[("OIDC_CLAIMS_IN_ID_TOKEN", "1")]).await;
    let s = t.seed("Acme", "alice@example.org");
    let client_id = register_public(&t).await;
    let (verifier, challenge) = pkce();
    let path = authorize_path(&client_id, &challenge, &[]);
    let mut b = Browser::new(&t);
    let first = b.get(&path).await;
    assert_eq!(first.status, 303);
    let login = b.get(first.location.as_deref().unwrap()).await;
    let start = link(&login, "oidc-idp");
    let callback = to_callback(&t, &mut b, &start, "alice", |_| {}).await;
    let p = b.get(&callback).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let p = second_factor(&t, &mut b, &s, p.location.as_deref().unwrap()).await;
    assert_eq!(
        p.location.as_deref(),
        Some(path.as_str()),
        "back to /authorize"
    );
    let consent = b.get(&path).await;
    let p = approve(&mut b, &consent, &s.org.slug, &["kennisbank"]).await;
    assert_eq!(p.status, 302, "{}", p.body);
    let loc = p.location.unwrap();
    assert!(loc.starts_with(REDIRECT), "{loc}");
    let q = query_of(&loc);
    let (status, tok) = crate::fixture::token(
        &t,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", &client_id),
            ("code", &q["code"]),
            ("redirect_uri", REDIRECT),
            ("code_verifier", &verifier),
        ],
    )
    .await;
    assert_eq!(status, 200, "{tok}");
    let ctx = kennis::oauth::check_bearer(t.app(), tok["access_token"].as_str().unwrap()).unwrap();
    assert_eq!((ctx.org_id, ctx.person_id), (s.org.id, s.person.id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node (oidc-provider); run by .ci/run"]
async fn a_real_provider_sign_in_is_refused_with_a_page_and_no_session() {
    let port = free_port();
    let t = kennis_for(port, |_| {}).await;
    let _idp = start_idp(&t, port, &[]).await;
    let people_before = kennis::identity::list_people(&t.app().store).unwrap().len();

    // The provider has not verified the address.
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "unverified", "/portal").await;
    assert_refused(
        &b,
        &p,
        403,
        "has not verified the email address unverified@example.org",
    );

    // Verified, but nobody here has that address: no account is made.
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "stranger", "/portal").await;
    assert_refused(
        &b,
        &p,
        403,
        "There is no account for stranger@example.org here",
    );
    assert_eq!(
        kennis::identity::list_people(&t.app().store).unwrap().len(),
        people_before
    );

    // No email at all.
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "noemail", "/portal").await;
    assert_refused(&b, &p, 403, "gave no email address");

    // A disabled person (kennis user disable) cannot sign in through the provider either.
    t.seed("Acme", "disabled@example.org");
    kennis::erase::disable_person(
        &t.app().store,
        &kennis::audit::Actor::Operator,
        "disabled@example.org",
        t.app().clock.now(),
    )
    .unwrap();
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "disabled", "/portal").await;
    assert_refused(&b, &p, 403, "This account is disabled");

    // The provider ends the sign-in (an account it does not know): its error is shown.
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "nobody-at-the-provider", "/portal").await;
    assert_refused(
        &b,
        &p,
        403,
        "The provider ended the sign-in (access_denied)",
    );

    // A wrong `state`: the answer is not for the sign-in this browser started.
    let mut b = Browser::new(&t);
    let login = b.get("/login").await;
    let start = link(&login, "oidc-idp");
    let callback = to_callback(&t, &mut b, &start, "alice", |_| {}).await;
    let mut wrong = url::Url::parse(&callback).unwrap();
    let pairs: Vec<(String, String)> = wrong.query_pairs().into_owned().collect();
    wrong.query_pairs_mut().clear();
    for (k, v) in pairs {
        let v = if k == "state" { format!("{v}x") } else { v };
        wrong.query_pairs_mut().append_pair(&k, &v);
    }
    let p = b.get(wrong.as_str()).await;
    assert_refused(&b, &p, 400, "was not started here");

    // The right answer opened in another browser (no flow cookie) is refused the same way.
    let mut b = Browser::new(&t);
    let login = b.get("/login").await;
    let start = link(&login, "oidc-idp");
    let callback = to_callback(&t, &mut b, &start, "alice", |_| {}).await;
    let mut other = Browser::new(&t);
    let p = other.get(&callback).await;
    assert_refused(&other, &p, 400, "was not started here");

    // A wrong `nonce`: the authorization request is changed on its way to the provider, which
    // signs the changed nonce into the ID token; kennis expects its own.
    let mut b = Browser::new(&t);
    let login = b.get("/login").await;
    let start = link(&login, "oidc-idp");
    let callback = to_callback(&t, &mut b, &start, "alice", |u| {
        let pairs: Vec<(String, String)> = u.query_pairs().into_owned().collect();
        u.query_pairs_mut().clear();
        for (k, v) in pairs {
            let v = if k == "nonce" {
                "attacker-chosen-nonce".into()
            } else {
                v
            };
            u.query_pairs_mut().append_pair(&k, &v);
        }
    })
    .await;
    let p = b.get(&callback).await;
    assert_refused(
        &b,
        &p,
        401,
        "was not made for this sign-in (its nonce differs)",
    );

    // Nothing of all this made a session or an account.
    assert_eq!(
        kennis::identity::list_people(&t.app().store).unwrap().len(),
        people_before + 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node (oidc-provider); run by .ci/run"]
async fn an_expired_id_token_is_refused() {
    let port = free_port();
    let t = kennis_for(port, |_| {}).await;
    // ID tokens valid 60 seconds; kennis allows 60 seconds of clock skew.
    let _idp = start_idp(&t, port, &[("OIDC_ID_TOKEN_TTL", "60")]).await;
    t.seed("Acme", "alice@example.org");
    // In time: accepted (the same provider, the same tokens' lifetime).
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "alice", "/portal").await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(has_session(&b));
    // Three minutes on kennis's clock between the provider's answer and its use: expired
    // (the flow itself is still within its ten minutes).
    let mut b = Browser::new(&t);
    let login = b.get("/login").await;
    let start = link(&login, "oidc-idp");
    let callback = to_callback(&t, &mut b, &start, "alice", |_| {}).await;
    t.clock.advance(SignedDuration::from_mins(3));
    let p = b.get(&callback).await;
    assert_refused(&b, &p, 401, "had expired by the time it reached kennis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node (oidc-provider); run by .ci/run"]
async fn an_id_token_signed_by_another_key_is_refused() {
    let port = free_port();
    let t = kennis_for(port, |_| {}).await;
    // The provider signs with its key; its /jwks publishes another under the same key id.
    let _idp = start_idp(
        &t,
        port,
        &[("OIDC_JWKS", "other"), ("OIDC_CLAIMS_IN_ID_TOKEN", "1")],
    )
    .await;
    t.seed("Acme", "alice@example.org");
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "alice", "/portal").await;
    assert_refused(&b, &p, 401, "not signed with a key the provider publishes");
}

/// How often kennis fetched the test provider's keys.
async fn jwks_fetches(t: &TestServer, idp: &Idp) -> u64 {
    let v: serde_json::Value = t
        .client
        .get(format!("{}/__test/jwks-fetches", idp.issuer))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["fetches"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node (oidc-provider); run by .ci/run"]
async fn keys_are_fetched_again_for_an_unknown_key_id() {
    let port = free_port();
    let t = kennis_for(port, |_| {}).await;
    // The first JWKS kennis fetches holds only a decoy key; the token's key id is unknown to
    // it, so kennis fetches the keys again (the provider rotated them) and signs in.
    let idp = start_idp(&t, port, &[("OIDC_JWKS", "stale-first")]).await;
    t.seed("Acme", "alice@example.org");
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "alice", "/portal").await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(has_session(&b));
    assert_eq!(jwks_fetches(&t, &idp).await, 2);
    // The next sign-in uses the cached keys.
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "alice", "/portal").await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(jwks_fetches(&t, &idp).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node (oidc-provider); run by .ci/run"]
async fn an_invitation_is_accepted_with_the_provider_for_the_invited_address_only() {
    let port = free_port();
    let t = kennis_for(port, |_| {}).await;
    let _idp = start_idp(&t, port, &[]).await;
    let admin = t.seed("Acme", "admin@example.org");
    let app = t.app();
    let other_token = invite(&t, &admin, "someone-else@example.org");
    // Signed in as someone the invitation is not for: refused, the invitation stays open.
    let mut b = Browser::new(&t);
    let page = b.get(&format!("/invite/{other_token}")).await;
    let start = link(&page, "oidc-idp");
    assert!(start.contains("invite="), "{start}");
    let callback = to_callback(&t, &mut b, &start, "invitee", |_| {}).await;
    let p = b.get(&callback).await;
    assert_refused(
        &b,
        &p,
        403,
        "This invitation is for someone-else@example.org",
    );
    kennis::identity::open_invitation(&app.store, &other_token, app.clock.now()).unwrap();

    // The invited address: a new account (the provider's name), a member, on to enrolment.
    let token = invite(&t, &admin, "invitee@example.org");
    let mut b = Browser::new(&t);
    let page = b.get(&format!("/invite/{token}")).await;
    let start = link(&page, "oidc-idp");
    let callback = to_callback(&t, &mut b, &start, "invitee", |_| {}).await;
    let p = b.get(&callback).await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(p.location.unwrap().starts_with("/login/totp"));
    assert!(has_session(&b));
    let person = kennis::identity::find_person(&app.store, "invitee@example.org").unwrap();
    assert_eq!(person.name, "Ivy Invitee");
    let member = app
        .store
        .read(|tx| kennis::identity::member(tx, admin.org.id, person.id))
        .unwrap();
    assert!(member.is_some());
    // The password nobody knows does not open the account.
    assert!(kennis::identity::verify_login(&app.store, "invitee@example.org", "").is_err());
    let used = kennis::identity::open_invitation(&app.store, &token, app.clock.now());
    assert!(matches!(
        used,
        Err(kennis::identity::IdentityError::LinkUsed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node (oidc-provider); run by .ci/run"]
async fn a_provider_trusted_for_the_second_factor_skips_it() {
    let port = free_port();
    let t = kennis_for(port, |p| p.skip_second_factor = true).await;
    let _idp = start_idp(&t, port, &[]).await;
    t.seed("Acme", "alice@example.org");
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "alice", "/portal").await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(p.location.as_deref(), Some("/portal"));
    let portal = b.get("/portal").await;
    assert_eq!(portal.status, 200, "{}", portal.body);
    let person = kennis::identity::find_person(&t.app().store, "alice@example.org").unwrap();
    assert!(person.last_login.is_some());
}

// ---- Without a provider (cargo test) ----

#[test]
fn oidc_tables_parse_and_bad_ones_are_refused() {
    let file = r#"
[oauth]
oidc_allow_http_loopback = false

[[oidc]]
id = "entra"
name = "Microsoft"
issuer = "https://login.microsoftonline.com/0000/v2.0"
client_id = "abc"
client_secret_env = "KENNIS_OIDC_SECRET"

[[oidc]]
id = "google"
name = "Google"
issuer = "https://accounts.google.com"
client_id = "def"
client_secret_file = "/etc/kennis/google-secret"
scopes = "openid  email"
skip_second_factor = true
"#;
    let s: Settings = toml::from_str(file).unwrap();
    let c = s.validate().unwrap();
    assert_eq!(c.oidc.len(), 2);
    assert_eq!(c.oidc[0].scopes, "openid email profile");
    assert!(!c.oidc[0].skip_second_factor);
    assert_eq!(c.oidc[1].scopes, "openid email");
    assert!(c.oidc[1].skip_second_factor);

    let refused = |table: &str, switch: Option<bool>| -> String {
        let mut s: Settings = toml::from_str(table).unwrap();
        s.oauth = switch.map(|on| OAuthSettings {
            oidc_allow_http_loopback: Some(on),
            ..Default::default()
        });
        s.validate().unwrap_err().to_string()
    };
    let table =
        |extra: &str| format!("[[oidc]]\nid = \"x\"\nname = \"X\"\nclient_id = \"c\"\n{extra}\n");
    // An http issuer only with the test switch, and only on 127.0.0.1.
    let http = table("issuer = \"http://127.0.0.1:9000\"");
    assert!(refused(&http, None).contains("https://"));
    assert!(refused(&http, Some(false)).contains("https://"));
    let mut s: Settings = toml::from_str(&http).unwrap();
    s.oauth = Some(OAuthSettings {
        oidc_allow_http_loopback: Some(true),
        ..Default::default()
    });
    assert!(s.validate().is_ok());
    assert!(refused(&table("issuer = \"http://localhost:9000\""), Some(true)).contains("issuer"));
    assert!(refused(&table("issuer = \"http://id.example\""), Some(true)).contains("issuer"));
    for (extra, says) in [
        ("issuer = \"https://id.example?x=1\"", "query"),
        ("issuer = \"https://user@id.example\"", "issuer"),
        ("issuer = \"ftp://id.example\"", "issuer"),
        (
            "issuer = \"https://id.example\"\nscopes = \"email profile\"",
            "openid",
        ),
        (
            "issuer = \"https://id.example\"\nclient_secret_env = \"A\"\nclient_secret_file = \"/s\"",
            "not both",
        ),
        (
            "issuer = \"https://id.example\"\nclient_secret_file = \"relative/secret\"",
            "absolute",
        ),
        (
            "issuer = \"https://id.example\"\nclient_secret_env = \"NOT-A-NAME\"",
            "environment variable",
        ),
    ] {
        let e = refused(&table(extra), None);
        assert!(e.contains(says) && e.contains("oidc"), "{extra}: {e}");
    }
    let bad_id = "[[oidc]]\nid = \"Bad Id\"\nname = \"X\"\nissuer = \"https://id.example\"\nclient_id = \"c\"\n";
    assert!(refused(bad_id, None).contains("a-z"));
    let twice = format!(
        "{}{}",
        table("issuer = \"https://a.example\""),
        table("issuer = \"https://b.example\"")
    );
    assert!(refused(&twice, None).contains("twice"));
    // Unknown keys in a table are refused, as everywhere in the file.
    assert!(
        toml::from_str::<Settings>(&table("issuer = \"https://a.example\"\nsecret = \"x\""))
            .is_err()
    );
}

/// The configuration example of docs/sign-in.md is a valid configuration, not only valid TOML.
#[test]
fn the_documented_providers_validate() {
    let page =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/sign-in.md"))
            .unwrap();
    let block = page
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    let c = toml::from_str::<Settings>(block)
        .unwrap()
        .validate()
        .unwrap();
    let ids: Vec<&str> = c.oidc.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["entra", "google", "keycloak"]);
}

#[test]
fn the_loopback_switch_comes_from_the_file_and_the_environment() {
    let env = |v: &str| {
        let v = v.to_owned();
        Settings::from_env(move |k| (k == "KENNIS_OIDC_ALLOW_HTTP_LOOPBACK").then(|| v.clone()))
    };
    let on = env("true").unwrap();
    assert_eq!(
        on.oauth.as_ref().unwrap().oidc_allow_http_loopback,
        Some(true)
    );
    assert!(
        env("maybe")
            .unwrap_err()
            .to_string()
            .contains("KENNIS_OIDC_ALLOW_HTTP_LOOPBACK")
    );
    // The file says cimd, the environment oidc: both hold.
    let file: Settings = toml::from_str("[oauth]\ncimd_allow_http_loopback = true").unwrap();
    let c = file.overlay(on).validate().unwrap();
    assert!(c.cimd_allow_http_loopback && c.oidc_allow_http_loopback);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_and_invitation_pages_offer_each_provider() {
    let mut second = provider("keycloak", "https://kc.example/realms/acme", None);
    second.name = "Keycloak <Acme>".into();
    let t = TestServer::start_with(settings(vec![
        provider("idp", "https://id.example", None),
        second,
    ]))
    .await;
    let mut b = Browser::new(&t);
    let p = b
        .get("/login?next=%2Fauthorize%3Fclient_id%3Dx%26state%3Dy")
        .await;
    assert_eq!(p.status, 200);
    assert_eq!(
        link(&p, "oidc-idp"),
        "/login/oidc/idp?next=%2Fauthorize%3Fclient_id%3Dx%26state%3Dy"
    );
    assert_eq!(
        link(&p, "oidc-keycloak"),
        "/login/oidc/keycloak?next=%2Fauthorize%3Fclient_id%3Dx%26state%3Dy"
    );
    assert!(p.body.contains("Keycloak &lt;Acme&gt;"), "the name is text");
    assert!(
        p.body.contains("id=\"login-form\""),
        "the password login stays"
    );
    // In Dutch too.
    let mut nl = Browser::speaking(&t, "nl");
    let p = nl.get("/login").await;
    assert!(
        p.body
            .contains("Of log in met het account van uw organisatie")
    );
    // An invitation's page offers them for accepting it.
    let s = t.seed("Acme", "admin@example.org");
    let token = invite(&t, &s, "new@example.org");
    let p = b.get(&format!("/invite/{token}")).await;
    let start = link(&p, "oidc-idp");
    assert!(
        start.starts_with(&format!("/login/oidc/idp?invite={token}&csrf=")),
        "{start}"
    );
    // Without providers there is no button.
    let plain = TestServer::start().await;
    let p = Browser::new(&plain).get("/login").await;
    assert!(!p.body.contains("oidc-"), "{}", p.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_without_a_started_sign_in_are_refused_and_limited_per_address() {
    // The issuer is never asked: every refusal here comes before.
    let t =
        TestServer::start_with(settings(vec![provider("idp", "http://127.0.0.1:9", None)])).await;
    let mut b = Browser::new(&t);
    let p = b.get("/login/oidc/nope/callback?code=c&state=s").await;
    assert_refused(&b, &p, 404, "no such sign-in provider");
    let p = b.get("/login/oidc/nope").await;
    assert_eq!(p.status, 404);
    // A made-up flow cookie and state.
    b.cookies
        .insert("kb_oidc".into(), "eyJwIjoiaWRwIn0.forged".into());
    let p = b.get("/login/oidc/idp/callback?code=c&state=s").await;
    assert_refused(&b, &p, 400, "was not started here");
    // Dutch.
    let mut nl = Browser::speaking(&t, "nl");
    let p = nl.get("/login/oidc/idp/callback?code=c&state=s").await;
    assert_refused(&nl, &p, 400, "is niet hier begonnen");
    // Ten failures from one address in the window (two above), then 429 with Retry-After.
    for _ in 0..8 {
        let p = b.get("/login/oidc/idp/callback?code=c&state=s").await;
        assert_eq!(p.status, 400);
    }
    let p = b.get("/login/oidc/idp/callback?code=c&state=s").await;
    assert_eq!(p.status, 429, "{}", p.body);
    assert!(p.headers.get("retry-after").is_some());
    assert!(!has_session(&b));
    // After the window, the address may try again.
    t.clock.advance(SignedDuration::from_mins(16));
    let p = b.get("/login/oidc/idp/callback?code=c&state=s").await;
    assert_eq!(p.status, 400);
}

/// A server whose provider `idp` is on a loopback port nothing listens on (returned).
async fn unreachable_provider() -> (TestServer, u16) {
    let port = free_port();
    let t = TestServer::start_with(settings(vec![provider(
        "idp",
        &format!("http://127.0.0.1:{port}"),
        None,
    )]))
    .await;
    (t, port)
}

/// A page elsewhere cannot make a visitor accept an invitation by sending their browser
/// through the provider (where they may be signed in already): the invitation's start needs
/// the token its page bound to this browser's pre-login cookie. Refused before the provider
/// is asked, and the invitation stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invitation_is_started_with_a_provider_only_from_its_page_in_that_browser() {
    // A start that gets past the check is a 502.
    let (t, _) = unreachable_provider().await;
    let s = t.seed("Acme", "admin@example.org");
    let app = t.app();
    let token = invite(&t, &s, "new@example.org");
    // The address an attacker who made the invitation knows: no token, or a made-up one.
    for forged in [
        format!("/login/oidc/idp?invite={token}"),
        format!("/login/oidc/idp?invite={token}&csrf=AAAA"),
    ] {
        let mut victim = Browser::new(&t);
        let p = victim.get(&forged).await;
        assert_eq!(p.status, 403, "{forged}: {}", p.body);
        assert!(!victim.cookies.contains_key("kb_oidc"));
    }
    // The token from the page, but in another browser (no pre-login cookie, or another one).
    let mut invitee = Browser::new(&t);
    let page = invitee.get(&format!("/invite/{token}")).await;
    assert!(invitee.cookies.contains_key("kb_pre"), "the page sets it");
    let start = link(&page, "oidc-idp");
    let p = Browser::new(&t).get(&start).await;
    assert_eq!(p.status, 403, "{}", p.body);
    let mut other = Browser::new(&t);
    other.get("/login").await;
    assert!(other.cookies.contains_key("kb_pre"));
    let p = other.get(&start).await;
    assert_eq!(p.status, 403, "{}", p.body);
    // The page's own browser gets past it (to the unreachable provider).
    let p = invitee.get(&start).await;
    assert_eq!(p.status, 502, "{}", p.body);
    // A plain sign-in needs no token: it only signs the browser's owner in.
    let p = Browser::new(&t).get("/login/oidc/idp?next=%2Fportal").await;
    assert_eq!(p.status, 502, "{}", p.body);
    // The form sent back (passwords that differ) shows the page again: with the cookie, with
    // buttons that still start; without it, with none (they could not start).
    let at = format!("/invite/{token}");
    let differ = [
        ("name", "Nieuw"),
        ("password", "een-lang-wachtwoord-1"),
        ("password_again", "een-ander-wachtwoord-2"),
    ];
    let again = invitee.submit(&at, &differ).await;
    assert_eq!(again.status, 400, "{}", again.body);
    assert_eq!(link(&again, "oidc-idp"), start);
    let mut cookieless = Browser::new(&t);
    let csrf = cookieless.get(&at).await.csrf();
    cookieless.cookies.remove("kb_pre");
    let mut form = vec![("csrf_token", csrf.as_str())];
    form.extend_from_slice(&differ);
    let again = cookieless.post(&at, &form).await;
    assert_eq!(again.status, 400, "{}", again.body);
    assert!(!again.body.contains("oidc-idp"), "{}", again.body);
    kennis::identity::open_invitation(&app.store, &token, app.clock.now()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_provider_gets_a_page_without_its_addresses() {
    let (t, port) = unreachable_provider().await;
    let mut b = Browser::new(&t);
    let p = b.get("/login/oidc/idp?next=%2Fportal").await;
    assert_eq!(p.status, 502, "{}", p.body);
    assert!(p.body.contains("could not be reached"), "{}", p.body);
    assert!(
        !p.body.contains(&port.to_string()),
        "no address on the page"
    );
    assert!(!b.cookies.contains_key("kb_oidc"));
    // A provider is the operator's choice, so it may live inside the operator's network (a
    // Keycloak on the LAN): kennis connects to an https issuer on a private address (here
    // loopback, without the test switch, which is only about http). The listener sees the
    // connection; the TLS handshake then fails and the page names no address.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let inside = listener.local_addr().unwrap().port();
    let t = TestServer::start_with(Settings {
        oidc: Some(vec![provider(
            "idp",
            &format!("https://127.0.0.1:{inside}/realms/x"),
            None,
        )]),
        ..Default::default()
    })
    .await;
    let accepted = std::thread::spawn(move || listener.accept().is_ok());
    let p = Browser::new(&t).get("/login/oidc/idp").await;
    assert_eq!(p.status, 502, "{}", p.body);
    assert!(
        !p.body.contains(&inside.to_string()),
        "no address on the page"
    );
    assert!(
        accepted.join().unwrap(),
        "kennis connected to the provider inside the network"
    );
}

/// Makes `email` a member of `org` too.
fn join(t: &TestServer, org: &str, email: &str) {
    let (role, now) = (kennis::identity::Role::Member, t.app().clock.now());
    kennis::identity::add_member(&t.app().store, org, email, role, true, now).unwrap();
}

/// A grant and a personal access token of `person` in `org`.
fn credentials(t: &TestServer, org: u64, person: u64) -> (String, String) {
    let grant = t.grant_pair(org, person, &["kennisbank"]).access_token;
    let (_, pat) = kennis::oauth::pats::create(
        &t.app().store,
        &kennis::audit::Actor::Operator,
        kennis::oauth::pats::NewToken {
            org_id: org,
            person_id: person,
            name: "script".into(),
            scopes: vec![],
            expires_in_days: None,
        },
        t.app().clock.now(),
    )
    .unwrap();
    (grant, pat)
}

fn works(t: &TestServer, token: &str) -> bool {
    if token.starts_with("kb_pat_") {
        kennis::oauth::pats::check_bearer(t.app(), token).is_ok()
    } else {
        kennis::oauth::check_bearer(t.app(), token).is_ok()
    }
}

fn admin_actions(t: &TestServer, org: u64, action: &str) -> Vec<String> {
    t.audit_records(org)
        .into_iter()
        .filter(|r| r.action.as_deref() == Some(action))
        .map(|r| {
            format!(
                "{} {}",
                r.actor.unwrap_or_default(),
                r.target.unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_revokes_all_their_connections_everywhere() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "leaver@example.org");
    let other = t.seed("Beta", "boss@example.org");
    join(&t, &other.org.slug, "leaver@example.org");
    let here = credentials(&t, s.org.id, s.person.id);
    let there = credentials(&t, other.org.id, s.person.id);
    let bystander = credentials(&t, other.org.id, other.person.id);
    // Another session of the person (another device).
    let mut elsewhere = Browser::new(&t);
    elsewhere.login(&s, "/portal").await;
    let mut b = Browser::new(&t);
    let account = b.login(&s, "/portal/account").await;
    assert!(
        account.body.contains("id=\"revoke-all-form\""),
        "{}",
        account.body
    );
    let p = b
        .post(
            "/portal/account/revoke-all",
            &[("csrf_token", &account.csrf())],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body
            .contains("2 connection(s) and 2 personal access token(s)"),
        "{}",
        p.body
    );
    for token in [&here.0, &here.1, &there.0, &there.1] {
        assert!(!works(&t, token), "{token} still works");
    }
    assert!(works(&t, &bystander.0) && works(&t, &bystander.1));
    // This session stays; the other one ended.
    assert_eq!(b.get("/portal").await.status, 200);
    assert_eq!(elsewhere.get("/portal").await.status, 303);
    // Audited as an admin action in both organisations.
    for org in [s.org.id, other.org.id] {
        let rec = admin_actions(&t, org, "connection.revoke_all");
        assert_eq!(
            rec,
            ["leaver@example.org leaver@example.org grants=2 tokens=2"]
        );
    }
    // Without the form's token nothing happens.
    let fresh = credentials(&t, s.org.id, s.person.id);
    let p = b.post("/portal/account/revoke-all", &[]).await;
    assert_eq!(p.status, 403);
    assert!(works(&t, &fresh.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_revokes_a_members_connections_in_their_own_organisation_only() {
    let t = TestServer::start().await;
    let admin = t.seed("Acme", "admin@example.org");
    let member = t.seed("Beta", "member@example.org");
    join(&t, &admin.org.slug, "member@example.org");
    let in_acme = credentials(&t, admin.org.id, member.person.id);
    let in_beta = credentials(&t, member.org.id, member.person.id);
    let mut b = Browser::new(&t);
    let page = b.login(&admin, "/portal/o/acme/members").await;
    assert!(page.body.contains("value=\"revoke_all\""), "{}", page.body);
    let path = format!("/portal/o/acme/members/{}", member.person.id);
    let p = b
        .post(
            &path,
            &[("csrf_token", &page.csrf()), ("action", "revoke_all")],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("id=\"revoke-done\""), "{}", p.body);
    assert!(!works(&t, &in_acme.0) && !works(&t, &in_acme.1));
    // The member's connections in the other organisation and their sessions stay.
    assert!(works(&t, &in_beta.0) && works(&t, &in_beta.1));
    assert_eq!(
        admin_actions(&t, admin.org.id, "connection.revoke_all"),
        ["admin@example.org member@example.org grants=1 tokens=1"]
    );
    assert!(admin_actions(&t, member.org.id, "connection.revoke_all").is_empty());

    // Someone who is not a member here (only of Beta) is out of this admin's reach.
    let outsider = t.seed("Beta", "outsider@example.org");
    let theirs = credentials(&t, member.org.id, outsider.person.id);
    let p = b
        .post(
            &format!("/portal/o/acme/members/{}", outsider.person.id),
            &[("csrf_token", &page.csrf()), ("action", "revoke_all")],
        )
        .await;
    assert_eq!(p.status, 404, "{}", p.body);
    assert!(works(&t, &theirs.0) && works(&t, &theirs.1));
    // Nor can the admin act in Beta's pages at all.
    let p = b
        .post(
            &format!("/portal/o/beta/members/{}", outsider.person.id),
            &[("csrf_token", &page.csrf()), ("action", "revoke_all")],
        )
        .await;
    assert_eq!(p.status, 404);
    assert!(works(&t, &theirs.0));
}

/// The pre-account takeover, end to end: an organisation's admin opens an invitation link for
/// an address that has no account, chooses its password and connects an assistant. When the
/// address's owner later accepts another organisation's invitation by signing in with a
/// provider that verified the address, the account becomes theirs alone: the admin's password,
/// connection and personal token stop working before the owner joins, and the claim is
/// audited in the first organisation. A later sign-in claims nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node (oidc-provider); run by .ci/run"]
async fn the_owner_of_an_address_claims_an_account_made_through_a_link() {
    let port = free_port();
    let t = kennis_for(port, |_| {}).await;
    let _idp = start_idp(&t, port, &[]).await;
    let x = t.seed("Acme", "admin@example.org");
    let y = t.seed("Beta", "boss@example.org");
    let app = t.app();
    let now = app.clock.now();
    let chosen = "een-wachtwoord-van-de-beheerder";
    let made = kennis::identity::accept_invitation(
        &app.store,
        &invite(&t, &x, "invitee@example.org"),
        "Ivy",
        chosen,
        now,
    )
    .unwrap();
    assert!(made.claimable);
    let enrol = kennis::identity::reset_totp(&app.store, "invitee@example.org").unwrap();
    let code = kennis::identity::code_at(&enrol.secret, now);
    kennis::identity::verify_totp(&app.store, made.id, &code, now).unwrap();
    kennis::identity::accept_terms(&app.store, made.id, &app.config.terms_version).unwrap();
    let (grant, pat) = credentials(&t, x.org.id, made.id);
    assert!(works(&t, &grant) && works(&t, &pat));

    let mut b = Browser::new(&t);
    let page = b
        .get(&format!(
            "/invite/{}",
            invite(&t, &y, "invitee@example.org")
        ))
        .await;
    let start = link(&page, "oidc-idp");
    let callback = to_callback(&t, &mut b, &start, "invitee", |_| {}).await;
    let p = b.get(&callback).await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert!(has_session(&b));
    let person = kennis::identity::find_person(&app.store, "invitee@example.org").unwrap();
    assert_eq!(person.id, made.id);
    assert!(!person.claimable);
    assert!(kennis::identity::verify_login(&app.store, "invitee@example.org", chosen).is_err());
    assert!(!works(&t, &grant) && !works(&t, &pat));
    let in_y = app
        .store
        .read(|tx| kennis::identity::member(tx, y.org.id, person.id))
        .unwrap();
    assert!(in_y.is_some());
    let claims = admin_actions(&t, x.org.id, "account.claim");
    assert_eq!(claims, vec!["invitee@example.org invitee@example.org"]);

    // Signed in again: nothing left to claim.
    let mut b = Browser::new(&t);
    let p = sign_in(&t, &mut b, "invitee", "/portal").await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(admin_actions(&t, x.org.id, "account.claim").len(), 1);
}
