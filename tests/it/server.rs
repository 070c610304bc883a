//! The server itself: health, metrics, TLS, request logs, graceful shutdown.

use kennis::config::Settings;
use kennis::store::{AUDIT, Store};

use crate::fixture::{ServeProcess, TestServer, get_status, install_crypto};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_metrics_answer() {
    let mut t = TestServer::start().await;
    let r = t.client.get(t.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "ok");
    let r = t.client.get(t.url("/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let text = t.metrics().await;
    assert!(
        text.contains(
            r#"kennis_http_requests_total{method="GET",route="/healthz",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(text.contains(r#"route="unmatched",status="404""#), "{text}");
    assert!(
        text.contains("kennis_http_request_duration_seconds_bucket"),
        "{text}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_vocabulary_is_read_before_the_server_answers() {
    let mut t = TestServer::start().await;
    let s = t.seed("Acme", "ann@example.org");
    // Enough words that reading them takes a while (tens of milliseconds here).
    let text: String = (0..40_000u32)
        .map(|i| format!("w{:x}q{} ", i.wrapping_mul(2_654_435_761), i % 97))
        .collect();
    t.put_doc(&s, "woorden.md", &text);
    t.restart().await;
    // No search has run in the new server: its words were read as it started, so the first
    // searches do not wait for them.
    let words = t.app().kb_index.vocabulary_words();
    assert!(
        matches!(words, Some(n) if n >= 40_000),
        "{words:?} words read when the server started answering"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_over_tls_with_a_generated_certificate() {
    install_crypto();
    let certs = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_path = certs.path().join("cert.pem");
    let key_path = certs.path().join("key.pem");
    std::fs::write(&cert_path, ck.cert.pem()).unwrap();
    std::fs::write(&key_path, ck.signing_key.serialize_pem()).unwrap();
    let mut t = TestServer::start_with(Settings {
        tls_cert: Some(cert_path),
        tls_key: Some(key_path),
        ..Settings::default()
    })
    .await;
    assert!(t.base.starts_with("https://"), "{}", t.base);
    let port = t.server.as_ref().unwrap().local_addr.port();
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ck.cert.pem().as_bytes()).unwrap()])
        .build()
        .unwrap();
    let r = client
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Plain HTTP on the TLS port gets no answer.
    let plain = t
        .client
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);
    // A client that does not trust the certificate is refused.
    let untrusting = reqwest::Client::builder().build().unwrap();
    assert!(
        untrusting
            .get(format!("https://localhost:{port}/healthz"))
            .send()
            .await
            .is_err()
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_flushes_the_batch_writer() {
    let mut t = TestServer::start().await;
    for i in 0..1000u32 {
        t.app().batch.append(AUDIT, &i);
    }
    let dir = t.data_dir().to_owned();
    t.stop().await;
    let store = Store::open(&dir).unwrap();
    let n = store.read(|tx| tx.count(AUDIT)).unwrap();
    assert_eq!(n, 1000);
}

#[test]
fn secrets_in_query_strings_and_link_paths_never_reach_the_log() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    for format in ["text", "json"] {
        let log = dir.path().join(format!("{format}.log"));
        let data = dir.path().join(format!("data-{format}"));
        let p = ServeProcess::spawn(&data, &["--log-format", format], Some(&log));
        let status = get_status(&format!(
            "{}/healthz?token=kb_trg_supersecret123&key=visible",
            p.base
        ));
        assert_eq!(status, 200);
        // One-time links carry their token in the path.
        for link in [
            "invite/kb_inv_supersecret456",
            "reset/kb_rst_supersecret789",
        ] {
            assert_eq!(get_status(&format!("{}/{link}", p.base)), 404);
        }
        let status = p.terminate();
        assert!(status.success(), "serve exited with {status}");
        let text = std::fs::read_to_string(&log).unwrap();
        for secret in ["supersecret123", "supersecret456", "supersecret789"] {
            assert!(
                !text.contains(secret),
                "{format} log leaks a token:\n{text}"
            );
        }
        assert!(text.contains("/invite/REDACTED"), "{format} log:\n{text}");
        assert!(
            text.contains("REDACTED") && text.contains("key=visible"),
            "{format} log:\n{text}"
        );
        if format == "json" {
            let line = text.lines().find(|l| l.contains("REDACTED")).unwrap();
            serde_json::from_str::<serde_json::Value>(line).expect("json log line");
        }
    }
}
