//! The authorization server: grant core, endpoints, lifetimes on the manual clock.

use jiff::SignedDuration;
use kennis::identity::{self, AccessDenied, ConnectorAccess};
use kennis::oauth::{self, BearerError, NewGrant};

use crate::fixture::{Seeded, TestServer};

fn mint(t: &TestServer, s: &Seeded, scopes: &[&str]) -> oauth::TokenPair {
    t.grant_pair(s.org.id, s.person.id, scopes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_check_gives_context_and_follows_lifetime_and_revocation() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "ann@example.org");
    let app = t.app().clone();
    let pair = mint(&t, &s, &["kennisbank"]);
    assert!(pair.access_token.starts_with("kb_at_"));
    assert!(pair.refresh_token.starts_with("kb_rt_"));
    assert_eq!(pair.expires_in, 3600);
    let ctx = oauth::check_bearer(&app, &pair.access_token).unwrap();
    assert_eq!(ctx.org_id, s.org.id);
    assert_eq!(ctx.person_id, s.person.id);
    assert_eq!(ctx.grant_id, pair.grant_id);
    assert_eq!(ctx.client_id, "test-client");
    assert_eq!(ctx.scopes, vec!["kennisbank"]);

    // Wrong, refresh-as-access, garbage.
    assert_eq!(
        oauth::check_bearer(&app, &pair.refresh_token),
        Err(BearerError::Invalid)
    );
    assert_eq!(
        oauth::check_bearer(&app, "kb_at_nope"),
        Err(BearerError::Invalid)
    );
    assert_eq!(oauth::check_bearer(&app, ""), Err(BearerError::Invalid));

    // Last use is recorded through the batch writer.
    app.batch.flush();
    let last = app
        .store
        .read(|tx| oauth::grant_last_used(tx, pair.grant_id))
        .unwrap();
    assert_eq!(last, Some(app.clock.now()));

    // Access tokens live one hour.
    t.clock.advance(SignedDuration::from_secs(3599));
    assert!(oauth::check_bearer(&app, &pair.access_token).is_ok());
    t.clock.advance(SignedDuration::from_secs(1));
    assert_eq!(
        oauth::check_bearer(&app, &pair.access_token),
        Err(BearerError::Expired)
    );
    assert_eq!(BearerError::Expired.reason(), "token expired");

    // Revocation wins over everything.
    let pair2 = mint(&t, &s, &["kennisbank", "feature_requests"]);
    assert!(oauth::revoke_grant(&app, pair2.grant_id).unwrap());
    assert_eq!(
        oauth::check_bearer(&app, &pair2.access_token),
        Err(BearerError::Revoked)
    );
    assert!(!oauth::revoke_grant(&app, 999_999).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_check_rechecks_the_person_on_every_call() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "bob@example.org");
    let app = t.app().clone();
    let pair = mint(&t, &s, &["feature_requests"]);
    let denied = |r: Result<oauth::AccessContext, BearerError>| match r {
        Err(BearerError::Denied(d)) => Some(d),
        Ok(_) => None,
        Err(e) => panic!("unexpected {e}"),
    };
    assert_eq!(denied(oauth::check_bearer(&app, &pair.access_token)), None);

    identity::set_org_policy(
        &app.store,
        &kennis::audit::Actor::Operator,
        &s.org.slug,
        Some(ConnectorAccess::Nobody),
        None,
        app.clock.now(),
    )
    .unwrap();
    let r = oauth::check_bearer(&app, &pair.access_token);
    assert_eq!(r.clone().unwrap_err().reason(), "connecting not allowed");
    assert_eq!(denied(r), Some(AccessDenied::ConnectingNotAllowed));
    identity::set_org_policy(
        &app.store,
        &kennis::audit::Actor::Operator,
        &s.org.slug,
        Some(ConnectorAccess::AllMembers),
        None,
        app.clock.now(),
    )
    .unwrap();

    identity::accept_terms(&app.store, s.person.id, "an-older-version").unwrap();
    assert_eq!(
        denied(oauth::check_bearer(&app, &pair.access_token)),
        Some(AccessDenied::TermsNotAccepted)
    );
    identity::accept_terms(&app.store, s.person.id, &app.config.terms_version).unwrap();

    identity::reset_totp(&app.store, "bob@example.org").unwrap();
    assert_eq!(
        denied(oauth::check_bearer(&app, &pair.access_token)),
        Some(AccessDenied::SecondFactorRequired)
    );

    // A grant for an organisation the person is not in.
    let other = identity::create_org(&app.store, "Elsewhere", app.clock.now()).unwrap();
    let err = oauth::issue_grant(
        &app,
        NewGrant {
            org_id: other.id,
            person_id: s.person.id,
            client_id: "c".into(),
            scopes: vec!["kennisbank".into()],
            resource: app.connector_url(),
        },
    )
    .unwrap();
    assert_eq!(
        oauth::check_bearer(&app, &err.access_token)
            .unwrap_err()
            .reason(),
        "not a member"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_grant_refuses_bad_scopes_and_foreign_resources_and_stores_nothing() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "cy@example.org");
    let app = t.app().clone();
    let base = NewGrant {
        org_id: s.org.id,
        person_id: s.person.id,
        client_id: "c".into(),
        scopes: vec!["kennisbank".into()],
        resource: app.connector_url(),
    };
    let e = oauth::issue_grant(
        &app,
        NewGrant {
            scopes: vec![],
            ..base.clone()
        },
    )
    .unwrap_err();
    assert_eq!(e.code(), "invalid_scope");
    let e = oauth::issue_grant(
        &app,
        NewGrant {
            scopes: vec!["admin".into()],
            ..base.clone()
        },
    )
    .unwrap_err();
    assert_eq!(e.code(), "invalid_scope");
    let e = oauth::issue_grant(
        &app,
        NewGrant {
            resource: "https://elsewhere.example/mcp".into(),
            ..base.clone()
        },
    )
    .unwrap_err();
    assert_eq!(e.code(), "invalid_target");
    let grants = app
        .store
        .read(|tx| oauth::grants_of_org(tx, s.org.id))
        .unwrap();
    assert!(grants.is_empty(), "a refused grant was stored");
    // Trailing slash names the same resource.
    let ok = oauth::issue_grant(
        &app,
        NewGrant {
            resource: format!("{}/", app.connector_url()),
            ..base
        },
    )
    .unwrap();
    assert!(oauth::check_bearer(&app, &ok.access_token).is_ok());
}

use crate::fixture::{
    Browser, REDIRECT, approve, authorize_path, code_for, exchange, pkce, query_of,
    register_public, token,
};

fn walk_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk_files(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_flow_issues_tokens_and_a_reused_code_revokes_the_grant() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "dee@example.org");
    let (client_id, verifier, code) = code_for(&t, &s, &["kennisbank", "feature_requests"]).await;
    assert!(code.starts_with("kb_code_"));
    let (st, tok) = exchange(&t, &client_id, &verifier, &code).await;
    assert_eq!(st, 200, "{tok}");
    assert_eq!(tok["token_type"], "Bearer");
    assert_eq!(tok["expires_in"], 3600);
    assert_eq!(tok["scope"], "kennisbank feature_requests");
    let access = tok["access_token"].as_str().unwrap().to_owned();
    let refresh = tok["refresh_token"].as_str().unwrap().to_owned();
    let ctx = oauth::check_bearer(t.app(), &access).unwrap();
    assert_eq!((ctx.org_id, ctx.person_id), (s.org.id, s.person.id));
    assert_eq!(ctx.client_id, client_id);

    // Grant table: a used code presented again → the whole grant is revoked.
    let (st, err) = exchange(&t, &client_id, &verifier, &code).await;
    assert_eq!(st, 400);
    assert_eq!(err["error"], "invalid_grant");
    assert_eq!(
        oauth::check_bearer(t.app(), &access),
        Err(BearerError::Revoked)
    );
    let (st, err) = token(
        &t,
        &[
            ("grant_type", "refresh_token"),
            ("client_id", &client_id),
            ("refresh_token", &refresh),
        ],
    )
    .await;
    assert_eq!((st, err["error"].as_str()), (400, Some("invalid_grant")));

    // No code, token or session appears in plain text anywhere in the data directory.
    t.app().batch.flush();
    let secrets = [code.clone(), access.clone(), refresh.clone()];
    let mut files = Vec::new();
    walk_files(t.data_dir(), &mut files);
    assert!(!files.is_empty());
    for f in files {
        let bytes = kennis::store::record::expand(&std::fs::read(&f).unwrap_or_default());
        for secret in &secrets {
            let needle = secret.as_bytes();
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} holds a secret in plain text",
                f.display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_of_any_kind_is_stored_in_plain_text() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "eve@example.org");
    let client_id = register_public(&t).await;
    // A confidential client too, for its secret.
    let r: serde_json::Value = t
        .client
        .post(t.url("/register"))
        .json(&serde_json::json!({"redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client_secret = r["client_secret"].as_str().unwrap().to_owned();
    assert!(client_secret.starts_with("kb_cs_"));
    assert_eq!(r["token_endpoint_auth_method"], "client_secret_post");
    let (verifier, challenge) = pkce();
    let mut b = Browser::new(&t);
    let path = authorize_path(&client_id, &challenge, &[]);
    let consent = b.login(&s, &path).await;
    let session = b.cookies["kb_session"].clone();
    assert!(session.starts_with("kb_sess_"));
    let p = approve(&mut b, &consent, &s.org.slug, &["kennisbank"]).await;
    let code = query_of(&p.location.unwrap())["code"].clone();
    let (_, tok) = exchange(&t, &client_id, &verifier, &code).await;
    let (_, tok2) = token(
        &t,
        &[
            ("grant_type", "refresh_token"),
            ("client_id", &client_id),
            ("refresh_token", tok["refresh_token"].as_str().unwrap()),
        ],
    )
    .await;
    t.app().batch.flush();
    let secrets: Vec<String> = [
        &code,
        &session,
        &client_secret,
        tok["access_token"].as_str().unwrap(),
        tok["refresh_token"].as_str().unwrap(),
        tok2["access_token"].as_str().unwrap(),
        tok2["refresh_token"].as_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut files = Vec::new();
    walk_files(t.data_dir(), &mut files);
    for f in files {
        let bytes = kennis::store::record::expand(&std::fs::read(&f).unwrap_or_default());
        for secret in &secrets {
            // The random part alone (after the `kb_<kind>_` prefix), in case a prefix were
            // stored separately. Not the part after the last `_`: base64url has `_` too, and a
            // short tail would turn up in any file by chance.
            let needle = secret.splitn(3, '_').nth(2).unwrap().as_bytes();
            assert!(needle.len() >= 40, "{secret}");
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} holds {secret} in plain text",
                f.display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_rotates_narrows_never_widens_and_replay_revokes() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "fay@example.org");
    let (client_id, verifier, code) = code_for(&t, &s, &["kennisbank", "feature_requests"]).await;
    let (_, tok) = exchange(&t, &client_id, &verifier, &code).await;
    let rt1 = tok["refresh_token"].as_str().unwrap().to_owned();
    let refresh = |rt: String, scope: Option<&'static str>| {
        let t = &t;
        let client_id = client_id.clone();
        async move {
            let mut f = vec![
                ("grant_type", "refresh_token".to_owned()),
                ("client_id", client_id),
                ("refresh_token", rt),
            ];
            if let Some(s) = scope {
                f.push(("scope", s.to_owned()));
            }
            let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
            token(t, &f).await
        }
    };
    // Widening is refused and changes nothing: the same refresh token still works.
    let (st, err) = refresh(rt1.clone(), Some("kennisbank admin")).await;
    assert_eq!((st, err["error"].as_str()), (400, Some("invalid_scope")));
    // Narrowing works: valid → valid with new tokens, old refresh token replaced.
    let (st, tok2) = refresh(rt1.clone(), Some("feature_requests")).await;
    assert_eq!(st, 200, "{tok2}");
    assert_eq!(tok2["scope"], "feature_requests");
    let at2 = tok2["access_token"].as_str().unwrap().to_owned();
    assert_eq!(
        oauth::check_bearer(t.app(), &at2).unwrap().scopes,
        vec!["feature_requests"]
    );
    let rt2 = tok2["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(rt2, rt1);
    // Once narrowed, the old scope cannot come back.
    let (st, err) = refresh(rt2.clone(), Some("kennisbank")).await;
    assert_eq!((st, err["error"].as_str()), (400, Some("invalid_scope")));
    let (st, tok3) = refresh(rt2.clone(), None).await;
    assert_eq!(st, 200);
    assert_eq!(tok3["scope"], "feature_requests");
    // A replaced refresh token comes back → the whole grant is revoked.
    let (st, err) = refresh(rt1.clone(), None).await;
    assert_eq!((st, err["error"].as_str()), (400, Some("invalid_grant")));
    let at3 = tok3["access_token"].as_str().unwrap();
    assert_eq!(oauth::check_bearer(t.app(), at3), Err(BearerError::Revoked));
    let rt3 = tok3["refresh_token"].as_str().unwrap().to_owned();
    let (st, _) = refresh(rt3, None).await;
    assert_eq!(st, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_endpoint_revokes_the_grant_and_accepts_unknown_tokens() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "gus@example.org");
    let (client_id, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    let (_, tok) = exchange(&t, &client_id, &verifier, &code).await;
    let access = tok["access_token"].as_str().unwrap();
    let r = t
        .client
        .post(t.url("/revoke"))
        .form(&[("token", "kb_at_unknown"), ("client_id", &client_id)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(oauth::check_bearer(t.app(), access).is_ok());
    let r = t
        .client
        .post(t.url("/revoke"))
        .form(&[
            ("token", tok["refresh_token"].as_str().unwrap()),
            ("client_id", &client_id),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        oauth::check_bearer(t.app(), access),
        Err(BearerError::Revoked)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifetimes_code_ten_minutes_refresh_thirty_days() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "hal@example.org");
    // Code: 10 minutes.
    let (client_id, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    t.clock.advance(SignedDuration::from_secs(600));
    let (st, err) = exchange(&t, &client_id, &verifier, &code).await;
    assert_eq!((st, err["error"].as_str()), (400, Some("invalid_grant")));
    assert!(
        err["error_description"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    let (client_id, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    t.clock.advance(SignedDuration::from_secs(599));
    let (st, tok) = exchange(&t, &client_id, &verifier, &code).await;
    assert_eq!(st, 200);
    // Refresh: 30 days.
    let rt = tok["refresh_token"].as_str().unwrap();
    t.clock.advance(SignedDuration::from_hours(30 * 24));
    let (st, err) = token(
        &t,
        &[
            ("grant_type", "refresh_token"),
            ("client_id", &client_id),
            ("refresh_token", rt),
        ],
    )
    .await;
    assert_eq!((st, err["error"].as_str()), (400, Some("invalid_grant")));
    let (client_id, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    let (_, tok) = exchange(&t, &client_id, &verifier, &code).await;
    t.clock
        .advance(SignedDuration::from_hours(30 * 24) - SignedDuration::from_secs(1));
    let (st, _) = token(
        &t,
        &[
            ("grant_type", "refresh_token"),
            ("client_id", &client_id),
            ("refresh_token", tok["refresh_token"].as_str().unwrap()),
        ],
    )
    .await;
    assert_eq!(st, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pkce_redirect_client_and_resource_must_match() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "ivy@example.org");
    let (client_id, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    let other_client = register_public(&t).await;
    let (wrong_verifier, _) = pkce();
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "invalid_grant",
            vec![
                ("client_id", &client_id),
                ("code_verifier", &wrong_verifier),
                ("redirect_uri", REDIRECT),
            ],
        ),
        (
            "invalid_grant",
            vec![
                ("client_id", &client_id),
                ("code_verifier", &verifier),
                ("redirect_uri", "http://127.0.0.1:45679/callback"),
            ],
        ),
        (
            "invalid_grant",
            vec![
                ("client_id", &other_client),
                ("code_verifier", &verifier),
                ("redirect_uri", REDIRECT),
            ],
        ),
        (
            "invalid_target",
            vec![
                ("client_id", &client_id),
                ("code_verifier", &verifier),
                ("redirect_uri", REDIRECT),
                ("resource", "https://elsewhere.example/mcp"),
            ],
        ),
        (
            "invalid_client",
            vec![
                ("client_id", "kb_client_nope"),
                ("code_verifier", &verifier),
                ("redirect_uri", REDIRECT),
            ],
        ),
    ];
    for (want, extra) in cases {
        let mut f = vec![
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
        ];
        f.extend(extra);
        let (st, err) = token(&t, &f).await;
        assert_eq!(err["error"], want, "{f:?}");
        assert!(st == 400 || st == 401);
    }
    // The refusals above did not use up the code.
    let (st, _) = exchange(&t, &client_id, &verifier, &code).await;
    assert_eq!(st, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorize_refuses_bad_requests_the_right_way() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "jo@example.org");
    let client_id = register_public(&t).await;
    let (_, challenge) = pkce();
    let mut b = Browser::new(&t);
    // Unknown client and foreign redirect URI: an error page, never a redirect.
    let p = b
        .get(&authorize_path("kb_client_nope", &challenge, &[]))
        .await;
    assert_eq!(p.status, 400);
    assert!(p.location.is_none());
    let p = b
        .get(
            &authorize_path(&client_id, &challenge, &[])
                .replace("127.0.0.1%3A45678", "evil.example%3A45678"),
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.location.is_none());
    // Other problems go back to the client.
    let expect_redirect = |p: crate::fixture::Page, error: &str| {
        assert_eq!(p.status, 302, "{}", p.body);
        let q = query_of(p.location.as_deref().unwrap());
        assert_eq!(q["error"], error);
        assert_eq!(q["state"], "st-123");
    };
    expect_redirect(
        b.get(&authorize_path(
            &client_id,
            &challenge,
            &[("resource", "https://elsewhere.example/mcp")],
        ))
        .await,
        "invalid_target",
    );
    expect_redirect(
        b.get(&authorize_path(
            &client_id,
            &challenge,
            &[("scope", "offline_access")],
        ))
        .await,
        "invalid_scope",
    );
    let plain = authorize_path(&client_id, &challenge, &[]).replace("S256", "plain");
    expect_redirect(b.get(&plain).await, "invalid_request");
    let no_pkce = format!(
        "/authorize?response_type=code&client_id={client_id}&redirect_uri={}&state=st-123",
        urlenc(REDIRECT)
    );
    expect_redirect(b.get(&no_pkce).await, "invalid_request");
    // A loopback redirect on another port matches (RFC 8252), unknown scopes are dropped, a
    // trailing slash on the resource is the same resource.
    let other_port = authorize_path(
        &client_id,
        &challenge,
        &[
            ("scope", "offline_access kennisbank"),
            ("resource", &format!("{}/", t.app().connector_url())),
        ],
    )
    .replace("45678", "50123");
    let consent = b.login(&s, &other_port).await;
    assert!(
        consent.body.contains("name=\"scope\" value=\"kennisbank\""),
        "{}",
        consent.body
    );
    assert!(!consent.body.contains("value=\"feature_requests\""));
    assert!(consent.body.contains("Test Assistant"));
    // Consent cannot be framed.
    assert_eq!(consent.headers["x-frame-options"], "DENY");
    assert!(
        consent.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    // Deny → access_denied.
    let mut form = crate::fixture::hidden_fields(&consent.body);
    form.push(("decision".into(), "deny".into()));
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let p = b.post("/authorize", &pairs).await;
    assert_eq!(p.status, 302);
    let loc = p.location.unwrap();
    assert!(loc.starts_with("http://127.0.0.1:50123/callback?"), "{loc}");
    assert_eq!(query_of(&loc)["error"], "access_denied");
    // Without a CSRF token, nothing is approved.
    let mut form = crate::fixture::hidden_fields(&consent.body);
    form.retain(|(k, _)| k != "csrf_token");
    form.push(("org".into(), s.org.slug.clone()));
    form.push(("scope".into(), "kennisbank".into()));
    form.push(("decision".into(), "approve".into()));
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let p = b.post("/authorize", &pairs).await;
    assert_eq!(p.status, 403);
    assert!(p.location.is_none());
    // Consent narrows: one of two scopes ticked.
    let path = authorize_path(&client_id, &challenge, &[]);
    let consent = b.get(&path).await;
    let p = approve(&mut b, &consent, &s.org.slug, &["feature_requests"]).await;
    let code = query_of(&p.location.unwrap())["code"].clone();
    let _ = code;
}

/// A store that fails while the consent page reads the person's organisations is an internal
/// error (500), on the page and on its submit: never the "no organisation" notice, which would
/// send the person to an administrator for a membership they have, and never a code. So is one
/// while reading the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_shows_a_failing_store_as_a_failure_not_as_no_organisation() {
    use kennis::store::{MEMBERSHIPS, OAUTH_CLIENTS, OAUTH_CODES, key};
    let t = TestServer::start().await;
    let s = t.seed("Acme", "jo@example.org");
    let client_id = register_public(&t).await;
    let (_, challenge) = pkce();
    let path = authorize_path(&client_id, &challenge, &[]);
    let mut b = Browser::new(&t);
    let consent = b.login(&s, &path).await;
    assert!(
        consent.body.contains("name=\"scope\" value=\"kennisbank\""),
        "{}",
        consent.body
    );
    // The membership's record becomes unreadable.
    let k = key::pair(s.org.id, s.person.id);
    let kept = t.damage_record(MEMBERSHIPS, &k);
    // The "no organisation" notice, in either language.
    let no_org = |body: &str| {
        body.contains("None of your organisations") || body.contains("Geen van uw organisaties")
    };
    let p = b.get(&path).await;
    assert_eq!(p.status, 500, "{}", p.body);
    assert!(!no_org(&p.body), "{}", p.body);
    assert!(!p.body.contains("value=\"kennisbank\""), "{}", p.body);
    assert!(!p.body.contains("not a record"), "{}", p.body);
    // Approving the form shown before: an error page, no redirect with a code, none stored.
    let codes = || t.app().store.read(|tx| tx.count(OAUTH_CODES)).unwrap();
    let codes_before = codes();
    let p = approve(&mut b, &consent, &s.org.slug, &["kennisbank"]).await;
    assert_eq!(p.status, 500, "{}", p.body);
    assert!(p.location.is_none(), "{:?}", p.location);
    assert!(!no_org(&p.body), "{}", p.body);
    assert_eq!(codes(), codes_before);
    // Once the record reads again, so does the page: nothing else was touched.
    t.restore_record(MEMBERSHIPS, &k, &kept);
    let p = b.get(&path).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("name=\"scope\" value=\"kennisbank\""),
        "{}",
        p.body
    );
    // The client's record unreadable: a failure (500), not the page for a refused request.
    let kept = t.damage_record(OAUTH_CLIENTS, client_id.as_bytes());
    let p = b.get(&path).await;
    assert_eq!(p.status, 500, "{}", p.body);
    assert!(p.location.is_none());
    t.restore_record(OAUTH_CLIENTS, client_id.as_bytes(), &kept);
    assert_eq!(b.get(&path).await.status, 200);
}

fn urlenc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_narrows_scopes() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "kim@example.org");
    let (client_id, verifier, code) = code_for(&t, &s, &["feature_requests"]).await;
    let (st, tok) = exchange(&t, &client_id, &verifier, &code).await;
    assert_eq!(st, 200);
    assert_eq!(tok["scope"], "feature_requests");
    let ctx = oauth::check_bearer(t.app(), tok["access_token"].as_str().unwrap()).unwrap();
    assert_eq!(ctx.scopes, vec!["feature_requests"]);
}

/// Registers one URI alone; `true` when it was accepted.
async fn registers(t: &TestServer, uri: &str) -> bool {
    // Stay under the registration rate limit (20 per 15 minutes).
    t.clock.advance(SignedDuration::from_secs(45));
    let r = t
        .client
        .post(t.url("/register"))
        .json(&serde_json::json!({"redirect_uris": [uri], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    let v: serde_json::Value = r.json().await.unwrap();
    match st {
        201 => {
            assert_eq!(v["redirect_uris"], serde_json::json!([uri]));
            true
        }
        400 => {
            assert_eq!(v["error"], "invalid_redirect_uri", "{v}");
            false
        }
        other => panic!("{uri}: status {other}: {v}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_uri_allow_list_table() {
    let t = TestServer::start().await;
    let table: &[(&str, bool)] = &[
        ("https://claude.ai/api/mcp/auth_callback", true),
        ("https://claude.com/api/mcp/auth_callback", true),
        (
            "https://chatgpt.com/connector_platform_oauth_redirect",
            true,
        ),
        ("https://chatgpt.com/connector/oauth/abc_123-XYZ", true),
        ("cursor://anysphere.cursor-mcp/oauth/callback", true),
        ("https://cursor.com/agents/mcp/oauth/callback", true),
        ("https://www.cursor.com/agents/mcp/oauth/callback", true),
        ("http://localhost:3000/callback", true),
        ("http://127.0.0.1:33418/", true),
        ("http://127.0.0.1:80/cb", true),
        ("http://127.0.0.1/", false),
        ("http://localhost/callback", false),
        ("https://vscode.dev/redirect", false),
        ("https://claude.ai/api/mcp/other", false),
        ("http://claude.ai/api/mcp/auth_callback", false),
        (
            "https://claude.ai.evil.example/api/mcp/auth_callback",
            false,
        ),
        ("https://evil.example/api/mcp/auth_callback", false),
        ("https://claude.ai:8443/api/mcp/auth_callback", false),
        ("https://user@claude.ai/api/mcp/auth_callback", false),
        ("https://claude.ai/api/mcp/auth_callback#frag", false),
        ("https://claude.ai/x/../api/mcp/other", false),
        ("https://chatgpt.com/connector/oauth/a/b", false),
        ("https://chatgpt.com/connector/oauth/", false),
        ("vscode://anysphere.cursor-mcp/oauth/callback", false),
        ("cursor://anysphere.cursor-mcp/other", false),
        ("http://192.168.1.5:8080/callback", false),
        ("javascript:alert(1)", false),
        ("not a uri", false),
    ];
    for (uri, ok) in table {
        assert_eq!(registers(&t, uri).await, *ok, "{uri}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_keeps_allowed_uris_and_checks_metadata() {
    let t = TestServer::start_with(kennis::config::Settings {
        redirect: Some(kennis::config::RedirectAllowList {
            exact_uris: vec!["https://vscode.dev/redirect".into()],
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    let reg = |body: serde_json::Value| {
        let t = &t;
        async move {
            let r = t
                .client
                .post(t.url("/register"))
                .json(&body)
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    // Cursor: all three kept (the localhost one has a port).
    let (st, v) = reg(
        serde_json::json!({"client_name": "Cursor", "redirect_uris": [
        "cursor://anysphere.cursor-mcp/oauth/callback",
        "https://www.cursor.com/agents/mcp/oauth/callback",
        "http://localhost:54321/callback"], "token_endpoint_auth_method": "none"}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["redirect_uris"].as_array().unwrap().len(), 3);
    assert_eq!(v["client_name"], "Cursor");
    assert!(v.get("client_secret").is_none());
    // VS Code: the exact URI from the config and the loopback one with a port are kept.
    let (st, v) = reg(serde_json::json!({"redirect_uris": [
        "https://vscode.dev/redirect", "https://insiders.vscode.dev/redirect",
        "http://127.0.0.1/", "http://127.0.0.1:33418/"]}))
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(
        v["redirect_uris"],
        serde_json::json!(["https://vscode.dev/redirect", "http://127.0.0.1:33418/"])
    );
    assert_eq!(v["token_endpoint_auth_method"], "client_secret_post");
    assert!(v["client_secret"].as_str().unwrap().starts_with("kb_cs_"));
    assert_eq!(
        v["grant_types"],
        serde_json::json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(v["response_types"], serde_json::json!(["code"]));
    // Refusals.
    let eleven: Vec<String> = (0..11)
        .map(|i| format!("http://127.0.0.1:{}/cb", 4000 + i))
        .collect();
    for (body, error) in [
        (
            serde_json::json!({"redirect_uris": eleven}),
            "invalid_redirect_uri",
        ),
        (
            serde_json::json!({"redirect_uris": ["https://evil.example/cb"]}),
            "invalid_redirect_uri",
        ),
        (serde_json::json!({}), "invalid_redirect_uri"),
        (
            serde_json::json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "client_secret_basic"}),
            "invalid_client_metadata",
        ),
        (
            serde_json::json!({"redirect_uris": [REDIRECT], "grant_types": ["client_credentials"]}),
            "invalid_client_metadata",
        ),
        (
            serde_json::json!({"redirect_uris": [REDIRECT], "response_types": ["token"]}),
            "invalid_client_metadata",
        ),
    ] {
        let (st, v) = reg(body.clone()).await;
        assert_eq!((st, v["error"].as_str()), (400, Some(error)), "{body}");
    }
    let n = t
        .app()
        .store
        .read(|tx| tx.count(kennis::store::OAUTH_CLIENTS))
        .unwrap();
    assert_eq!(n, 2, "refused registrations stored nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confidential_clients_must_send_their_secret() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "lou@example.org");
    let v: serde_json::Value = t
        .client
        .post(t.url("/register"))
        .json(&serde_json::json!({"redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client_id = v["client_id"].as_str().unwrap().to_owned();
    let secret = v["client_secret"].as_str().unwrap().to_owned();
    let (verifier, challenge) = pkce();
    let mut b = Browser::new(&t);
    let consent = b
        .login(&s, &authorize_path(&client_id, &challenge, &[]))
        .await;
    let p = approve(&mut b, &consent, &s.org.slug, &["kennisbank"]).await;
    let code = query_of(&p.location.unwrap())["code"].clone();
    let base = [
        ("grant_type", "authorization_code"),
        ("client_id", client_id.as_str()),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_verifier", verifier.as_str()),
    ];
    let (st, err) = token(&t, &base).await;
    assert_eq!((st, err["error"].as_str()), (401, Some("invalid_client")));
    let mut wrong = base.to_vec();
    wrong.push(("client_secret", "kb_cs_wrong"));
    let (st, _) = token(&t, &wrong).await;
    assert_eq!(st, 401);
    let mut right = base.to_vec();
    right.push(("client_secret", &secret));
    let (st, _) = token(&t, &right).await;
    assert_eq!(st, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_endpoints_are_rate_limited_per_address() {
    let t = TestServer::start().await;
    for i in 0..20 {
        let r = t
            .client
            .post(t.url("/register"))
            .json(&serde_json::json!({"redirect_uris": [REDIRECT]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "request {i}");
    }
    let r = t
        .client
        .post(t.url("/register"))
        .json(&serde_json::json!({"redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // A 15-minute window that opened with the first request (the clock did not move).
    assert_eq!(retry, 900);
    t.clock.advance(SignedDuration::from_secs(retry as i64));
    let r = t
        .client
        .post(t.url("/register"))
        .json(&serde_json::json!({"redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // /revoke: 100 per window.
    for _ in 0..100 {
        let r = t
            .client
            .post(t.url("/revoke"))
            .form(&[("token", "x")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let r = t
        .client
        .post(t.url("/revoke"))
        .form(&[("token", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    // /token: 300 per window.
    for _ in 0..300 {
        let r = t
            .client
            .post(t.url("/token"))
            .form(&[("grant_type", "x")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
    }
    let r = t
        .client
        .post(t.url("/token"))
        .form(&[("grant_type", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    // /authorize: 100 per window.
    for _ in 0..100 {
        let r = t
            .client
            .get(t.url("/authorize?client_id=x"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
    }
    let r = t
        .client
        .get(t.url("/authorize?client_id=x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_documents_and_cors() {
    let t = TestServer::start().await;
    let m: serde_json::Value = t
        .client
        .get(t.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["issuer"], t.base);
    assert_eq!(m["authorization_endpoint"], t.url("/authorize"));
    assert_eq!(m["token_endpoint"], t.url("/token"));
    assert_eq!(m["registration_endpoint"], t.url("/register"));
    assert_eq!(m["revocation_endpoint"], t.url("/revoke"));
    assert_eq!(
        m["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    assert_eq!(m["response_types_supported"], serde_json::json!(["code"]));
    assert_eq!(
        m["token_endpoint_auth_methods_supported"],
        serde_json::json!(["none", "client_secret_post"])
    );
    assert_eq!(
        m["scopes_supported"],
        serde_json::json!(["kennisbank", "feature_requests"])
    );
    assert_eq!(m["authorization_response_iss_parameter_supported"], true);
    let r: serde_json::Value = t
        .client
        .get(t.url("/.well-known/oauth-protected-resource/mcp/kennisbank"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["resource"], t.app().connector_url());
    assert_eq!(r["authorization_servers"], serde_json::json!([t.base]));
    assert_eq!(r["bearer_methods_supported"], serde_json::json!(["header"]));
    let expired = BearerError::Expired.reason();
    let h = oauth::www_authenticate(&t.app().public_url, Some(("invalid_token", &expired)));
    assert_eq!(
        h,
        format!(
            "Bearer error=\"invalid_token\", error_description=\"token expired\", scope=\"kennisbank feature_requests\", resource_metadata=\"{}\"",
            t.url("/.well-known/oauth-protected-resource/mcp/kennisbank")
        )
    );
    for path in [
        "/register",
        "/token",
        "/revoke",
        "/.well-known/oauth-authorization-server",
    ] {
        let r = t
            .client
            .request(reqwest::Method::OPTIONS, t.url(path))
            .header("origin", "http://localhost:6274")
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,mcp-protocol-version",
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        assert_eq!(r.headers()["access-control-allow-origin"], "*");
        let allowed = r.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_lowercase();
        assert!(allowed.contains("mcp-protocol-version"), "{allowed}");
    }
    let r = t
        .client
        .get(t.url("/.well-known/oauth-authorization-server"))
        .header("origin", "http://localhost:6274")
        .send()
        .await
        .unwrap();
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(exposed.contains("www-authenticate"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_check_is_fast_enough_for_the_connector() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "quick@example.org");
    let g = mint(&t, &s, &["kennisbank"]);
    let app = t.app().clone();
    let n = 2000;
    let started = std::time::Instant::now();
    for _ in 0..n {
        assert!(oauth::check_bearer(&app, &g.access_token).is_ok());
    }
    let per_call = started.elapsed() / n;
    eprintln!("check_bearer: {per_call:?} per call");
    // Generous even for a debug build on a busy machine; a write transaction per call
    // (an fsync each) would blow through it.
    assert!(
        per_call < std::time::Duration::from_millis(2),
        "{per_call:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_codes_tokens_and_sessions_are_purged_a_day_after_expiry() {
    use kennis::housekeeping::{Purged, purge_expired};
    use kennis::store::{OAUTH_TOKENS, SESSIONS};
    let mut t = TestServer::start().await;
    let s = t.seed("Acme", "annie@example.org");
    let app = t.app().clone();
    let count = |table| app.store.read(|tx| tx.count(table)).unwrap();
    let old_token = t.grant(&s, &["kennisbank"]);
    kennis::identity::sessions::create(&app.store, s.person.id, app.clock.now()).unwrap();
    assert_eq!((count(OAUTH_TOKENS), count(SESSIONS)), (2, 1));

    // Nothing is removed while it may still be used, nor within the day after expiry.
    let purge = || purge_expired(&app.store, app.clock.now()).unwrap();
    assert_eq!(purge(), Purged::default());
    t.clock.advance(SignedDuration::from_hours(24));
    assert_eq!(
        purge(),
        Purged::default(),
        "the access token expired 23 hours ago"
    );

    // A day and a bit after: the access token (1 h) and the session (12 h) go; the refresh
    // token (30 days) and a new grant's tokens stay.
    t.clock.advance(SignedDuration::from_hours(13));
    let new_token = t.grant(&s, &["kennisbank"]);
    let p = purge();
    assert_eq!((p.tokens, p.sessions, p.codes), (1, 1, 0));
    assert_eq!((count(OAUTH_TOKENS), count(SESSIONS)), (3, 0));
    let status = |token: String| {
        let mcp = t.mcp(&token);
        async move { mcp.rpc("tools/list", serde_json::json!({})).await.0 }
    };
    assert_eq!(status(new_token).await, 200);
    assert_eq!(status(old_token).await, 401);

    t.clock.advance(SignedDuration::from_hours(32 * 24));
    assert_eq!(purge().tokens, 3, "every token is now long expired");
    assert_eq!(count(OAUTH_TOKENS), 0);
    t.stop().await;
}
