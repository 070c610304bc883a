//! The shared fixture: the real server on 127.0.0.1:0 with a temporary data directory and a
//! manual clock, plus helpers to run and spawn the `kennis` binary.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kennis::clock::ManualClock;
use kennis::config::{Config, Settings};
use kennis::http::RunningServer;

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
        let server = kennis::http::start(config, clock.clone())
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

    pub fn app(&self) -> &Arc<kennis::app::App> {
        &self.server.as_ref().expect("running").app
    }

    pub async fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }

    /// Starts a new server on the same data directory and clock (after [`Self::stop`]).
    pub async fn restart(&mut self) {
        self.stop().await;
        let config = test_config(self.data_dir(), Settings::default());
        let server = kennis::http::start(config, self.clock.clone())
            .await
            .expect("server restarts");
        self.base = server.public_url().to_owned();
        self.server = Some(server);
    }
}

pub fn test_config(data_dir: &Path, over: Settings) -> Config {
    Settings {
        listen: Some("127.0.0.1:0".into()),
        data_dir: Some(data_dir.to_owned()),
        ..Settings::default()
    }
    .overlay(over)
    .validate()
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
            input.write_all(s.as_bytes()).unwrap();
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
        let app = self.app();
        kennis::oauth::issue_grant(
            app,
            kennis::oauth::NewGrant {
                org_id: seeded.org.id,
                person_id: seeded.person.id,
                client_id: "test-client".into(),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                resource: app.connector_url(),
            },
        )
        .expect("grant issued")
        .access_token
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
        let r = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", &self.version)
            .header("mcp-method", method)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
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
        let (status, body) = self
            .rpc(
                "tools/call",
                serde_json::json!({"name": tool, "arguments": args}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result: {body}"))
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
