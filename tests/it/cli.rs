//! The command line: contract output, exit codes, clear refusals that store nothing, and the
//! same commands with and without a running server.

use crate::fixture::{ServeProcess, TestServer, run, run_json, stderr};

const PW: &str = "paard-batterij-niet\n";

#[test]
fn commands_work_on_the_data_directory_without_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let org = run_json(d, &["org", "create", "Bouwbedrijf Kozijn", "--json"], None);
    assert_eq!(org["slug"], "bouwbedrijf-kozijn");
    assert!(org["id"].as_u64().unwrap() >= 1);
    let user = run_json(
        d,
        &[
            "user",
            "add",
            "Annie@Example.org",
            "--name",
            "Annie",
            "--password-stdin",
            "--json",
        ],
        Some(PW),
    );
    assert_eq!(user["email"], "annie@example.org");
    let totp = run_json(d, &["user", "totp", "annie@example.org", "--json"], None);
    assert!(
        totp["otpauth_uri"]
            .as_str()
            .unwrap()
            .starts_with("otpauth://totp/")
    );
    assert!(totp["secret"].as_str().unwrap().len() >= 26);
    let m = run_json(
        d,
        &[
            "member",
            "add",
            "bouwbedrijf-kozijn",
            "annie@example.org",
            "--role",
            "admin",
            "--may-connect",
            "--json",
        ],
        None,
    );
    assert_eq!(m["role"], "admin");
    assert_eq!(m["may_connect"], true);
    let set = run_json(
        d,
        &[
            "org",
            "set",
            "bouwbedrijf-kozijn",
            "--connector-access",
            "selected_members",
            "--require-second-factor",
            "false",
            "--json",
        ],
        None,
    );
    assert_eq!(set["connector_access"], "selected_members");
    assert_eq!(set["require_second_factor"], false);
    let orgs = run_json(d, &["org", "list", "--json"], None);
    assert_eq!(orgs["items"].as_array().unwrap().len(), 1);
    let users = run_json(d, &["user", "list", "--json"], None);
    assert_eq!(users["items"][0]["email"], "annie@example.org");
    // Without --json the output is for people, not JSON.
    let out = run(d, &["org", "list"], None);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("bouwbedrijf-kozijn"));
    assert!(serde_json::from_slice::<serde_json::Value>(&out.stdout).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_go_through_the_admin_socket_while_a_server_runs() {
    let mut t = TestServer::start().await;
    let d = t.data_dir().to_owned();
    // The server holds the database lock, so this can only succeed through the socket.
    let org = tokio::task::spawn_blocking(move || {
        run_json(&d, &["org", "create", "Live Org", "--json"], None)
    })
    .await
    .unwrap();
    assert_eq!(org["slug"], "live-org");
    let found = kennis::identity::find_org(&t.app().store, "live-org").unwrap();
    assert_eq!(found.id, org["id"].as_u64().unwrap());
    let d = t.data_dir().to_owned();
    let out = tokio::task::spawn_blocking(move || run(&d, &["org", "create", "Live Org"], None))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
    t.stop().await;
}

#[test]
fn bad_input_is_a_clear_error_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run_json(d, &["org", "create", "Acme", "--json"], None);
    run_json(
        d,
        &[
            "user",
            "add",
            "bob@example.org",
            "--password-stdin",
            "--json",
        ],
        Some(PW),
    );

    let cases: &[(&[&str], Option<&str>, &str)] = &[
        (
            &["member", "add", "nosuch", "bob@example.org"],
            None,
            "unknown organisation `nosuch`",
        ),
        (
            &["member", "add", "acme", "nobody@example.org"],
            None,
            "unknown person",
        ),
        (
            &["user", "add", "BOB@example.org", "--password-stdin"],
            Some(PW),
            "already exists",
        ),
        (
            &["user", "add", "carol@example.org", "--password-stdin"],
            Some("\n"),
            "password refused: it is empty",
        ),
        (
            &["user", "add", "carol@example.org", "--password-stdin"],
            Some("kort\n"),
            "password refused",
        ),
        (
            &["user", "add", "carol@example.org", "--password-stdin"],
            Some("Password12345\n"),
            "password refused",
        ),
        (
            &["user", "add", "not-an-email", "--password-stdin"],
            Some(PW),
            "not an email address",
        ),
        (&["org", "create", "Acme"], None, "already exists"),
        (&["org", "create", "   "], None, "organisation name"),
        (
            &["org", "set", "nosuch", "--connector-access", "nobody"],
            None,
            "unknown organisation",
        ),
        (
            &["user", "totp", "nobody@example.org"],
            None,
            "unknown person",
        ),
    ];
    for (args, stdin, expected) in cases {
        let out = run(d, args, *stdin);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(expected),
            "{args:?}: expected `{expected}` in: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one clear line: {err}");
    }
    let users = run_json(d, &["user", "list", "--json"], None);
    assert_eq!(users["items"].as_array().unwrap().len(), 1, "{users}");
    let orgs = run_json(d, &["org", "list", "--json"], None);
    assert_eq!(orgs["items"].as_array().unwrap().len(), 1, "{orgs}");
}

#[test]
fn bad_usage_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for args in [
        &["org"][..],
        &["org", "set", "x", "--connector-access", "everyone"],
        &["frobnicate"],
    ] {
        let out = run(d, args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    // No terminal and no --password-stdin: the password is never taken from argv.
    let out = run(d, &["user", "add", "dan@example.org"], Some("ignored\n"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--password-stdin"));
}

#[test]
fn malformed_config_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("kennis.toml");
    for (text, field) in [
        ("listen = \"nope\"\n", "`listen`"),
        ("agent_workers = \"many\"\n", "`agent_workers`"),
        ("lissen = \"127.0.0.1:1\"\n", "unknown field `lissen`"),
        ("listen = [\n", "kennis.toml"),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let out = run(
            dir.path(),
            &["--config", cfg.to_str().unwrap(), "serve"],
            None,
        );
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(stderr(&out).contains(field), "{text}: {}", stderr(&out));
    }
    // An environment value that is wrong is named too.
    let out = crate::fixture::kennis(dir.path())
        .env("KENNIS_LOG_FORMAT", "xml")
        .args(["org", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("`log_format`"), "{}", stderr(&out));
    // A switch is on or off, nothing else.
    let out = crate::fixture::kennis(dir.path())
        .env("KENNIS_EXTRACT_TEXT", "flase")
        .args(["org", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("KENNIS_EXTRACT_TEXT"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_newer_schema_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = kennis::store::Store::open(dir.path()).unwrap();
        kennis::store::set_schema_version_for_tests(&store, kennis::store::SCHEMA_VERSION + 1)
            .unwrap();
    }
    let out = run(dir.path(), &["org", "list"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("newer kennis"), "{}", stderr(&out));
}

#[test]
fn demo_prints_credentials_once_and_they_work() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let first = ServeProcess::spawn(&d, &["--demo"], None);
    let banner = first.banner.clone();
    assert!(banner.contains("/mcp/kennisbank"), "{banner}");
    assert!(banner.contains("otpauth://totp/"), "{banner}");
    let password = banner
        .lines()
        .find_map(|l| l.trim().strip_prefix("password:"))
        .expect("password printed")
        .trim()
        .to_owned();
    assert!(first.terminate().success());

    let second = ServeProcess::spawn(&d, &["--demo"], None);
    assert!(
        second.banner.contains("already present"),
        "{}",
        second.banner
    );
    assert!(!second.banner.contains(&password));
    assert!(second.banner.contains("kennis user passwd"));
    assert!(second.terminate().success());

    let store = kennis::store::Store::open(&d).unwrap();
    let person =
        kennis::identity::verify_login(&store, kennis::demo::DEMO_EMAIL, &password).unwrap();
    assert!(person.has_second_factor());
    let orgs = store
        .read(|tx| kennis::identity::organisations_of(tx, person.id))
        .unwrap();
    assert_eq!(orgs.len(), 1);
    // The demo knowledge base is loaded and indexed.
    let top = store
        .read(|tx| kennis::kb::list(tx, orgs[0].0.id, None))
        .unwrap();
    let names: Vec<&str> = top.iter().map(|e| e.name.as_str()).collect();
    assert!(
        names.contains(&"handleidingen") && names.contains(&"aangeleverd"),
        "{names:?}"
    );
    drop(store);
    let index = kennis::kb::index::SearchIndex::open(&d.join("index"), true).unwrap();
    let hits = index
        .candidates(orgs[0].0.id, None, &["kozijn".to_string()], 100)
        .unwrap();
    assert!(hits.0.len() >= 3 && hits.1 == hits.0.len(), "{hits:?}");
}

/// What a newcomer meets first: a read-only command on a mistyped data directory creates
/// nothing; agents and projects can be listed with the ids other commands take; a second agent
/// of the same name is refused; `GET /` leads to the portal.
#[test]
fn a_newcomer_finds_ids_and_makes_no_accidental_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-here");
    for args in [
        &["org", "list"][..],
        &["user", "list"],
        &["member", "list", "acme"],
    ] {
        let out = run(&missing, args, None);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&out).contains("there is no data directory"),
            "{}",
            stderr(&out)
        );
        assert!(!missing.exists(), "{args:?} created the data directory");
    }
    // Without --data-dir the default is ./data: it is not made either.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kennis"))
        .args(["org", "list"])
        .current_dir(dir.path())
        .env_remove("KENNIS_DATA_DIR")
        .env_remove("KENNIS_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("there is no data directory data")
            && stderr(&out).contains("--data-dir"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.path().join("data").exists(), "org list created ./data");
    // An empty directory is no kennis data either.
    std::fs::create_dir(&missing).unwrap();
    let out = run(&missing, &["org", "list"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no kennis data in"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(&missing).unwrap().count(), 0);

    let d = dir.path();
    run_json(d, &["org", "create", "Acme", "--json"], None);
    let agent = run_json(
        d,
        &[
            "agent", "add", "acme", "Echo", "--kind", "generic", "--exec", "echo", "--json",
        ],
        None,
    );
    let project = run_json(
        d,
        &["project", "add", "acme", "Website", "--ready", "--json"],
        None,
    );
    let agents = run_json(d, &["agent", "list", "acme", "--json"], None);
    assert_eq!(agents["items"][0]["id"], agent["id"]);
    assert_eq!(agents["items"][0]["name"], "Echo");
    assert_eq!(agents["items"][0]["exec"], "echo");
    let projects = run_json(d, &["project", "list", "acme", "--json"], None);
    assert_eq!(projects["items"][0]["id"], project["id"]);
    assert_eq!(projects["items"][0]["rollout"], "ready");

    let args = [
        "agent", "add", "acme", "echo", "--kind", "generic", "--exec", "echo",
    ];
    let out = run(d, &args, None);
    assert_eq!(out.status.code(), Some(1), "{args:?}");
    assert!(stderr(&out).contains("already"), "{}", stderr(&out));
    assert_eq!(
        run_json(d, &["agent", "list", "acme", "--json"], None)["items"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "the refused duplicate was not stored"
    );
}

#[test]
fn the_front_door_leads_to_the_portal_and_the_banner_names_the_listen_address() {
    let dir = tempfile::tempdir().unwrap();
    let serve = ServeProcess::spawn(
        dir.path(),
        &["--public-url", "https://kennis.example.org"],
        None,
    );
    assert!(
        serve.base.starts_with("http://127.0.0.1:"),
        "the banner names the address it listens on: {}",
        serve.base
    );
    assert!(
        serve
            .banner
            .contains("public URL: https://kennis.example.org")
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (status, location) = rt.block_on(async {
        let resp = crate::fixture::http_client()
            .get(format!("{}/", serve.base))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.headers()["location"].clone())
    });
    assert_eq!(status, 303);
    assert_eq!(location, "/portal");
    serve.terminate();
}

/// The operations example in docs/operations.md, and the same without `--may-connect`: when a
/// policy leaves no member able to connect an assistant, `org set` says so, and `member add`
/// says whether the member may connect under the organisation's policy.
#[test]
fn a_policy_that_leaves_no_one_able_to_connect_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let org = "bouwbedrijf-de-vries";
    run_json(
        d,
        &["org", "create", "Bouwbedrijf De Vries", "--json"],
        None,
    );
    run_json(
        d,
        &[
            "user",
            "add",
            "annie@example.org",
            "--password-stdin",
            "--json",
        ],
        Some("zonnebloem-kaasschaaf-7\n"),
    );
    let said = |args: &[&str]| {
        let out = run(d, args, None);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Without --may-connect, under the default policy (all members) she may connect.
    let added = said(&["member", "add", org, "annie@example.org", "--role", "admin"]);
    assert!(added.contains("may connect an assistant: yes"), "{added}");
    // Selected members only: nobody is selected yet, and the command says so.
    let policy = ["org", "set", org, "--connector-access", "selected_members"];
    let set = said(&policy);
    assert!(
        set.contains("warning: no member of bouwbedrijf-de-vries may connect an assistant"),
        "{set}"
    );
    let v = run_json(d, &[&policy[..], &["--json"]].concat(), None);
    assert_eq!(v["members_who_may_connect"], 0, "{v}");
    let again = said(&["member", "add", org, "annie@example.org"]);
    assert!(
        again.contains("may connect an assistant: no (the organisation lets selected members"),
        "{again}"
    );
    // As the example has it: with the right to connect, no warning.
    said(&[
        "member",
        "set",
        org,
        "annie@example.org",
        "--may-connect",
        "true",
    ]);
    let set = said(&policy);
    assert!(!set.contains("warning"), "{set}");
    let v = run_json(d, &[&policy[..], &["--json"]].concat(), None);
    assert_eq!(v["members_who_may_connect"], 1, "{v}");
    let ops = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"),
    )
    .unwrap();
    assert!(
        ops.contains(&format!(
            "kennis member add {org} annie@example.org --role admin --may-connect"
        )),
        "the operations example gives its admin the right to connect"
    );
}
