//! Rules the domain operations own themselves (not their pages or handlers): knowledge-base
//! writes are searchable at once, trigger lookups are bound to an organisation, and who may
//! see or revoke a connection.

use kennis::kb::{self, Expect, NewVersion};
use kennis::oauth::{self, NewGrant};
use kennis::triggers::{self, Change, TriggerError};

use crate::fixture::{Seeded, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kb_write_leaves_the_document_searchable_at_once() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "ann@example.org");
    let app = t.app();
    let write = |path: &str, text: &str, expect| {
        kb::write(
            &app.store,
            &app.kb_index,
            NewVersion {
                org_id: s.org.id,
                path,
                bytes: text.as_bytes(),
                expect,
                by: Some(s.person.id),
                now: app.clock.now(),
            },
        )
    };
    let found = |term: &str| {
        app.kb_index
            .candidates(s.org.id, None, &[term.to_owned()], 10)
            .unwrap()
            .0
            .into_iter()
            .map(|c| (c.path, c.version))
            .collect::<Vec<_>>()
    };
    let out = write(
        "aangeleverd/a.md",
        "De kozijnen zijn geschilderd.",
        Expect::Create,
    )
    .unwrap();
    assert!(out.created && out.changed);
    assert_eq!(found("kozijn"), vec![("aangeleverd/a.md".to_owned(), 1)]);
    // A revision replaces the indexed text at once too.
    write("aangeleverd/a.md", "Nu over dakgoten.", Expect::Version(1)).unwrap();
    assert!(found("kozijn").is_empty());
    assert_eq!(found("dakgoten"), vec![("aangeleverd/a.md".to_owned(), 2)]);
    // A refused write changes nothing.
    assert!(write("aangeleverd/a.md", "kozijn", Expect::Version(1)).is_err());
    assert!(found("kozijn").is_empty());

    // The batch form: searchable once finished.
    let mut writer = kb::Writer::new(&app.store, &app.kb_index);
    for (i, path) in ["b/1.md", "b/2.md"].iter().enumerate() {
        writer
            .put(NewVersion {
                org_id: s.org.id,
                path,
                bytes: format!("regenpijp {i}").as_bytes(),
                expect: Expect::Any,
                by: None,
                now: app.clock.now(),
            })
            .unwrap();
    }
    assert_eq!(writer.finish().unwrap(), 2);
    assert_eq!(found("regenpijp").len(), 2);
}

fn generic_trigger(t: &TestServer, org: &str) -> triggers::Trigger {
    crate::fixture::echo_trigger(t, org).trigger
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_lookups_are_bound_to_the_organisation() {
    let t = TestServer::start().await;
    let acme = t.seed("Acme", "ann@example.org");
    let other = t.seed("Other", "olga@example.org");
    let app = t.app();
    let trig = generic_trigger(&t, &acme.org.slug);
    let id = trig.id;
    let now = app.clock.now();

    let got = app
        .store
        .read(|tx| triggers::get(tx, acme.org.id, id))
        .unwrap();
    assert_eq!(got, trig);
    let runs = app
        .store
        .read(|tx| triggers::recent_runs(tx, acme.org.id, id, 10));
    assert!(runs.unwrap().is_empty());

    // Another organisation's trigger is not found, as an unknown one is.
    let err = app
        .store
        .read(|tx| triggers::get(tx, other.org.id, id))
        .unwrap_err();
    assert!(matches!(err, TriggerError::UnknownTrigger), "{err}");
    let err = app
        .store
        .read(|tx| triggers::recent_runs(tx, other.org.id, id, 10))
        .unwrap_err();
    assert!(matches!(err, TriggerError::UnknownTrigger), "{err}");
    for what in [Change::Pause, Change::RenewSecret, Change::Delete] {
        let err = triggers::change(&app.store, Some(other.org.id), &id.to_string(), what, now)
            .unwrap_err();
        assert!(matches!(err, TriggerError::UnknownTrigger), "{err}");
    }
    // Untouched by the refused changes.
    let after = app
        .store
        .read(|tx| triggers::get(tx, acme.org.id, id))
        .unwrap();
    assert_eq!(after, trig);

    // Its own organisation may change it; the operator (no organisation) any.
    let (paused, _) = triggers::change(
        &app.store,
        Some(acme.org.id),
        &id.to_string(),
        Change::Pause,
        now,
    )
    .unwrap();
    assert!(paused.paused);
    let (resumed, _) =
        triggers::change(&app.store, None, &id.to_string(), Change::Resume, now).unwrap();
    assert!(!resumed.paused);
}

fn grant(t: &TestServer, s: &Seeded, person_id: u64) -> u64 {
    let app = t.app();
    oauth::issue_grant(
        app,
        NewGrant {
            org_id: s.org.id,
            person_id,
            client_id: "test-client".into(),
            scopes: vec!["kennisbank".into()],
            resource: app.connector_url(),
        },
    )
    .unwrap()
    .grant_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_may_see_and_revoke_a_connection() {
    let t = TestServer::start().await;
    let acme = t.seed("Acme", "ann@example.org");
    let bob = t.seed("Acme", "bob@example.org").person;
    let other = t.seed("Other", "olga@example.org");
    let app = t.app();
    let anns = grant(&t, &acme, acme.person.id);
    let bobs = grant(&t, &acme, bob.id);
    let olgas = grant(&t, &other, other.person.id);
    let visible = |person_id: u64, admin: bool| {
        app.store
            .read(|tx| oauth::connections_visible_to(tx, acme.org.id, person_id, admin))
            .unwrap()
            .into_iter()
            .map(|c| (c.grant.id, c.person_email))
            .collect::<Vec<_>>()
    };
    let revoked = |id: u64| {
        app.store
            .read(|tx| {
                tx.get::<oauth::Grant>(kennis::store::OAUTH_GRANTS, &kennis::store::key::id(id))
            })
            .unwrap()
            .unwrap()
            .revoked_at
            .is_some()
    };

    // A member sees their own connections, an admin every one of the organisation; newest
    // first, never another organisation's.
    assert_eq!(
        visible(bob.id, false),
        vec![(bobs, "bob@example.org".to_owned())]
    );
    assert_eq!(
        visible(acme.person.id, true),
        vec![
            (bobs, "bob@example.org".to_owned()),
            (anns, "ann@example.org".to_owned())
        ]
    );

    // A member may not revoke someone else's grant, nor anyone another organisation's.
    assert!(!oauth::revoke_connection(app, acme.org.id, bob.id, false, anns).unwrap());
    assert!(!revoked(anns));
    assert!(!oauth::revoke_connection(app, acme.org.id, acme.person.id, true, olgas).unwrap());
    assert!(!revoked(olgas));
    assert!(!oauth::revoke_connection(app, acme.org.id, bob.id, false, 999_999).unwrap());

    // Their own, yes; an admin's any of the organisation.
    assert!(oauth::revoke_connection(app, acme.org.id, bob.id, false, bobs).unwrap());
    assert!(revoked(bobs));
    assert!(oauth::revoke_connection(app, acme.org.id, acme.person.id, true, anns).unwrap());
    assert!(revoked(anns));
}
