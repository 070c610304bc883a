//! Load over loopback against a release build of `kennis` (a second process): 32 concurrent
//! senders, bounded in count and time.
//!
//! Phase 1: every delivery carries a new event key, so each creates a run (202; the run is
//! committed durably before the answer). Phase 2: deliveries to a slot in cooldown (200
//! `skipped: cooldown`). Prints throughput and latency percentiles per phase.
//!
//! Run: `cargo build --release && cargo bench --bench hooks_load`. Not part of CI.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

const SENDERS: usize = 32;

fn kennis(data: &Path, args: &[&str]) -> Value {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/kennis");
    let out = Command::new(&bin)
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run `cargo build --release` first)", bin.display()));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[derive(Clone, Copy)]
struct Phase {
    name: &'static str,
    expect: u16,
    keyed: bool,
    total: u64,
    max_time: Duration,
}

async fn drive(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    p: &Phase,
) -> (u64, Duration, Vec<Duration>) {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..SENDERS {
        let (client, url, secret, next) = (
            client.clone(),
            url.to_owned(),
            secret.to_owned(),
            next.clone(),
        );
        let (expect, keyed, total, max_time, name) =
            (p.expect, p.keyed, p.total, p.max_time, p.name);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total || start.elapsed() > max_time {
                    break;
                }
                let mut req = client
                    .post(&url)
                    .bearer_auth(&secret)
                    .body(r#"{"bench":true}"#);
                if keyed {
                    req = req.header("X-Service-Event-Key", format!("{name}-{n}"));
                }
                let t = Instant::now();
                let r = req.send().await.expect("request");
                let status = r.status().as_u16();
                let _ = r.bytes().await;
                lat.push(t.elapsed());
                assert_eq!(status, expect, "{name}: delivery {n}");
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed();
    all.sort();
    (all.len() as u64, elapsed, all)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    kennis(&data, &["org", "create", "Bench", "--json"]);
    let agent = kennis(
        &data,
        &[
            "agent", "add", "bench", "Echo", "--kind", "generic", "--exec", "echo", "--json",
        ],
    );
    let project = kennis(
        &data,
        &["project", "add", "bench", "P", "--ready", "--json"],
    );
    let add = |cooldown: &str| {
        kennis(
            &data,
            &[
                "trigger",
                "add",
                "bench",
                "T",
                "--agent",
                &agent["id"].to_string(),
                "--project",
                &project["id"].to_string(),
                "--instructions",
                "Benchmark",
                "--cooldown",
                cooldown,
                "--json",
            ],
        )
    };
    let runs = add("0");
    let cool = add("3600");

    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/kennis");
    let mut child = Command::new(bin)
        .arg("--data-dir")
        .arg(&data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut base = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(u) = line.strip_prefix("kennis listening on ") {
            base = u.to_owned();
            break;
        }
    }
    let port = base.rsplit(':').next().unwrap().to_owned();
    let url_of = |v: &Value| {
        let u = v["url"].as_str().unwrap();
        let path = &u[u.find("/api/").unwrap()..];
        format!("http://127.0.0.1:{port}{path}")
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder().pool_max_idle_per_host(SENDERS).build().unwrap();
        let secret = |v: &Value| v["secret"].as_str().unwrap().to_owned();
        // Start the cooldown.
        let r = client.post(url_of(&cool)).bearer_auth(secret(&cool)).body("{}").send().await.unwrap();
        assert_eq!(r.status(), 202);
        let phases = [
            (Phase { name: "runs", expect: 202, keyed: true, total: 20_000, max_time: Duration::from_secs(20) }, &runs),
            (Phase { name: "cooldown", expect: 200, keyed: false, total: 200_000, max_time: Duration::from_secs(20) }, &cool),
        ];
        for (phase, trigger) in &phases {
            // Warm-up: connections and caches.
            let warm = Phase { total: 500, max_time: Duration::from_secs(5), name: "warm", ..*phase };
            drive(&client, &url_of(trigger), &secret(trigger), &warm).await;
            let (n, elapsed, lat) = drive(&client, &url_of(trigger), &secret(trigger), phase).await;
            println!(
                "{:>9}: {n} deliveries in {:.2}s = {:.0}/s; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                phase.name,
                elapsed.as_secs_f64(),
                n as f64 / elapsed.as_secs_f64(),
                pct(&lat, 0.50),
                pct(&lat, 0.99),
                pct(&lat, 1.0),
            );
        }
        let m = client.get(format!("http://127.0.0.1:{port}/metrics")).send().await.unwrap().text().await.unwrap();
        for line in m.lines().filter(|l| l.starts_with("kennis_hook_deliveries_total") || l.starts_with("kennis_runs_total") || l.starts_with("kennis_run_queue_length")) {
            println!("  {line}");
        }
    });
    let _ = child.kill();
    let _ = child.wait();
}
