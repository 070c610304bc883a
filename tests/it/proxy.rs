//! Behind proxies (issue 22): only the header family `[proxy] header` names is believed from
//! `trusted_proxies`, so a client cannot pick its own address or host by sending the family the
//! proxy passes through untouched.
//!
//! - Against the real server directly (the test client plays the proxy): forged headers of
//!   the other family change neither the address the limits count nor the host.
//! - Through the real programs (ignored; `.ci/run` installs them) with exactly the documented (docs/install.md)
//!   texts, only addresses, ports and certificate paths changed: nginx (the default family,
//!   and `forwarded` with its `proxy_set_header Forwarded` line) and Caddy. The connector, the
//!   OAuth flow and a hook delivery work through them; a client sending forged `Forwarded:
//!   for=…;host=…` and `X-Forwarded-*` meets the per-address limits and the host check.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kennis::config::{ProxySettings, Settings};
use serde_json::{Value, json};

use crate::attacks::login_at;
use crate::fixture::{
    KillOnDrop, SEED_PASSWORD, Seeded, TestServer, code_for, echo_trigger, exchange, free_port,
    install_crypto,
};

const HOST: &str = "kennis.example.org";

/// A fenced block of the "Behind a reverse proxy" section of `docs/install.md`: the `n`th (from 0) whose
/// fence names `lang`.
fn readme_block(lang: &str, n: usize) -> String {
    let readme = include_str!("../../docs/install.md");
    let section = readme
        .split("## Behind a reverse proxy")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/install.md has the section");
    let fence = format!("```{lang}\n");
    let block = section
        .split(fence.as_str())
        .nth(n + 1)
        .unwrap_or_else(|| panic!("docs/install.md section has a {lang} block #{n}"));
    block.split("```").next().unwrap().to_owned()
}

/// Replaces `from` (which must be there) by `to`.
fn swap(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "`{from}` not in:\n{text}");
    text.replace(from, to)
}

/// The documented TOML (its `trusted_proxies` and `[proxy] header`), with the test's listen
/// address and public URL, and `header` set to `header` when given.
fn readme_settings(public_url: &str, header: Option<&str>) -> Settings {
    let mut s: Settings =
        toml::from_str(&readme_block("toml", 0)).expect("the documented TOML parses");
    assert_eq!(
        s.trusted_proxies.as_deref(),
        Some(&["127.0.0.1".to_owned(), "::1".to_owned()][..])
    );
    s.listen = None;
    s.public_url = Some(public_url.to_owned());
    if let Some(h) = header {
        s.proxy = Some(ProxySettings {
            header: Some(h.into()),
        });
    }
    s
}

/// A client whose connections come from `local` (a loopback address: 127.0.0.1 is the trusted
/// proxy, others are outside clients), sending `headers` with every request, with `HOST`
/// resolving to `proxy` when given, trusting `root` when given.
fn client(
    local: &str,
    headers: &[(&str, String)],
    proxy: Option<SocketAddr>,
    root: Option<&str>,
) -> reqwest::Client {
    install_crypto();
    let mut h = reqwest::header::HeaderMap::new();
    for (k, v) in headers {
        h.append(
            reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let mut b = reqwest::Client::builder()
        .local_address(local.parse::<IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(h);
    if let Some(addr) = proxy {
        b = b.resolve(HOST, addr);
    }
    if let Some(pem) = root {
        b = b.tls_certs_only([reqwest::Certificate::from_pem(pem.as_bytes()).unwrap()]);
    }
    b.build().unwrap()
}

/// Forged headers of both families, different for attempt `i`: every address and host they
/// name is someone else's.
fn forged(i: usize) -> Vec<(&'static str, String)> {
    vec![
        (
            "forwarded",
            format!("for=198.51.100.{i};host=evil{i}.example;proto=https"),
        ),
        ("x-forwarded-for", format!("203.0.113.{i}")),
        ("x-forwarded-host", format!("evil{i}.example")),
        ("x-forwarded-proto", "https".into()),
        ("x-real-ip", format!("192.0.2.{i}")),
    ]
}

/// What the attack needs to know of the way in: the base URL requests go to, the public URL
/// built URLs must name, and how to build a client (from a loopback address, with headers)
/// that reaches the server that way.
struct Way<'a> {
    base: String,
    public: String,
    make: &'a MakeClient<'a>,
}

/// Builds a client whose connections come from a loopback address, sending extra headers.
type MakeClient<'a> = dyn Fn(&str, &[(&str, String)]) -> reqwest::Client + 'a;

/// The attack through `way`: one client (from `attacker`) sending forged headers of both
/// families, different at every request.
/// - 15 wrong passwords: 10 judged (401), then 429 — the per-account-and-address limit met
///   — and the right password from that client is still refused; another client (from
///   `other`) is not blocked, so the proxy's own address is not what counts either.
/// - 21 registrations: the 21st is 429 (20 per address), and `other` may still register.
/// - The connector with a token and forged hosts answers 200 (the real host counts), and the
///   URLs it builds name the public URL, never a forged host.
async fn forged_headers_meet_the_limits(
    way: &Way<'_>,
    s: &Seeded,
    token: &str,
    attacker: &str,
    other: &str,
) {
    let login = format!("{}/login", way.base);
    let mut statuses = Vec::new();
    for i in 0..15 {
        let c = (way.make)(attacker, &forged(i + 1));
        statuses.push(login_at(&c, &login, &s.person.email, &format!("wrong-{i}")).await);
    }
    assert_eq!(&statuses[..10], &[401; 10], "{statuses:?}");
    assert_eq!(&statuses[10..], &[429; 5], "{statuses:?}");
    let c = (way.make)(attacker, &forged(99));
    assert_eq!(
        login_at(&c, &login, &s.person.email, SEED_PASSWORD).await,
        429,
        "the attacker's address stays blocked for this account"
    );
    let c = (way.make)(other, &forged(100));
    assert_eq!(
        login_at(&c, &login, &s.person.email, SEED_PASSWORD).await,
        303,
        "another client is not blocked"
    );

    let register = |c: reqwest::Client| {
        let url = format!("{}/register", way.base);
        async move {
            c.post(url)
                .json(&json!({
                    "client_name": "Forger",
                    "redirect_uris": [crate::fixture::REDIRECT],
                    "token_endpoint_auth_method": "none",
                }))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let mut statuses = Vec::new();
    for i in 0..21 {
        statuses.push(register((way.make)(attacker, &forged(i + 1))).await);
    }
    assert_eq!(&statuses[..20], &[201; 20], "{statuses:?}");
    assert_eq!(statuses[20], 429, "{statuses:?}");
    assert_eq!(register((way.make)(other, &forged(7))).await, 201);

    // The connector: forged hosts of both families change nothing; built URLs are public.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let mcp = format!("{}/mcp/kennisbank", way.base);
    let c = (way.make)(other, &forged(8));
    let r = c
        .post(&mcp)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&list)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = c.post(&mcp).json(&list).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(
        challenge.contains(&format!("{}/.well-known/", way.public)) && !challenge.contains("evil"),
        "{challenge}"
    );
    let meta: Value = c
        .get(format!(
            "{}/.well-known/oauth-protected-resource/mcp/kennisbank",
            way.base
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["resource"], format!("{}/mcp/kennisbank", way.public));
}

/// [`forged_headers_meet_the_limits`] through a proxy at `public`, for a fresh organisation
/// and person of `t`.
async fn attack_through(
    t: &TestServer,
    public: &str,
    make: &MakeClient<'_>,
    attacker: &str,
    other: &str,
) {
    let way = Way {
        base: public.to_owned(),
        public: public.to_owned(),
        make,
    };
    let s = t.seed("Hout BV", "bert@example.org");
    let token = t.grant(&s, &["kennisbank"]);
    forged_headers_meet_the_limits(&way, &s, &token, attacker, other).await;
}

/// The attack against the real server directly, the test client playing a trusted proxy
/// (127.0.0.1) that appends or overwrites its own family and passes the other through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_chosen_header_family_is_believed() {
    let public = format!("https://{HOST}");
    for family in ["x-forwarded-for", "forwarded"] {
        let t = TestServer::start_with(readme_settings(&public, Some(family))).await;
        let s = t.seed("Bouw BV", "annie@example.org");
        let token = t.grant(&s, &["kennisbank"]);
        let server = t.server.as_ref().unwrap().local_addr;
        // What the proxy itself writes for the client at `from`: its family, last.
        let proxy_says = move |from: &str| -> Vec<(&'static str, String)> {
            let from = from.replace("127.0.0.", "203.0.113.2");
            match family {
                "forwarded" => vec![("forwarded", format!("for={from};host={HOST};proto=https"))],
                _ => vec![
                    ("x-forwarded-for", from),
                    ("x-forwarded-host", HOST.to_owned()),
                    ("x-forwarded-proto", "https".to_owned()),
                ],
            }
        };
        let make = move |from: &str, headers: &[(&str, String)]| {
            // The client's forged headers first, then the proxy's: it appends to its own
            // family (the nearest hop is the rightmost) and passes the other through.
            let mut all = headers.to_vec();
            all.extend(proxy_says(from));
            client("127.0.0.1", &all, None, None)
        };
        let way = Way {
            base: format!("http://{server}"),
            public: public.clone(),
            make: &make,
        };
        forged_headers_meet_the_limits(&way, &s, &token, "127.0.0.2", "127.0.0.3").await;

        // Headers of the chosen family alone still count: without them the Host is the
        // server's own address, refused by the connector.
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
        let other_family = if family == "forwarded" {
            vec![("x-forwarded-host", HOST.to_owned())]
        } else {
            vec![("forwarded", format!("for=203.0.113.9;host={HOST}"))]
        };
        let r = client("127.0.0.1", &other_family, None, None)
            .post(format!("http://{server}/mcp/kennisbank"))
            .bearer_auth(&token)
            .json(&list)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            403,
            "{family}: the other family's host is not believed"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Real proxies.

/// Waits until `base`/healthz answers 200 through `c`.
async fn wait_up(c: &reqwest::Client, base: &str, what: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let up = c.get(format!("{base}/healthz")).send().await;
        if up.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(Instant::now() < until, "{what} did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The documented nginx server block inside a minimal main config for a test run: listening on
/// `listen` with the certificate in `work`, passing to `upstream`; with `forwarded`, the
/// documented `Forwarded` line instead of the three `X-Forwarded-*` lines.
fn nginx_conf(work: &Path, listen: u16, upstream: SocketAddr, forwarded: bool) -> String {
    let w = work.display();
    let mut server = readme_block("nginx", 0);
    server = swap(
        &server,
        "listen 443 ssl;",
        &format!("listen 127.0.0.1:{listen} ssl;"),
    );
    server = swap(
        &server,
        "/etc/letsencrypt/live/kennis.example.org/fullchain.pem",
        &format!("{w}/cert.pem"),
    );
    server = swap(
        &server,
        "/etc/letsencrypt/live/kennis.example.org/privkey.pem",
        &format!("{w}/key.pem"),
    );
    server = swap(
        &server,
        "proxy_pass http://127.0.0.1:8080;",
        &format!("proxy_pass http://{upstream};"),
    );
    if forwarded {
        let set_forwarded = readme_block("nginx", 1);
        let x_lines: Vec<&str> = server
            .lines()
            .filter(|l| l.contains("proxy_set_header X-Forwarded-"))
            .collect();
        assert_eq!(x_lines.len(), 3, "{server}");
        let mut replaced = server.replacen(x_lines[0], set_forwarded.trim_end(), 1);
        for l in &x_lines[1..] {
            replaced = swap(&replaced, &format!("{l}\n"), "");
        }
        server = replaced;
    }
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
{server}
}}
"#
    )
}

/// A self-signed certificate for `HOST` in `work` (cert.pem, key.pem); its PEM.
fn certificate(work: &Path) -> String {
    let ck = rcgen::generate_simple_self_signed(vec![HOST.to_string()]).unwrap();
    std::fs::write(work.join("cert.pem"), ck.cert.pem()).unwrap();
    std::fs::write(work.join("key.pem"), ck.signing_key.serialize_pem()).unwrap();
    ck.cert.pem()
}

/// A running nginx (killed on drop) with its work directory, public base URL, address and
/// the root its certificate is trusted by.
struct Nginx {
    _child: KillOnDrop,
    _work: tempfile::TempDir,
    public: String,
    addr: SocketAddr,
    root: String,
}

impl Nginx {
    /// A client of this nginx, connecting from `from`, sending `headers`.
    fn client(&self, from: &str, headers: &[(&str, String)]) -> reqwest::Client {
        client(from, headers, Some(self.addr), Some(&self.root))
    }
}

/// Starts the documented (docs/install.md) nginx in front of a fresh server (the documented TOML; `header =
/// "forwarded"` and nginx's `Forwarded` line when `forwarded`).
async fn behind_nginx(forwarded: bool) -> (TestServer, Nginx) {
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let public = format!("https://{HOST}:{port}");
    let header = forwarded.then_some("forwarded");
    let t = TestServer::start_with(readme_settings(&public, header)).await;
    let upstream = t.server.as_ref().unwrap().local_addr;
    let root = certificate(work.path());
    std::fs::write(
        work.path().join("nginx.conf"),
        nginx_conf(work.path(), port, upstream, forwarded),
    )
    .unwrap();
    let child = Command::new("nginx")
        .args(["-p", work.path().to_str().unwrap(), "-c"])
        .arg(work.path().join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx must be installed (.ci/run installs it)");
    let nginx = Nginx {
        _child: KillOnDrop(child),
        _work: work,
        public,
        addr: format!("127.0.0.1:{port}").parse().unwrap(),
        root,
    };
    wait_up(&nginx.client("127.0.0.2", &[]), &nginx.public, "nginx").await;
    (t, nginx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx; run by .ci/run"]
async fn connector_oauth_and_hooks_work_through_nginx() {
    let (mut t, nginx) = behind_nginx(false).await;
    let public = nginx.public.clone();
    let upstream = t.server.as_ref().unwrap().local_addr;
    // Every request of the fixture now goes through nginx (from 127.0.0.2, an outside client).
    t.client = nginx.client("127.0.0.2", &[]);
    t.base = public.clone();

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
    // A Host naming someone else is refused through the proxy too.
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
        .header("forwarded", "host=evil.example;proto=http")
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

    // The attack through nginx: forged headers of both families.
    let make = |from: &str, headers: &[(&str, String)]| nginx.client(from, headers);
    attack_through(&t, &public, &make, "127.0.0.3", "127.0.0.4").await;
    t.stop().await;
}

/// nginx writing `Forwarded` itself (the documented (docs/install.md) line) with `[proxy] header = "forwarded"`:
/// the client's `X-Forwarded-*`, which nginx now passes through, are not believed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx; run by .ci/run"]
async fn forwarded_written_by_nginx_is_believed_and_nothing_else() {
    let (mut t, nginx) = behind_nginx(true).await;
    let make = |from: &str, headers: &[(&str, String)]| nginx.client(from, headers);
    attack_through(&t, &nginx.public, &make, "127.0.0.2", "127.0.0.3").await;
    t.stop().await;
}

/// The documented Caddyfile for a test run: served as plain HTTP on a loopback port (no
/// certificate to fetch, no admin endpoint), passing to `upstream`.
fn caddyfile(listen: u16, upstream: SocketAddr) -> String {
    let site = readme_block("caddyfile", 0);
    let site = swap(
        &site,
        &format!("{HOST} {{"),
        &format!("http://{HOST}:{listen} {{"),
    );
    let site = swap(&site, "127.0.0.1:8080", &upstream.to_string());
    format!("{{\n\tadmin off\n\tauto_https off\n\tdefault_bind 127.0.0.1\n}}\n\n{site}")
}

/// Caddy (Debian's 2.6) with the documented (docs/install.md) Caddyfile: it overwrites `X-Forwarded-For`,
/// `-Host` and `-Proto` for a client it does not trust and passes `Forwarded` through; with
/// the default family the forged `Forwarded` is not believed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs caddy; run by .ci/run"]
async fn the_readme_caddyfile_keeps_forged_headers_out() {
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let public = format!("http://{HOST}:{port}");
    let mut t = TestServer::start_with(readme_settings(&public, None)).await;
    let upstream = t.server.as_ref().unwrap().local_addr;
    std::fs::write(work.path().join("Caddyfile"), caddyfile(port, upstream)).unwrap();
    let child = Command::new("caddy")
        .args(["run", "--adapter", "caddyfile", "--config"])
        .arg(work.path().join("Caddyfile"))
        // Caddy keeps its storage under XDG_DATA_HOME/HOME: the test's directory.
        .env("HOME", work.path())
        .env("XDG_DATA_HOME", work.path().join("data"))
        .env("XDG_CONFIG_HOME", work.path().join("config"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("caddy must be installed (.ci/run installs it)");
    let _caddy = KillOnDrop(child);
    let proxy: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let make = |from: &str, headers: &[(&str, String)]| client(from, headers, Some(proxy), None);
    wait_up(&make("127.0.0.2", &[]), &public, "caddy").await;

    // The OAuth flow and the connector through Caddy.
    t.client = make("127.0.0.2", &[]);
    t.base = public.clone();
    let s = t.seed("Bouw BV", "annie@example.org");
    let (client_id, verifier, code) = code_for(&t, &s, &["kennisbank"]).await;
    let (status, body) = exchange(&t, &client_id, &verifier, &code).await;
    assert_eq!(status, 200, "{body}");
    let token = body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(t.mcp(&token).tool_names().await.len(), 6);

    attack_through(&t, &public, &make, "127.0.0.3", "127.0.0.4").await;
    t.stop().await;
}

/// `kennis serve` with an unknown `[proxy] header` (file or env) or an unknown key in
/// `[proxy]` stops before listening, with an error naming the setting; the data directory is
/// not created.
#[test]
fn an_unknown_proxy_setting_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let serve = |config: &str, env: Option<&str>| {
        let file = dir.path().join("kennis.toml");
        std::fs::write(&file, config).unwrap();
        let mut cmd = crate::fixture::kennis(&data);
        cmd.arg("--config").arg(&file);
        cmd.args(["serve", "--listen", &listen]);
        if let Some(v) = env {
            cmd.env("KENNIS_PROXY_HEADER", v);
        }
        let out = cmd.stdin(Stdio::null()).output().expect("kennis runs");
        (out.status.success(), crate::fixture::stderr(&out))
    };
    let (ok, err) = serve("[proxy]\nheader = \"x-real-ip\"\n", None);
    assert!(!ok);
    assert!(
        err.contains("proxy.header") && err.contains("x-real-ip"),
        "{err}"
    );
    let (ok, err) = serve("[proxy]\nheader = \"forwarded\"\n", Some("both"));
    assert!(!ok);
    assert!(
        err.contains("proxy.header") && err.contains("both"),
        "{err}"
    );
    let (ok, err) = serve("[proxy]\nheaders = \"forwarded\"\n", None);
    assert!(!ok);
    assert!(err.contains("headers"), "{err}");
    assert!(!data.exists(), "nothing was written");
}
