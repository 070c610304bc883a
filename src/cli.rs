//! The command line: clap definitions and what each command does. `main.rs` only dispatches.

use crate::progress::Progress;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use crate::admin::{self, AdminContext, AdminError, AdminRequest};
use crate::clock;
use crate::config::{Config, ConfigError, Settings};
use crate::identity::{ConnectorAccess, Role};
use crate::store::{self, Store};

#[derive(Debug, Parser)]
#[command(
    name = "kennis",
    version,
    about = "Knowledge-base connector, OAuth login and event triggers in one binary"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// TOML config file (also KENNIS_CONFIG).
    #[arg(long, global = true, env = "KENNIS_CONFIG", value_name = "F")]
    pub config: Option<PathBuf>,
    /// Data directory (default ./data; also KENNIS_DATA_DIR).
    #[arg(long, global = true, value_name = "D")]
    pub data_dir: Option<PathBuf>,
    /// Log format: text or json (also KENNIS_LOG_FORMAT).
    #[arg(long, global = true, value_name = "FORMAT")]
    pub log_format: Option<String>,
}

/// The help line of every `--json`.
const JSON_HELP: &str = "Print one JSON object on stdout instead of text for people.";

/// Only `--json`.
#[derive(Debug, Args)]
pub struct JsonArg {
    #[arg(long, help = JSON_HELP)]
    pub json: bool,
}

/// An organisation and `--json`.
#[derive(Debug, Args)]
pub struct OrgArgs {
    /// The organisation's slug.
    pub org: String,
    #[arg(long, help = JSON_HELP)]
    pub json: bool,
}

/// A person and `--json`.
#[derive(Debug, Args)]
pub struct EmailArgs {
    /// The person's email address.
    pub email: String,
    #[arg(long, help = JSON_HELP)]
    pub json: bool,
}

/// A trigger and `--json`.
#[derive(Debug, Args)]
pub struct TriggerId {
    /// The trigger's id (UUID, from `trigger add` or `trigger list`).
    pub id: String,
    #[arg(long, help = JSON_HELP)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Organisations.
    #[command(subcommand)]
    Org(OrgCommand),
    /// People.
    #[command(subcommand)]
    User(UserCommand),
    /// Memberships.
    #[command(subcommand)]
    Member(MemberCommand),
    /// Copy the data directory's contents into a new directory PATH, consistently, even while
    /// the server runs.
    Backup {
        /// A new directory (or an empty one) to write the backup into.
        path: PathBuf,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Agents of an organisation.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Apps that feature requests are filed for.
    #[command(subcommand)]
    App(AppCommand),
    /// Projects of an organisation.
    #[command(subcommand)]
    Project(ProjectCommand),
    /// Event triggers.
    #[command(subcommand)]
    Trigger(TriggerCommand),
    /// Personal access tokens (for scripts and automation that cannot log in in a browser).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Restore a backup made by `kennis backup` into an empty data directory.
    Restore {
        /// A directory written by `kennis backup`.
        path: PathBuf,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// The knowledge base.
    #[command(subcommand)]
    Kb(KbCommand),
    /// Extract the text of PDF and Office documents not extracted yet (retrying failures),
    /// then rebuild the search index from the store (all organisations, or one).
    Reindex {
        /// Only this organisation (its slug); default all.
        #[arg(long, value_name = "ORG")]
        org: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Give the database file's unused space back and merge the search index (also done after
    /// large imports and reindexing).
    Compact(JsonArg),
    /// Audit records.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Agent runs: what one did, and cancelling one.
    #[command(subcommand)]
    Run(RunCommand),
    /// Internal: the text-extraction child process (`kb::extract::Extractor` starts it).
    #[command(name = "extract-worker", hide = true)]
    ExtractWorker(ExtractWorkerArgs),
}

/// `kennis extract-worker`'s one argument (see `kb::extract::worker_main`).
#[derive(Debug, Args)]
pub struct ExtractWorkerArgs {
    /// Internal: the request line, given by the worker to itself once its limits are set.
    #[arg(long, hide = true)]
    pub limited: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// A run (or feature request's agent jobs) with its transcript: model messages, tool
    /// calls with arguments and shortened results, tokens and timings.
    Show {
        /// The run's id (as the hook answer and `trigger list` show it).
        id: u64,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Cancel a queued or running run: it becomes `cancelled`, its executor is stopped and
    /// its trigger slot is free again.
    Cancel {
        /// The run's id.
        id: u64,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum KbCommand {
    /// Load a folder tree as documents (re-import stores new versions only where changed).
    Import {
        /// The organisation's slug.
        org: String,
        /// The folder whose tree of files becomes documents.
        dir: PathBuf,
        /// Folder inside the knowledge base to put the documents under (default: the top).
        #[arg(long, value_name = "P")]
        prefix: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Move a document to the trash (its versions are kept; `kb restore` brings it back).
    Delete {
        /// The organisation's slug.
        org: String,
        /// The document's path.
        path: String,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// List an organisation's deleted documents.
    Trash(OrgArgs),
    /// Bring a deleted document back with its whole history.
    Restore {
        /// The organisation's slug.
        org: String,
        /// The deleted document's path.
        path: String,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Move or rename a document (its history moves with it).
    Move {
        /// The organisation's slug.
        org: String,
        /// The document's path now.
        from: String,
        /// Its new path (no live document may hold it).
        to: String,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Write the latest version of every document as files under a new or empty folder.
    Export {
        /// The organisation's slug.
        org: String,
        /// The folder to write into (created; refused when not empty).
        dir: PathBuf,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Write an organisation's audit records as JSON lines.
    Export {
        /// The organisation's slug.
        org: String,
        /// Only records from this time (RFC 3339) or date on.
        #[arg(long)]
        since: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Public base URL (issuer, links); default http(s)://<listen address>.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// PEM certificate chain to serve TLS with (needs --tls-key).
    #[arg(long, value_name = "F", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "F", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Get a certificate for this domain from an ACME CA (repeatable; TLS-ALPN-01 on the
    /// listen address, which must be reachable on port 443).
    #[arg(long = "acme-domain", value_name = "DOMAIN")]
    pub acme_domains: Vec<String>,
    /// Contact address given to the ACME CA.
    #[arg(long, value_name = "EMAIL")]
    pub acme_email: Option<String>,
    /// ACME directory URL (default: Let's Encrypt production).
    #[arg(long, value_name = "URL")]
    pub acme_directory: Option<String>,
    /// Create a demo organisation and person on first start.
    #[arg(long)]
    pub demo: bool,
}

#[derive(Debug, Subcommand)]
pub enum OrgCommand {
    /// Create an organisation; prints its slug, which other commands take as ORG.
    Create {
        /// The organisation's name, e.g. "Bouwbedrijf De Vries".
        name: String,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Every organisation with its slug.
    List(JsonArg),
    /// Remove an organisation and everything of it for good: memberships, documents and their
    /// history, content no other organisation has, search entries, triggers, runs, agents,
    /// projects, apps, feature requests, audit, grants and tokens (people stay). Run it again
    /// to finish a removal that was interrupted.
    Delete {
        /// The organisation's slug.
        org: String,
        /// Confirm the removal (without it nothing happens: exit status 2).
        #[arg(long)]
        yes: bool,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Change an organisation's connector policy (ORG is its slug).
    Set {
        /// The organisation's slug.
        org: String,
        /// Who may connect an assistant: all_members, selected_members (those with
        /// may_connect) or nobody.
        #[arg(long, value_name = "all_members|selected_members|nobody")]
        connector_access: Option<ConnectorAccess>,
        /// Whether members need a second factor to sign in and connect.
        #[arg(long, value_name = "true|false")]
        require_second_factor: Option<bool>,
        /// Whether members may make and use personal access tokens.
        #[arg(long, value_name = "allow|deny")]
        personal_tokens: Option<crate::identity::PersonalTokens>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a person; the password is read from a prompt or, with --password-stdin, stdin.
    Add {
        /// The person's email address (their login name).
        email: String,
        /// The name shown in the portal.
        #[arg(long, value_name = "N")]
        name: Option<String>,
        /// Read the password as one line from stdin instead of asking twice.
        #[arg(long)]
        password_stdin: bool,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Every person with their organisations.
    List(JsonArg),
    /// Stop a person from signing in: their portal sessions end and their connections are
    /// revoked at once.
    Disable(EmailArgs),
    /// Let a disabled person sign in again (they connect their assistants anew).
    Enable(EmailArgs),
    /// Erase a person for good: name, email, password, second factor, memberships, sessions,
    /// connections. Audit records stay and name them `deleted-<id>`. Refused while they are
    /// an organisation's last admin.
    Delete {
        /// The person's email address.
        email: String,
        /// Confirm the erasure (without it nothing happens: exit status 2).
        #[arg(long)]
        yes: bool,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Start a new second-factor enrolment; prints the otpauth URI and secret.
    Totp(EmailArgs),
    /// Set a new password.
    Passwd {
        /// The person's email address.
        email: String,
        /// Read the password as one line from stdin instead of asking twice.
        #[arg(long)]
        password_stdin: bool,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Invite someone to organisation ORG: prints a one-time link (valid 7 days) to pass on.
    Invite {
        /// The organisation's slug.
        org: String,
        /// The invited person's email address.
        email: String,
        /// The role the person gets: admin or member.
        #[arg(long, default_value = "member", value_name = "admin|member")]
        role: Role,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// A one-time password-reset link (valid 24 hours); ends the person's sessions now, and
    /// using it requires a new second factor.
    Reset(EmailArgs),
}

#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// Add a person to an organisation (an existing member stays as they are: see `member set`).
    Add {
        /// The organisation's slug.
        org: String,
        /// The person's email address (`kennis user add` first).
        email: String,
        /// The role: admin or member (default member).
        #[arg(long, value_name = "admin|member")]
        role: Option<Role>,
        /// Allowed to connect an assistant (when the organisation lets selected members):
        /// `--may-connect` alone means true (default false).
        #[arg(long, value_name = "true|false", num_args = 0..=1, default_missing_value = "true",
              action = clap::ArgAction::Set)]
        may_connect: Option<bool>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// The members of an organisation.
    List(OrgArgs),
    /// Change a member's role or right to connect (an organisation keeps one admin).
    Set {
        /// The organisation's slug.
        org: String,
        /// The member's email address.
        email: String,
        /// The new role: admin or member.
        #[arg(long, value_name = "admin|member")]
        role: Option<Role>,
        /// Whether the member may connect an assistant.
        #[arg(long, value_name = "true|false", action = clap::ArgAction::Set)]
        may_connect: Option<bool>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// Remove a person from an organisation; their connections there are revoked at once.
    Remove {
        /// The organisation's slug.
        org: String,
        /// The member's email address.
        email: String,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
}

// Parsed once per process: the size of `Add` costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Add an agent to organisation ORG (its slug); prints its id.
    Add {
        /// The organisation's slug.
        org: String,
        /// The agent's name.
        name: String,
        /// generic (runs triggers) or feature (works on feature requests).
        #[arg(long, value_name = "generic|feature")]
        kind: crate::roster::AgentKind,
        /// How the agent runs: echo (answers with its input), command (a program), http (a
        /// URL that is POSTed the job) or llm (a chat-completions model with the tools).
        #[arg(long = "exec", value_parser = ["echo", "command", "http", "llm"])]
        exec: String,
        /// Program of a `command` agent (absolute path; started without a shell).
        #[arg(long, value_name = "PATH")]
        program: Option<String>,
        /// Argument for the program; repeatable.
        #[arg(long = "arg", value_name = "A", allow_hyphen_values = true)]
        args: Vec<String>,
        /// URL of an `http` agent; for `llm`, the API's base URL (POST {BASE}/chat/completions).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// For `llm`: one of the operator's `[[llm.endpoints]]` (its id) instead of --url and
        /// --api-key-*; its URL and key come from the server's configuration at run time.
        #[arg(long, value_name = "ID", conflicts_with_all = ["url", "api_key_env", "api_key_file"])]
        endpoint: Option<String>,
        /// For `command`: a variable of the server's environment the program receives (by
        /// name, value read at run time); repeatable. No `KENNIS_*` variable may be named.
        #[arg(long = "env", value_name = "NAME")]
        env: Vec<String>,
        /// Seconds before the agent is stopped (default 60, for `llm` 600; at most 3600).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
        /// Model of an `llm` agent, e.g. gpt-4.1-mini or qwen2.5:7b.
        #[arg(long, value_name = "M")]
        model: Option<String>,
        /// Environment variable of the server that holds the API key (read at run time).
        #[arg(long, value_name = "VAR", conflicts_with = "api_key_file")]
        api_key_env: Option<String>,
        /// File that holds the API key (absolute path, read at run time).
        #[arg(long, value_name = "F")]
        api_key_file: Option<PathBuf>,
        /// Most tool calls one `llm` run may make (default 20, at most 200).
        #[arg(long, value_name = "N")]
        max_steps: Option<u32>,
        /// Most tokens (prompt + completion, from the endpoint's `usage`) one `llm` run may
        /// use (default 200000).
        #[arg(long, value_name = "N")]
        max_tokens: Option<u64>,
        /// File with the system prompt of an `llm` agent (read now and stored with the agent).
        #[arg(long, value_name = "F")]
        system_prompt_file: Option<PathBuf>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// The agents of organisation ORG with their ids (what `trigger add --agent` takes).
    List(OrgArgs),
}

#[derive(Debug, Subcommand)]
pub enum AppCommand {
    /// Add an app to organisation ORG; only `live` apps accept new feature requests.
    Add {
        /// The organisation's slug.
        org: String,
        /// The app's name.
        name: String,
        /// live (accepts new requests), draft or archived.
        #[arg(long, value_enum, default_value = "live")]
        status: crate::requests::apps::AppStatus,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// The apps of organisation ORG.
    List(OrgArgs),
}

#[derive(Debug, Subcommand)]
pub enum ProjectCommand {
    /// Add a project to organisation ORG; `--ready` marks it fully rolled out.
    Add {
        /// The organisation's slug.
        org: String,
        /// The project's name.
        name: String,
        /// The project is fully rolled out (only ready projects can have triggers).
        #[arg(long)]
        ready: bool,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// The projects of organisation ORG with their ids (what `trigger add --project` takes).
    List(OrgArgs),
}

#[derive(Debug, Subcommand)]
pub enum TriggerCommand {
    /// Add a trigger; prints its URL and secret (shown only now).
    Add {
        /// The organisation's slug.
        org: String,
        /// The trigger's name.
        name: String,
        /// Agent id (from `agent add`); must be a generic agent.
        #[arg(long, value_name = "ID")]
        agent: u64,
        /// Project id (from `project add`); must be ready.
        #[arg(long, value_name = "ID")]
        project: u64,
        /// What the agent is asked to do with each event.
        #[arg(long, value_name = "TEXT")]
        instructions: String,
        /// Seconds after a run starts during which further events are skipped (default 300).
        #[arg(long, value_name = "S")]
        cooldown: Option<u64>,
        /// POST each run's result here, signed (Standard Webhooks), when the run ends; https
        /// and a public address only.
        #[arg(long, value_name = "URL")]
        callback_url: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// The organisation's triggers.
    List(OrgArgs),
    /// Pause: events get 200 `skipped: inactive`.
    Pause(TriggerId),
    /// Resume a paused trigger: events start runs again.
    Resume(TriggerId),
    /// A new secret; the old one stops working at once, the URL stays.
    RenewSecret(TriggerId),
    /// The URL stops working; existing runs remain.
    Delete(TriggerId),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a personal access token for member EMAIL of organisation ORG; prints the token
    /// (shown only now).
    Create {
        /// The organisation's slug.
        org: String,
        /// The member's email address (the token acts as them).
        email: String,
        /// What the token is for, e.g. "n8n" (shown in lists).
        #[arg(long)]
        name: String,
        /// A scope the token gets (repeatable): kennisbank (default), feature_requests.
        #[arg(long = "scope", value_name = "S")]
        scopes: Vec<String>,
        /// Days until the token expires: 1 to 365 (default 90).
        #[arg(long, value_name = "D")]
        expires_in_days: Option<i64>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
    /// The personal access tokens of organisation ORG.
    List(OrgArgs),
    /// Revoke token ID: its next call gets 401.
    Revoke {
        /// The token's id (from `token create` or `token list`).
        id: u64,
        #[arg(long, help = JSON_HELP)]
        json: bool,
    },
}

/// How a command failed; decides the exit status.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage: exit status 2.
    #[error("{0}")]
    Usage(String),
    /// A refused or failed request: exit status 1.
    #[error("{0}")]
    Failed(String),
}

impl From<AdminError> for CliError {
    fn from(e: AdminError) -> Self {
        CliError::Failed(e.to_string())
    }
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> Self {
        CliError::Failed(e.to_string())
    }
}

impl From<store::StoreError> for CliError {
    fn from(e: store::StoreError) -> Self {
        CliError::Failed(e.to_string())
    }
}

impl CliError {
    pub fn exit(self) -> ExitCode {
        eprintln!("kennis: {self}");
        match self {
            CliError::Usage(_) => ExitCode::from(2),
            CliError::Failed(_) => ExitCode::from(1),
        }
    }
}

/// Assembles the configuration: file, then environment, then flags.
pub fn load_config(global: &GlobalArgs, flags: Settings) -> Result<Config, CliError> {
    let file = match &global.config {
        Some(path) => Settings::from_file(path)?,
        None => Settings::default(),
    };
    let env = Settings::from_env(|k| std::env::var(k).ok())?;
    let global_flags = Settings {
        data_dir: global.data_dir.clone(),
        log_format: global.log_format.clone(),
        ..Settings::default()
    };
    Ok(file
        .overlay(env)
        .overlay(global_flags)
        .overlay(flags)
        .validate()?)
}

/// Runs `req` through the running server's admin socket, or on the store directly when no
/// server runs on this data directory.
pub fn run_admin(config: &Config, req: AdminRequest) -> Result<Value, CliError> {
    let mut view = ProgressView::new();
    let mut progress = |p: Progress| view.show(p);
    if let Some(v) = admin::try_send(&config.data_dir, &req, &mut progress)? {
        return Ok(v);
    }
    // Only the commands that start an installation may create its data directory: any other
    // one on a directory without kennis data is a mistyped --data-dir, not a new installation.
    let starts = matches!(
        req,
        AdminRequest::OrgCreate { .. } | AdminRequest::UserAdd { .. }
    );
    if !starts && !config.data_dir.join(store::DB_FILE).exists() {
        let dir = config.data_dir.display();
        let what = if config.data_dir.exists() {
            format!("no kennis data in {dir}")
        } else {
            format!("there is no data directory {dir}")
        };
        return Err(CliError::Failed(format!(
            "{what} (pass --data-dir or set KENNIS_DATA_DIR; `kennis org create` starts a new one)"
        )));
    }
    let store = Store::open(&config.data_dir).map_err(|e| match e {
        store::StoreError::Locked { .. } => CliError::Failed(format!(
            "{e}; its admin socket {} does not answer",
            admin::socket_path(&config.data_dir).display()
        )),
        other => other.into(),
    })?;
    let kb_index = crate::kb::index::SearchIndex::open(
        &config.data_dir.join(crate::app::INDEX_DIR),
        config.extract_text,
    )
    .map_err(|e| CliError::Failed(e.to_string()))?;
    let ctx = AdminContext {
        store,
        data_dir: config.data_dir.clone(),
        clock: clock::system(),
        kb_index: std::sync::Arc::new(kb_index),
        public_url: offline_public_url(config),
        wake_jobs: None,
        stop_run: None,
        close_org: None,
        extractor: crate::app::extractor(config),
        llm_endpoints: config.llm.endpoints.clone(),
        callback_allow_http_loopback: config.callback_allow_http_loopback,
        terms_version: config.terms_version.clone(),
    };
    Ok(admin::execute(&ctx, req, &mut progress)?)
}

/// Shows progress reports on stderr: a bar per stage when stderr is a terminal, otherwise a
/// line per stage at most every few seconds (and its last report), for logs.
pub struct ProgressView {
    terminal: bool,
    bar: Option<(String, indicatif::ProgressBar)>,
    last_line: Option<std::time::Instant>,
}

impl Default for ProgressView {
    fn default() -> Self {
        Self::new()
    }
}

impl ProgressView {
    pub fn new() -> ProgressView {
        use std::io::IsTerminal;
        ProgressView {
            terminal: std::io::stderr().is_terminal(),
            bar: None,
            last_line: None,
        }
    }

    pub fn show(&mut self, p: Progress) {
        match p {
            Progress::Step { stage, done, total } if self.terminal => {
                let bar = match &self.bar {
                    Some((s, bar)) if *s == stage => bar.clone(),
                    _ => {
                        self.finish();
                        let bar = indicatif::ProgressBar::new(total);
                        if let Ok(style) = indicatif::ProgressStyle::with_template(
                            "{msg:20} [{bar:30}] {human_pos}/{human_len} ({elapsed}, {eta} left)",
                        ) {
                            bar.set_style(style.progress_chars("=> "));
                        }
                        bar.set_message(stage.clone());
                        self.bar = Some((stage, bar.clone()));
                        bar
                    }
                };
                bar.set_length(total);
                bar.set_position(done);
            }
            Progress::Step { .. } => {
                let due = self
                    .last_line
                    .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(2));
                if due || p.is_final() {
                    eprintln!("{}", p.line());
                    self.last_line = Some(std::time::Instant::now());
                }
            }
            Progress::Note { text } => match &self.bar {
                Some((_, bar)) => bar.println(text),
                None => eprintln!("{text}"),
            },
        }
    }

    fn finish(&mut self) {
        if let Some((_, bar)) = self.bar.take() {
            bar.finish();
        }
    }
}

impl Drop for ProgressView {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The base URL a server on this configuration would announce: its `public_url`, else the
/// listen address (the same rule as `server::start`, minus the port chosen at bind time).
pub fn offline_public_url(config: &Config) -> String {
    config.public_url.clone().unwrap_or_else(|| {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", config.listen)
    })
}

/// How a command's answer reads for people (`--json` prints the answer itself, or the fields
/// [`Shown::only`] names).
#[derive(Debug, Clone, Copy)]
pub enum Print {
    /// A sentence with the answer's `{field}`s filled in ([`fill`]).
    Say(&'static str),
    /// The answer's `items`, a line each with these fields, tab-separated ([`human_list`]).
    List(&'static [&'static str]),
    /// What a function makes of the answer.
    Text(fn(&Value) -> String),
}

/// How one command's answer is shown.
#[derive(Debug, Clone, Copy)]
pub struct Shown {
    /// `--json`: JSON on stdout instead of text for people.
    pub json: bool,
    pub print: Print,
    /// With `--json`, only these fields of the answer (the others are for people to read).
    pub only: Option<&'static [&'static str]>,
}

impl Shown {
    /// Prints the answer on stdout.
    pub fn print(&self, answer: &Value) {
        let text = match (self.json, self.only) {
            (true, Some(fields)) => Value::Object(
                fields
                    .iter()
                    .map(|f| ((*f).to_owned(), answer[*f].clone()))
                    .collect(),
            )
            .to_string(),
            (true, None) => answer.to_string(),
            (false, _) => match self.print {
                Print::Say(template) => fill(template, answer),
                Print::List(fields) => human_list(answer, fields),
                Print::Text(f) => f(answer),
            },
        };
        let text = text.trim_end();
        if !text.is_empty() {
            let _ = writeln!(std::io::stdout().lock(), "{text}");
        }
    }
}

/// `token create` for people: the token, and why every call with it is refused for now when
/// the person cannot connect yet.
pub fn human_token(v: &Value) -> String {
    let mut out = fill(
        "{token}\n(token {id}; shown only now: store it where your script reads it)",
        v,
    );
    if let Some(why) = v["refused"].as_str() {
        out.push_str(&format!(
            "\nnote: every call with it is refused until this changes — {why}"
        ));
    }
    out
}

/// `template` with each `{field}` (a name of letters, digits and `_`) replaced by that field
/// of `v` as [`text`] shows it; other braces stay as they are.
pub fn fill(template: &str, v: &Value) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some((before, after)) = rest.split_once('{') {
        out.push_str(before);
        let name_end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        match after.split_at(name_end) {
            (name, tail) if !name.is_empty() && tail.starts_with('}') => {
                out.push_str(&text(&v[name]));
                rest = &tail[1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A value as people read it: a string as it is, null as `-`, anything else as JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// The `items` of a list as JSON lines.
pub fn json_lines(v: &Value) -> String {
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| format!("{item}\n"))
        .collect()
}

/// Reads a password: one line from stdin with `--password-stdin`, else twice from a prompt.
pub fn read_password(from_stdin: bool) -> Result<String, CliError> {
    if from_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| CliError::Failed(format!("reading the password from stdin: {e}")))?;
        return Ok(line.trim_end_matches(['\n', '\r']).to_owned());
    }
    if !std::io::stdin().is_terminal() {
        return Err(CliError::Usage(
            "no terminal to ask for a password: pass --password-stdin and write it to stdin".into(),
        ));
    }
    let first =
        rpassword::prompt_password("Password: ").map_err(|e| CliError::Failed(e.to_string()))?;
    let second =
        rpassword::prompt_password("Again: ").map_err(|e| CliError::Failed(e.to_string()))?;
    if first != second {
        return Err(CliError::Failed("the two passwords differ".into()));
    }
    Ok(first)
}

/// A backup path made absolute: the server may run in another directory.
pub fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(path).map_err(|e| CliError::Failed(format!("{}: {e}", path.display())))
}

/// `kennis restore`: offline only, into an empty data directory.
pub fn restore(config: &Config, path: &Path) -> Result<Value, CliError> {
    if std::os::unix::net::UnixStream::connect(admin::socket_path(&config.data_dir)).is_ok() {
        return Err(CliError::Failed(format!(
            "a kennis server is running on {}; restore into a new, empty data directory",
            config.data_dir.display()
        )));
    }
    let mut view = ProgressView::new();
    let summary = store::restore_from_dir(path, &config.data_dir, &mut |p| view.show(p))?;
    Ok(
        serde_json::json!({"path": summary.path, "records": summary.records, "bytes": summary.bytes}),
    )
}

/// Human rendering of `extraction_failures` (import, reindex): a line per file, at most 20.
pub fn human_failures(v: &Value) -> String {
    const SHOWN: usize = 20;
    let all = v["extraction_failures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out: String = all
        .iter()
        .take(SHOWN)
        .map(|f| {
            format!(
                "\n  no text: {}: {}",
                f["path"].as_str().unwrap_or(""),
                f["reason"].as_str().unwrap_or("")
            )
        })
        .collect();
    if all.len() > SHOWN {
        out.push_str(&format!(
            "\n  … and {} more (--json lists them all)",
            all.len() - SHOWN
        ));
    }
    out
}

/// Human rendering of `{items: [...]}` lists: one line per item with the named fields.
pub fn human_list(v: &Value, fields: &[&str]) -> String {
    let items = v["items"].as_array().cloned().unwrap_or_default();
    if items.is_empty() {
        return "(none)".into();
    }
    items
        .iter()
        .map(|item| {
            fields
                .iter()
                .map(|f| text(&item[*f]))
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `llm` settings of `agent add`: `None` when no llm flag is given and the executor is
/// another. The system prompt file is read here; the key file is only named (made absolute,
/// as the server may run in another directory) and read by the server at run time.
#[allow(clippy::too_many_arguments)]
pub fn llm_options(
    exec: &str,
    model: Option<String>,
    endpoint: Option<String>,
    api_key_env: Option<String>,
    api_key_file: Option<PathBuf>,
    max_steps: Option<u32>,
    max_tokens: Option<u64>,
    system_prompt_file: Option<PathBuf>,
) -> Result<Option<crate::roster::LlmOptions>, CliError> {
    let any = model.is_some()
        || endpoint.is_some()
        || api_key_env.is_some()
        || api_key_file.is_some()
        || max_steps.is_some()
        || max_tokens.is_some()
        || system_prompt_file.is_some();
    if exec != "llm" && !any {
        return Ok(None);
    }
    let system_prompt = match system_prompt_file {
        Some(f) => Some(std::fs::read_to_string(&f).map_err(|e| {
            CliError::Failed(format!("reading the system prompt {}: {e}", f.display()))
        })?),
        None => None,
    };
    let api_key_file = match api_key_file {
        Some(f) => Some(absolute(&f)?.to_string_lossy().into_owned()),
        None => None,
    };
    Ok(Some(crate::roster::LlmOptions {
        model: model.unwrap_or_default(),
        api_key_env,
        api_key_file,
        max_steps,
        max_tokens,
        system_prompt,
        endpoint,
    }))
}

/// Human rendering of `run show`: the run, then its transcript one line per entry.
pub fn human_run(v: &Value) -> String {
    let s = text;
    let mut out = format!(
        "run {} ({}) · agent {} · {} · created {} · updated {}\nresult: {}\n",
        v["id"],
        s(&v["kind"]),
        s(v.pointer("/agent/name").unwrap_or(&Value::Null)),
        s(&v["status"]),
        s(&v["created_at"]),
        s(&v["updated_at"]),
        s(&v["result"])
    );
    let cb = &v["callback"];
    if !cb.is_null() {
        out.push_str(&format!(
            "callback to {}: {} (webhook-id {})\n",
            s(&cb["url"]),
            s(&cb["state"]),
            s(&cb["webhook_id"])
        ));
        for a in v["callbacks"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  attempt {} at {}: {} {}\n",
                a["attempt"],
                s(&a["at"]),
                a["status"],
                s(&a["reason"])
            ));
        }
    }
    let t = &v["transcript"];
    if t.is_null() {
        out.push_str("no transcript yet\n");
        return out;
    }
    out.push_str(&format!(
        "tokens: {} prompt + {} completion = {}; tool calls: {}\n",
        t["prompt_tokens"], t["completion_tokens"], t["total_tokens"], t["tool_calls"]
    ));
    for e in t["entries"].as_array().into_iter().flatten() {
        let line = match e["type"].as_str().unwrap_or("") {
            "job" => format!("job ({}) {}", s(&e["executor"]), s(&e["model"])),
            "model" => {
                let calls: Vec<String> = e["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| format!("{}({})", s(&c["name"]), s(&c["arguments"])))
                    .collect();
                format!(
                    "model [{} ms, {}+{} tokens, {}] {}{}",
                    e["duration_ms"],
                    e["prompt_tokens"],
                    e["completion_tokens"],
                    s(&e["finish_reason"]),
                    e["content"].as_str().unwrap_or(""),
                    if calls.is_empty() {
                        String::new()
                    } else {
                        format!(" → {}", calls.join(", "))
                    }
                )
            }
            "tool" => format!(
                "tool {} [{} ms, {}] {}",
                s(&e["name"]),
                e["duration_ms"],
                if e["ok"] == true { "ok" } else { "error" },
                s(&e["result"])
            ),
            "retry" => format!("retry in {} ms: {}", e["wait_ms"], s(&e["reason"])),
            "event" => format!("event {}", e["event"]),
            "end" => format!("end {}: {}", s(&e["status"]), s(&e["note"])),
            other => format!("{other}: {e}"),
        };
        out.push_str(&format!("{:>8} ms  {line}\n", e["elapsed_ms"]));
    }
    out
}

/// What `kennis serve` logs unless `KENNIS_LOG` says otherwise: kennis's own lines (one per
/// request among them) and other crates' warnings. The MCP SDK would add three lines of its
/// own to every connector call (its per-request service starting and stopping).
const SERVE_LOG: &str = "info,rmcp=warn";

/// `kennis serve`.
pub fn serve(config: Config, demo: bool) -> Result<(), CliError> {
    crate::logging::init(config.log_format, SERVE_LOG);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("starting the runtime: {e}")))?;
    runtime.block_on(async move {
        crate::server::install_panic_hook();
        let serves_tls = config.tls.is_some() || config.acme.is_some();
        let server = crate::server::start(config, clock::system())
            .await
            .map_err(|e| CliError::Failed(e.to_string()))?;
        let app = server.app.clone();
        if demo {
            let setup = app
                .blocking(crate::demo::ensure)
                .await
                .map_err(|e| CliError::Failed(format!("demo setup: {e}")))?;
            print!(
                "{}",
                crate::demo::describe(&setup, &app.connector_url(), &app.public_url)
            );
        }
        let signal =
            crate::server::shutdown_signal().map_err(|e| CliError::Failed(e.to_string()))?;
        // The address it listens on (what a local client or proxy connects to), then the public
        // URL when that is another (behind a proxy, or with ACME).
        let scheme = if serves_tls { "https" } else { "http" };
        let listening = format!("{scheme}://{}", server.local_addr);
        if app.public_url != listening {
            println!("public URL: {}", app.public_url);
        }
        println!("kennis listening on {listening}");
        let _ = std::io::stdout().flush();
        let mut server = server;
        tokio::select! {
            _ = signal => tracing::info!("shutting down"),
            _ = server.stopped() => {},
        }
        server.shutdown().await;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::{CommandFactory, Parser};

    /// Every command and every option a person can type has a help line (`kennis … --help`),
    /// and `--role` names its values.
    #[test]
    fn every_command_and_option_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            if cmd.is_hide_set() {
                return;
            }
            if path != "kennis" && cmd.get_about().is_none() {
                missing.push(format!("command `{path}`"));
            }
            for arg in cmd.get_arguments() {
                if arg.is_hide_set() || arg.get_id() == "help" || arg.get_id() == "version" {
                    continue;
                }
                if arg.get_help().is_none() {
                    missing.push(format!("`{path}` argument `{}`", arg.get_id()));
                }
                // A role is one of a few words: the help names them.
                let names = arg
                    .get_value_names()
                    .map(|n| n.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(" "))
                    .unwrap_or_default();
                if arg.get_id() == "role" && names != "admin|member" {
                    missing.push(format!("`{path}` --role does not list admin|member"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_name() != "help" {
                    walk(sub, &format!("{path} {}", sub.get_name()), missing);
                }
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "kennis", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    #[test]
    fn fill_names_fields_and_leaves_other_braces() {
        let v = serde_json::json!({"id": 7, "name": "Echo", "gone": null});
        assert_eq!(
            super::fill("{name} (id {id}, {gone}) -d '{}' {missing} {x", &v),
            "Echo (id 7, -) -d '{}' - {x"
        );
    }

    /// DESIGN.md's two forms: `member add … [--may-connect]` (a flag, or with true|false) and
    /// `member set … [--may-connect true|false]`.
    #[test]
    fn may_connect_takes_both_contract_forms() {
        use super::{Command, MemberCommand};
        let may = |args: &[&str]| {
            let cli = Cli::try_parse_from(["kennis", "member"].iter().chain(args))
                .map_err(|e| e.to_string())?;
            match cli.command {
                Command::Member(MemberCommand::Add { may_connect, .. })
                | Command::Member(MemberCommand::Set { may_connect, .. }) => Ok(may_connect),
                other => Err(format!("{other:?}")),
            }
        };
        assert_eq!(may(&["add", "o", "e"]), Ok(None));
        assert_eq!(may(&["add", "o", "e", "--may-connect"]), Ok(Some(true)));
        assert_eq!(
            may(&["add", "o", "e", "--may-connect", "true"]),
            Ok(Some(true))
        );
        assert_eq!(
            may(&["add", "o", "e", "--may-connect", "false"]),
            Ok(Some(false))
        );
        assert_eq!(
            may(&["add", "o", "e", "--may-connect", "--json"]),
            Ok(Some(true))
        );
        assert_eq!(
            may(&["set", "o", "e", "--may-connect", "false"]),
            Ok(Some(false))
        );
        assert_eq!(
            may(&["set", "o", "e", "--may-connect", "true"]),
            Ok(Some(true))
        );
        assert!(may(&["set", "o", "e", "--may-connect"]).is_err());
        assert!(may(&["set", "o", "e", "--may-connect", "maybe"]).is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
