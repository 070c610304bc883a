//! Behind a real nginx (Debian's), configured as the README's recipe: the connector, the
//! OAuth flow and a hook delivery all work through it. nginx rewrites `Host` to the upstream
//! address (its default); kennis believes `X-Forwarded-Host`/`-Proto`/`-For` from it because
//! it is in `trusted_proxies`.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kennis::config::Settings;
use serde_json::json;

use crate::fixture::{
    KillOnDrop, TestServer, code_for, echo_trigger, exchange, free_port, install_crypto,
};

const HOST: &str = "kennis.example.org";

/// The README's nginx recipe (TLS left out: the test client speaks plain HTTP to nginx).
fn nginx_conf(work: &std::path::Path, listen: u16, upstream: SocketAddr) -> String {
    let w = work.display();
    format!(
        r#"
user root root;
worker_processes 1;
daemon off;
pid {w}/nginx.pid;
error_log {w}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {w}/access.log;
    client_body_temp_path {w}/body;
    proxy_temp_path {w}/proxy;
    fastcgi_temp_path {w}/fastcgi;
    uwsgi_temp_path {w}/uwsgi;
    scgi_temp_path {w}/scgi;
    server {{
        listen 127.0.0.1:{listen};
        server_name {HOST};
        client_max_body_size 12m;
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header X-Forwarded-Host $http_host;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx; run by .ci/run"]
async fn connector_oauth_and_hooks_work_through_nginx() {
    let work = tempfile::tempdir().unwrap();
    let nginx_port = free_port();
    let public = format!("http://{HOST}:{nginx_port}");
    let mut t = TestServer::start_with(Settings {
        public_url: Some(public.clone()),
        trusted_proxies: Some(vec!["127.0.0.1".into()]),
        ..Settings::default()
    })
    .await;
    let upstream = t.server.as_ref().unwrap().local_addr;
    std::fs::write(
        work.path().join("nginx.conf"),
        nginx_conf(work.path(), nginx_port, upstream),
    )
    .unwrap();
    let child = Command::new("nginx")
        .args(["-p", work.path().to_str().unwrap(), "-c"])
        .arg(work.path().join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx must be installed (.ci/run installs it)");
    let _nginx = KillOnDrop(child);
    // Every request of the fixture now goes to nginx, which names the public host.
    install_crypto();
    let nginx_addr: SocketAddr = format!("127.0.0.1:{nginx_port}").parse().unwrap();
    t.client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(HOST, nginx_addr)
        .build()
        .unwrap();
    t.base = public.clone();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let up = t.client.get(t.url("/healthz")).send().await;
        if up.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(Instant::now() < until, "nginx did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The OAuth flow through the proxy: register, log in, consent, code, token.
    let s = t.seed("Bouw BV", "annie@example.org");
    let (client_id, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    let (status, body) = exchange(&t, &client_id, &verifier, &code).await;
    assert_eq!(status, 200, "{body}");
    let token = body["access_token"].as_str().unwrap().to_owned();

    // The connector: nginx sent Host 127.0.0.1:<port>, the forwarded host counts.
    let mcp = t.mcp(&token);
    assert_eq!(mcp.tool_names().await.len(), 6);
    // Directly, a Host naming the upstream address is still refused (DNS-rebinding check).
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let direct = crate::fixture::http_client()
        .post(format!("http://{upstream}/mcp/kennisbank"))
        .bearer_auth(&token)
        .json(&list)
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 403);
    // A forwarded host naming someone else is refused through the proxy too.
    let evil = t
        .client
        .post(t.url("/mcp/kennisbank"))
        .header("host", "evil.example")
        .bearer_auth(&token)
        .json(&list)
        .send()
        .await
        .unwrap();
    assert_eq!(evil.status(), 403);

    // A hook delivery through the proxy starts a run, and its Location is the public URL.
    let created = echo_trigger(&t, &s.org.slug);
    let (trigger, secret) = (created.trigger.id, created.secret);
    let r = t
        .client
        .post(t.url(&format!("/api/hooks/events/{trigger}")))
        .bearer_auth(&secret)
        .json(&json!({"event": "deploy"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with(&public), "{location}");
    let run = t
        .client
        .get(&location)
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(run.status(), 200);
    t.stop().await;
}
