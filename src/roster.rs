//! Who does an organisation's work: its agents (name, kind, executor and its settings) and
//! its projects (rollout state), as stored, with the checks of `agent add` and `project add`
//! and the lookups. The runtime that executes agents is [`crate::agents`].
//!
//! An agent is `generic` (started by event triggers) or `feature` (works on feature requests),
//! and has an executor: the built-in `echo`, a `command` started without a shell, an `http`
//! endpoint, or `llm`, a language model behind an OpenAI-compatible chat-completions API.
//! Projects carry a rollout state; triggers may only be saved for `ready` projects.

#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::audit::{self, Actor};
use crate::config::{LlmConfig, LlmEndpoint};
use crate::identity;
use crate::store::by_org::{self, Kind};
use crate::store::{AGENTS, PROJECTS, Read, ReadTx, Store, StoreError, key};

/// Longest allowed executor timeout: one hour.
pub const MAX_TIMEOUT_SECS: u64 = 3600;
/// Executor timeout when none is given.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Wall time of an `llm` run when no `--timeout` is given: models take their time.
pub const DEFAULT_LLM_TIMEOUT_SECS: u64 = 600;
/// Tool calls an `llm` run may make when no `--max-steps` is given, and at most.
pub const DEFAULT_MAX_STEPS: u32 = 20;
pub const MAX_MAX_STEPS: u32 = 200;
/// Tokens (prompt + completion, as the endpoint's `usage` counts them) an `llm` run may use
/// when no `--max-tokens` is given, and the range allowed.
pub const DEFAULT_MAX_TOKENS: u64 = 200_000;
pub const MAX_TOKENS_RANGE: std::ops::RangeInclusive<u64> = 1_000..=10_000_000;
/// Longest system prompt an `llm` agent may have (characters).
pub const SYSTEM_PROMPT_MAX: usize = 20_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// Runs started by event triggers.
    Generic,
    /// Works on feature requests.
    Feature,
}

/// How an agent is executed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "exec", rename_all = "snake_case")]
pub enum Executor {
    Echo,
    Command {
        program: String,
        args: Vec<String>,
        /// Variables of the server's environment passed to the program (`--env`), by name;
        /// their values are read at run time.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
    },
    Http {
        url: String,
    },
    /// A model behind `POST {url}/chat/completions`. The API key is read at run time from the
    /// server's environment or a file; only the variable's name or the file's path is stored.
    Llm(LlmSettings),
}

impl Executor {
    pub fn name(&self) -> &'static str {
        match self {
            Executor::Echo => "echo",
            Executor::Command { .. } => "command",
            Executor::Http { .. } => "http",
            Executor::Llm(_) => "llm",
        }
    }

    /// The executor as the organisation's audit names it (`agent.add`): what its admins are
    /// shown of the agent on the Triggers page and no more. An operator's endpoint by its id,
    /// a model address of the agent's own without user, password or query; never a key, the
    /// variable or file it is read from, a program's path or an `http` agent's address —
    /// the operator's configuration, which the server's log and `kennis agent list` show.
    pub fn describe(&self) -> String {
        match self {
            Executor::Echo => "exec=echo".into(),
            Executor::Command { .. } => "exec=command".into(),
            Executor::Http { .. } => "exec=http".into(),
            Executor::Llm(l) => {
                let (what, target) = l.shown_target();
                format!("exec=llm {what}={target} model={}", l.model)
            }
        }
    }
}

/// A URL without its user, password, query and fragment (what may carry a secret): how an
/// agent's address is shown and logged.
pub fn without_secrets(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "(not a URL)".into(),
    }
}

/// How an `llm` agent reaches its model. Stored with the agent; the key itself never is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmSettings {
    /// Base URL without trailing slash, e.g. `https://api.openai.com/v1`.
    pub url: String,
    pub model: String,
    /// The server's environment variable that holds the API key, read at run time.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// A file holding the API key, read at run time.
    #[serde(default)]
    pub api_key_file: Option<String>,
    pub max_steps: u32,
    pub max_tokens: u64,
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// One of the operator's `[[llm.endpoints]]`: then `url` only shows where it pointed when
    /// the agent was added, and the URL and key come from the configuration at run time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

impl LlmSettings {
    /// Where the conversation goes, as the organisation is shown it (the Triggers page, the
    /// audit): an operator's endpoint by its id (`endpoint`), an address of the agent's own
    /// without user, password or query (`url`).
    pub fn shown_target(&self) -> (&'static str, String) {
        match &self.endpoint {
            Some(id) => ("endpoint", id.clone()),
            None => ("url", without_secrets(&self.url)),
        }
    }

    /// The settings as `agent add` would take them back (for listings).
    pub fn options(&self) -> LlmOptions {
        LlmOptions {
            model: self.model.clone(),
            api_key_env: self.api_key_env.clone(),
            api_key_file: self.api_key_file.clone(),
            max_steps: Some(self.max_steps),
            max_tokens: Some(self.max_tokens),
            system_prompt: self.system_prompt.clone(),
            endpoint: self.endpoint.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    pub id: u64,
    pub org_id: u64,
    pub name: String,
    pub kind: AgentKind,
    pub executor: Executor,
    pub timeout_secs: u64,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rollout {
    Pending,
    RollingOut,
    Ready,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Project {
    pub id: u64,
    pub org_id: u64,
    pub name: String,
    pub rollout: Rollout,
    pub created_at: Timestamp,
}

/// Why an agent or project operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("unknown organisation `{0}`")]
    UnknownOrg(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What `agent add --exec llm` adds to [`NewAgent`] (whose `url` is the API's base URL); what
/// is not given is left to the defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LlmOptions {
    pub model: String,
    pub api_key_env: Option<String>,
    pub api_key_file: Option<String>,
    pub max_steps: Option<u32>,
    pub max_tokens: Option<u64>,
    /// The system prompt's text (the command line reads `--system-prompt-file`).
    pub system_prompt: Option<String>,
    /// One of the operator's `[[llm.endpoints]]` (its id) instead of `url` and a key of the
    /// agent's own: the URL and key then come from the server's configuration at run time.
    pub endpoint: Option<String>,
}

/// What `agent add` asks for; checked by [`add_agent`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewAgent {
    pub name: String,
    pub kind: AgentKind,
    /// `echo`, `command`, `http` or `llm` (whose settings come in [`LlmOptions`]).
    pub exec: String,
    // A missing `Option` reads as `None`.
    pub program: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    pub url: Option<String>,
    pub timeout_secs: Option<u64>,
}

fn check_name(what: &str, name: &str) -> Result<String, AgentError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(AgentError::InvalidInput(format!(
            "{what} name must be 1 to 100 characters without control characters"
        )));
    }
    Ok(name.to_owned())
}

fn check_url(url: &str, flag: &str) -> Result<(), AgentError> {
    if !(url.starts_with("http://") || url.starts_with("https://"))
        || url.len() > 2000
        || url.chars().any(|c| c.is_control() || c == ' ')
    {
        return Err(AgentError::InvalidInput(format!(
            "{flag} must be an http:// or https:// URL"
        )));
    }
    Ok(())
}

fn llm_executor(
    new: &NewAgent,
    llm: Option<&LlmOptions>,
    endpoint: Option<&LlmEndpoint>,
) -> Result<Executor, AgentError> {
    let bad = |m: String| Err(AgentError::InvalidInput(m));
    let Some(o) = llm else {
        return bad("the llm executor needs --url BASE and --model M".into());
    };
    let url = match (endpoint, new.url.as_deref()) {
        (Some(_), Some(_)) => return bad("give --endpoint or --url, not both".into()),
        (Some(_), None) if o.api_key_env.is_some() || o.api_key_file.is_some() => {
            return bad(
                "a model endpoint brings its own key: give no --api-key-env or --api-key-file with --endpoint"
                    .into(),
            );
        }
        (Some(e), None) => e.url.as_str(),
        (None, None) => {
            return bad(
                "the llm executor needs --url BASE (e.g. https://api.openai.com/v1)".into(),
            );
        }
        (None, Some(url)) => url,
    };
    check_url(url, "--url")?;
    if new.program.is_some() || !new.args.is_empty() {
        return bad("the llm executor takes no --program or --arg".into());
    }
    let model = o.model.trim();
    if model.is_empty() {
        return bad("the llm executor needs --model M".into());
    }
    if model.len() > 200 || model.chars().any(char::is_control) {
        return bad("--model must be 1 to 200 characters".into());
    }
    match (&o.api_key_env, &o.api_key_file) {
        (Some(_), Some(_)) => return bad("give --api-key-env or --api-key-file, not both".into()),
        (Some(var), None)
            if var.is_empty()
                || var.len() > 200
                || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            return bad("--api-key-env must name an environment variable (A-Z, 0-9, _)".into());
        }
        (None, Some(file)) if !std::path::Path::new(file).is_absolute() || file.contains('\0') => {
            return bad("--api-key-file must be an absolute path".into());
        }
        _ => {}
    }
    let max_steps = o.max_steps.unwrap_or(DEFAULT_MAX_STEPS);
    if !(1..=MAX_MAX_STEPS).contains(&max_steps) {
        return bad(format!("--max-steps must be 1 to {MAX_MAX_STEPS}"));
    }
    let max_tokens = o.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if !MAX_TOKENS_RANGE.contains(&max_tokens) {
        return bad(format!(
            "--max-tokens must be {} to {}",
            MAX_TOKENS_RANGE.start(),
            MAX_TOKENS_RANGE.end()
        ));
    }
    let system_prompt = o
        .system_prompt
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty());
    if system_prompt.is_some_and(|p| p.chars().count() > SYSTEM_PROMPT_MAX) {
        return bad(format!(
            "the system prompt is longer than {SYSTEM_PROMPT_MAX} characters"
        ));
    }
    Ok(Executor::Llm(LlmSettings {
        url: url.trim_end_matches('/').to_owned(),
        model: model.to_owned(),
        api_key_env: o.api_key_env.clone(),
        api_key_file: o.api_key_file.clone(),
        max_steps,
        max_tokens,
        system_prompt: system_prompt.map(str::to_owned),
        endpoint: endpoint.map(|e| e.id.clone()),
    }))
}

/// The operator's endpoint `id` if organisation `org` may use it. An unknown id and one not
/// offered to the organisation are refused alike (an admin learns nothing of other
/// organisations' endpoints).
pub fn endpoint_for<'a>(
    endpoints: &'a [LlmEndpoint],
    org: &str,
    id: &str,
) -> Result<&'a LlmEndpoint, AgentError> {
    endpoints
        .iter()
        .find(|e| e.id == id && e.allows(org))
        .ok_or_else(|| {
            AgentError::InvalidInput(format!(
                "the model endpoint `{id}` is not offered to organisation {org}"
            ))
        })
}

/// Checks the names of `--env`: variables of the server a `command` agent receives.
fn check_env_names(names: &[String]) -> Result<Vec<String>, AgentError> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        let name = name.trim();
        let ok = name.len() <= 200
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(AgentError::InvalidInput(format!(
                "--env `{name}` is not an environment variable's name (A-Z, 0-9, _)"
            )));
        }
        if name.starts_with("KENNIS_") {
            return Err(AgentError::InvalidInput(format!(
                "--env `{name}`: no KENNIS_ variable of the server is passed to an agent (the job's are KENNIS_RUN_*)"
            )));
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

fn executor_of(
    new: &NewAgent,
    extra: &AgentExtras,
    endpoint: Option<&LlmEndpoint>,
) -> Result<Executor, AgentError> {
    let bad = |m: &str| Err(AgentError::InvalidInput(m.into()));
    let llm = extra.llm;
    if llm.is_some() && new.exec != "llm" {
        return bad(
            "--model, --endpoint, --api-key-*, --max-steps, --max-tokens and --system-prompt-file are for the llm executor",
        );
    }
    if !extra.env.is_empty() && new.exec != "command" {
        return bad("--env is for the command executor");
    }
    match new.exec.as_str() {
        "echo" => {
            if new.program.is_some() || new.url.is_some() || !new.args.is_empty() {
                return bad("the echo executor takes no --program, --arg or --url");
            }
            Ok(Executor::Echo)
        }
        "command" => {
            let Some(program) = new.program.as_deref() else {
                return bad("the command executor needs --program PATH");
            };
            // An absolute path: the server's working directory and PATH must not decide which
            // program runs.
            if !std::path::Path::new(program).is_absolute() {
                return bad("--program must be an absolute path");
            }
            if new.url.is_some() {
                return bad("the command executor takes no --url");
            }
            if new.args.iter().any(|a| a.contains('\0')) {
                return bad("arguments may not contain NUL");
            }
            Ok(Executor::Command {
                program: program.to_owned(),
                args: new.args.clone(),
                env: check_env_names(extra.env)?,
            })
        }
        "http" => {
            let Some(url) = new.url.as_deref() else {
                return bad("the http executor needs --url URL");
            };
            check_url(url, "--url")?;
            if new.program.is_some() || !new.args.is_empty() {
                return bad("the http executor takes no --program or --arg");
            }
            Ok(Executor::Http {
                url: url.to_owned(),
            })
        }
        "llm" => llm_executor(new, llm, endpoint),
        other => Err(AgentError::InvalidInput(format!(
            "executor `{other}` is not echo, command, http or llm"
        ))),
    }
}

fn org_id(tx: &ReadTx, slug: &str) -> Result<u64, AgentError> {
    identity::org_by_slug(tx, slug)?
        .map(|o| o.id)
        .ok_or_else(|| AgentError::UnknownOrg(slug.to_owned()))
}

/// Adds an agent to the organisation with slug `org` (the operator's; no executor settings
/// beyond [`NewAgent`]).
pub fn add_agent(
    store: &Store,
    org: &str,
    new: &NewAgent,
    now: Timestamp,
) -> Result<Agent, AgentError> {
    let extra = AgentExtras::default();
    add_agent_full(store, &Actor::Operator, org, new, &extra, now)
}

/// What `agent add` may give beyond [`NewAgent`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentExtras<'a> {
    /// The settings of an `llm` agent.
    pub llm: Option<&'a LlmOptions>,
    /// `--env`: variables of the server's environment a `command` agent receives.
    pub env: &'a [String],
    /// The operator's `[[llm.endpoints]]`, for an `llm` agent that names one.
    pub endpoints: &'a [LlmEndpoint],
}

/// Adds an agent as the operator (the command line): any executor, any URL. Audited
/// (`agent.add`, with where the agent points).
pub fn add_agent_full(
    store: &Store,
    by: &Actor,
    org: &str,
    new: &NewAgent,
    extra: &AgentExtras,
    now: Timestamp,
) -> Result<Agent, AgentError> {
    let name = check_name("agent", &new.name)?;
    let endpoint = match extra.llm.and_then(|o| o.endpoint.as_deref()) {
        Some(id) => Some(endpoint_for(extra.endpoints, org, id)?),
        None => None,
    };
    let executor = executor_of(new, extra, endpoint)?;
    let default_timeout = match executor {
        Executor::Llm(_) => DEFAULT_LLM_TIMEOUT_SECS,
        _ => DEFAULT_TIMEOUT_SECS,
    };
    let timeout_secs = new.timeout_secs.unwrap_or(default_timeout);
    if !(1..=MAX_TIMEOUT_SECS).contains(&timeout_secs) {
        return Err(AgentError::InvalidInput(format!(
            "--timeout must be 1 to {MAX_TIMEOUT_SECS} seconds"
        )));
    }
    let org_id = store.read(|tx| org_id(tx, org))?;
    store.write(|tx| {
        let taken = by_org::records::<Agent>(tx, Kind::Agent, org_id)?
            .into_iter()
            .any(|(_, a)| a.name.to_lowercase() == name.to_lowercase());
        if taken {
            return Err(AgentError::InvalidInput(format!(
                "this organisation has an agent named `{name}` already (`kennis agent list {org}`)"
            )));
        }
        let agent = Agent {
            id: tx.next_id("agent")?,
            org_id,
            name,
            kind: new.kind,
            executor,
            timeout_secs,
            created_at: now,
        };
        tx.put(AGENTS, &key::id(agent.id), &agent)?;
        by_org::add(tx, Kind::Agent, org_id, &key::id(agent.id))?;
        let target = format!(
            "agent {} {} {}",
            agent.id,
            agent.name,
            agent.executor.describe()
        );
        audit::admin_in(tx, org_id, by, "agent.add", &target, now)?;
        Ok(agent)
    })
}

/// Adds a language-model agent as an organisation's admin (the portal): only on one of the
/// operator's endpoints offered to the organisation. A URL, key variable or key file of the
/// admin's own, or another executor, is refused: the operator's keys go only to the
/// operator's endpoints.
pub fn add_org_admin_agent(
    store: &Store,
    by: &Actor,
    llm_config: &LlmConfig,
    org: &str,
    new: &NewAgent,
    llm: &LlmOptions,
    now: Timestamp,
) -> Result<Agent, AgentError> {
    let bad = |m: &str| Err(AgentError::InvalidInput(m.into()));
    if new.exec != "llm" || new.program.is_some() || !new.args.is_empty() {
        return bad("an organisation's admin adds language-model agents only");
    }
    if new.url.is_some() || llm.api_key_env.is_some() || llm.api_key_file.is_some() {
        return bad(
            "an organisation's admin chooses one of the operator's model endpoints; another URL or key is given only on the server's command line",
        );
    }
    if llm.endpoint.is_none() {
        return bad("choose one of the model endpoints offered to this organisation");
    }
    let extra = AgentExtras {
        llm: Some(llm),
        env: &[],
        endpoints: &llm_config.endpoints,
    };
    add_agent_full(store, by, org, new, &extra, now)
}

/// Adds a project to the organisation with slug `org` (the operator's; audited).
pub fn add_project(
    store: &Store,
    org: &str,
    name: &str,
    rollout: Rollout,
    now: Timestamp,
) -> Result<Project, AgentError> {
    let name = check_name("project", name)?;
    let org_id = store.read(|tx| org_id(tx, org))?;
    store.write(|tx| {
        let project = Project {
            id: tx.next_id("project")?,
            org_id,
            name,
            rollout,
            created_at: now,
        };
        tx.put(PROJECTS, &key::id(project.id), &project)?;
        by_org::add(tx, Kind::Project, org_id, &key::id(project.id))?;
        let target = format!("project {} {}", project.id, project.name);
        audit::admin_in(tx, org_id, &Actor::Operator, "project.add", &target, now)?;
        Ok(project)
    })
}

pub fn get_agent(tx: &impl Read, id: u64) -> Result<Option<Agent>, StoreError> {
    tx.get(AGENTS, &key::id(id))
}

pub fn get_project(tx: &impl Read, id: u64) -> Result<Option<Project>, StoreError> {
    tx.get(PROJECTS, &key::id(id))
}

/// The organisation's agents, oldest first.
pub fn list_agents(store: &Store, org_id: u64) -> Result<Vec<Agent>, StoreError> {
    Ok(store
        .read(|tx| by_org::records::<Agent>(tx, Kind::Agent, org_id))?
        .into_iter()
        .map(|r| r.1)
        .collect())
}

/// The organisation's projects, oldest first.
pub fn list_projects(store: &Store, org_id: u64) -> Result<Vec<Project>, StoreError> {
    Ok(store
        .read(|tx| by_org::records::<Project>(tx, Kind::Project, org_id))?
        .into_iter()
        .map(|r| r.1)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_executor_is_described_without_the_operators_configuration() {
        let http = Executor::Http {
            url: "https://user:geheim@agent.example/run?token=geheim#x".into(),
        };
        assert_eq!(http.describe(), "exec=http");
        let cmd = Executor::Command {
            program: "/opt/agents/geheim".into(),
            args: vec!["--token".into(), "geheim".into()],
            env: vec!["GEHEIM".into()],
        };
        assert_eq!(cmd.describe(), "exec=command");
        let llm = |endpoint: Option<&str>| {
            Executor::Llm(LlmSettings {
                url: "https://user:geheim@10.0.0.5:11434/v1?key=geheim".into(),
                model: "m".into(),
                api_key_env: Some("GEHEIM_KEY".into()),
                api_key_file: Some("/etc/kennis/geheim.key".into()),
                max_steps: 1,
                max_tokens: 1,
                system_prompt: None,
                endpoint: endpoint.map(str::to_owned),
            })
        };
        assert_eq!(
            llm(Some("huis")).describe(),
            "exec=llm endpoint=huis model=m"
        );
        assert_eq!(
            llm(None).describe(),
            "exec=llm url=https://10.0.0.5:11434/v1 model=m"
        );
    }
}
