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

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Deliveries, Measured, Server};

const SENDERS: usize = 32;
const RUNS: u64 = 1_000;
const RECEIVER_DELAY: Duration = Duration::from_secs(2);
const PHASE: Duration = Duration::from_secs(10);
/// The test switch that lets callbacks go to `http://127.0.0.1:<port>`.
const SWITCH: (&str, &str) = ("KENNIS_CALLBACK_ALLOW_HTTP_LOOPBACK", "true");

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

/// Keyed deliveries (each creates a run) from [`SENDERS`] senders for `time`.
async fn deliveries(url: &str, secret: &str, tag: &str, time: Duration) -> Measured {
    Deliveries {
        url,
        secret,
        keyed: Some(tag),
        expect: 202,
        total: u64::MAX,
        time,
        senders: SENDERS,
    }
    .run()
    .await
}

fn report(name: &str, m: &Measured) {
    println!("{name:>9}: deliveries {}", m.line());
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
    common::kennis(&data, &["org", "create", "Bench", "--json"], &[SWITCH]);
    let with_callback = common::echo_trigger(
        &data,
        "bench",
        "With callback",
        "0",
        &["--callback-url", &callback],
        &[SWITCH],
    );
    let plain = common::echo_trigger(&data, "bench", "Plain", "0", &[], &[SWITCH]);
    let server = Server::start(&data, "127.0.0.1:0", &[SWITCH]);
    let url_of = |v: &serde_json::Value| server.hook_url(v);
    let secret = |v: &serde_json::Value| v["secret"].as_str().unwrap().to_owned();
    let port = server.port().to_owned();

    rt.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(SENDERS)
            .build()
            .unwrap();
        let baseline = deliveries(&url_of(&plain), &secret(&plain), "base", PHASE).await;
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
        let loaded = deliveries(&url_of(&plain), &secret(&plain), "load", PHASE).await;
        report("baseline", &baseline);
        report("callbacks", &loaded);
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
    // Killed, not stopped: a graceful stop would wait for the callbacks still under way.
    drop(server);
}
