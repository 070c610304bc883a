//! Load over loopback against a release build of `kennis` (a second process): 32 concurrent
//! senders, bounded in count and time.
//!
//! Phase 1: every delivery carries a new event key, so each creates a run (202; the run is
//! committed durably before the answer). Phase 2: deliveries to a slot in cooldown (200
//! `skipped: cooldown`). Prints throughput and latency percentiles per phase.
//!
//! Run: `cargo build --release && cargo bench --bench hooks_load`. Not part of CI.

mod common;

use std::time::Duration;

use common::{Deliveries, Server};

const SENDERS: usize = 32;

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    common::kennis(&data, &["org", "create", "Bench", "--json"], &[]);
    let runs = common::echo_trigger(&data, "bench", "Runs", "0", &[], &[]);
    let cool = common::echo_trigger(&data, "bench", "Cooldown", "3600", &[], &[]);
    let server = Server::start(&data, "127.0.0.1:0", &[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(SENDERS)
            .build()
            .unwrap();
        let secret = |v: &serde_json::Value| v["secret"].as_str().unwrap().to_owned();
        // Start the cooldown.
        let r = client
            .post(server.hook_url(&cool))
            .bearer_auth(secret(&cool))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        let (runs_url, cool_url) = (server.hook_url(&runs), server.hook_url(&cool));
        let (runs_secret, cool_secret) = (secret(&runs), secret(&cool));
        let phases = [
            ("runs", Some("runs"), 202, 20_000, &runs_url, &runs_secret),
            ("cooldown", None, 200, 200_000, &cool_url, &cool_secret),
        ];
        for (name, keyed, expect, total, url, secret) in phases {
            let load = |total, secs, keyed| Deliveries {
                url,
                secret,
                keyed,
                expect,
                total,
                time: Duration::from_secs(secs),
                senders: SENDERS,
            };
            // Warm-up: connections and caches.
            load(500, 5, keyed.map(|_| "warm")).run().await;
            let m = load(total, 20, keyed).run().await;
            println!("{name:>9}: deliveries {}", m.line());
        }
        let m = client
            .get(format!("{}/metrics", server.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for line in m.lines().filter(|l| {
            l.starts_with("kennis_hook_deliveries_total")
                || l.starts_with("kennis_runs_total")
                || l.starts_with("kennis_run_queue_length")
        }) {
            println!("  {line}");
        }
    });
    server.stop();
}
