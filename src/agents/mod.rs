//! Agents and projects of an organisation, and the runtime that executes runs.
//!
//! An agent is `generic` (started by event triggers) or `feature` (works on feature requests),
//! and has an executor: the built-in `echo`, a `command` started without a shell, or an `http`
//! endpoint. Projects carry a rollout state; triggers may only be saved for `ready` projects.

mod exec;
mod runtime;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::identity;
use crate::store::{AGENTS, PROJECTS, Read, ReadTx, Store, StoreError, key};

pub use exec::{AgentEvent, EventSink, Job, JobAgent, Outcome, dispatch};
pub use runtime::{RunQueue, enqueue, recover, start_workers};

/// Longest allowed executor timeout: one hour.
pub const MAX_TIMEOUT_SECS: u64 = 3600;
/// Executor timeout when none is given.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;

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
    Command { program: String, args: Vec<String> },
    Http { url: String },
}

impl Executor {
    pub fn name(&self) -> &'static str {
        match self {
            Executor::Echo => "echo",
            Executor::Command { .. } => "command",
            Executor::Http { .. } => "http",
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

/// What `agent add` asks for; checked by [`add_agent`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewAgent {
    pub name: String,
    pub kind: AgentKind,
    /// `echo`, `command` or `http`.
    pub exec: String,
    #[serde(default)]
    pub program: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
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

fn executor_of(new: &NewAgent) -> Result<Executor, AgentError> {
    let bad = |m: &str| Err(AgentError::InvalidInput(m.into()));
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
            })
        }
        "http" => {
            let Some(url) = new.url.as_deref() else {
                return bad("the http executor needs --url URL");
            };
            if !(url.starts_with("http://") || url.starts_with("https://"))
                || url.len() > 2000
                || url.chars().any(|c| c.is_control() || c == ' ')
            {
                return bad("--url must be an http:// or https:// URL");
            }
            if new.program.is_some() || !new.args.is_empty() {
                return bad("the http executor takes no --program or --arg");
            }
            Ok(Executor::Http {
                url: url.to_owned(),
            })
        }
        other => Err(AgentError::InvalidInput(format!(
            "executor `{other}` is not echo, command or http"
        ))),
    }
}

fn org_id(tx: &ReadTx, slug: &str) -> Result<u64, AgentError> {
    identity::org_by_slug(tx, slug)?
        .map(|o| o.id)
        .ok_or_else(|| AgentError::UnknownOrg(slug.to_owned()))
}

/// Adds an agent to the organisation with slug `org`.
pub fn add_agent(
    store: &Store,
    org: &str,
    new: &NewAgent,
    now: Timestamp,
) -> Result<Agent, AgentError> {
    let name = check_name("agent", &new.name)?;
    let executor = executor_of(new)?;
    let timeout_secs = new.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
    if !(1..=MAX_TIMEOUT_SECS).contains(&timeout_secs) {
        return Err(AgentError::InvalidInput(format!(
            "--timeout must be 1 to {MAX_TIMEOUT_SECS} seconds"
        )));
    }
    let org_id = store.read(|tx| org_id(tx, org))?;
    store.write(|tx| {
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
        Ok(agent)
    })
}

/// Adds a project to the organisation with slug `org`.
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
        .read(|tx| tx.scan::<Agent>(AGENTS, b""))?
        .into_iter()
        .map(|r| r.1)
        .filter(|a| a.org_id == org_id)
        .collect())
}

/// The organisation's projects, oldest first.
pub fn list_projects(store: &Store, org_id: u64) -> Result<Vec<Project>, StoreError> {
    Ok(store
        .read(|tx| tx.scan::<Project>(PROJECTS, b""))?
        .into_iter()
        .map(|r| r.1)
        .filter(|p| p.org_id == org_id)
        .collect())
}
