//! Run callbacks (DESIGN.md "Run callbacks") against a real receiver on 127.0.0.1: the signed
//! `run.finished` POST checked with the Standard Webhooks algorithm written out here, retries
//! with the same webhook id as the manual clock moves, a callback that outlives a restart, and
//! refused URLs that are never contacted.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use jiff::SignedDuration;
use kennis::clock::Clock;
use kennis::config::{Settings, TriggerSettings};
use kennis::requests;
use kennis::roster::{self, Rollout};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::fixture::{Browser, TestServer, echo_agent, run, run_json, stderr};

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Got {
    path: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header"))
            .to_str()
            .unwrap()
            .to_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A scripted answer: status and, for a redirect, its `Location`.
type Answer = (u16, Option<String>);

#[derive(Clone, Default)]
struct Script {
    got: Arc<Mutex<Vec<Got>>>,
    /// Answers in order (status, Location); after the last, 200.
    answers: Arc<Mutex<Vec<Answer>>>,
    /// How long each answer takes (after the request is recorded).
    delay: Duration,
}

/// A receiver on 127.0.0.1 that records every request and answers from its script.
struct Receiver {
    addr: SocketAddr,
    script: Script,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(answers: Vec<Answer>) -> Receiver {
        Self::start_on("127.0.0.1:0".parse().unwrap(), answers).await
    }

    async fn start_on(addr: SocketAddr, answers: Vec<Answer>) -> Receiver {
        Self::start_with(addr, answers, Duration::ZERO).await
    }

    /// A receiver that takes `delay` to answer each request.
    async fn slow(delay: Duration) -> Receiver {
        Self::start_with("127.0.0.1:0".parse().unwrap(), vec![], delay).await
    }

    async fn start_with(addr: SocketAddr, answers: Vec<Answer>, delay: Duration) -> Receiver {
        async fn answer(
            State(s): State<Script>,
            uri: axum::http::Uri,
            headers: HeaderMap,
            body: axum::body::Bytes,
        ) -> Response {
            s.got.lock().unwrap().push(Got {
                path: uri.path().to_owned(),
                headers,
                body: body.to_vec(),
            });
            tokio::time::sleep(s.delay).await;
            let next = {
                let mut a = s.answers.lock().unwrap();
                if a.is_empty() {
                    (200, None)
                } else {
                    a.remove(0)
                }
            };
            let status = StatusCode::from_u16(next.0).unwrap();
            match next.1 {
                Some(loc) => (status, [("location", loc)], "moved").into_response(),
                None => (status, "ok").into_response(),
            }
        }
        let script = Script {
            got: Arc::default(),
            answers: Arc::new(Mutex::new(answers)),
            delay,
        };
        // A receiver started again on the same port waits for the dropped one's listener to
        // close (its task ends asynchronously).
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 100 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("bind {addr}: {e}"),
            }
        };
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(script.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { addr, script, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn got(&self) -> Vec<Got> {
        self.script.got.lock().unwrap().clone()
    }

    /// Waits until `n` requests arrived (real time: the sender looks a few times a second).
    async fn wait_for(&self, n: usize) -> Vec<Got> {
        for _ in 0..300 {
            let got = self.got();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the receiver got {} requests, not {n}", self.got().len());
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn loopback_allowed() -> Settings {
    Settings {
        triggers: Some(TriggerSettings {
            callback_allow_http_loopback: Some(true),
        }),
        ..Settings::default()
    }
}

/// The Standard Webhooks check, written out from the specification: the key is the base64
/// after `whsec_`; the signature is base64(HMAC-SHA256(key, "id.timestamp.body")), sent as
/// `v1,<signature>` (one of several, space-separated).
fn standard_webhooks_verify(signing_secret: &str, got: &Got) -> bool {
    let key = STANDARD
        .decode(signing_secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let id = got.header("webhook-id");
    let ts = got.header("webhook-timestamp");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&got.body);
    let expected = STANDARD.encode(mac.finalize().into_bytes());
    got.header("webhook-signature")
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|s| s == expected)
}

/// A generic agent and a ready project in `org`: (agent id, project id).
fn agent_and_project(t: &TestServer, org: &str, agent: roster::NewAgent) -> (String, String) {
    let app = t.app();
    let now = app.clock.now();
    let a = roster::add_agent(&app.store, org, &agent, now).unwrap();
    let p = roster::add_project(&app.store, org, "Site", Rollout::Ready, now).unwrap();
    (a.id.to_string(), p.id.to_string())
}

/// `kennis trigger add` with a callback URL through the running server: its JSON answer.
fn add_trigger(t: &TestServer, org: &str, agent: roster::NewAgent, callback: &str) -> Value {
    let (a, p) = agent_and_project(t, org, agent);
    run_json(
        t.data_dir(),
        &[
            "trigger",
            "add",
            org,
            "Build",
            "--agent",
            &a,
            "--project",
            &p,
            "--instructions",
            "Report.",
            "--cooldown",
            "0",
            "--callback-url",
            callback,
            "--json",
        ],
        None,
    )
}

async fn fire(t: &TestServer, trigger: &Value) -> u64 {
    fire_keyed(t, trigger, "main").await
}

async fn fire_keyed(t: &TestServer, trigger: &Value, key: &str) -> u64 {
    let r = t
        .client
        .post(t.url(&format!(
            "/api/hooks/events/{}",
            trigger["id"].as_str().unwrap()
        )))
        .bearer_auth(trigger["secret"].as_str().unwrap())
        .header("X-Service-Event-Key", key)
        .json(&json!({"build": 42}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    r.json::<Value>().await.unwrap()["featureRequestId"]
        .as_u64()
        .unwrap()
}

/// The read-run endpoint's answer for `run` of `trigger`.
async fn read_run(t: &TestServer, trigger: &Value, run: u64) -> Value {
    t.client
        .get(t.url(&format!("/api/hooks/runs/{run}")))
        .bearer_auth(trigger["secret"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn callback(t: &TestServer, run: u64) -> Option<requests::callback::Callback> {
    t.app()
        .store
        .read(|tx| requests::callback::get(tx, run))
        .unwrap()
}

/// Waits until the run's callback kept `n` attempts.
async fn attempts(t: &TestServer, run: u64, n: usize) -> requests::callback::Callback {
    for _ in 0..300 {
        if let Some(cb) = callback(t, run).filter(|c| c.attempts.len() >= n) {
            return cb;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "run {run}'s callback never kept {n} attempts: {:?}",
        callback(t, run)
    );
}

fn statuses(v: &Value) -> Vec<u64> {
    v["callbacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_is_posted_signed_with_the_read_run_answer() {
    let t = TestServer::start_with(loopback_allowed()).await;
    t.seed("Acme", "ann@example.org");
    let rx = Receiver::start(vec![]).await;
    let trigger = add_trigger(&t, "acme", echo_agent(), &rx.url("/kennis/result?team=7"));
    assert_eq!(trigger["callback_url"], rx.url("/kennis/result?team=7"));
    let listed = run_json(t.data_dir(), &["trigger", "list", "acme", "--json"], None);
    assert_eq!(
        listed["items"][0]["callback_url"],
        rx.url("/kennis/result?team=7")
    );

    let run = fire(&t, &trigger).await;
    let got = rx.wait_for(1).await;
    let got = &got[0];
    assert_eq!(got.path, "/kennis/result");
    assert_eq!(got.header("content-type"), "application/json");
    let secret = trigger["signing_secret"].as_str().unwrap();
    assert!(
        standard_webhooks_verify(secret, got),
        "signature {} does not verify",
        got.header("webhook-signature")
    );
    // Another trigger's secret does not verify it: the key is this trigger's.
    let other = add_trigger(&t, "acme", echo_agent(), &rx.url("/other"));
    assert!(!standard_webhooks_verify(
        other["signing_secret"].as_str().unwrap(),
        got
    ));
    assert_eq!(
        got.header("webhook-timestamp"),
        t.clock.now().as_second().to_string()
    );
    let body = got.json();
    assert_eq!(body["type"], "run.finished");
    let read = read_run(&t, &trigger, run).await;
    assert_eq!(read["status"], "succeeded");
    assert_eq!(
        body["run"], read,
        "the callback carries the read-run answer"
    );
    assert_eq!(body.as_object().unwrap().len(), 2, "{body}");

    attempts(&t, run, 1).await;
    let shown = run_json(
        t.data_dir(),
        &["run", "show", &run.to_string(), "--json"],
        None,
    );
    assert_eq!(statuses(&shown), [200]);
    let first = &shown["callbacks"][0];
    assert_eq!(first["attempt"], 1);
    assert_eq!(first["at"], t.clock.now().to_string());
    assert!(first["reason"].is_string());
    assert_eq!(shown["callback"]["state"], "delivered");
    assert_eq!(shown["callback"]["webhook_id"], got.header("webhook-id"));
    let human = crate::fixture::run(t.data_dir(), &["run", "show", &run.to_string()], None);
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    assert!(
        human.contains("delivered") && human.contains("attempt 1") && human.contains(": 200"),
        "{human}"
    );

    let metrics = t.metrics().await;
    assert!(
        metrics.contains("kennis_callbacks_sent_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kennis_callbacks_failed_total 0"),
        "{metrics}"
    );
    assert!(metrics.contains("kennis_callbacks_pending"), "{metrics}");
    // Nothing more arrives: a delivered callback is not sent again by itself.
    t.clock.advance(SignedDuration::from_hours(30));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(rx.got().len(), 1);
}

/// Every final status of the read-run endpoint is called back (`succeeded` and `cancelled` are
/// above and below): a command that fails, and one that outlives its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_timed_out_runs_are_called_back_too() {
    let t = TestServer::start_with(loopback_allowed()).await;
    t.seed("Acme", "ann@example.org");
    let rx = Receiver::start(vec![]).await;
    let command = |program: &str, args: &[&str], timeout: Option<u64>| roster::NewAgent {
        exec: "command".into(),
        program: Some(program.into()),
        args: args.iter().map(|a| a.to_string()).collect(),
        timeout_secs: timeout,
        ..echo_agent()
    };
    for (agent, status, path) in [
        (command("/bin/false", &[], None), "failed", "/failed"),
        (
            command("/bin/sleep", &["30"], Some(1)),
            "timed_out",
            "/late",
        ),
    ] {
        let trigger = add_trigger(&t, "acme", agent, &rx.url(path));
        let run = fire(&t, &trigger).await;
        let mut got = None;
        for _ in 0..400 {
            got = rx.got().into_iter().find(|g| g.path == path);
            if got.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let got = got.unwrap_or_else(|| panic!("no callback for the {status} run"));
        assert!(standard_webhooks_verify(
            trigger["signing_secret"].as_str().unwrap(),
            &got
        ));
        let read = read_run(&t, &trigger, run).await;
        assert_eq!(read["status"], status, "{read}");
        assert_eq!(got.json()["run"], read);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_are_retried_with_the_same_webhook_id_and_shown() {
    let t = TestServer::start_with(loopback_allowed()).await;
    let admin = t.seed("Acme", "ann@example.org");
    let rx = Receiver::start(vec![(500, None), (500, None)]).await;
    let trigger = add_trigger(&t, "acme", echo_agent(), &rx.url("/hook"));
    let run = fire(&t, &trigger).await;

    rx.wait_for(1).await;
    let cb = attempts(&t, run, 1).await;
    assert_eq!(cb.state, requests::callback::State::Pending);
    let wait = cb.next_at.unwrap().duration_since(t.clock.now());
    assert!(
        wait > SignedDuration::ZERO && wait <= SignedDuration::from_secs(60),
        "first retry within a minute: {wait:?}"
    );
    // Not before it is due.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(rx.got().len(), 1);
    t.clock.advance(SignedDuration::from_secs(60));
    rx.wait_for(2).await;
    let cb = attempts(&t, run, 2).await;
    let wait = cb.next_at.unwrap().duration_since(t.clock.now());
    assert!(
        wait > SignedDuration::from_secs(60),
        "backoff grows: {wait:?}"
    );
    t.clock.advance(wait + SignedDuration::from_secs(1));
    let got = rx.wait_for(3).await;
    attempts(&t, run, 3).await;

    let ids: Vec<String> = got.iter().map(|g| g.header("webhook-id")).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    let secret = trigger["signing_secret"].as_str().unwrap();
    assert!(got.iter().all(|g| standard_webhooks_verify(secret, g)));
    let shown = run_json(
        t.data_dir(),
        &["run", "show", &run.to_string(), "--json"],
        None,
    );
    assert_eq!(statuses(&shown), [500, 500, 200]);
    assert_eq!(shown["callbacks"][2]["attempt"], 3);
    assert!(
        shown["callbacks"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("500"),
        "{shown}"
    );
    assert_eq!(shown["callback"]["state"], "delivered");

    // The run's page shows every attempt and sends it again, in both languages.
    let page_path = format!("/portal/o/acme/runs/{run}");
    let mut b = Browser::new(&t);
    let page = b.login(&admin, &page_path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let table = page.body.split("id=\"run-callbacks\"").nth(1).unwrap();
    let table = table.split("</table>").next().unwrap();
    assert_eq!(
        table.matches("<tr>").count(),
        4,
        "header and three attempts"
    );
    assert!(page.body.contains("Send again"));
    let mut nl = Browser::speaking(&t, "nl");
    let page = nl.login(&admin, &page_path).await;
    assert!(page.body.contains("Opnieuw versturen"), "{}", page.body);
    let again = nl
        .post(
            &format!("{page_path}/callback-again"),
            &[("csrf_token", &page.csrf())],
        )
        .await;
    assert_eq!(again.status, 303, "{}", again.body);
    let got = rx.wait_for(4).await;
    assert_eq!(got[3].header("webhook-id"), ids[0]);
    let cb = attempts(&t, run, 4).await;
    assert_eq!(cb.attempts[3].attempt, 4);
    // Send again without the CSRF token: refused, nothing sent.
    let forged = nl.post(&format!("{page_path}/callback-again"), &[]).await;
    assert_eq!(forged.status, 403);
    // Another organisation's admin cannot send it again through their own pages.
    let other = t.seed("Bakkerij", "bob@example.org");
    let mut bob = Browser::new(&t);
    let page = bob.login(&other, "/portal/o/bakkerij/triggers").await;
    let foreign = bob
        .post(
            &format!("/portal/o/bakkerij/runs/{run}/callback-again"),
            &[("csrf_token", &page.csrf())],
        )
        .await;
    assert_eq!(foreign.status, 404, "{}", foreign.body);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(rx.got().len(), 4);
    // "Send again" is an admin action of the organisation, audited with its admin.
    t.app().batch.flush();
    let out = crate::fixture::run(t.data_dir(), &["audit", "export", "acme"], None);
    let again: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["action"] == "run.callback_again")
        .collect();
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(
        (&again[0]["actor"], &again[0]["target"]),
        (&json!("ann@example.org"), &json!(format!("run {run}")))
    );
    let out = crate::fixture::run(t.data_dir(), &["audit", "export", "bakkerij"], None);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("run.callback_again"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_pending_at_a_restart_is_sent_after_it() {
    let mut t = TestServer::start_with(loopback_allowed()).await;
    t.seed("Acme", "ann@example.org");
    // A port nobody listens on yet: the first attempt finds the connection refused.
    let port = crate::fixture::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let trigger = add_trigger(&t, "acme", echo_agent(), &format!("http://{addr}/hook"));
    let run = fire(&t, &trigger).await;
    let cb = attempts(&t, run, 1).await;
    assert_eq!(cb.attempts[0].status, 0);
    assert_eq!(cb.state, requests::callback::State::Pending);

    t.stop().await;
    let rx = Receiver::start_on(addr, vec![]).await;
    t.restart_with(loopback_allowed()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rx.got().is_empty(), "not before it is due");
    t.clock.advance(SignedDuration::from_secs(60));
    let got = rx.wait_for(1).await;
    assert_eq!(got[0].header("webhook-id"), cb.webhook_id);
    assert!(standard_webhooks_verify(
        trigger["signing_secret"].as_str().unwrap(),
        &got[0]
    ));
    let cb = attempts(&t, run, 2).await;
    assert_eq!(
        cb.attempts.iter().map(|a| a.status).collect::<Vec<_>>(),
        [0, 200]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_ended_while_no_server_runs_is_called_back_at_the_next_start() {
    let mut t = TestServer::start_with(loopback_allowed()).await;
    t.seed("Acme", "ann@example.org");
    let rx = Receiver::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow.sh");
    std::fs::write(&slow, "#!/bin/sh\nsleep 30\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let agent = roster::NewAgent {
        name: "Slow".into(),
        kind: roster::AgentKind::Generic,
        exec: "command".into(),
        program: Some(slow.to_str().unwrap().into()),
        args: vec![],
        url: None,
        timeout_secs: Some(60),
    };
    let trigger = add_trigger(&t, "acme", agent, &rx.url("/hook"));
    let run = fire(&t, &trigger).await;
    for _ in 0..100 {
        let r = t
            .app()
            .store
            .read(|tx| requests::get(tx, run))
            .unwrap()
            .unwrap();
        if r.status == requests::Status::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    t.stop().await;
    // The operator cancels it with no server running: the run ends in the store alone, and its
    // callback is pending in that same write.
    let out = crate::fixture::run(t.data_dir(), &["run", "cancel", &run.to_string()], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(rx.got().is_empty());
    // The command line used the wall clock; move the test clock past it.
    t.clock
        .set(jiff::Timestamp::now() + SignedDuration::from_secs(5));
    t.restart_with(loopback_allowed()).await;
    let got = rx.wait_for(1).await;
    let body = got[0].json();
    assert_eq!(body["run"]["status"], "cancelled");
    assert_eq!(body["run"]["id"], run);
    assert!(standard_webhooks_verify(
        trigger["signing_secret"].as_str().unwrap(),
        &got[0]
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_callback_urls_are_not_saved_and_never_contacted() {
    // Without the test switch, a loopback receiver is as refused as any inside address.
    let mut t = TestServer::start().await;
    let admin = t.seed("Acme", "ann@example.org");
    let rx = Receiver::start(vec![]).await;
    let (a, p) = agent_and_project(&t, "acme", echo_agent());
    for bad in [
        "https://10.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://localhost/hook",
        "https://[::1]/hook",
        &rx.url("/hook"),
        "http://93.184.215.14/hook",
        "https://user:pw@93.184.215.14/hook",
        "ftp://93.184.215.14/hook",
    ] {
        let out = run(
            t.data_dir(),
            &[
                "trigger",
                "add",
                "acme",
                "Build",
                "--agent",
                &a,
                "--project",
                &p,
                "--instructions",
                "Report.",
                "--callback-url",
                bad,
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(1), "{bad}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("callback_url") && stderr(&out).contains("refused"),
            "{bad}: {}",
            stderr(&out)
        );
    }
    let listed = run_json(t.data_dir(), &["trigger", "list", "acme", "--json"], None);
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        0,
        "nothing saved"
    );

    // The portal form refuses it too, with the reason, and saves nothing.
    let mut b = Browser::new(&t);
    let page = b.login(&admin, "/portal/o/acme/triggers").await;
    assert!(page.body.contains("name=\"callback_url\""));
    let refused = b
        .post(
            "/portal/o/acme/triggers",
            &[
                ("csrf_token", &page.csrf()),
                ("name", "Build"),
                ("instructions", "Report."),
                ("agent", &a),
                ("project", &p),
                ("cooldown", "0"),
                ("callback_url", "https://10.0.0.1/hook"),
            ],
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("id=\"error\""), "{}", refused.body);
    assert!(refused.body.contains("private network"), "{}", refused.body);
    let listed = run_json(t.data_dir(), &["trigger", "list", "acme", "--json"], None);
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        0,
        "nothing saved"
    );

    // Saved while the switch was on, refused again when sending once it is off: the attempt is
    // kept with the reason and nothing reaches the receiver.
    t.restart_with(loopback_allowed()).await;
    // With the switch, the portal form saves one and shows it.
    let mut b = Browser::new(&t);
    let page = b.login(&admin, "/portal/o/acme/triggers").await;
    let saved = b
        .post(
            "/portal/o/acme/triggers",
            &[
                ("csrf_token", &page.csrf()),
                ("name", "From the portal"),
                ("instructions", "Report."),
                ("agent", &a),
                ("project", &p),
                ("cooldown", "0"),
                ("callback_url", &rx.url("/portal")),
            ],
        )
        .await;
    assert_eq!(saved.status, 200, "{}", saved.body);
    assert!(saved.body.contains(&rx.url("/portal")), "{}", saved.body);
    let listed = run_json(t.data_dir(), &["trigger", "list", "acme", "--json"], None);
    assert_eq!(listed["items"][0]["callback_url"], rx.url("/portal"));
    let detail = b
        .get(&format!(
            "/portal/o/acme/triggers/{}",
            listed["items"][0]["id"].as_str().unwrap()
        ))
        .await;
    assert!(
        detail.body.contains("id=\"trigger-callback-url\""),
        "{}",
        detail.body
    );
    let trigger = add_trigger(&t, "acme", echo_agent(), &rx.url("/hook"));
    t.restart().await;
    let run_id = fire(&t, &trigger).await;
    let cb = attempts(&t, run_id, 1).await;
    assert_eq!(cb.state, requests::callback::State::Failed);
    assert_eq!(cb.attempts[0].status, 0);
    assert!(cb.attempts[0].reason.contains("refused"), "{cb:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(rx.got().is_empty());

    // A stored URL that points inside (as a changed DNS answer would) is not contacted either.
    let app = t.app().clone();
    let id = uuid::Uuid::parse_str(trigger["id"].as_str().unwrap()).unwrap();
    app.store
        .write(|tx| {
            let mut tr: kennis::triggers::Trigger =
                tx.get(kennis::store::TRIGGERS, id.as_bytes())?.unwrap();
            tr.callback_url = Some("https://10.0.0.1/hook".into());
            tx.put(kennis::store::TRIGGERS, id.as_bytes(), &tr)
        })
        .unwrap();
    let started = std::time::Instant::now();
    let inside = fire(&t, &trigger).await;
    let cb = attempts(&t, inside, 1).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused without trying to connect"
    );
    assert_eq!(cb.state, requests::callback::State::Failed);
    assert!(cb.attempts[0].reason.contains("private network"), "{cb:?}");
    let metrics = t.metrics().await;
    assert!(
        metrics.contains("kennis_callbacks_failed_total 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_from_the_receiver_is_not_followed() {
    let t = TestServer::start_with(loopback_allowed()).await;
    t.seed("Acme", "ann@example.org");
    // Where the redirect points: another loopback listener, which must never be asked.
    let inside = Receiver::start(vec![]).await;
    let rx = Receiver::start(vec![
        (307, Some(inside.url("/steal"))),
        (302, Some("http://10.0.0.1/steal".into())),
    ])
    .await;
    let trigger = add_trigger(&t, "acme", echo_agent(), &rx.url("/hook"));
    let run = fire(&t, &trigger).await;
    let cb = attempts(&t, run, 1).await;
    assert_eq!(cb.attempts[0].status, 307);
    assert!(cb.attempts[0].reason.contains("redirect"), "{cb:?}");
    assert_eq!(cb.state, requests::callback::State::Pending);
    t.clock.advance(SignedDuration::from_secs(60));
    let cb = attempts(&t, run, 2).await;
    assert_eq!(cb.attempts[1].status, 302);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.got().len(), 2);
    assert!(inside.got().is_empty(), "the redirect was followed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_holds_only_its_organisations_share() {
    let t = TestServer::start_with(loopback_allowed()).await;
    t.seed("Acme", "ann@example.org");
    t.seed("Bakkerij", "bob@example.org");
    // Acme's receiver never answers in time; Bakkerij's answers at once.
    let slow = Receiver::slow(Duration::from_secs(30)).await;
    let fast = Receiver::start(vec![]).await;
    let acme = add_trigger(&t, "acme", echo_agent(), &slow.url("/hook"));
    let bakkerij = add_trigger(&t, "bakkerij", echo_agent(), &fast.url("/hook"));
    let share = kennis::triggers::callback::PER_ORG;
    let mut acme_runs = Vec::new();
    for n in 0..share + 4 {
        acme_runs.push(fire_keyed(&t, &acme, &format!("k{n}")).await);
    }
    slow.wait_for(share).await;

    // Another organisation's callback and the hook endpoint do not wait for Acme's receiver.
    let started = std::time::Instant::now();
    let run = fire(&t, &bakkerij).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the hook answered late"
    );
    fast.wait_for(1).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "Bakkerij's callback waited {:?}",
        started.elapsed()
    );
    assert_eq!(
        attempts(&t, run, 1).await.state,
        requests::callback::State::Delivered
    );
    // Acme has its share in flight and no more.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(slow.got().len(), share);

    // After 10 s without an answer an attempt ends with status 0, to be retried; then the rest
    // of Acme's callbacks get their turn.
    let cb = attempts(&t, acme_runs[0], 1).await;
    assert_eq!(cb.attempts[0].status, 0);
    assert!(cb.attempts[0].reason.contains("10 seconds"), "{cb:?}");
    assert_eq!(cb.state, requests::callback::State::Pending);
    slow.wait_for(share + 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_during_the_callback_sends_it_again_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("kennis.toml");
    std::fs::write(&config, "[triggers]\ncallback_allow_http_loopback = true\n").unwrap();
    let config = config.to_str().unwrap();
    let cli = |args: &[&str]| {
        let mut all = vec!["--config", config];
        all.extend_from_slice(args);
        run_json(&data, &all, None)
    };
    // The first receiver takes the callback and never answers.
    let hanging = Receiver::slow(Duration::from_secs(60)).await;
    let addr = hanging.addr;
    cli(&["org", "create", "Acme", "--json"]);
    let agent = cli(&[
        "agent", "add", "acme", "Echo", "--kind", "generic", "--exec", "echo", "--json",
    ]);
    let project = cli(&["project", "add", "acme", "Site", "--ready", "--json"]);
    let trigger = cli(&[
        "trigger",
        "add",
        "acme",
        "Build",
        "--agent",
        &agent["id"].to_string(),
        "--project",
        &project["id"].to_string(),
        "--instructions",
        "Report.",
        "--callback-url",
        &hanging.url("/hook"),
        "--json",
    ]);
    let server = crate::fixture::ServeProcess::spawn(&data, &["--config", config], None);
    let path = &trigger["url"].as_str().unwrap()
        [trigger["url"].as_str().unwrap().find("/api/").unwrap()..];
    let r = crate::fixture::http_client()
        .post(format!("{}{path}", server.base))
        .bearer_auth(trigger["secret"].as_str().unwrap())
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let run: u64 = r.json::<Value>().await.unwrap()["featureRequestId"]
        .as_u64()
        .unwrap();
    let first = hanging.wait_for(1).await;
    // SIGKILL while the attempt waits for its answer: nothing of it was recorded.
    server.kill9();
    drop(hanging);
    let rx = Receiver::start_on(addr, vec![]).await;
    let again = crate::fixture::ServeProcess::spawn(&data, &["--config", config], None);
    let got = rx.wait_for(1).await;
    assert_eq!(got[0].header("webhook-id"), first[0].header("webhook-id"));
    assert_eq!(got[0].body, first[0].body, "the same run, the same body");
    assert!(standard_webhooks_verify(
        trigger["signing_secret"].as_str().unwrap(),
        &got[0]
    ));
    let mut shown = Value::Null;
    for _ in 0..100 {
        shown = cli(&["run", "show", &run.to_string(), "--json"]);
        if shown["callback"]["state"] == "delivered" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(statuses(&shown), [200], "{shown}");
    assert!(again.terminate().success());
}

/// The `n`th fenced block whose fence names `lang` in the "Getting the result back" section of
/// `docs/triggers.md`.
fn docs_block(lang: &str, n: usize) -> String {
    let page = include_str!("../../docs/triggers.md");
    let section = page
        .split("## Getting the result back")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/triggers.md has the section");
    let fence = format!("```{lang}\n");
    section
        .split(fence.as_str())
        .nth(n + 1)
        .unwrap_or_else(|| panic!("no {lang} block #{n} in the section"))
        .split("```")
        .next()
        .unwrap()
        .to_owned()
}

/// The verification examples of the docs, run as written against a real callback: the Python
/// function accepts it and refuses a changed body and another secret; the shell lines compute
/// the signature the callback carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs python3 and openssl; run by .ci/run"]
async fn the_documented_verification_examples_accept_a_real_callback() {
    let t = TestServer::start_with(loopback_allowed()).await;
    // The Python example checks the timestamp against the wall clock.
    t.clock.set(jiff::Timestamp::now());
    t.seed("Acme", "ann@example.org");
    let rx = Receiver::start(vec![]).await;
    let trigger = add_trigger(&t, "acme", echo_agent(), &rx.url("/hook"));
    fire(&t, &trigger).await;
    let got = rx.wait_for(1).await.remove(0);
    let secret = trigger["signing_secret"].as_str().unwrap();
    assert!(standard_webhooks_verify(secret, &got));

    let dir = tempfile::tempdir().unwrap();
    let headers = json!({
        "webhook-id": got.header("webhook-id"),
        "webhook-timestamp": got.header("webhook-timestamp"),
        "webhook-signature": got.header("webhook-signature"),
    });
    std::fs::write(dir.path().join("headers.json"), headers.to_string()).unwrap();
    std::fs::write(dir.path().join("body.json"), &got.body).unwrap();
    let python = format!(
        "{}\n\nimport json, sys\nsecret = sys.argv[1]\nheaders = json.load(open('headers.json'))\nbody = open('body.json', 'rb').read()\nother = 'whsec_' + base64.b64encode(b'x' * 32).decode()\nprint(json.dumps([verify(secret, headers, body), verify(secret, headers, body + b' '), verify(other, headers, body)]))\n",
        docs_block("python", 0)
    );
    std::fs::write(dir.path().join("verify.py"), python).unwrap();
    let out = std::process::Command::new("python3")
        .arg("verify.py")
        .arg(secret)
        .current_dir(dir.path())
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{}", stderr(&out));
    let verdicts: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdicts, json!([true, false, false]));

    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(docs_block("sh", 1))
        .env("SECRET", secret)
        .env("ID", got.header("webhook-id"))
        .env("TS", got.header("webhook-timestamp"))
        .current_dir(dir.path())
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{}", stderr(&out));
    let computed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        format!("v1,{}", computed.trim()),
        got.header("webhook-signature")
    );
}

/// Retention does not take a run whose result callback is still on its way: it goes (with its
/// callback record) once the callback arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_a_run_until_its_callback_is_done() {
    let t = TestServer::start_with(loopback_allowed()).await;
    t.seed("Acme", "ann@example.org");
    // Nobody listens yet: the first attempt finds the connection refused.
    let port = crate::fixture::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let trigger = add_trigger(&t, "acme", echo_agent(), &format!("http://{addr}/hook"));
    let run = fire(&t, &trigger).await;
    let cb = attempts(&t, run, 1).await;
    assert_eq!(cb.state, requests::callback::State::Pending);

    // Past the runs' retention (90 days): the run stays while its callback is pending.
    t.clock.advance(SignedDuration::from_hours(100 * 24));
    let app = t.app().clone();
    let r = app.blocking(kennis::housekeeping::retain).await.unwrap();
    assert_eq!(r.runs, 0, "{r:?}");
    assert!(
        app.store
            .read(|tx| requests::get(tx, run))
            .unwrap()
            .is_some()
    );

    // The receiver comes up; the next attempts arrive and the callback is delivered.
    let rx = Receiver::start_on(addr, vec![]).await;
    for _ in 0..20 {
        if !rx.got().is_empty() {
            break;
        }
        t.clock.advance(SignedDuration::from_hours(15));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    rx.wait_for(1).await;
    for _ in 0..100 {
        if callback(&t, run).is_some_and(|c| c.state == requests::callback::State::Delivered) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        callback(&t, run).unwrap().state,
        requests::callback::State::Delivered
    );
    let r = app.blocking(kennis::housekeeping::retain).await.unwrap();
    assert_eq!(r.runs, 1, "{r:?}");
    assert!(
        app.store
            .read(|tx| requests::get(tx, run))
            .unwrap()
            .is_none()
    );
    assert!(
        callback(&t, run).is_none(),
        "the callback record went with it"
    );
}

/// A callback is signed with the trigger's signing secret, the key its signed deliveries are
/// checked with; yet a callback is kennis telling the receiver a run ended, not the receiver
/// asking for a run. Whoever gets a callback (the receiver, a relay or log on its way) sending
/// it on to the trigger's URL within the 5-minute window starts no run: 401, nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_sent_back_to_its_trigger_starts_no_run() {
    let t = TestServer::start_with(loopback_allowed()).await;
    t.seed("Acme", "ann@example.org");
    let rx = Receiver::start(vec![]).await;
    let trigger = add_trigger(&t, "acme", echo_agent(), &rx.url("/kennis/result"));
    let run = fire(&t, &trigger).await;
    let got = rx.wait_for(1).await;
    let got = &got[0];
    assert!(standard_webhooks_verify(
        trigger["signing_secret"].as_str().unwrap(),
        got
    ));

    let replay = |path: String| {
        let mut r = t.client.post(t.url(&path));
        for name in [
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
            "content-type",
        ] {
            r = r.header(name, got.header(name));
        }
        r.body(got.body.clone()).send()
    };
    let hook = format!("/api/hooks/events/{}", trigger["id"].as_str().unwrap());
    let r = replay(hook.clone()).await.unwrap();
    let status = r.status();
    let answer = r.text().await.unwrap();
    assert_eq!(status, 401, "a callback replayed as a delivery: {answer}");
    let next = t.app().store.read(|tx| requests::get(tx, run + 1)).unwrap();
    assert!(next.is_none(), "a run was started: {next:?}");
    // Under another event key too: the refusal comes from what the callback is, not the slot.
    let r = t
        .client
        .post(t.url(&hook))
        .header("webhook-id", got.header("webhook-id"))
        .header("webhook-timestamp", got.header("webhook-timestamp"))
        .header("webhook-signature", got.header("webhook-signature"))
        .header("X-Service-Event-Key", "other")
        .body(got.body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The trigger's own signed deliveries still work.
    let id = "msg_2Lh3pX";
    let ts = t.clock.now().as_second().to_string();
    let body = br#"{"build": 43}"#;
    let key = STANDARD
        .decode(
            trigger["signing_secret"]
                .as_str()
                .unwrap()
                .strip_prefix("whsec_")
                .unwrap(),
        )
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let sig = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    let r = t
        .client
        .post(t.url(&hook))
        .header("webhook-id", id)
        .header("webhook-timestamp", &ts)
        .header("webhook-signature", sig)
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
}

/// Deleting a trigger ends its runs' callbacks: one still waiting for its next attempt is
/// given up at that attempt (`failed`, "the run's trigger no longer exists") and nothing more
/// reaches the URL — an admin who deletes a trigger because of where it reports gets no
/// further results sent there, for up to two days of retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_triggers_callbacks_stop() {
    let t = TestServer::start_with(loopback_allowed()).await;
    t.seed("Acme", "ann@example.org");
    let rx = Receiver::start(vec![(500, None), (500, None)]).await;
    let trigger = add_trigger(&t, "acme", echo_agent(), &rx.url("/hook"));
    let run = fire(&t, &trigger).await;
    rx.wait_for(1).await;
    let cb = attempts(&t, run, 1).await;
    assert_eq!(cb.state, requests::callback::State::Pending);

    let out = crate::fixture::run(
        t.data_dir(),
        &["trigger", "delete", trigger["id"].as_str().unwrap()],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    t.clock.advance(SignedDuration::from_secs(60));
    let cb = attempts(&t, run, 2).await;
    assert_eq!(cb.state, requests::callback::State::Failed, "{cb:?}");
    assert_eq!(cb.attempts[1].status, 0);
    assert!(
        cb.attempts[1].reason.contains("trigger no longer exists"),
        "{cb:?}"
    );
    t.clock.advance(SignedDuration::from_hours(48));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(rx.got().len(), 1, "the URL heard from a deleted trigger");
}
