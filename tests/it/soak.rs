//! Bounded soaks of the release binary, run by `.ci/run` (ignored in `cargo test`; they need
//! `KENNIS_BIN`, the release build, and fail without it):
//!
//! - crash soak: concurrent hook deliveries and `kennisbank_write` calls while the server is
//!   SIGKILLed at random moments, at least 20 times, restarted on the same address each time;
//!   every run whose 202 was received and every write that succeeded is there afterwards.
//! - login memory: peak RSS during 200 parallel logins (from 200 addresses, through a trusted
//!   proxy header, so every one reaches the password hasher) stays below 400 MB above idle.
//!
//! Both print their figures (docs/performance.md).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn release_binary() -> PathBuf {
    let bin = std::env::var("KENNIS_BIN")
        .expect("set KENNIS_BIN to the release binary (target/release/kennis); .ci/run does");
    let bin = PathBuf::from(bin);
    assert!(bin.is_file(), "{} is not a file", bin.display());
    bin
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Proc {
    child: Child,
}

impl Proc {
    fn start(bin: &Path, data: &Path, listen: &str, env: &[(&str, &str)]) -> Proc {
        let mut cmd = Command::new(bin);
        for (k, _) in std::env::vars() {
            if k.starts_with("KENNIS_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd
            .arg("--data-dir")
            .arg(data)
            .args(["serve", "--listen", listen])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kennis");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("kennis listening on ") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(120))
            .expect("kennis listening");
        Proc { child }
    }

    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn terminate(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Sets up the data directory through the library before the server owns it: an
/// organisation with a ready person, a grant for the connector at `public_url`, an echo
/// trigger without cooldown. Returns (access token, trigger URL path, trigger secret).
fn prepare(data: &Path, public_url: &str) -> (String, String, String, u64) {
    use kennis::identity::{self, NewPerson, Role};
    let config = crate::fixture::test_config(data, kennis::config::Settings::default());
    let clock = kennis::clock::system();
    let app = kennis::app::App::open(config, public_url.to_owned(), clock).unwrap();
    let now = app.clock.now();
    let store = &app.store;
    let org = identity::create_org(store, "Soak", now).unwrap();
    let person = identity::add_person(
        store,
        NewPerson {
            email: "soak@example.org",
            name: None,
            password: crate::fixture::SEED_PASSWORD,
        },
        now,
    )
    .unwrap();
    let enrol = identity::reset_totp(store, "soak@example.org").unwrap();
    identity::verify_totp(
        store,
        person.id,
        &identity::code_at(&enrol.secret, now),
        now,
    )
    .unwrap();
    identity::accept_terms(store, person.id, &app.config.terms_version).unwrap();
    identity::add_member(store, &org.slug, "soak@example.org", Role::Admin, true, now).unwrap();
    let pair = kennis::oauth::issue_grant(
        &app,
        kennis::oauth::NewGrant {
            org_id: org.id,
            person_id: person.id,
            client_id: "soak".into(),
            scopes: vec!["kennisbank".into()],
            resource: app.connector_url(),
        },
    )
    .unwrap();
    let echo = kennis::roster::NewAgent {
        name: "Echo".into(),
        kind: kennis::roster::AgentKind::Generic,
        exec: "echo".into(),
        program: None,
        args: vec![],
        url: None,
        timeout_secs: None,
    };
    let a = kennis::roster::add_agent(store, &org.slug, &echo, now).unwrap();
    let p = kennis::roster::add_project(store, &org.slug, "P", kennis::roster::Rollout::Ready, now)
        .unwrap();
    let c = kennis::triggers::add(
        store,
        &org.slug,
        &kennis::triggers::NewTrigger {
            name: "Soak".into(),
            agent_id: a.id,
            project_id: p.id,
            instructions: "x".into(),
            cooldown_secs: Some(0),
            callback_url: None,
        },
        now,
    )
    .unwrap();
    app.batch.shutdown();
    app.commits.shutdown();
    (
        pair.access_token,
        format!("/api/hooks/events/{}", c.trigger.id),
        c.secret,
        org.id,
    )
}

#[derive(Default)]
struct Acked {
    runs: Vec<u64>,
    writes: Vec<(String, u64)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the release binary (KENNIS_BIN); run by .ci/run"]
async fn crash_soak_loses_no_acknowledged_run_or_write() {
    let bin = release_binary();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let base = format!("http://{listen}");
    let (token, hook, secret, org_id) = prepare(&data, &base);
    let kills: usize = std::env::var("KENNIS_SOAK_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
        .max(20);
    let acked = Arc::new(Mutex::new(Acked::default()));
    crate::fixture::install_crypto();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let started = Instant::now();
    let mut seq = 0u64;
    for round in 0..kills {
        let server = Proc::start(&bin, &data, &listen, &[]);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for w in 0..6 {
            let (c, acked, stop) = (client.clone(), acked.clone(), stop.clone());
            let (base, hook, secret, token) =
                (base.clone(), hook.clone(), secret.clone(), token.clone());
            seq += 1_000_000;
            let mut n = seq;
            tasks.push(tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    if w < 3 {
                        // A delivery per key: each may create a run.
                        let r = c
                            .post(format!("{base}{hook}"))
                            .bearer_auth(&secret)
                            .header("x-service-event-key", format!("k{n}"))
                            .json(&json!({"n": n}))
                            .send()
                            .await;
                        let Ok(r) = r else { break };
                        if r.status() == 202
                            && let Ok(v) = r.json::<Value>().await
                            && let Some(id) = v["featureRequestId"].as_u64()
                        {
                            acked.lock().unwrap().runs.push(id);
                        }
                    } else {
                        let path = format!("aangeleverd/soak/{n}.md");
                        let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                            "params": {"name": "kennisbank_write",
                                "arguments": {"path": path, "content": format!("write {n}\n")}}});
                        let r = c
                            .post(format!("{base}/mcp/kennisbank"))
                            .bearer_auth(&token)
                            .header("accept", "application/json, text/event-stream")
                            .header("mcp-protocol-version", "2025-06-18")
                            .json(&body)
                            .send()
                            .await;
                        let Ok(r) = r else { break };
                        if r.status() == 200
                            && let Ok(v) = r.json::<Value>().await
                            && v["result"]["isError"] != json!(true)
                            && let Some(version) =
                                v["result"]["structuredContent"]["version"].as_u64()
                        {
                            acked.lock().unwrap().writes.push((path, version));
                        }
                    }
                }
            }));
        }
        // A random moment: 150 ms to 1.2 s into the round.
        let wait = 150 + (rand_u64() % 1050);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        server.kill9();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
        eprintln!(
            "soak round {} of {kills}: killed after {wait} ms",
            round + 1
        );
    }
    // A last clean start must come up on the same address; then check everything.
    let server = Proc::start(&bin, &data, &listen, &[]);
    assert_eq!(
        client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    server.terminate();
    let acked = acked.lock().unwrap();
    let store = kennis::store::Store::open(&data).unwrap();
    let mut lost_runs = Vec::new();
    let mut lost_writes = Vec::new();
    store
        .read(|tx| -> Result<(), kennis::store::StoreError> {
            for id in &acked.runs {
                if kennis::requests::get(tx, *id)?.is_none() {
                    lost_runs.push(*id);
                }
            }
            Ok(())
        })
        .unwrap();
    store
        .read(|tx| -> Result<(), kennis::store::StoreError> {
            for (path, version) in &acked.writes {
                match kennis::kb::get_version(tx, org_id, path, *version)? {
                    Some(_) => {}
                    None => lost_writes.push(format!("{path} v{version}")),
                }
            }
            Ok(())
        })
        .unwrap();
    eprintln!(
        "crash soak: {kills} SIGKILLs in {:.0} s; {} acknowledged runs, {} acknowledged writes; lost {} runs, {} writes",
        started.elapsed().as_secs_f64(),
        acked.runs.len(),
        acked.writes.len(),
        lost_runs.len(),
        lost_writes.len()
    );
    assert!(
        acked.runs.len() >= 20,
        "too few runs acknowledged to mean anything"
    );
    assert!(
        acked.writes.len() >= 20,
        "too few writes acknowledged to mean anything"
    );
    assert!(
        lost_runs.is_empty(),
        "acknowledged runs lost: {lost_runs:?}"
    );
    assert!(
        lost_writes.is_empty(),
        "acknowledged writes lost: {lost_writes:?}"
    );
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

pub(crate) fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the release binary (KENNIS_BIN); run by .ci/run"]
async fn two_hundred_parallel_logins_stay_below_400_mb_above_idle() {
    let bin = release_binary();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let base = format!("http://{listen}");
    prepare(&data, &base);
    let server = Proc::start(
        &bin,
        &data,
        &listen,
        &[("KENNIS_TRUSTED_PROXIES", "127.0.0.1")],
    );
    let pid = server.child.id();
    crate::fixture::install_crypto();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    assert_eq!(
        client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_kib(pid, "VmRSS:");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let (c, base) = (client.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            let from = format!("198.51.{}.{}", i / 200, i % 200 + 1);
            let r = c
                .get(format!("{base}/login"))
                .header("x-forwarded-for", &from)
                .send()
                .await
                .unwrap();
            let cookie = r
                .headers()
                .get("set-cookie")
                .unwrap()
                .to_str()
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .to_owned();
            let body = r.text().await.unwrap();
            let csrf = crate::fixture::hidden_fields(&body)
                .into_iter()
                .find(|(k, _)| k == "csrf_token")
                .unwrap()
                .1;
            // Half with the right password, half wrong, a few unknown accounts.
            let (email, pw) = match i % 4 {
                0 | 1 => ("soak@example.org", crate::fixture::SEED_PASSWORD.to_owned()),
                2 => ("soak@example.org", format!("wrong-{i}")),
                _ => ("nobody@example.org", format!("wrong-{i}")),
            };
            c.post(format!("{base}/login"))
                .header("x-forwarded-for", &from)
                .header("cookie", cookie)
                .form(&[
                    ("csrf_token", csrf.as_str()),
                    ("email", email),
                    ("password", &pw),
                ])
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for t in tasks {
        *statuses.entry(t.await.unwrap()).or_default() += 1;
    }
    let elapsed = started.elapsed();
    let peak = rss_kib(pid, "VmHWM:");
    let after = rss_kib(pid, "VmRSS:");
    server.terminate();
    eprintln!(
        "200 parallel logins in {:.1} s: answers {statuses:?}; RSS idle {} MB, peak {} MB (+{} MB), after {} MB",
        elapsed.as_secs_f64(),
        idle / 1024,
        peak / 1024,
        (peak.saturating_sub(idle)) / 1024,
        after / 1024
    );
    assert!(
        statuses.keys().all(|s| [303, 401, 503].contains(s)),
        "{statuses:?}"
    );
    assert!(
        peak.saturating_sub(idle) < 400 * 1024,
        "peak RSS {} MB above idle",
        (peak - idle) / 1024
    );
}
