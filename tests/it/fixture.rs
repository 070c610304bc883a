//! The shared fixture: the real server on 127.0.0.1:0 with a temporary data directory and a
//! manual clock; helpers to run and spawn the `kennis` binary; grants and MCP calls; and a
//! scripted browser and OAuth client for the portal and the authorization server (cookies by
//! hand — the test client keeps none —, CSRF tokens read from the forms, login with the second
//! factor, the consent flow and `/token`).

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use kennis::clock::ManualClock;
use kennis::config::{Config, Settings};
use kennis::server::RunningServer;
use sha2::{Digest, Sha256};

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub fn http_client() -> reqwest::Client {
    install_crypto();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// The real server, in this process, on a free loopback port.
pub struct TestServer {
    pub server: Option<RunningServer>,
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub client: reqwest::Client,
    pub base: String,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(Settings::default()).await
    }

    /// Starts with extra settings layered over the test defaults.
    pub async fn start_with(settings: Settings) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = test_config(dir.path(), settings);
        let clock = ManualClock::new("2026-06-01T09:00:00Z".parse().unwrap());
        let server = kennis::server::start(config, clock.clone())
            .await
            .expect("server starts");
        let base = server.public_url().to_owned();
        TestServer {
            server: Some(server),
            dir,
            clock,
            client: http_client(),
            base,
        }
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub fn app(&self) -> &Arc<kennis::app::App> {
        &self.server.as_ref().expect("running").app
    }

    /// Makes the record at `key` of `table` unreadable — a compressed record's first byte
    /// before bytes that are no frame — so that reading it fails as a damaged store would;
    /// returns what it held, for [`TestServer::restore_record`].
    pub fn damage_record(&self, table: kennis::store::Table, key: &[u8]) -> Vec<u8> {
        let store = &self.app().store;
        let kept = store
            .read(|tx| tx.get_raw(table, key))
            .unwrap()
            .expect("a record to damage");
        store
            .write(|tx| tx.put_raw(table, key, b"\x01not a record"))
            .unwrap();
        kept
    }

    /// Puts back what [`TestServer::damage_record`] returned.
    pub fn restore_record(&self, table: kennis::store::Table, key: &[u8], kept: &[u8]) {
        self.app()
            .store
            .write(|tx| tx.put_raw(table, key, kept))
            .unwrap();
    }

    /// The organisation's audit records, oldest first, once those still pending are written.
    pub fn audit_records(&self, org_id: u64) -> Vec<kennis::audit::AuditRecord> {
        self.app().batch.flush();
        self.app()
            .store
            .read(|tx| kennis::audit::records(tx, org_id, None))
            .unwrap()
    }

    pub async fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }

    /// Starts a new server on the same data directory and clock (after [`Self::stop`]).
    pub async fn restart(&mut self) {
        self.restart_with(Settings::default()).await;
    }

    /// [`Self::restart`] with other settings layered over the test defaults.
    pub async fn restart_with(&mut self, settings: Settings) {
        self.stop().await;
        // The stopped server's last tasks (a connection closing, a blocking job ending) may
        // still hold the store or the index for a moment: the new one waits for them, up to
        // five seconds. A process that restarts never meets this; a test in one process can.
        let mut waited = 0;
        let server = loop {
            let config = test_config(self.data_dir(), settings.clone());
            match kennis::server::start(config, self.clock.clone()).await {
                Ok(server) => break server,
                Err(e) if waited < 50 && still_held(&e) => {
                    waited += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => panic!("server restarts: {e}"),
            }
        };
        self.base = server.public_url().to_owned();
        self.server = Some(server);
    }
}

/// Whether a start failed in a way the previous server's last handles explain: the store is
/// locked, or the index could not be opened (its writer's lock is held). Any other failure
/// panics at once; these do after the wait.
fn still_held(e: &kennis::server::ServerError) -> bool {
    use kennis::app::OpenError;
    use kennis::server::ServerError;
    use kennis::store::StoreError;
    matches!(
        e,
        ServerError::Store(StoreError::Locked { .. })
            | ServerError::Open(OpenError::Store(StoreError::Locked { .. }))
            | ServerError::Open(OpenError::Index(_))
    )
}

pub fn test_config(data_dir: &Path, over: Settings) -> Config {
    Settings {
        listen: Some("127.0.0.1:0".into()),
        data_dir: Some(data_dir.to_owned()),
        ..Settings::default()
    }
    .overlay(over)
    .validate()
    .map(|mut config| {
        // The test binary is not kennis: extraction children are the real kennis binary.
        config.extract_program = Some(env!("CARGO_BIN_EXE_kennis").into());
        config
    })
    .expect("valid test config")
}

/// The `kennis` binary with `--data-dir`, environment cleared of `KENNIS_*`.
pub fn kennis(data_dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kennis"));
    for (k, _) in std::env::vars() {
        if k.starts_with("KENNIS_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("--data-dir").arg(data_dir);
    cmd
}

/// Runs the binary with `args` and optional stdin.
pub fn run(data_dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = kennis(data_dir);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn kennis");
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            // A command refused before it reads stdin (bad usage exits at once) closes the
            // pipe; that is its answer, judged by the caller from the exit status and stderr.
            match input.write_all(s.as_bytes()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other.unwrap(),
            }
        }
    }
    child.wait_with_output().expect("kennis output")
}

/// Runs the binary and parses its `--json` output; panics with stderr when it fails.
pub fn run_json(data_dir: &Path, args: &[&str], stdin: Option<&str>) -> serde_json::Value {
    let out = run(data_dir, args, stdin);
    assert!(
        out.status.success(),
        "kennis {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "kennis {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A `kennis serve` process on a free port.
pub struct ServeProcess {
    pub child: Child,
    pub base: String,
    /// Everything the process printed on stdout up to and including the listening line.
    pub banner: String,
}

impl ServeProcess {
    pub fn spawn(data_dir: &Path, extra: &[&str], stderr_to: Option<&Path>) -> ServeProcess {
        let mut cmd = kennis(data_dir);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        match stderr_to {
            Some(p) => cmd.stderr(std::fs::File::create(p).unwrap()),
            None => cmd.stderr(Stdio::null()),
        };
        let mut child = cmd.spawn().expect("spawn kennis serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut banner = String::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                banner.push_str(&line);
                banner.push('\n');
                if let Some(url) = line.strip_prefix("kennis listening on ") {
                    let _ = tx.send((url.to_owned(), banner.clone()));
                }
            }
        });
        let (base, banner) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("kennis serve printed its address");
        ServeProcess {
            child,
            base,
            banner,
        }
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// SIGTERM, then waits for a clean exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.signal("-TERM");
        self.child.wait().expect("wait")
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(mut self) {
        self.signal("-KILL");
        let _ = self.child.wait();
    }
}

pub fn socket_path(data_dir: &Path) -> PathBuf {
    kennis::admin::socket_path(data_dir)
}

/// A GET from outside any runtime; returns the status.
pub fn get_status(url: &str) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        http_client()
            .get(url)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    })
}

/// A person who passes every connector check: member (admin) of a fresh organisation, second
/// factor confirmed, current terms accepted.
pub struct Seeded {
    pub org: kennis::identity::Org,
    pub person: kennis::identity::Person,
    pub password: String,
    pub totp_secret: String,
}

pub const SEED_PASSWORD: &str = "paard-batterij-niet";

impl TestServer {
    /// Creates an organisation named `org_name` and a ready person `email` in it.
    pub fn seed(&self, org_name: &str, email: &str) -> Seeded {
        use kennis::identity::{self, NewPerson, Role};
        let app = self.app();
        let store = &app.store;
        let now = app.clock.now();
        let org = match identity::create_org(store, org_name, now) {
            Ok(o) => o,
            Err(identity::IdentityError::DuplicateOrg(slug)) => {
                identity::find_org(store, &slug).unwrap()
            }
            Err(e) => panic!("{e}"),
        };
        let person = identity::add_person(
            store,
            NewPerson {
                email,
                name: None,
                password: SEED_PASSWORD,
            },
            now,
        )
        .unwrap();
        let enrol = identity::reset_totp(store, email).unwrap();
        let code = identity::code_at(&enrol.secret, now);
        identity::verify_totp(store, person.id, &code, now).unwrap();
        identity::accept_terms(store, person.id, &app.config.terms_version).unwrap();
        identity::add_member(store, &org.slug, email, Role::Admin, true, now).unwrap();
        let person = identity::find_person(store, email).unwrap();
        Seeded {
            org,
            person,
            password: SEED_PASSWORD.into(),
            totp_secret: enrol.secret,
        }
    }
}

impl TestServer {
    /// A grant for `seeded` with `scopes`, minted through the library (as the consent flow
    /// does), and its access token.
    pub fn grant(&self, seeded: &Seeded, scopes: &[&str]) -> String {
        self.grant_pair(seeded.org.id, seeded.person.id, scopes)
            .access_token
    }

    /// A grant of `person_id` in `org_id` with `scopes`, minted through the library; both
    /// tokens.
    pub fn grant_pair(
        &self,
        org_id: u64,
        person_id: u64,
        scopes: &[&str],
    ) -> kennis::oauth::TokenPair {
        let app = self.app();
        kennis::oauth::issue_grant(
            app,
            kennis::oauth::NewGrant {
                org_id,
                person_id,
                client_id: "test-client".into(),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                resource: app.connector_url(),
            },
        )
        .expect("grant issued")
    }

    /// An MCP client for the connector with this token.
    pub fn mcp(&self, token: &str) -> McpClient {
        McpClient {
            client: self.client.clone(),
            url: self.url("/mcp/kennisbank"),
            token: token.to_owned(),
            version: "2025-06-18".into(),
        }
    }
}

/// A minimal MCP-over-HTTP client: JSON-RPC POSTs with the bearer token.
pub struct McpClient {
    pub client: reqwest::Client,
    pub url: String,
    pub token: String,
    pub version: String,
}

impl McpClient {
    /// One JSON-RPC request; returns the HTTP status and the parsed body (Null if none).
    pub async fn rpc(&self, method: &str, params: serde_json::Value) -> (u16, serde_json::Value) {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        self.send(&body, &[("mcp-method", method)]).await
    }

    /// POSTs `body` (any JSON-RPC message) with the token, the `Accept` the transport asks
    /// for, this client's protocol version and `headers`; the HTTP status and the parsed body.
    pub async fn send(
        &self,
        body: &serde_json::Value,
        headers: &[(&str, &str)],
    ) -> (u16, serde_json::Value) {
        let mut r = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", &self.version);
        for (name, value) in headers {
            r = r.header(*name, *value);
        }
        let r = r.json(body).send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }

    /// `tools/call` of `tool` with `args`: the HTTP status and the whole reply.
    async fn call_rpc(&self, tool: &str, args: serde_json::Value) -> (u16, serde_json::Value) {
        self.rpc(
            "tools/call",
            serde_json::json!({"name": tool, "arguments": args}),
        )
        .await
    }

    /// The names `tools/list` offers, in order.
    pub async fn tool_names(&self) -> Vec<String> {
        let (status, body) = self.rpc("tools/list", serde_json::json!({})).await;
        assert_eq!(status, 200, "{body}");
        body["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools: {body}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// `tools/call`; returns the result object (panics on a JSON-RPC error).
    pub async fn call(&self, tool: &str, args: serde_json::Value) -> serde_json::Value {
        let (status, body) = self.call_rpc(tool, args).await;
        assert_eq!(status, 200, "{body}");
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result: {body}"))
    }

    /// `tools/call` of a tool this client's grant does not have: a JSON-RPC error (HTTP 200)
    /// saying the tool is unknown, not a tool result.
    pub async fn unknown(&self, tool: &str, args: serde_json::Value) {
        let (status, body) = self.call_rpc(tool, args).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("Unknown tool: {tool}")),
            "{tool}: {body}"
        );
    }

    /// `tools/call` expecting success: the structured content.
    pub async fn ok(&self, tool: &str, args: serde_json::Value) -> serde_json::Value {
        let r = self.call(tool, args.clone()).await;
        assert_ne!(r["isError"], true, "{tool} {args} failed: {r}");
        r["structuredContent"].clone()
    }

    /// `tools/call` expecting a tool error: the error object (`code`, `message`, …).
    pub async fn err(&self, tool: &str, args: serde_json::Value) -> serde_json::Value {
        let r = self.call(tool, args.clone()).await;
        assert_eq!(r["isError"], true, "{tool} {args} should fail: {r}");
        r["structuredContent"]["error"].clone()
    }
}

pub struct Browser<'a> {
    pub t: &'a TestServer,
    pub cookies: HashMap<String, String>,
    /// The `Accept-Language` every request sends, if any.
    pub accept_language: Option<&'static str>,
}

pub struct Page {
    pub status: u16,
    pub location: Option<String>,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Page {
    /// The value of the first `csrf_token` hidden input.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf_token\" value=\"")
            .unwrap_or_else(|| panic!("no csrf_token in page: {}", self.body));
        let rest = &self.body[at + "name=\"csrf_token\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl<'a> Browser<'a> {
    pub fn new(t: &'a TestServer) -> Self {
        Browser {
            t,
            cookies: HashMap::new(),
            accept_language: None,
        }
    }

    /// A browser whose requests prefer `language` (an `Accept-Language` value).
    pub fn speaking(t: &'a TestServer, language: &'static str) -> Self {
        Browser {
            accept_language: Some(language),
            ..Browser::new(t)
        }
    }

    /// `req` with the cookies and the language of this browser.
    fn headers(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let req = req.header("cookie", self.cookie_header());
        match self.accept_language {
            Some(l) => req.header("accept-language", l),
            None => req,
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn finish(&mut self, resp: reqwest::Response) -> Page {
        for v in resp.headers().get_all("set-cookie") {
            let v = v.to_str().unwrap();
            let (pair, _) = v.split_once(';').unwrap_or((v, ""));
            let (k, val) = pair.split_once('=').unwrap();
            if val.is_empty() {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_owned(), val.to_owned());
            }
        }
        Page {
            status: resp.status().as_u16(),
            location: resp
                .headers()
                .get("location")
                .map(|l| l.to_str().unwrap().to_owned()),
            headers: resp.headers().clone(),
            body: resp.text().await.unwrap(),
        }
    }

    pub fn abs(&self, path: &str) -> String {
        if path.starts_with("http") {
            path.to_owned()
        } else {
            self.t.url(path)
        }
    }

    async fn send_get(&self, path: &str) -> reqwest::Response {
        self.headers(self.t.client.get(self.abs(path)))
            .send()
            .await
            .unwrap()
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let resp = self.send_get(path).await;
        self.finish(resp).await
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let resp = self
            .headers(self.t.client.post(self.abs(path)))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        self.finish(resp).await
    }

    /// Opens the page at `path` and posts its form back to `path` with the page's CSRF token
    /// and `fields` (a person filling in a form).
    pub async fn submit(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        let page = self.get(path).await;
        let csrf = page.csrf();
        let mut form = vec![("csrf_token", csrf.as_str())];
        form.extend_from_slice(fields);
        self.post(path, &form).await
    }

    /// A multipart POST as a browser sends it: text fields, then the files (name, content
    /// type, bytes), all under the field name `file`.
    pub async fn multipart(
        &mut self,
        path: &str,
        fields: &[(&str, &str)],
        files: &[(&str, &str, &[u8])],
    ) -> Page {
        const BOUNDARY: &str = "----kennisTestBoundary7MA4YWxk";
        let mut body = Vec::new();
        for (k, v) in fields {
            body.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
                )
                .as_bytes(),
            );
        }
        for (name, content_type, bytes) in files {
            body.extend_from_slice(
                format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: {content_type}\r\n\r\n").as_bytes(),
            );
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
        self.post_raw(path, &content_type, body).await
    }

    /// A POST of `body` as it is, under `content_type` (a malformed form, say).
    pub async fn post_raw(&mut self, path: &str, content_type: &str, body: Vec<u8>) -> Page {
        let resp = self
            .headers(self.t.client.post(self.abs(path)))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        self.finish(resp).await
    }

    /// A GET returning the raw bytes (downloads): status, headers, body.
    pub async fn get_bytes(&self, path: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
        let resp = self.send_get(path).await;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        (status, headers, resp.bytes().await.unwrap().to_vec())
    }

    /// Logs in with password and second factor; ends on the page `next` leads to.
    pub async fn login(&mut self, s: &Seeded, next: &str) -> Page {
        let q = form_urlencoded::Serializer::new(String::new())
            .append_pair("next", next)
            .finish();
        let p = self.get(&format!("/login?{q}")).await;
        assert_eq!(p.status, 200);
        assert!(p.body.contains("id=\"login-form\""));
        let csrf = p.csrf();
        let p = self
            .post(
                &format!("/login?{q}"),
                &[
                    ("csrf_token", &csrf),
                    ("email", &s.person.email),
                    ("password", &s.password),
                ],
            )
            .await;
        assert_eq!(p.status, 303, "{}", p.body);
        let totp_url = p.location.unwrap();
        assert!(totp_url.starts_with("/login/totp"));
        let p = self.get(&totp_url).await;
        assert!(p.body.contains("id=\"totp-form\""), "{}", p.body);
        let csrf = p.csrf();
        // A fresh time step: the seeding used the current one.
        self.t.clock.advance(jiff::SignedDuration::from_secs(30));
        let code = kennis::identity::code_at(&s.totp_secret, self.t.app().clock.now());
        let p = self
            .post(&totp_url, &[("csrf_token", &csrf), ("code", &code)])
            .await;
        assert_eq!(p.status, 303, "{}", p.body);
        let to = p.location.unwrap();
        self.get(&to).await
    }
}

/// PKCE pair: (verifier, S256 challenge).
pub fn pkce() -> (String, String) {
    let verifier = kennis::oauth::new_secret("v-");
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

pub const REDIRECT: &str = "http://127.0.0.1:45678/callback";

/// Registers a public client with the loopback redirect; returns its id.
pub async fn register_public(t: &TestServer) -> String {
    let r = t
        .client
        .post(t.url("/register"))
        .json(&serde_json::json!({
            "client_name": "Test Assistant",
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: serde_json::Value = r.json().await.unwrap();
    v["client_id"].as_str().unwrap().to_owned()
}

pub fn authorize_path(client_id: &str, challenge: &str, extra: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("response_type", "code")
        .append_pair("client_id", client_id)
        .append_pair("redirect_uri", REDIRECT)
        .append_pair("state", "st-123")
        .append_pair("code_challenge", challenge)
        .append_pair("code_challenge_method", "S256");
    for (k, v) in extra {
        q.append_pair(k, v);
    }
    format!("/authorize?{}", q.finish())
}

/// Query parameters of a redirect URL.
pub fn query_of(url: &str) -> HashMap<String, String> {
    let u = url::Url::parse(url).unwrap();
    u.query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Approves the consent page (already loaded in `page`) with `scopes`; returns the redirect.
pub async fn approve(b: &mut Browser<'_>, page: &Page, org: &str, scopes: &[&str]) -> Page {
    assert!(page.body.contains("id=\"consent-form\""), "{}", page.body);
    let mut form: Vec<(String, String)> = hidden_fields(&page.body);
    form.push(("org".into(), org.into()));
    for s in scopes {
        form.push(("scope".into(), (*s).into()));
    }
    form.push(("decision".into(), "approve".into()));
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    b.post("/authorize", &pairs).await
}

/// Every hidden input of a page, as (name, value), HTML entities of values decoded.
pub fn hidden_fields(body: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for part in body.split("<input type=\"hidden\" ").skip(1) {
        let name = between(part, "name=\"", "\"");
        let value = between(part, "value=\"", "\"");
        out.push((name, unescape(&value)));
    }
    out
}

fn between(s: &str, a: &str, b: &str) -> String {
    let i = s.find(a).unwrap() + a.len();
    let j = s[i..].find(b).unwrap();
    s[i..i + j].to_owned()
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The whole flow up to a code: register, log in, consent. Returns (client_id, verifier, code).
pub async fn code_for(t: &TestServer, s: &Seeded, scopes: &[&str]) -> (String, String, String) {
    let client_id = register_public(t).await;
    let (verifier, challenge) = pkce();
    let mut b = Browser::new(t);
    let path = authorize_path(&client_id, &challenge, &[]);
    let first = b.get(&path).await;
    assert_eq!(first.status, 303, "{}", first.body);
    let consent = b.login(s, &path).await;
    let p = approve(&mut b, &consent, &s.org.slug, scopes).await;
    assert_eq!(p.status, 302, "{}", p.body);
    let loc = p.location.unwrap();
    assert!(loc.starts_with(REDIRECT), "{loc}");
    let q = query_of(&loc);
    assert_eq!(q["state"], "st-123");
    assert_eq!(q["iss"], t.base);
    (client_id, verifier, q["code"].clone())
}

/// POST /token with a form; returns (status, JSON).
pub async fn token(t: &TestServer, form: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let r = t
        .client
        .post(t.url("/token"))
        .form(form)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    if status == 200 {
        assert_eq!(r.headers()["cache-control"], "no-store");
    }
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

pub async fn exchange(
    t: &TestServer,
    client_id: &str,
    verifier: &str,
    code: &str,
) -> (u16, serde_json::Value) {
    token(
        t,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", client_id),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("code_verifier", verifier),
        ],
    )
    .await
}

impl TestServer {
    /// A trigger of the organisation `org` (slug) for a new built-in echo agent and a ready
    /// project, with `instructions` and `cooldown` seconds; its secret is in the result.
    pub fn echo_trigger(
        &self,
        org: &str,
        instructions: &str,
        cooldown: Option<u64>,
    ) -> kennis::triggers::Created {
        use kennis::roster::{self, Rollout};
        let app = self.app();
        let now = app.clock.now();
        let a = roster::add_agent(&app.store, org, &echo_agent(), now).unwrap();
        let p = roster::add_project(&app.store, org, "Website", Rollout::Ready, now).unwrap();
        let new = kennis::triggers::NewTrigger {
            name: "Nieuwe offerte".into(),
            agent_id: a.id,
            project_id: p.id,
            instructions: instructions.into(),
            cooldown_secs: cooldown,
            callback_url: None,
        };
        kennis::triggers::add(&app.store, org, &new, now).unwrap()
    }

    /// A run of a new echo trigger of `org` (slug) with `instructions`, delivered with the
    /// payload `{"offerte": 17}` and waited for until it ends: the trigger and the run's id.
    pub async fn finished_run(
        &self,
        org: &str,
        instructions: &str,
    ) -> (kennis::triggers::Created, u64) {
        let trigger = self.echo_trigger(org, instructions, Some(0));
        let r = self
            .client
            .post(self.url(&format!("/api/hooks/events/{}", trigger.trigger.id)))
            .bearer_auth(&trigger.secret)
            .json(&serde_json::json!({"offerte": 17}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        let v: serde_json::Value = r.json().await.unwrap();
        let run = v["featureRequestId"].as_u64().expect("run id");
        for _ in 0..200 {
            let done = self
                .app()
                .store
                .read(|tx| kennis::requests::get(tx, run))
                .unwrap()
                .is_some_and(|r| r.status.is_final());
            if done {
                return (trigger, run);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("run {run} did not end");
    }

    /// Writes a new document `path` with `text` into `seeded`'s organisation, as that person.
    pub fn put_doc(&self, seeded: &Seeded, path: &str, text: &str) {
        write_as(self.app(), seeded, path, text, kennis::kb::Expect::Create);
    }

    /// Stores documents into `org` outside the write rules (as an import does) and indexes
    /// them in one commit.
    pub fn import_docs(&self, org: u64, docs: &[(&str, &[u8])]) {
        let app = self.app();
        for (path, bytes) in docs {
            kennis::kb::store_document(&app.store, org, path, bytes, None, app.clock.now())
                .unwrap();
        }
        app.kb_index.catch_up(&app.store).unwrap();
    }
}

/// Writes `text` to `path` in `seeded`'s organisation through the write rules, as that person.
pub fn write_as(
    app: &kennis::app::App,
    seeded: &Seeded,
    path: &str,
    text: &str,
    expect: kennis::kb::Expect,
) {
    kennis::kb::write(
        &app.store,
        &app.kb_index,
        kennis::kb::NewVersion {
            org_id: seeded.org.id,
            path,
            bytes: text.as_bytes(),
            expect,
            by: Some(seeded.person.id),
            now: app.clock.now(),
        },
    )
    .unwrap();
}

/// The paths of a `kennisbank_search` result, in the order given.
pub fn result_paths(search: &serde_json::Value) -> Vec<String> {
    search["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect()
}

/// POSTs only the head of a request that declares a `length`-byte body, sends none of the
/// body, and returns the status the server answers with. A refusal by `Content-Length` must
/// come before the body is read; an ordinary client that keeps writing the body can instead
/// see a broken pipe when the server closes the connection after its answer.
pub async fn status_before_body(url: &str, headers: &[(&str, &str)], length: usize) -> u16 {
    let mut stream = post_head(url, headers, &format!("content-length: {length}")).await;
    read_status(
        &mut stream,
        "the server answers without waiting for the body",
    )
    .await
}

/// POSTs a body of `chunks` chunks of 64 KiB each without saying its length
/// (`Transfer-Encoding: chunked`), and returns the status the server answers with; the
/// server may answer and stop reading before the last chunks.
pub async fn status_of_chunked_body(url: &str, headers: &[(&str, &str)], chunks: usize) -> u16 {
    use tokio::io::AsyncWriteExt;
    let mut stream = post_head(url, headers, "transfer-encoding: chunked").await;
    let chunk = format!("10000\r\n{}\r\n", " ".repeat(0x10000));
    for _ in 0..chunks {
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    read_status(&mut stream, "the server answers").await
}

/// A connection to `url`'s server with the head of a POST to its path written: `headers` and
/// `framing` (how the body's length is told).
async fn post_head(url: &str, headers: &[(&str, &str)], framing: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let url = reqwest::Url::parse(url).unwrap();
    let host = url.host_str().unwrap();
    let port = url.port_or_known_default().unwrap();
    let mut stream = tokio::net::TcpStream::connect((host, port)).await.unwrap();
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    let mut head = format!("POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\n{framing}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// The status of the answer that comes on `stream` within 10 s (`waiting` says what failed).
async fn read_status(stream: &mut tokio::net::TcpStream, waiting: &str) -> u16 {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{waiting}"))
            .unwrap();
        assert!(n > 0, "connection closed without an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&answer);
    line.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line")
}

/// A free loopback port (bound and released; for programs that must be told a port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An outside program (nginx, pebble) killed when the test ends, passed or not.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `name` made unique in this test process (an organisation refuses a second agent of the
/// same name): `Echo 1`, `Echo 2`, …
pub fn unique_name(name: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!(
        "{name} {}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// An agent that echoes its job (the generic `echo` executor).
pub fn echo_agent() -> kennis::roster::NewAgent {
    kennis::roster::NewAgent {
        name: unique_name("Echo"),
        kind: kennis::roster::AgentKind::Generic,
        exec: "echo".into(),
        program: None,
        args: vec![],
        url: None,
        timeout_secs: None,
    }
}

/// A trigger in `org` whose agent echoes, in a ready project; the trigger and its secret.
pub fn echo_trigger(t: &TestServer, org: &str) -> kennis::triggers::Created {
    t.echo_trigger(org, "Handle the event.", None)
}

/// The field names of a JSON object, sorted (shapes of answers).
pub fn sorted_keys(v: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

/// Waits until `f` returns `Some`, at most `secs` seconds.
pub async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    secs: u64,
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let until = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
