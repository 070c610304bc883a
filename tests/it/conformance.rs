//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, Node 22) against
//! the real connector, through a small proxy that adds a valid bearer token. The server's
//! public URL is the proxy's, and the proxy passes the `Host` header through unchanged, so the
//! DNS-rebinding scenario really tests the server's Host/Origin check. `#[ignore]`d: it needs
//! Node and `npm ci` in tests/node; `.ci/run` provides both.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use kennis::config::Settings;

use crate::fixture::{TestServer, http_client};

/// The scenarios that apply to this server, per protocol revision (`--spec-version`); the
/// others need the suite's fixture tools, prompts, resources, logging, sessions or server
/// streams, which a knowledge-base connector does not offer (docs/testing.md).
const SCENARIOS: &[(&str, &[&str])] = &[
    (
        "2025-11-25",
        &[
            "server-initialize",
            "ping",
            "tools-list",
            "dns-rebinding-protection",
        ],
    ),
    (
        "2026-07-28",
        &[
            "server-stateless",
            "tools-list",
            "dns-rebinding-protection",
            "caching",
            "http-header-validation",
        ],
    ),
];

#[derive(Clone)]
struct Proxy {
    upstream: String,
    token: String,
    client: reqwest::Client,
}

/// Forwards one request to the server with the bearer token added; Host and Origin unchanged.
async fn forward(State(p): State<Proxy>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 4 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let uri = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    let mut headers = parts.headers.clone();
    headers.remove(header::CONNECTION);
    headers.remove(header::CONTENT_LENGTH);
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {}", p.token)).unwrap(),
    );
    let sent = p
        .client
        .request(parts.method, format!("{}{uri}", p.upstream))
        .headers(headers)
        .body(body)
        .send()
        .await;
    match sent {
        Ok(r) => {
            let mut out = Response::builder().status(r.status());
            for (k, v) in r.headers() {
                if k != header::TRANSFER_ENCODING && k != header::CONNECTION {
                    out = out.header(k, v);
                }
            }
            let bytes = r.bytes().await.unwrap_or_default();
            out.body(Body::from(bytes)).unwrap()
        }
        Err(e) => Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::from(e.to_string()))
            .unwrap(),
    }
}

fn node_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node 22 and `npm ci` in tests/node; run by .ci/run"]
async fn official_conformance_scenarios_pass() {
    let cli = node_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        cli.is_file(),
        "the conformance package is missing: run `npm ci` in tests/node ({})",
        cli.display()
    );
    let node = Command::new("node").arg("--version").output();
    let version = match node {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        _ => panic!("`node` is not on PATH; the conformance suite needs Node 22 or later"),
    };
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 22,
        "the conformance suite needs Node 22 or later, found {version}"
    );

    // The proxy's address is the server's public URL, as behind a reverse proxy.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", listener.local_addr().unwrap());
    let t = TestServer::start_with(Settings {
        public_url: Some(proxy_url.clone()),
        ..Settings::default()
    })
    .await;
    let s = t.seed("Acme", "conformance@example.org");
    let token = t.grant(&s, &["kennisbank", "feature_requests"]);
    let upstream = format!("http://{}", t.server.as_ref().expect("running").local_addr);
    let proxy = Proxy {
        upstream,
        token,
        client: http_client(),
    };
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let url = format!("{proxy_url}/mcp/kennisbank");
    let mut failures = Vec::new();
    for (version, scenarios) in SCENARIOS {
        for scenario in *scenarios {
            if let Err(why) = run_scenario(&cli, &url, version, scenario, t.data_dir()).await {
                failures.push(format!("{version} {scenario}: {why}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs one scenario; a run that checked nothing does not count as a pass.
async fn run_scenario(
    cli: &std::path::Path,
    url: &str,
    version: &str,
    scenario: &str,
    work: &std::path::Path,
) -> Result<(), String> {
    let out_dir = work.join(format!("conformance-{version}-{scenario}"));
    let mut cmd = Command::new("node");
    cmd.arg(cli)
        .args(["server", "--url", url, "--scenario", scenario])
        .args(["--spec-version", version, "-o"])
        .arg(&out_dir)
        .current_dir(node_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || cmd.output()),
    )
    .await
    .map_err(|_| "did not finish within 120 s".to_owned())?
    .unwrap()
    .map_err(|e| format!("node does not run: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The suite exits non-zero for any failed check, including the ones that do not apply
    // here; the saved checks decide.
    let checks = saved_checks(&out_dir);
    if !checks.iter().any(|c| c["status"] == "SUCCESS") {
        return Err(format!(
            "passed no checks (exit {}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let bad: Vec<String> = checks
        .iter()
        .filter(|c| {
            // SKIPPED: the suite found nothing to check (subscription streams, not offered).
            !(matches!(c["status"].as_str(), Some("SUCCESS" | "INFO" | "SKIPPED"))
                || not_applicable(c))
        })
        .map(|c| {
            format!(
                "check {} is {}: {}",
                c["id"], c["status"], c["errorMessage"]
            )
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad.join("\n"))
    }
}

/// Checks that do not apply to a connector with tools only, each failing exactly for that
/// reason (docs/testing.md): those that need one of the suite's diagnostic fixture
/// tools, and the caching hints of prompt and resource lists, which this server does not offer
/// (the method must be unknown, -32601).
fn not_applicable(check: &serde_json::Value) -> bool {
    let id = check["id"].as_str().unwrap_or_default();
    let message = check["errorMessage"].as_str().unwrap_or_default();
    let needs_fixture_tool = matches!(
        id,
        "sep-2575-server-rejects-undeclared-capability"
            | "sep-2575-missing-capability-http-400"
            | "sep-2575-http-server-no-independent-requests-on-stream"
            | "sep-2575-server-no-log-without-loglevel"
    ) && message
        .starts_with("Not testable: server does not list the diagnostic tool");
    let not_offered = matches!(
        id,
        "sep-2549-prompts-list-caching-hints"
            | "sep-2549-resources-list-caching-hints"
            | "sep-2549-resources-templates-list-caching-hints"
    ) && message.contains("returned JSON-RPC error -32601");
    needs_fixture_tool || not_offered
}

/// Every check in the `checks.json` files the suite saved under `dir`.
fn saved_checks(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(saved_checks(&p));
        } else if p.file_name().is_some_and(|n| n == "checks.json") {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            out.extend(v.as_array().cloned().unwrap_or_default());
        }
    }
    out
}
