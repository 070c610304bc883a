//! Run callbacks under load, against a release build of `kennis` (a second process): 1,000 runs
//! end within about a second, each with a callback to a receiver that takes 2 s to answer;
//! meanwhile 32 senders keep delivering to another trigger. Hook deliveries must not slow down:
//! the callbacks have their own bounded pool.
//!
//! Phase "baseline": deliveries with no callbacks under way. Phase "callbacks": the same
//! deliveries right after the 1,000 runs were fired, while their callbacks wait on the slow
//! receiver. Prints latency percentiles of both, then how many callbacks arrived and the
//! callback metrics.
//!
//! Run: `cargo build --release && cargo bench --bench callbacks_load`. Not part of CI.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

const SENDERS: usize = 32;
const RUNS: u64 = 1_000;
const RECEIVER_DELAY: Duration = Duration::from_secs(2);
const PHASE: Duration = Duration::from_secs(10);
/// The test switch that lets callbacks go to `http://127.0.0.1:<port>`.
const SWITCH: (&str, &str) = ("KENNIS_CALLBACK_ALLOW_HTTP_LOOPBACK", "true");

fn bin() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/kennis")
}

fn kennis(data: &Path, args: &[&str]) -> Value {
    let out = Command::new(bin())
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env(SWITCH.0, SWITCH.1)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run `cargo build --release` first)",
                bin().display()
            )
        });
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A receiver that answers 200 after [`RECEIVER_DELAY`]; counts what it got.
async fn slow_receiver(got: Arc<AtomicU64>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move || {
        let got = got.clone();
        async move {
            tokio::time::sleep(RECEIVER_DELAY).await;
            got.fetch_add(1, Ordering::Relaxed);
            "ok"
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/result")
}

/// Keyed deliveries (each creates a run) from [`SENDERS`] senders for `time`: sorted latencies.
async fn deliveries(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    tag: &str,
    time: Duration,
) -> Vec<Duration> {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..SENDERS {
        let (client, url, secret, next, tag) = (
            client.clone(),
            url.to_owned(),
            secret.to_owned(),
            next.clone(),
            tag.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while start.elapsed() < time {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .bearer_auth(&secret)
                    .header("X-Service-Event-Key", format!("{tag}-{n}"))
                    .body(r#"{"bench":true}"#)
                    .send()
                    .await
                    .expect("request");
                let status = r.status().as_u16();
                let _ = r.bytes().await;
                lat.push(t.elapsed());
                assert_eq!(status, 202, "{tag}: delivery {n}");
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    all
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

fn report(name: &str, lat: &[Duration], time: Duration) {
    println!(
        "{name:>9}: {} deliveries in {:.0}s = {:.0}/s; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(),
        time.as_secs_f64(),
        lat.len() as f64 / time.as_secs_f64(),
        pct(lat, 0.50),
        pct(lat, 0.99),
        pct(lat, 1.0),
    );
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let callback = rt.block_on(slow_receiver(got.clone()));

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
    let add = |extra: &[&str]| {
        let (a, p) = (agent["id"].to_string(), project["id"].to_string());
        let mut args = vec![
            "trigger",
            "add",
            "bench",
            "T",
            "--agent",
            &a,
            "--project",
            &p,
            "--instructions",
            "Benchmark",
            "--cooldown",
            "0",
            "--json",
        ];
        args.extend_from_slice(extra);
        kennis(&data, &args)
    };
    let with_callback = add(&["--callback-url", &callback]);
    let plain = add(&[]);

    let mut child = Command::new(bin())
        .arg("--data-dir")
        .arg(&data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env(SWITCH.0, SWITCH.1)
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
        format!("http://127.0.0.1:{port}{}", &u[u.find("/api/").unwrap()..])
    };
    let secret = |v: &Value| v["secret"].as_str().unwrap().to_owned();

    rt.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(SENDERS)
            .build()
            .unwrap();
        let baseline = deliveries(&client, &url_of(&plain), &secret(&plain), "base", PHASE).await;
        let fired = Instant::now();
        let mut sends = Vec::new();
        for n in 0..RUNS {
            let (client, url, secret) = (
                client.clone(),
                url_of(&with_callback),
                secret(&with_callback),
            );
            sends.push(tokio::spawn(async move {
                let r = client
                    .post(&url)
                    .bearer_auth(&secret)
                    .header("X-Service-Event-Key", format!("cb-{n}"))
                    .body("{}")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 202);
            }));
        }
        for s in sends {
            s.await.unwrap();
        }
        println!(
            "fired {RUNS} runs with callbacks in {:.2}s",
            fired.elapsed().as_secs_f64()
        );
        // The runs queue behind the baseline's: wait until all of them ended, so their
        // callbacks are pending (or sent) while the second phase is measured.
        let metric = |text: &str, name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
                .unwrap_or(0.0)
        };
        let waited = Instant::now();
        loop {
            let m = client
                .get(format!("http://127.0.0.1:{port}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let ended = metric(&m, "kennis_callbacks_pending ")
                + metric(&m, "kennis_callbacks_sent_total ")
                + metric(&m, "kennis_callbacks_failed_total ");
            if ended >= RUNS as f64 || waited.elapsed() > Duration::from_secs(300) {
                println!(
                    "{ended} runs with callbacks ended {:.1}s after firing (the baseline's runs drained first)",
                    fired.elapsed().as_secs_f64()
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let loaded = deliveries(&client, &url_of(&plain), &secret(&plain), "load", PHASE).await;
        report("baseline", &baseline, PHASE);
        report("callbacks", &loaded, PHASE);
        let m = client
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for line in m.lines().filter(|l| l.starts_with("kennis_callbacks_")) {
            println!("  {line}");
        }
        println!(
            "  receiver got {} callbacks {:.0}s after the runs were fired",
            got.load(Ordering::Relaxed),
            fired.elapsed().as_secs_f64()
        );
    });
    let _ = child.kill();
    let _ = child.wait();
}
