//! Event triggers, the two hook endpoints and the agent runtime, against the real server.

use std::path::Path;
use std::time::Duration;

use jiff::SignedDuration;
use kennis::identity;
use kennis::requests;
use kennis::roster::{self, AgentKind, NewAgent, Rollout};
use kennis::triggers::{self, Change, NewTrigger};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::fixture::{ServeProcess, TestServer, http_client, run, run_json, status_before_body};

struct Hook {
    id: uuid::Uuid,
    org_id: u64,
    url: String,
    secret: String,
}

fn org(t: &TestServer, name: &str) -> String {
    let app = t.app();
    identity::create_org(&app.store, name, app.clock.now())
        .unwrap()
        .slug
}

fn echo() -> NewAgent {
    crate::fixture::echo_agent()
}

fn command(program: &Path, timeout: u64) -> NewAgent {
    NewAgent {
        name: crate::fixture::unique_name("Script"),
        kind: AgentKind::Generic,
        exec: "command".into(),
        program: Some(program.to_str().unwrap().into()),
        args: vec![],
        url: None,
        timeout_secs: Some(timeout),
    }
}

fn hook(t: &TestServer, org: &str, agent: NewAgent, cooldown: Option<u64>) -> Hook {
    let app = t.app();
    let now = app.clock.now();
    let a = roster::add_agent(&app.store, org, &agent, now).unwrap();
    let p = roster::add_project(&app.store, org, "P", Rollout::Ready, now).unwrap();
    let c = triggers::add(
        &app.store,
        org,
        &NewTrigger {
            name: "T".into(),
            agent_id: a.id,
            project_id: p.id,
            instructions: "Handle the event.".into(),
            cooldown_secs: cooldown,
            callback_url: None,
        },
        now,
    )
    .unwrap();
    Hook {
        id: c.trigger.id,
        org_id: c.trigger.org_id,
        url: t.url(&format!("/api/hooks/events/{}", c.trigger.id)),
        secret: c.secret,
    }
}

/// A shell script in `dir`, executable.
fn script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

async fn fire(c: &reqwest::Client, h: &Hook, key: Option<&str>, body: &Value) -> (u16, Value) {
    let mut req = c.post(&h.url).bearer_auth(&h.secret).json(body);
    if let Some(k) = key {
        req = req.header("X-Service-Event-Key", k);
    }
    let r = req.send().await.unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn read(t: &TestServer, id: u64, secret: &str) -> (u16, Value) {
    let r = t
        .client
        .get(t.url(&format!("/api/hooks/runs/{id}")))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// Polls the read endpoint until the run has a result (the worker runs on real time).
async fn wait_result(t: &TestServer, id: u64, secret: &str) -> Value {
    for _ in 0..400 {
        let (s, v) = read(t, id, secret).await;
        assert_eq!(s, 200, "{v}");
        if !v["result"].is_null() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {id} never finished");
}

fn run_id(v: &Value) -> u64 {
    v["featureRequestId"]
        .as_u64()
        .unwrap_or_else(|| panic!("{v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_response_table_and_order_of_checks() {
    let mut t = TestServer::start().await;
    let o = org(&t, "Acme");
    let h = hook(&t, &o, echo(), None);
    let c = &t.client;
    let msg = |v: &Value| v["message"].as_str().unwrap_or("").to_owned();

    // 404: unknown UUID, not a UUID — even without a secret.
    let unknown = t.url(&format!("/api/hooks/events/{}", uuid::Uuid::new_v4()));
    let r = c.post(&unknown).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(msg(&r.json().await.unwrap()), "Unknown event trigger");
    let r = c
        .post(t.url("/api/hooks/events/nope"))
        .bearer_auth(&h.secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // 401: missing or wrong secret, before the key and body are looked at.
    let r = c
        .post(&h.url)
        .header("X-Service-Event-Key", "bad key")
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(msg(&r.json().await.unwrap()), "Invalid token");
    let r = c
        .post(&h.url)
        .bearer_auth("kb_trg_wrong")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .post(format!("{}?token=kb_trg_wrong", h.url))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // 400: bad keys (header and query), before the body.
    for bad in ["has space", "é", &"k".repeat(101)] {
        let (s, v) = fire(c, &h, Some(bad), &json!({})).await;
        assert_eq!(s, 400, "{bad}: {v}");
        assert!(!msg(&v).is_empty());
    }
    let r = c
        .post(format!("{}?key=a%2Fb", h.url))
        .bearer_auth(&h.secret)
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // 400 / 413: the body.
    let r = c
        .post(&h.url)
        .bearer_auth(&h.secret)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // Refused by its declared length, before the body is read.
    let bearer = format!("Bearer {}", h.secret);
    let status = status_before_body(&h.url, &[("authorization", &bearer)], 1024 * 1024 + 1).await;
    assert_eq!(status, 413);
    // Nothing of the refused deliveries was stored.
    assert!(
        t.app()
            .store
            .read(|tx| triggers::recent_runs(tx, h.org_id, h.id, 10))
            .unwrap()
            .is_empty()
    );

    // 202 with the key at its longest, a Location to the read URL, before the agent ran.
    let long_key = "a.B_c:d-".repeat(12) + "1234";
    assert_eq!(long_key.len(), 100);
    let r = c
        .post(format!("{}?token={}", h.url, h.secret))
        .header("X-Service-Event-Key", &long_key)
        .json(&json!({"x": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let loc = r.headers()["location"].to_str().unwrap().to_owned();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["dispatched"], true);
    let id = run_id(&v);
    assert_eq!(loc, t.url(&format!("/api/hooks/runs/{id}")));
    let done = wait_result(&t, id, &h.secret).await;
    assert_eq!(done["status"], "succeeded");
    assert!(
        done["result"]
            .as_str()
            .unwrap()
            .contains("Handle the event."),
        "{done}"
    );
    assert!(done["createdAt"].as_str().unwrap().ends_with('Z'));
    // Cooldown (default 300 s) for the same key, with the key echoed; another key is free.
    let (s, v) = fire(c, &h, Some(&long_key), &json!({})).await;
    assert_eq!(
        (s, v),
        (200, json!({"skipped": "cooldown", "key": long_key}))
    );
    let (s, v) = fire(c, &h, Some("other"), &json!({})).await;
    assert_eq!(s, 202);
    wait_result(&t, run_id(&v), &h.secret).await;
    // The query key works like the header.
    let r = c
        .post(format!("{}?key=other", h.url))
        .bearer_auth(&h.secret)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"skipped": "cooldown", "key": "other"})
    );

    // Cooldown ends exactly after 300 s of the injected clock.
    t.clock.advance(SignedDuration::from_secs(299));
    assert_eq!(
        fire(c, &h, Some(&long_key), &json!({})).await.1["skipped"],
        "cooldown"
    );
    t.clock.advance(SignedDuration::from_secs(1));
    assert_eq!(fire(c, &h, Some(&long_key), &json!({})).await.0, 202);
    // Without a key: no `key` in the skip.
    let (s, v) = fire(c, &h, None, &json!({})).await;
    assert_eq!(s, 202);
    wait_result(&t, run_id(&v), &h.secret).await;
    assert_eq!(
        fire(c, &h, None, &json!({})).await.1,
        json!({"skipped": "cooldown"})
    );

    let metrics = c
        .get(t.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"kennis_hook_deliveries_total{outcome="dispatched"} 4"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"kennis_hook_deliveries_total{outcome="cooldown"} 4"#),
        "{metrics}"
    );
    assert!(metrics.contains("kennis_run_duration_seconds"), "{metrics}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_endpoint_table() {
    let mut t = TestServer::start().await;
    let o = org(&t, "Acme");
    let a = hook(&t, &o, echo(), None);
    let b = hook(&t, &o, echo(), None);
    let (_, v) = fire(&t.client, &a, None, &json!({})).await;
    let id = run_id(&v);
    let (s, v) = read(&t, id, &a.secret).await;
    assert_eq!(s, 200);
    let mut keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["createdAt", "id", "result", "status", "updatedAt"]);
    // Another trigger's secret, no secret: 403.
    assert_eq!(
        read(&t, id, &b.secret).await,
        (403, json!({"message": "Access denied"}))
    );
    let r = t
        .client
        .get(t.url(&format!("/api/hooks/runs/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // ?token= works too.
    let r = t
        .client
        .get(t.url(&format!("/api/hooks/runs/{id}?token={}", a.secret)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Unknown id, not a number: 404.
    assert_eq!(
        read(&t, 999_999, &a.secret).await,
        (404, json!({"message": "Not found"}))
    );
    let r = t
        .client
        .get(t.url("/api/hooks/runs/abc"))
        .bearer_auth(&a.secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // A feature request (not a run) with the same id sequence: 404.
    let app = t.app();
    let now = app.clock.now();
    let app_id = requests::apps::add(&app.store, 1, "App", requests::apps::AppStatus::Live, now)
        .unwrap()
        .app_id;
    let new = requests::feature::NewRequest {
        app_id,
        title: "Verzoek".into(),
        description: "Iets".into(),
    };
    let fr = app
        .store
        .write(|tx| requests::feature::create_in(tx, 1, 1, &new, 0, now))
        .unwrap()
        .0
        .id;
    assert!(fr > id, "one sequence for runs and feature requests");
    assert_eq!(read(&t, fr, &a.secret).await.0, 404);
    // A run of a feature agent is not a generic run: 404.
    let feature = roster::add_agent(
        &app.store,
        &o,
        &NewAgent {
            kind: AgentKind::Feature,
            ..echo()
        },
        app.clock.now(),
    )
    .unwrap();
    let fid = app
        .store
        .write(|tx| {
            let r =
                requests::create_run(tx, 1, feature.id, a.id, None, "x".into(), app.clock.now())?;
            Ok::<_, kennis::store::StoreError>(r.id)
        })
        .unwrap();
    assert_eq!(read(&t, fid, &a.secret).await.0, 404);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_state_table_pause_resume_renew_delete() {
    let mut t = TestServer::start().await;
    let o = org(&t, "Acme");
    let mut h = hook(&t, &o, echo(), Some(0));
    let store = t.app().store.clone();
    let now = t.app().clock.now();
    let c = t.client.clone();

    triggers::change(&store, None, &h.id.to_string(), Change::Pause, now).unwrap();
    assert_eq!(
        fire(&c, &h, None, &json!({})).await,
        (200, json!({"skipped": "inactive"}))
    );
    assert_eq!(
        fire(&c, &h, Some("k"), &json!({})).await,
        (200, json!({"skipped": "inactive", "key": "k"}))
    );
    // Paused still checks the secret and the key first.
    let r = c.post(&h.url).bearer_auth("kb_trg_x").send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(
        store
            .read(|tx| triggers::recent_runs(tx, h.org_id, h.id, 10))
            .unwrap()
            .is_empty()
    );

    triggers::change(&store, None, &h.id.to_string(), Change::Resume, now).unwrap();
    let (s, v) = fire(&c, &h, None, &json!({})).await;
    assert_eq!(s, 202);
    let first = run_id(&v);
    wait_result(&t, first, &h.secret).await;

    // Renew: the old secret stops at once; the URL stays; paused state is kept.
    triggers::change(&store, None, &h.id.to_string(), Change::Pause, now).unwrap();
    let (_, secret) =
        triggers::change(&store, None, &h.id.to_string(), Change::RenewSecret, now).unwrap();
    let old = std::mem::replace(&mut h.secret, secret.unwrap());
    let r = c
        .post(&h.url)
        .bearer_auth(&old)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(read(&t, first, &old).await.0, 403);
    assert_eq!(
        fire(&c, &h, None, &json!({})).await.1["skipped"],
        "inactive"
    );
    triggers::change(&store, None, &h.id.to_string(), Change::Resume, now).unwrap();
    assert_eq!(fire(&c, &h, None, &json!({})).await.0, 202);
    assert_eq!(read(&t, first, &h.secret).await.0, 200);

    // Delete: the URL stops working, and its secret reads no run any more (the runs remain,
    // for the portal and `run show`).
    triggers::change(&store, None, &h.id.to_string(), Change::Delete, now).unwrap();
    let (s, v) = fire(&c, &h, None, &json!({})).await;
    assert_eq!((s, v), (404, json!({"message": "Unknown event trigger"})));
    assert_eq!(
        read(&t, first, &h.secret).await,
        (403, json!({"message": "Access denied"}))
    );
    assert!(triggers::change(&store, None, &h.id.to_string(), Change::Resume, now).is_err());
    assert_eq!(
        store
            .read(|tx| triggers::recent_runs(tx, h.org_id, h.id, 10))
            .unwrap()
            .len(),
        2
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_is_per_key_and_shared_without_a_key() {
    let mut t = TestServer::start().await;
    let o = org(&t, "Acme");
    let gate = t.data_dir().join("gate");
    let prog = script(
        t.data_dir(),
        "wait.sh",
        &format!(
            "cat >/dev/null\nwhile [ ! -e {} ]; do sleep 0.05; done\necho '{{\"type\":\"result\",\"text\":\"done\"}}'",
            gate.display()
        ),
    );
    let h = hook(&t, &o, command(&prog, 60), Some(0));
    let c = t.client.clone();
    let (s, v) = fire(&c, &h, None, &json!({})).await;
    assert_eq!(s, 202);
    let nokey = run_id(&v);
    assert_eq!(
        fire(&c, &h, None, &json!({})).await.1,
        json!({"skipped": "in_flight"})
    );
    let (s, v) = fire(&c, &h, Some("a"), &json!({})).await;
    assert_eq!(s, 202);
    let a = run_id(&v);
    assert_eq!(
        fire(&c, &h, Some("a"), &json!({})).await.1,
        json!({"skipped": "in_flight", "key": "a"})
    );
    assert_eq!(fire(&c, &h, Some("b"), &json!({})).await.0, 202);
    std::fs::write(&gate, "").unwrap();
    wait_result(&t, nokey, &h.secret).await;
    let done = wait_result(&t, a, &h.secret).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["result"], "done");
    assert_eq!(fire(&c, &h, None, &json!({})).await.0, 202);
    assert_eq!(fire(&c, &h, Some("a"), &json!({})).await.0, 202);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_is_appended_and_cut_after_8_kb_on_a_character_boundary() {
    let mut t = TestServer::start().await;
    let o = org(&t, "Acme");
    let h = hook(&t, &o, echo(), Some(0));
    // `{"t":"` is 6 bytes; then 3-byte characters: byte 8192 falls inside one.
    let text = "€".repeat(4000);
    let (s, v) = fire(&t.client, &h, None, &json!({"t": text})).await;
    assert_eq!(s, 202);
    let run = t
        .app()
        .store
        .read(|tx| requests::get(tx, run_id(&v)))
        .unwrap()
        .unwrap();
    let (head, json_part) = run
        .instructions
        .split_once("Event payload (JSON):\n")
        .unwrap();
    assert!(head.starts_with("Handle the event."));
    let cut = json_part.split("\n[payload cut").next().unwrap();
    let full = serde_json::to_string(&json!({"t": text})).unwrap();
    assert!(full.starts_with(cut));
    assert_eq!(
        cut.len(),
        8190,
        "6 + 3·2728 bytes: the last whole character before 8192"
    );
    assert!(json_part.contains(&format!("[payload cut after 8190 of {} bytes]", full.len())));
    // A small payload is appended whole.
    let (_, v) = fire(&t.client, &h, Some("small"), &json!({"klein": "ja"})).await;
    let run = t
        .app()
        .store
        .read(|tx| requests::get(tx, run_id(&v)))
        .unwrap()
        .unwrap();
    assert!(
        run.instructions
            .ends_with("Event payload (JSON):\n{\"klein\":\"ja\"}"),
        "{}",
        run.instructions
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_agents_succeed_fail_and_time_out() {
    let mut t = TestServer::start().await;
    let o = org(&t, "Acme");
    let ok = script(
        t.data_dir(),
        "ok.sh",
        r#"job=$(cat)
case "$job" in *marker-42*) found=yes ;; *) found=no ;; esac
echo '{"type":"message","text":"working"}'
printf '{"type":"result","text":"payload seen: %s"}\n' "$found""#,
    );
    let h = hook(&t, &o, command(&ok, 30), Some(0));
    let (_, v) = fire(&t.client, &h, None, &json!({"m": "marker-42"})).await;
    let done = wait_result(&t, run_id(&v), &h.secret).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["result"], "payload seen: yes");

    let bad = script(
        t.data_dir(),
        "bad.sh",
        "cat >/dev/null\necho 'boom: disk full' >&2\nexit 3",
    );
    let h = hook(&t, &o, command(&bad, 30), Some(0));
    let (_, v) = fire(&t.client, &h, None, &json!({})).await;
    let done = wait_result(&t, run_id(&v), &h.secret).await;
    assert_eq!(done["status"], "failed");
    assert!(
        done["result"].as_str().unwrap().contains("boom: disk full"),
        "{done}"
    );

    let slow = script(t.data_dir(), "slow.sh", "sleep 30");
    let h = hook(&t, &o, command(&slow, 1), Some(0));
    let (_, v) = fire(&t.client, &h, None, &json!({})).await;
    let done = wait_result(&t, run_id(&v), &h.secret).await;
    assert_eq!(done["status"], "timed_out");

    let quiet = script(t.data_dir(), "quiet.sh", "cat >/dev/null");
    let h = hook(&t, &o, command(&quiet, 30), Some(0));
    let (_, v) = fire(&t.client, &h, None, &json!({})).await;
    let done = wait_result(&t, run_id(&v), &h.secret).await;
    assert_eq!(done["status"], "failed");
    assert!(
        done["result"]
            .as_str()
            .unwrap()
            .contains("without a result"),
        "{done}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deliveries_make_one_run_per_slot() {
    let mut t = TestServer::start().await;
    let o = org(&t, "Acme");
    let h = std::sync::Arc::new(hook(&t, &o, echo(), None));
    let fire_all = |keys: Vec<Option<String>>| {
        let h = h.clone();
        async move {
            let c = http_client();
            let tasks: Vec<_> = keys
                .into_iter()
                .map(|k| {
                    let (c, h) = (c.clone(), h.clone());
                    tokio::spawn(async move { fire(&c, &h, k.as_deref(), &json!({})).await })
                })
                .collect();
            let mut out = Vec::new();
            for task in tasks {
                out.push(task.await.unwrap());
            }
            out
        }
    };
    let same = fire_all(vec![None; 64]).await;
    assert_eq!(same.iter().filter(|r| r.0 == 202).count(), 1, "{same:?}");
    assert!(
        same.iter()
            .all(|r| r.0 == 202 || r.1["skipped"].is_string())
    );
    let keyed = fire_all((0..64).map(|i| Some(format!("k{i}"))).collect()).await;
    assert_eq!(keyed.iter().filter(|r| r.0 == 202).count(), 64);
    let ids: std::collections::HashSet<u64> = keyed.iter().map(|r| run_id(&r.1)).collect();
    assert_eq!(ids.len(), 64);
    assert_eq!(
        t.app()
            .store
            .read(|tx| triggers::recent_runs(tx, h.org_id, h.id, 1000))
            .unwrap()
            .len(),
        65
    );
    t.stop().await;
}

/// Sets up an organisation, agent, ready project and trigger with the CLI on a data directory
/// with no server running; returns (trigger id, secret).
fn cli_trigger(data: &Path, program: Option<&Path>, cooldown: &str) -> (String, String) {
    run_json(data, &["org", "create", "Acme", "--json"], None);
    let agent = match program {
        None => run_json(
            data,
            &[
                "agent", "add", "acme", "E", "--kind", "generic", "--exec", "echo", "--json",
            ],
            None,
        ),
        Some(p) => run_json(
            data,
            &[
                "agent",
                "add",
                "acme",
                "C",
                "--kind",
                "generic",
                "--exec",
                "command",
                "--program",
                p.to_str().unwrap(),
                "--timeout",
                "120",
                "--json",
            ],
            None,
        ),
    };
    let project = run_json(
        data,
        &["project", "add", "acme", "P", "--ready", "--json"],
        None,
    );
    let trig = run_json(
        data,
        &[
            "trigger",
            "add",
            "acme",
            "T",
            "--agent",
            &agent["id"].to_string(),
            "--project",
            &project["id"].to_string(),
            "--instructions",
            "Go",
            "--cooldown",
            cooldown,
            "--json",
        ],
        None,
    );
    assert!(
        trig["url"]
            .as_str()
            .unwrap()
            .ends_with(trig["id"].as_str().unwrap())
    );
    (
        trig["id"].as_str().unwrap().to_owned(),
        trig["secret"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_manages_agents_projects_and_triggers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (id, secret) = tokio::task::spawn_blocking({
        let data = data.clone();
        move || cli_trigger(&data, None, "300")
    })
    .await
    .unwrap();
    assert!(secret.starts_with("kb_trg_"));
    let d = data.clone();
    tokio::task::spawn_blocking(move || {
        // Refusals: exit 1 with a message, nothing stored.
        let out = run(&d, &["project", "add", "acme", "Later", "--json"], None);
        assert!(out.status.success());
        let pending: Value = serde_json::from_slice(&out.stdout).unwrap();
        let out = run(
            &d,
            &[
                "trigger",
                "add",
                "acme",
                "X",
                "--agent",
                "1",
                "--project",
                &pending["id"].to_string(),
                "--instructions",
                "Go",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("ready"));
        let out = run(
            &d,
            &[
                "agent",
                "add",
                "acme",
                "C",
                "--kind",
                "generic",
                "--exec",
                "command",
                "--program",
                "relative.sh",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(1));
        let out = run(
            &d,
            &[
                "agent", "add", "acme", "C", "--kind", "robot", "--exec", "echo",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(2));
        let list = run_json(&d, &["trigger", "list", "acme", "--json"], None);
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
        run_json(&d, &["trigger", "pause", &id, "--json"], None);
        let list = run_json(&d, &["trigger", "list", "acme", "--json"], None);
        assert_eq!(list["items"][0]["paused"], true);
        let renewed = run_json(&d, &["trigger", "renew-secret", &id, "--json"], None);
        assert_eq!(renewed.as_object().unwrap().len(), 1);
        assert_ne!(renewed["secret"].as_str().unwrap(), secret);
        run_json(&d, &["trigger", "resume", &id, "--json"], None);
        run_json(&d, &["trigger", "delete", &id, "--json"], None);
        let list = run_json(&d, &["trigger", "list", "acme", "--json"], None);
        assert_eq!(list["items"].as_array().unwrap().len(), 0);
        let out = run(&d, &["trigger", "pause", &id], None);
        assert_eq!(out.status.code(), Some(1));
    })
    .await
    .unwrap();
}

#[test]
fn query_token_never_reaches_the_log_and_demo_trigger_fires() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (id, secret) = cli_trigger(&data, None, "300");
    let log = dir.path().join("serve.log");
    let p = ServeProcess::spawn(&data, &["--log-format", "json"], Some(&log));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let base = p.base.clone();
    rt.block_on(async {
        let c = http_client();
        let r = c
            .post(format!(
                "{base}/api/hooks/events/{id}?token={secret}&key=visible-key"
            ))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        let loc = r.headers()["location"].to_str().unwrap().to_owned();
        let r = c.get(format!("{loc}?token={secret}")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        // Also through the running server's admin socket.
        let list = run_json(&data, &["trigger", "list", "acme", "--json"], None);
        assert!(list["items"][0]["url"].as_str().unwrap().starts_with(&base));
    });
    assert!(p.terminate().success());
    let text = std::fs::read_to_string(&log).unwrap();
    let bare = secret.trim_start_matches("kb_trg_");
    assert!(
        !text.contains(bare),
        "log leaks the trigger secret:\n{text}"
    );
    assert!(text.contains("key=visible-key"), "{text}");

    // The demo prints a trigger and curl lines that work.
    let demo = dir.path().join("demo");
    let p = ServeProcess::spawn(&demo, &["--demo"], None);
    let line = p
        .banner
        .lines()
        .find(|l| l.contains("curl -i -X POST"))
        .expect("demo curl line");
    let secret = line
        .split("Bearer ")
        .nth(1)
        .unwrap()
        .split('\'')
        .next()
        .unwrap()
        .to_owned();
    let url = line.rsplit(' ').next().unwrap().to_owned();
    assert!(p.banner.contains("/api/hooks/runs/"), "{}", p.banner);
    rt.block_on(async {
        let r = http_client()
            .post(&url)
            .bearer_auth(&secret)
            .json(&json!({"melding": "test"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    });
    assert!(p.terminate().success());
}

#[test]
fn sigkill_with_runs_queued_and_running_then_every_run_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let gate = dir.path().join("block");
    std::fs::write(&gate, "").unwrap();
    let prog = script(
        dir.path(),
        "agent.sh",
        &format!(
            "cat >/dev/null\nwhile [ -e {} ]; do sleep 0.05; done\necho '{{\"type\":\"result\",\"text\":\"ok\"}}'",
            gate.display()
        ),
    );
    let (id, secret) = cli_trigger(&data, Some(&prog), "0");
    let config = dir.path().join("one-worker.toml");
    std::fs::write(&config, "agent_workers = \"1\"\n").unwrap();
    let cfg = config.to_str().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let p = ServeProcess::spawn(&data, &["--config", cfg], None);
    let c = http_client();
    let fire_key = |base: String, key: &'static str| {
        let (c, id, secret) = (c.clone(), id.clone(), secret.clone());
        async move {
            let r = c
                .post(format!("{base}/api/hooks/events/{id}"))
                .bearer_auth(&secret)
                .header("X-Service-Event-Key", key)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let status_of = |base: String, run: u64| {
        let (c, secret) = (c.clone(), secret.clone());
        async move {
            let r = c
                .get(format!("{base}/api/hooks/runs/{run}"))
                .bearer_auth(&secret)
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()
        }
    };
    let ids: Vec<u64> = rt.block_on(async {
        let mut ids = Vec::new();
        for k in ["k1", "k2", "k3"] {
            let (s, v) = fire_key(p.base.clone(), k).await;
            assert_eq!(s, 202, "{v}");
            ids.push(run_id(&v));
        }
        // Wait until the one worker holds the first run.
        for _ in 0..200 {
            if status_of(p.base.clone(), ids[0]).await["status"] == "running" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(status_of(p.base.clone(), ids[0]).await["status"], "running");
        assert_eq!(status_of(p.base.clone(), ids[2]).await["status"], "queued");
        ids
    });
    p.kill9();
    std::fs::remove_file(&gate).unwrap();
    let again = ServeProcess::spawn(&data, &["--config", cfg], None);
    rt.block_on(async {
        for run in &ids {
            let mut last = Value::Null;
            for _ in 0..400 {
                last = status_of(again.base.clone(), *run).await;
                if !last["result"].is_null() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(last["status"], "succeeded", "run {run}: {last}");
        }
        // The slots are usable again.
        assert_eq!(fire_key(again.base.clone(), "k1").await.0, 202);
    });
    assert!(again.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_deliveries_and_duplicate_delivery_ids() {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut t = TestServer::start().await;
    let o = org(&t, "Acme");
    let h = hook(&t, &o, echo(), Some(0));
    let trigger = t
        .app()
        .store
        .read(|tx| triggers::get(tx, h.org_id, h.id))
        .unwrap();
    let signing = triggers::signing_secret(&t.app().server_key, &trigger);
    let key = b64.decode(signing.strip_prefix("whsec_").unwrap()).unwrap();
    let now = t.app().clock.now().as_second();
    let body = r#"{"event":"deploy"}"#;
    let std_sig = |id: &str, ts: i64, body: &str| {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{id}.{ts}.{body}").as_bytes());
        format!("v1,{}", b64.encode(mac.finalize().into_bytes()))
    };
    let send_std = |id: &'static str, ts: i64, sig: String| {
        t.client
            .post(&h.url)
            .header("webhook-id", id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", sig)
            .body(body)
            .send()
    };
    // Bad signature, stale timestamp: 401, nothing stored.
    let r = send_std("msg_1", now, std_sig("msg_1", now, "{}"))
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let old = now - 301;
    let r = send_std("msg_1", old, std_sig("msg_1", old, body))
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Correctly signed timestamps far away or at the ends of i64 (once an overflow): 401.
    for far in [
        i64::MIN,
        i64::MIN + 1,
        -1,
        now + 301,
        253_402_207_200,
        i64::MAX,
    ] {
        let r = send_std("msg_1", far, std_sig("msg_1", far, body))
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{far}");
    }
    assert!(
        t.app()
            .store
            .read(|tx| triggers::recent_runs(tx, h.org_id, h.id, 10))
            .unwrap()
            .is_empty()
    );
    // Good: 202; the same id again: 200 duplicate with the same run, not a second run.
    let r = send_std(
        "msg_1",
        now,
        format!("v1,AAAA {}", std_sig("msg_1", now, body)),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 202);
    let first = run_id(&r.json().await.unwrap());
    wait_result(&t, first, &h.secret).await;
    let r = send_std("msg_1", now, std_sig("msg_1", now, body))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"duplicate": true, "featureRequestId": first})
    );

    // GitHub: the whole whsec_ string is the HMAC key.
    let gh_sig = |body: &str| {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(signing.as_bytes()).unwrap();
        mac.update(body.as_bytes());
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    };
    let send_gh = |sig: String| {
        t.client
            .post(&h.url)
            .header("X-Hub-Signature-256", sig)
            .header("X-GitHub-Delivery", "gh-1")
            .header("X-Service-Event-Key", "gh")
            .body(body)
            .send()
    };
    let r = send_gh(gh_sig("tampered")).await.unwrap();
    assert_eq!(r.status(), 401);
    let r = send_gh(gh_sig(body)).await.unwrap();
    assert_eq!(r.status(), 202);
    let gh = run_id(&r.json().await.unwrap());
    let r = send_gh(gh_sig(body)).await.unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"duplicate": true, "featureRequestId": gh})
    );
    // Renewing the secret changes the signing secret too.
    triggers::change(
        &t.app().store,
        None,
        &h.id.to_string(),
        Change::RenewSecret,
        t.app().clock.now(),
    )
    .unwrap();
    let r = t
        .client
        .post(&h.url)
        .header("X-Hub-Signature-256", gh_sig(body))
        .header("X-GitHub-Delivery", "gh-2")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portal_trigger_pages_for_admins() {
    use crate::fixture::Browser;
    let mut t = TestServer::start().await;
    let admin = t.seed("Acme", "ada@example.org");
    let member = t.seed("Acme", "mo@example.org");
    let app = t.app().clone();
    identity::add_member(
        &app.store,
        "acme",
        "mo@example.org",
        identity::Role::Member,
        true,
        app.clock.now(),
    )
    .unwrap();
    let now = app.clock.now();
    let agent = roster::add_agent(&app.store, "acme", &echo(), now).unwrap();
    let ready = roster::add_project(&app.store, "acme", "Live site", Rollout::Ready, now).unwrap();
    let pending =
        roster::add_project(&app.store, "acme", "Half done", Rollout::Pending, now).unwrap();

    // Members are not admins: no trigger pages.
    let mut mb = Browser::new(&t);
    let page = mb.login(&member, "/portal/o/acme/triggers").await;
    assert_eq!(page.status, 403, "{}", page.body);

    let mut b = Browser::new(&t);
    let page = b.login(&admin, "/portal/o/acme/triggers").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Live site") && page.body.contains("Half done"));
    // Only the ready project is offered in the form.
    let form = page.body.split("id=\"trigger-form\"").nth(1).unwrap();
    assert!(form.contains(&format!("<option value=\"{}\">Live site", ready.id)));
    assert!(!form.contains(&format!("<option value=\"{}\"", pending.id)));
    let csrf = page.csrf();
    let agent_id = agent.id.to_string();
    // A forged pending project is refused and nothing is stored.
    let p = b
        .post(
            "/portal/o/acme/triggers",
            &[
                ("csrf_token", &csrf),
                ("name", "Build"),
                ("instructions", "Look"),
                ("agent", &agent_id),
                ("project", &pending.id.to_string()),
                ("cooldown", "300"),
            ],
        )
        .await;
    assert_eq!(p.status, 400);
    assert!(triggers::list(&app.store, "acme").unwrap().is_empty());
    // Without the CSRF token: refused.
    let p = b
        .post(
            "/portal/o/acme/triggers",
            &[
                ("name", "Build"),
                ("instructions", "Look"),
                ("agent", &agent_id),
                ("project", &ready.id.to_string()),
            ],
        )
        .await;
    assert_eq!(p.status, 403);
    let p = b
        .post(
            "/portal/o/acme/triggers",
            &[
                ("csrf_token", &csrf),
                ("name", "Build"),
                ("instructions", "Look"),
                ("agent", &agent_id),
                ("project", &ready.id.to_string()),
                ("cooldown", "300"),
            ],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    let secret = p
        .body
        .split("id=\"secret\">")
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap()
        .to_owned();
    assert!(secret.starts_with("kb_trg_"));
    assert!(p.body.contains("curl -X POST"));
    let trig = triggers::list(&app.store, "acme").unwrap().remove(0);
    let h = Hook {
        id: trig.id,
        org_id: trig.org_id,
        url: t.url(&format!("/api/hooks/events/{}", trig.id)),
        secret: secret.clone(),
    };
    let (s, v) = fire(&t.client, &h, None, &json!({})).await;
    assert_eq!(s, 202);
    wait_result(&t, run_id(&v), &secret).await;
    // Recent runs on the trigger's page.
    let page = b.get(&format!("/portal/o/acme/triggers/{}", trig.id)).await;
    assert!(
        page.body.contains("id=\"runs\"") && page.body.contains("succeeded"),
        "{}",
        page.body
    );
    // Pause through the page: deliveries are skipped.
    let p = b
        .post(
            &format!("/portal/o/acme/triggers/{}/pause", trig.id),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(p.status, 303);
    assert_eq!(
        fire(&t.client, &h, None, &json!({})).await.1["skipped"],
        "inactive"
    );
    // Renew: a new secret shown once, the old one refused.
    let p = b
        .post(
            &format!("/portal/o/acme/triggers/{}/renew-secret", trig.id),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(p.status, 200);
    assert_eq!(fire(&t.client, &h, None, &json!({})).await.0, 401);
    // Delete: the URL stops working.
    let p = b
        .post(
            &format!("/portal/o/acme/triggers/{}/delete", trig.id),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(p.status, 303);
    let r = t.client.post(&h.url).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 404);
    t.stop().await;
}

/// A store that fails under a trigger's or a run's page is a failure (500, the detail kept
/// from the page), not "no such trigger" or "no such run"; so is one under the portal's home,
/// not "not a member of any organisation", and under an organisation's pages, not "not found".
/// Each page reads again once its record does. A refused form whose page cannot be read again
/// to say why answers with the failure too, and so does a session that cannot be read: not the
/// login page, nor "form expired".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portal_pages_show_a_failing_store_as_a_failure_not_as_missing() {
    use crate::fixture::Browser;
    use kennis::store::{MEMBERSHIPS, PEOPLE, REQUESTS, TRIGGERS, Table, key};
    let mut t = TestServer::start().await;
    let admin = t.seed("Acme", "ada@example.org");
    let h = hook(&t, "acme", echo(), None);
    let (s, v) = fire(&t.client, &h, None, &json!({})).await;
    assert_eq!(s, 202);
    let run = run_id(&v);
    wait_result(&t, run, &h.secret).await;
    let mut b = Browser::new(&t);
    let run_page = format!("/portal/o/acme/runs/{run}");
    assert_eq!(b.login(&admin, &run_page).await.status, 200);

    let cases: [(&str, Table, Vec<u8>, &[&str]); 5] = [
        (&run_page, REQUESTS, key::id(run).to_vec(), &["No such run"]),
        (
            &format!("/portal/o/acme/triggers/{}", h.id),
            TRIGGERS,
            h.id.as_bytes().to_vec(),
            &["No such trigger"],
        ),
        (
            "/portal",
            MEMBERSHIPS,
            key::pair(admin.org.id, admin.person.id).to_vec(),
            &["not a member of any organisation"],
        ),
        (
            "/portal/o/acme/triggers",
            MEMBERSHIPS,
            key::pair(admin.org.id, admin.person.id).to_vec(),
            &["Not found"],
        ),
        // The session's person: a failure, not a way back to the login page.
        (
            "/portal/account",
            PEOPLE,
            key::id(admin.person.id).to_vec(),
            &["Log in"],
        ),
    ];
    for (path, table, k, missing) in cases {
        let before = b.get(path).await;
        assert_eq!(before.status, 200, "{path}: {}", before.body);
        let kept = t.damage_record(table, &k);
        let p = b.get(path).await;
        assert_eq!(p.status, 500, "{path}: {}", p.body);
        for words in missing {
            assert!(!p.body.contains(words), "{path}: {}", p.body);
        }
        assert!(!p.body.contains("not a record"), "{path}: {}", p.body);
        t.restore_record(table, &k, &kept);
        let after = b.get(path).await;
        assert_eq!(after.status, 200, "{path}: {}", after.body);
        assert_eq!(after.body.len(), before.body.len(), "{path}");
    }
    // A refused agent whose list of triggers cannot be read to show why: the failure, not a
    // redirect to the home page as if nothing had been sent.
    let csrf = b.get("/portal/o/acme/triggers").await.csrf();
    let k = h.id.as_bytes().to_vec();
    let kept = t.damage_record(TRIGGERS, &k);
    let agents = |t: &TestServer| {
        kennis::roster::list_agents(&t.app().store, admin.org.id)
            .unwrap()
            .len()
    };
    let agents_before = agents(&t);
    let p = b
        .post(
            "/portal/o/acme/agents",
            &[
                ("csrf_token", &csrf),
                ("name", "Model"),
                ("timeout", "soon"),
            ],
        )
        .await;
    assert_eq!(p.status, 500, "{:?} {}", p.location, p.body);
    t.restore_record(TRIGGERS, &k, &kept);
    assert_eq!(agents(&t), agents_before, "a refused agent is not added");
    // A form whose session cannot be read: the failure, not "form expired".
    let k = key::id(admin.person.id);
    let kept = t.damage_record(PEOPLE, &k);
    let p = b
        .post("/portal/o/acme/agents", &[("csrf_token", &csrf)])
        .await;
    assert_eq!(p.status, 500, "{:?} {}", p.location, p.body);
    let p = b.post("/logout", &[("csrf_token", &csrf)]).await;
    assert_eq!(p.status, 500, "{:?} {}", p.location, p.body);
    t.restore_record(PEOPLE, &k, &kept);
    // Still logged in: the failed logout ended nothing.
    assert_eq!(b.get("/portal/account").await.status, 200);
    t.stop().await;
}

/// "Run again" on a run's page: a new run of the same trigger with the same instructions (the
/// first delivery's payload included), refused by the trigger's rules (cooldown, paused) with
/// nothing created, and bound to the organisation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portal_run_page_shows_the_run_and_runs_it_again_within_the_rules() {
    use crate::fixture::Browser;
    let t = TestServer::start().await;
    let admin = t.seed("Acme", "ada@example.org");
    let other = t.seed("Beta", "bo@example.org");
    let h = hook(&t, "acme", echo(), Some(60));
    let (s, v) = fire(&t.client, &h, Some("pr-7"), &json!({"pr": 7})).await;
    assert_eq!(s, 202);
    let first = run_id(&v);
    wait_result(&t, first, &h.secret).await;

    let mut b = Browser::new(&t);
    let page = b
        .login(&admin, &format!("/portal/o/acme/runs/{first}"))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    for part in [
        "id=\"run-instructions\"",
        "Handle the event.",
        "{&quot;pr&quot;:7}",
        "id=\"run-duration\"",
        "id=\"run-again-form\"",
        "pr-7",
    ] {
        assert!(page.body.contains(part), "{part} missing: {}", page.body);
    }
    let csrf = page.csrf();
    let again = format!("/portal/o/acme/runs/{first}/again");
    let runs = |app: &kennis::app::App| {
        app.store
            .read(|tx| triggers::recent_runs(tx, h.org_id, h.id, 10))
            .unwrap()
    };

    // Within the cooldown: refused, no new run.
    let p = b.post(&again, &[("csrf_token", &csrf)]).await;
    assert_eq!(p.status, 409, "{}", p.body);
    assert!(p.body.contains("cooling down") || p.body.contains("No new run"));
    assert_eq!(runs(t.app()).len(), 1);
    // Without the CSRF token: refused.
    assert_eq!(b.post(&again, &[]).await.status, 403);

    // After the cooldown: a new run with the same instructions and key.
    t.clock.advance(SignedDuration::from_secs(61));
    let p = b.post(&again, &[("csrf_token", &csrf)]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let all = runs(t.app());
    assert_eq!(all.len(), 2);
    let (new, old) = (&all[0], &all[1]);
    assert_ne!(new.id, first);
    assert_eq!(new.instructions, old.instructions);
    assert_eq!(new.event_key.as_deref(), Some("pr-7"));
    wait_result(&t, new.id, &h.secret).await;

    // Paused: refused.
    triggers::change(
        &t.app().store,
        None,
        &h.id.to_string(),
        Change::Pause,
        t.app().clock.now(),
    )
    .unwrap();
    t.clock.advance(SignedDuration::from_secs(61));
    let p = b.post(&again, &[("csrf_token", &csrf)]).await;
    assert_eq!(p.status, 409);
    assert_eq!(runs(t.app()).len(), 2);

    // Another organisation's admin cannot run it again (nor see it).
    let mut ob = Browser::new(&t);
    let page = ob
        .login(&other, &format!("/portal/o/beta/runs/{first}"))
        .await;
    assert_eq!(page.status, 404);
    let csrf = page.csrf();
    let p = ob
        .post(
            &format!("/portal/o/beta/runs/{first}/again"),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(p.status, 404);
    assert_eq!(runs(t.app()).len(), 2);
}
