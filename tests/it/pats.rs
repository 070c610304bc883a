//! Personal access tokens (issue 23) through the real server, CLI and portal: a token acts as
//! its person with its scopes and is audited by id; every per-call recheck of a grant refuses
//! its next call; the secret is stored and logged nowhere; wrong tokens meet their own
//! per-address limit; the CLI's `--json` shapes; the portal page in both languages.

use std::path::Path;

use jiff::SignedDuration;
use kennis::identity::{self, ConnectorAccess, MemberChange, Role};
use kennis::oauth::pats::{self, NewToken};
use serde_json::{Value, json};

use crate::fixture::{
    Browser, Seeded, ServeProcess, TestServer, run, run_json, sorted_keys, stderr,
};

/// Runs the CLI on the server's data directory (through its admin socket) off the runtime.
async fn cli(t: &TestServer, args: &[&str]) -> std::process::Output {
    let dir = t.data_dir().to_owned();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&dir, &args, None)
    })
    .await
    .unwrap()
}

/// [`cli`] expecting success: its `--json` answer.
async fn cli_json(t: &TestServer, args: &[&str]) -> Value {
    let out = cli(t, args).await;
    assert!(out.status.success(), "kennis {args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("kennis {args:?}: {e}"))
}

/// A person with the seed's password, and nothing else: no second factor, no terms accepted.
fn add_person(store: &kennis::store::Store, email: &str, now: jiff::Timestamp) -> identity::Person {
    identity::add_person(
        store,
        identity::NewPerson {
            email,
            name: None,
            password: crate::fixture::SEED_PASSWORD,
        },
        now,
    )
    .unwrap()
}

/// A token for `s` made through the library, with `scopes` and `days`.
fn token_for(t: &TestServer, s: &Seeded, scopes: &[&str], days: Option<i64>) -> (u64, String) {
    let app = t.app();
    let (token, secret) = pats::create(
        &app.store,
        &kennis::audit::Actor::Operator,
        NewToken {
            org_id: s.org.id,
            person_id: s.person.id,
            name: "script".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            expires_in_days: days,
        },
        app.clock.now(),
    )
    .unwrap();
    (token.id, secret)
}

/// `tools/list` with `token`: the status and the error description of a refusal.
async fn try_list(t: &TestServer, token: &str) -> (u16, String) {
    let (status, body) = t.mcp(token).rpc("tools/list", json!({})).await;
    (
        status,
        body["error_description"].as_str().unwrap_or("").to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_acts_as_its_person_with_its_scopes_and_is_audited() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let made = cli_json(
        &t,
        &[
            "token",
            "create",
            &slug,
            "annie@example.org",
            "--name",
            "n8n",
            "--json",
        ],
    )
    .await;
    assert_eq!(sorted_keys(&made), ["id", "token"], "{made}");
    let secret = made["token"].as_str().unwrap().to_owned();
    assert!(
        secret.starts_with("kb_pat_") && secret.len() == 7 + 43,
        "{secret}"
    );
    let id = made["id"].as_u64().unwrap();

    // Default scope: the knowledge base only (its six tools, ChatGPT's two included).
    let mcp = t.mcp(&secret);
    let names = mcp.tool_names().await;
    assert_eq!(names.len(), 6, "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("feature_request")));
    mcp.ok(
        "kennisbank_write",
        json!({"path": "aangeleverd/n8n.md", "content": "uit de automatisering"}),
    )
    .await;
    mcp.unknown("app_list", json!({})).await;

    // The document is written by the person; the audit names the token.
    t.app().batch.flush();
    let app = t.app().clone();
    let (doc, records) = app
        .store
        .read(|tx| {
            Ok::<_, kennis::store::StoreError>((
                kennis::kb::get_document(tx, s.org.id, "aangeleverd/n8n.md").unwrap(),
                kennis::audit::records(tx, s.org.id, None)?,
            ))
        })
        .unwrap();
    assert!(doc.is_some());
    let write = records
        .iter()
        .find(|r| r.tool == "kennisbank_write")
        .unwrap();
    assert_eq!(
        (write.person_id, write.grant_id, write.token_id),
        (s.person.id, 0, Some(id))
    );
    // The export names the token (admin actions, such as the organisation's creation, come
    // first and name none).
    let out = cli(&t, &["audit", "export", &slug]).await;
    let call: Value = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<Value>(l).unwrap())
        .find(|r| r["tool"] == "kennisbank_write")
        .unwrap();
    assert_eq!(call["token_id"], id, "{call}");

    // More scopes, one day: both feature tools and knowledge base.
    let two = cli_json(
        &t,
        &[
            "token",
            "create",
            &slug,
            "Annie@Example.org",
            "--name",
            "ci",
            "--scope",
            "feature_requests",
            "--scope",
            "kennisbank",
            "--expires-in-days",
            "1",
            "--json",
        ],
    )
    .await;
    let both = t.mcp(two["token"].as_str().unwrap());
    assert_eq!(both.tool_names().await.len(), 11);

    // The list: every field, last use recorded.
    t.app().batch.flush();
    let list = cli_json(&t, &["token", "list", &slug, "--json"]).await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    let n8n = items.iter().find(|i| i["id"] == id).unwrap();
    for field in [
        "id",
        "name",
        "email",
        "scopes",
        "created_at",
        "expires_at",
        "last_used_at",
    ] {
        assert!(n8n.get(field).is_some(), "{field} missing: {n8n}");
    }
    assert_eq!(n8n["name"], "n8n");
    assert_eq!(n8n["email"], "annie@example.org");
    assert_eq!(n8n["scopes"], json!(["kennisbank"]));
    let now = t.app().clock.now();
    assert_eq!(n8n["created_at"], now.to_string());
    assert_eq!(
        n8n["expires_at"],
        (now + SignedDuration::from_hours(90 * 24)).to_string()
    );
    assert_eq!(n8n["last_used_at"], now.to_string());
    let ci = items.iter().find(|i| i["name"] == "ci").unwrap();
    assert_eq!(ci["scopes"], json!(["kennisbank", "feature_requests"]));
    assert_eq!(
        ci["expires_at"],
        (now + SignedDuration::from_hours(24)).to_string()
    );
    assert_eq!(ci["last_used_at"], now.to_string());
    // A token never used has no last use.
    let (_, _unused) = token_for(&t, &s, &[], None);
    let list = cli_json(&t, &["token", "list", &slug, "--json"]).await;
    assert_eq!(list["items"][0]["last_used_at"], Value::Null, "{list}");
    t.stop().await;
}

/// A token made on the command line for someone who cannot connect yet (added there, never
/// signed in) is refused at every call: the command says so, and why, in its text for people;
/// `--json` stays `{id, token}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_someone_who_cannot_connect_yet_says_why() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let email = "bram@example.org";
    {
        let app = t.app();
        let now = app.clock.now();
        add_person(&app.store, email, now);
        identity::add_member(&app.store, &slug, email, Role::Member, true, now).unwrap();
    }
    let make = || async {
        let out = cli(&t, &["token", "create", &slug, email, "--name", "ci"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        let token = text.lines().next().unwrap().to_owned();
        assert!(token.starts_with("kb_pat_"), "{text}");
        (token, text)
    };
    // The organisation asks for a second factor (the default), and the terms are not accepted.
    let (first, text) = make().await;
    assert!(
        text.contains("note: every call with it is refused until this changes — second factor required: the organisation asks for a second factor"),
        "{text}"
    );
    assert_eq!(
        try_list(&t, &first).await,
        (401, "second factor required".into())
    );
    let person = {
        let store = &t.app().store;
        identity::reset_totp(store, email).unwrap();
        let person = identity::find_person(store, email).unwrap();
        identity::confirm_totp_unchecked(store, person.id).unwrap();
        person
    };
    let (_, text) = make().await;
    assert!(
        text.contains("terms not accepted: the person has not accepted the current terms: they sign in to the portal once and accept them"),
        "{text}"
    );
    assert_eq!(
        try_list(&t, &first).await,
        (401, "terms not accepted".into())
    );
    identity::accept_terms(&t.app().store, person.id, &t.app().config.terms_version).unwrap();
    let (third, text) = make().await;
    assert!(!text.contains("note:"), "{text}");
    assert_eq!(try_list(&t, &first).await.0, 200);
    assert_eq!(try_list(&t, &third).await.0, 200);
    // `--json`: the token and its id, nothing else, whether it works yet or not.
    identity::accept_terms(&t.app().store, person.id, "0").unwrap();
    let made = cli_json(
        &t,
        &["token", "create", &slug, email, "--name", "n8n", "--json"],
    )
    .await;
    assert_eq!(sorted_keys(&made), vec!["id", "token"], "{made}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_token_requests_are_refused_and_store_nothing() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let outsider = t.seed("Elders BV", "mo@example.org");
    let base = ["token", "create", slug.as_str()];
    for (extra, why) in [
        (
            vec!["annie@example.org", "--name", "x", "--expires-in-days", "0"],
            "1 to 365",
        ),
        (
            vec![
                "annie@example.org",
                "--name",
                "x",
                "--expires-in-days",
                "366",
            ],
            "1 to 365",
        ),
        (
            vec!["annie@example.org", "--name", "x", "--scope", "admin"],
            "unknown scope",
        ),
        (vec!["annie@example.org", "--name", " "], "token name"),
        (vec!["mo@example.org", "--name", "x"], "not a member"),
        (vec!["niemand@example.org", "--name", "x"], "not a member"),
    ] {
        let mut args = base.to_vec();
        args.extend(extra.iter());
        let out = cli(&t, &args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
    }
    let out = cli(&t, &["token", "create", &slug, "annie@example.org"]).await;
    assert_eq!(out.status.code(), Some(2), "--name is required");
    let out = cli(&t, &["token", "revoke", "999"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no such personal access token"));
    let list = cli_json(&t, &["token", "list", &slug, "--json"]).await;
    assert_eq!(list, json!({"items": []}));
    let list = cli_json(&t, &["token", "list", &outsider.org.slug, "--json"]).await;
    assert_eq!(list, json!({"items": []}));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recheck_of_a_grant_refuses_the_next_call() {
    let mut t = TestServer::start().await;
    type Change = Box<dyn Fn(&TestServer, &Seeded, u64)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "removed",
            Box::new(|t, s, _| {
                let app = t.app();
                kennis::oauth::remove_member(
                    &app.store,
                    &kennis::audit::Actor::Operator,
                    s.org.id,
                    s.person.id,
                    app.clock.now(),
                )
                .unwrap();
            }),
            // Leaving the organisation revokes the person's tokens there.
            "token revoked",
        ),
        (
            "may_connect off",
            Box::new(|t, s, _| {
                let store = &t.app().store;
                identity::set_org_policy(
                    store,
                    &kennis::audit::Actor::Operator,
                    &s.org.slug,
                    Some(ConnectorAccess::SelectedMembers),
                    None,
                    jiff::Timestamp::now(),
                )
                .unwrap();
                identity::set_member(
                    store,
                    &kennis::audit::Actor::Operator,
                    s.org.id,
                    s.person.id,
                    MemberChange {
                        role: None,
                        may_connect: Some(false),
                    },
                    jiff::Timestamp::now(),
                )
                .unwrap();
            }),
            "connecting not allowed",
        ),
        (
            "connector access nobody",
            Box::new(|t, s, _| {
                identity::set_org_policy(
                    &t.app().store,
                    &kennis::audit::Actor::Operator,
                    &s.org.slug,
                    Some(ConnectorAccess::Nobody),
                    None,
                    jiff::Timestamp::now(),
                )
                .unwrap();
            }),
            "connecting not allowed",
        ),
        (
            "second factor gone",
            Box::new(|t, s, _| {
                identity::reset_totp(&t.app().store, &s.person.email).unwrap();
            }),
            "second factor required",
        ),
        (
            "terms not accepted",
            Box::new(|t, s, _| {
                identity::accept_terms(&t.app().store, s.person.id, "0").unwrap();
            }),
            "terms not accepted",
        ),
        (
            "revoked",
            Box::new(|t, _, id| {
                let out = run(
                    t.data_dir(),
                    &["token", "revoke", &id.to_string(), "--json"],
                    None,
                );
                assert!(out.status.success(), "{}", stderr(&out));
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(v, json!({"id": id, "revoked": true}));
            }),
            "token revoked",
        ),
        (
            "organisation denies tokens",
            Box::new(|t, s, _| {
                let out = run(
                    t.data_dir(),
                    &[
                        "org",
                        "set",
                        &s.org.slug,
                        "--personal-tokens",
                        "deny",
                        "--json",
                    ],
                    None,
                );
                assert!(out.status.success(), "{}", stderr(&out));
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(v["personal_tokens"], "deny");
            }),
            "personal access tokens not allowed",
        ),
        // Last: the clock does not go back.
        (
            "expired",
            Box::new(|t, _, _| {
                t.clock.advance(SignedDuration::from_hours(24));
            }),
            "token expired",
        ),
    ];
    for (i, (what, change, reason)) in cases.into_iter().enumerate() {
        let s = t.seed(&format!("Org {i}"), &format!("p{i}@example.org"));
        if what == "removed" {
            // Someone else stays admin, so the person can be removed.
            let other = t.seed(&format!("Org {i}"), &format!("admin{i}@example.org"));
            assert_eq!(other.org.id, s.org.id);
        }
        let (id, secret) = token_for(&t, &s, &[], Some(1));
        assert_eq!(try_list(&t, &secret).await.0, 200, "{what}: before");
        let t_ref = &t;
        let s_ref = &s;
        tokio::task::block_in_place(|| change(t_ref, s_ref, id));
        let (status, description) = try_list(&t, &secret).await;
        assert_eq!(status, 401, "{what}");
        assert_eq!(description, reason, "{what}");
    }
    // A denying organisation refuses new tokens too; allowing again makes them work.
    let s = t.seed("Org 8", "p8@example.org");
    let out = cli(
        &t,
        &["org", "set", &s.org.slug, "--personal-tokens", "deny"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(
        &t,
        &[
            "token",
            "create",
            &s.org.slug,
            "p8@example.org",
            "--name",
            "x",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not allow"), "{}", stderr(&out));
    let out = cli(
        &t,
        &["org", "set", &s.org.slug, "--personal-tokens", "allow"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(
        &t,
        &["org", "set", &s.org.slug, "--personal-tokens", "maybe"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    let (_, secret) = token_for(&t, &s, &[], None);
    assert_eq!(try_list(&t, &secret).await.0, 200);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_meet_their_own_limit_per_address() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let (_, good) = token_for(&t, &s, &[], None);
    let grant = t.grant(&s, &["kennisbank"]);
    let mut refused = 0;
    let mut limited = 0;
    for i in 0..1000 {
        let wrong = format!("kb_pat_{i:043}");
        match try_list(&t, &wrong).await.0 {
            401 => refused += 1,
            429 => limited += 1,
            other => panic!("{other}"),
        }
    }
    assert_eq!(refused, 300, "the limit is 300 failures per window");
    assert_eq!(limited, 700);
    // The address is blocked for tokens, the good one included …
    assert_eq!(try_list(&t, &good).await.0, 429);
    // … but OAuth tokens keep their own count.
    assert_eq!(try_list(&t, &grant).await.0, 200);
    t.clock.advance(SignedDuration::from_mins(16));
    assert_eq!(try_list(&t, &good).await.0, 200);
    t.stop().await;
}

/// A token's calls count toward the organisation's hourly tool limits with its grants' calls:
/// 29 requests made through a grant and one through a token use up the 30 an hour, and the
/// next call is refused for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_calls_count_toward_the_same_hourly_limits() {
    use kennis::requests::apps::{self, AppStatus};
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let app_id = apps::add(
        &t.app().store,
        s.org.id,
        "Planning",
        AppStatus::Live,
        t.app().clock.now(),
    )
    .unwrap()
    .app_id;
    let grant = t.mcp(&t.grant(&s, &["feature_requests"]));
    let (_, secret) = token_for(&t, &s, &["feature_requests"], None);
    let pat = t.mcp(&secret);
    let create =
        |i: usize| json!({"app_id": app_id, "title": format!("Verzoek {i}"), "description": "x"});
    for i in 0..29 {
        grant.ok("feature_request_create", create(i)).await;
    }
    pat.ok("feature_request_create", create(29)).await;
    for mcp in [&pat, &grant] {
        let e = mcp.err("feature_request_create", create(30)).await;
        assert_eq!(e["code"], "rate_limited", "{e}");
    }
    t.stop().await;
}

/// Sets up a ready person (second factor, terms) in a data directory with no server.
fn seed_offline(data: &Path) -> (String, String) {
    let store = kennis::store::Store::open(data).unwrap();
    let now = jiff::Timestamp::now();
    let org = identity::create_org(&store, "Bouw BV", now).unwrap();
    let email = "annie@example.org";
    let person = add_person(&store, email, now);
    identity::reset_totp(&store, email).unwrap();
    identity::confirm_totp_unchecked(&store, person.id).unwrap();
    identity::accept_terms(&store, person.id, "1").unwrap();
    identity::add_member(&store, &org.slug, email, Role::Admin, true, now).unwrap();
    (org.slug, email.to_owned())
}

fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_is_neither_stored_nor_logged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let (slug, email) = seed_offline(&data);
    let log = dir.path().join("serve.log");
    let server = ServeProcess::spawn(&data, &[], Some(&log));
    let made = {
        let data = data.clone();
        tokio::task::spawn_blocking(move || {
            run_json(
                &data,
                &["token", "create", &slug, &email, "--name", "n8n", "--json"],
                None,
            )
        })
        .await
        .unwrap()
    };
    let secret = made["token"].as_str().unwrap().to_owned();
    let client = crate::fixture::http_client();
    let call = |token: String| {
        client
            .post(format!("{}/mcp/kennisbank", server.base))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "kennisbank_write", "arguments": {"path": "aangeleverd/a.md", "content": "hallo"}}}))
            .send()
    };
    assert_eq!(call(secret.clone()).await.unwrap().status(), 200);
    // A wrong token that differs only at the end, for the log's failure path.
    let last = if secret.ends_with('A') { "B" } else { "A" };
    let wrong = format!("{}{last}", &secret[..secret.len() - 1]);
    let r = call(wrong).await.unwrap();
    assert_eq!(r.status(), 401, "{}", r.text().await.unwrap());
    assert!(server.terminate().success());

    let random_part = secret.trim_start_matches("kb_pat_");
    let mut files = Vec::new();
    files_under(&data, &mut files);
    assert!(files.iter().any(|f| f.ends_with("kennis.redb")));
    for f in files {
        let bytes = kennis::store::record::expand(&std::fs::read(&f).unwrap());
        assert!(
            !bytes
                .windows(random_part.len())
                .any(|w| w == random_part.as_bytes()),
            "the secret is in {}",
            f.display()
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("mcp/kennisbank"), "no request logged: {text}");
    assert!(!text.contains(&random_part[..20]), "secret logged: {text}");
    // kennis logs each call once; the MCP SDK's own lines per call stay out by default.
    assert!(
        !text.contains("rmcp"),
        "the SDK's per-call lines are logged: {text}"
    );
}

/// The `#new-token` secret on a page.
fn new_token(body: &str) -> String {
    let at = body
        .find("id=\"new-token\"")
        .unwrap_or_else(|| panic!("no #new-token: {body}"));
    let rest = &body[at..];
    let start = rest.find('>').unwrap() + 1;
    let end = rest[start..].find('<').unwrap();
    rest[start..start + end].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_made_and_revoked_in_the_portal() {
    let mut t = TestServer::start().await;
    let admin = t.seed("Bouw BV", "annie@example.org");
    let member = t.seed("Bouw BV", "bob@example.org");
    identity::set_member(
        &t.app().store,
        &kennis::audit::Actor::Operator,
        member.org.id,
        member.person.id,
        MemberChange {
            role: Some(Role::Member),
            may_connect: None,
        },
        jiff::Timestamp::now(),
    )
    .unwrap();
    let slug = admin.org.slug.clone();
    let path = format!("/portal/o/{slug}/tokens");

    // A member makes a token: the form, the secret shown once.
    let mut b = Browser::new(&t);
    let page = b.login(&member, &path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for needle in [
        "id=\"token-form\"",
        "name=\"name\"",
        "name=\"scope\" value=\"kennisbank\" checked",
        "name=\"scope\" value=\"feature_requests\"",
        "name=\"expires_in_days\"",
        "<html lang=\"en\"",
    ] {
        assert!(page.body.contains(needle), "{needle}: {}", page.body);
    }
    let made = b
        .submit(
            &path,
            &[
                ("name", "n8n"),
                ("scope", "kennisbank"),
                ("scope", "feature_requests"),
                ("expires_in_days", "30"),
            ],
        )
        .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let bobs = new_token(&made.body);
    assert!(bobs.starts_with("kb_pat_"), "{bobs}");
    assert_eq!(t.mcp(&bobs).tool_names().await.len(), 11);
    t.mcp(&bobs).ok("kennisbank_list", json!({})).await;
    // Shown once: the page again has no secret.
    let again = b.get(&path).await;
    assert!(!again.body.contains(&bobs));
    assert!(!again.body.contains("id=\"new-token\""));
    assert!(again.body.contains("n8n"));

    // Bad input: a clear refusal, nothing stored.
    for fields in [
        [
            ("name", "x"),
            ("scope", "kennisbank"),
            ("expires_in_days", "400"),
        ],
        [("name", "x"), ("scope", "admin"), ("expires_in_days", "3")],
        [
            ("name", ""),
            ("scope", "kennisbank"),
            ("expires_in_days", "3"),
        ],
        [
            ("name", "x"),
            ("scope", "kennisbank"),
            ("expires_in_days", "veel"),
        ],
    ] {
        let p = b.submit(&path, &fields).await;
        assert_eq!(p.status, 400, "{fields:?}: {}", p.body);
        assert!(!p.body.contains("id=\"new-token\""));
    }
    let count = |t: &TestServer| {
        t.app()
            .store
            .read(|tx| pats::list(tx, admin.org.id, None))
            .unwrap()
            .len()
    };
    assert_eq!(count(&t), 1);

    // The admin makes one too, sees both, and revokes the member's.
    let mut a = Browser::new(&t);
    a.login(&admin, &path).await;
    let made = a
        .submit(
            &path,
            &[
                ("name", "beheer"),
                ("scope", "kennisbank"),
                ("expires_in_days", "7"),
            ],
        )
        .await;
    let annies = new_token(&made.body);
    let page = a.get(&path).await;
    assert!(page.body.contains("bob@example.org"), "{}", page.body);
    // The audit log names the token behind a call, and its person.
    t.app().batch.flush();
    let audit = a.get(&format!("/portal/o/{slug}/audit")).await;
    assert!(
        audit.body.contains("Personal access token “n8n”"),
        "{}",
        audit.body
    );
    assert!(audit.body.contains("bob@example.org"));
    let rows = t
        .app()
        .store
        .read(|tx| pats::list(tx, admin.org.id, None))
        .unwrap();
    let bob_id = rows
        .iter()
        .find(|r| r.token.name == "n8n")
        .unwrap()
        .token
        .id;
    let annie_id = rows
        .iter()
        .find(|r| r.token.name == "beheer")
        .unwrap()
        .token
        .id;

    // The member sees only their own, and cannot revoke the admin's.
    let mine = b.get(&path).await;
    assert!(!mine.body.contains("beheer"), "{}", mine.body);
    let csrf = mine.csrf();
    let p = b
        .post(
            &format!("{path}/{annie_id}"),
            &[("csrf_token", &csrf), ("action", "revoke")],
        )
        .await;
    assert_eq!(p.status, 404, "{}", p.body);
    assert_eq!(try_list(&t, &annies).await.0, 200);

    let csrf = page.csrf();
    assert!(
        page.body.contains(&format!("action=\"{path}/{bob_id}\"")),
        "{}",
        page.body
    );
    assert!(page.body.contains("name=\"action\" value=\"revoke\""));
    let p = a
        .post(
            &format!("{path}/{bob_id}"),
            &[("csrf_token", &csrf), ("action", "revoke")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(try_list(&t, &bobs).await, (401, "token revoked".to_owned()));
    // The person revokes their own; without the CSRF token nothing happens.
    let p = a
        .post(&format!("{path}/{annie_id}"), &[("action", "revoke")])
        .await;
    assert_eq!(p.status, 403);
    assert_eq!(try_list(&t, &annies).await.0, 200);
    let csrf = a.get(&path).await.csrf();
    let p = a
        .post(
            &format!("{path}/{annie_id}"),
            &[("csrf_token", &csrf), ("action", "revoke")],
        )
        .await;
    assert_eq!(p.status, 303);
    assert_eq!(try_list(&t, &annies).await.0, 401);

    // Only admins switch tokens off: a member's post is refused, the setting unchanged.
    let csrf = b.get(&path).await.csrf();
    assert!(
        !b.get(&path)
            .await
            .body
            .contains("id=\"personal-tokens-form\"")
    );
    let p = b
        .post(
            &format!("{path}/setting"),
            &[("csrf_token", &csrf), ("personal_tokens", "deny")],
        )
        .await;
    assert_eq!(p.status, 403, "{}", p.body);
    let page = a.get(&path).await;
    assert!(
        page.body.contains("id=\"personal-tokens-form\""),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let p = a
        .post(
            &format!("{path}/setting"),
            &[("csrf_token", &csrf), ("personal_tokens", "sometimes")],
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    let org = t
        .app()
        .store
        .read(|tx| identity::org(tx, admin.org.id))
        .unwrap()
        .unwrap();
    assert_eq!(org.personal_tokens, identity::PersonalTokens::Allow);
    // The admin denies them: no form for the member (in Dutch), a notice.
    let p = a
        .post(
            &format!("{path}/setting"),
            &[("csrf_token", &csrf), ("personal_tokens", "deny")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let mut nl = Browser::speaking(&t, "nl");
    let page = nl.login(&member, &path).await;
    assert!(page.body.contains("<html lang=\"nl\""));
    assert!(page.body.contains("Toegangstokens"), "{}", page.body);
    assert!(!page.body.contains("id=\"token-form\""));
    assert!(page.body.contains("id=\"tokens-denied\""));
    let csrf = page.csrf();
    let p = nl
        .post(
            &path,
            &[
                ("csrf_token", &csrf),
                ("name", "x"),
                ("scope", "kennisbank"),
                ("expires_in_days", "3"),
            ],
        )
        .await;
    assert_eq!(p.status, 403, "{}", p.body);
    assert!(
        p.body
            .contains("Deze organisatie staat geen persoonlijke toegangstokens toe."),
        "{}",
        p.body
    );
    assert_eq!(count(&t), 2);
    t.stop().await;
}

/// A password reset (issued by the operator) or a disabled account ends the person's personal
/// access tokens with their grants and sessions: the next call gets 401, and a new token works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_or_a_disabled_account_ends_the_persons_tokens() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let slug = s.org.slug.clone();
    let made = cli_json(
        &t,
        &[
            "token",
            "create",
            &slug,
            "annie@example.org",
            "--name",
            "ci",
            "--json",
        ],
    )
    .await;
    let secret = made["token"].as_str().unwrap().to_owned();
    t.mcp(&secret).ok("kennisbank_list", json!({})).await;
    cli_json(&t, &["user", "reset", "annie@example.org", "--json"]).await;
    let (status, _) = t.mcp(&secret).rpc("tools/list", json!({})).await;
    assert_eq!(status, 401, "a reset revokes the person's tokens");

    let made = cli_json(
        &t,
        &[
            "token",
            "create",
            &slug,
            "annie@example.org",
            "--name",
            "ci2",
            "--json",
        ],
    )
    .await;
    let secret = made["token"].as_str().unwrap().to_owned();
    t.mcp(&secret).ok("kennisbank_list", json!({})).await;
    cli_json(&t, &["user", "disable", "annie@example.org", "--json"]).await;
    let (status, _) = t.mcp(&secret).rpc("tools/list", json!({})).await;
    assert_eq!(status, 401, "disabling revokes the person's tokens");
    t.stop().await;
}
