//! The authorization server: grant core, endpoints, lifetimes on the manual clock.

use jiff::SignedDuration;
use kennis::identity::{self, AccessDenied, ConnectorAccess};
use kennis::oauth::{self, BearerError, NewGrant};

use crate::fixture::{Seeded, TestServer};

fn mint(t: &TestServer, s: &Seeded, scopes: &[&str]) -> oauth::TokenPair {
    let app = t.app();
    oauth::issue_grant(
        app,
        NewGrant {
            org_id: s.org.id,
            person_id: s.person.id,
            client_id: "test-client".into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            resource: app.connector_url(),
        },
    )
    .unwrap()
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

    identity::set_org_policy(&app.store, &s.org.slug, Some(ConnectorAccess::Nobody), None).unwrap();
    let r = oauth::check_bearer(&app, &pair.access_token);
    assert_eq!(r.clone().unwrap_err().reason(), "connecting not allowed");
    assert_eq!(denied(r), Some(AccessDenied::ConnectingNotAllowed));
    identity::set_org_policy(
        &app.store,
        &s.org.slug,
        Some(ConnectorAccess::AllMembers),
        None,
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
