//! The tools of the knowledge base and the feature requests, with their one entry point
//! [`call`]: the hourly limit, the tool, the audit record. The MCP connector calls them as a
//! person's grant; the `llm` agent executor calls the knowledge-base tools in-process as the
//! organisation's agent, under the same rules, limits and audit. No `unwrap`, `expect` or
//! indexing in this folder (the lints below hold for every file in it).

pub mod args;
pub mod kb;
pub mod requests;

use std::time::Instant;

use serde_json::{Value, json};

use crate::app::App;
use crate::audit::{self, AuditRecord, Outcome, limits};
use crate::kb::KbError;
use crate::store::StoreError;

/// The scope that unlocks the knowledge-base tools.
pub const SCOPE_KB: &str = "kennisbank";
/// The scope that unlocks the feature-request tools.
pub const SCOPE_REQUESTS: &str = "feature_requests";

/// Who acts: a person through a grant or a personal access token, or an organisation's agent
/// during one run (or job).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    Person { person_id: u64, grant_id: u64 },
    Token { person_id: u64, token_id: u64 },
    Agent { agent_id: u64, run_id: u64 },
}

/// Who is calling: the organisation, the actor, and the scopes that decide which tools exist.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    pub org_id: u64,
    pub actor: Actor,
    pub scopes: Vec<String>,
}

impl Caller {
    /// A person's call through a grant with `scopes`.
    pub fn person(org_id: u64, person_id: u64, grant_id: u64, scopes: Vec<String>) -> Caller {
        Caller {
            org_id,
            actor: Actor::Person {
                person_id,
                grant_id,
            },
            scopes,
        }
    }

    /// A person's call through personal access token `token_id` with `scopes`.
    pub fn token(org_id: u64, person_id: u64, token_id: u64, scopes: Vec<String>) -> Caller {
        Caller {
            org_id,
            actor: Actor::Token {
                person_id,
                token_id,
            },
            scopes,
        }
    }

    /// The organisation's agent working on run (or feature-request job) `run_id`: it gets the
    /// knowledge-base tools only.
    pub fn agent(org_id: u64, agent_id: u64, run_id: u64) -> Caller {
        Caller {
            org_id,
            actor: Actor::Agent { agent_id, run_id },
            scopes: vec![SCOPE_KB.to_owned()],
        }
    }

    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }

    /// The person acting, if a person acts (documents written by an agent have no author).
    pub fn person_id(&self) -> Option<u64> {
        match self.actor {
            Actor::Person { person_id, .. } | Actor::Token { person_id, .. } => Some(person_id),
            Actor::Agent { .. } => None,
        }
    }

    /// The person acting; the feature-request tools act only for people.
    pub fn require_person(&self) -> Result<u64, ToolError> {
        self.person_id().ok_or_else(|| {
            ToolError::InvalidInput("this tool acts for a person, not for an agent".into())
        })
    }
}

/// A tool's successful answer: the structured result and its readable text.
pub struct ToolOk {
    pub structured: Value,
    pub text: String,
    /// The path or request the call was about, for the audit record.
    pub target: Option<String>,
}

/// Why a tool call was refused or failed: a tool error result, never an HTTP error, so the
/// assistant reads the message and can act on it.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AppClosed(String),
    #[error(
        "hourly limit of {limit} calls of {tool} for this organisation reached; retry in {retry_after_seconds} seconds"
    )]
    RateLimited {
        tool: &'static str,
        limit: usize,
        retry_after_seconds: u64,
    },
    #[error("{}", kb_shown(.0))]
    Kb(#[from] KbError),
    /// A failure of the server; its detail is for the log ([`ToolError::detail`]), never shown.
    #[error("{INTERNAL_SHOWN}")]
    Internal(String),
}

/// What a caller (an assistant, a model, the audit log an organisation's admins read) is told
/// of a failure inside the server; the detail goes only to the server's log.
pub const INTERNAL_SHOWN: &str = "internal error: the server could not complete this call; try again later, and if it goes on, ask the server's operator (the server's log says why)";

fn kb_shown(e: &KbError) -> String {
    match e {
        KbError::Index(_) | KbError::Store(_) => INTERNAL_SHOWN.to_owned(),
        e => e.to_string(),
    }
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        ToolError::Internal(e.to_string())
    }
}

impl ToolError {
    /// For the server's log: what the caller is told, and for a failure inside the server,
    /// what failed.
    pub fn detail(&self) -> String {
        match self {
            ToolError::Internal(detail) => format!("internal error: {detail}"),
            // The knowledge base's own words: this error's `Display` hides its failures.
            ToolError::Kb(e) => e.to_string(),
            e => e.to_string(),
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ToolError::InvalidInput(_) => "invalid_input",
            ToolError::NotFound(_) => "not_found",
            ToolError::AppClosed(_) => "app_closed",
            ToolError::RateLimited { .. } => "rate_limited",
            ToolError::Kb(e) => e.code(),
            ToolError::Internal(_) => "internal",
        }
    }

    /// The `structuredContent` of the error result.
    pub fn structured(&self) -> Value {
        let mut error = json!({"code": self.code(), "message": self.to_string()});
        match self {
            ToolError::RateLimited {
                retry_after_seconds,
                ..
            } => args::set(
                &mut error,
                "retry_after_seconds",
                json!(retry_after_seconds),
            ),
            ToolError::Kb(KbError::VersionConflict {
                current_version, ..
            }) => args::set(&mut error, "current_version", json!(current_version)),
            _ => {}
        }
        json!({ "error": error })
    }

    fn outcome(&self) -> Outcome {
        match self {
            ToolError::Internal(_) | ToolError::Kb(KbError::Index(_) | KbError::Store(_)) => {
                Outcome::Error
            }
            _ => Outcome::Refused,
        }
    }
}

/// A tool: its name, the scope that unlocks it, and its implementation.
pub struct ToolSpec {
    pub name: &'static str,
    /// The tool's title for people (`title` and `annotations.title` in `tools/list`).
    pub title: &'static str,
    /// Announced as `readOnlyHint`; clients such as ChatGPT ask before every other call.
    pub read_only: bool,
    pub scope: &'static str,
    /// Offered to an organisation's agents too (`llm` runs); ChatGPT's `search` and `fetch`
    /// only repeat the knowledge-base tools for people's assistants.
    pub for_agents: bool,
    /// One small read transaction (a document, an app list, a request): the connector runs
    /// it on the async worker, where handing it to a blocking thread and back would cost
    /// more than the call itself (`docs/performance.md`, stop 33); a large document's text is
    /// read through [`App::long_work`]. Searches, listings of a folder and writes are handed
    /// off.
    pub quick: bool,
    pub run: fn(&App, &Caller, &args::Args) -> Result<ToolOk, ToolError>,
}

/// Every tool the connector knows, in the order `tools/list` shows them.
pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "kennisbank_list",
        title: "List knowledge-base documents",
        read_only: true,
        scope: SCOPE_KB,
        for_agents: true,
        quick: false,
        run: kb::list,
    },
    ToolSpec {
        name: "kennisbank_read",
        title: "Read a knowledge-base document",
        read_only: true,
        scope: SCOPE_KB,
        for_agents: true,
        quick: true,
        run: kb::read,
    },
    ToolSpec {
        name: "kennisbank_search",
        title: "Search the knowledge base",
        read_only: true,
        scope: SCOPE_KB,
        for_agents: true,
        quick: false,
        run: kb::search,
    },
    ToolSpec {
        name: "kennisbank_write",
        title: "Write a knowledge-base document",
        read_only: false,
        scope: SCOPE_KB,
        for_agents: true,
        quick: false,
        run: kb::write,
    },
    ToolSpec {
        name: "search",
        title: "Search the knowledge base (ChatGPT)",
        read_only: true,
        scope: SCOPE_KB,
        for_agents: false,
        quick: false,
        run: kb::chatgpt_search,
    },
    ToolSpec {
        name: "fetch",
        title: "Fetch a knowledge-base document (ChatGPT)",
        read_only: true,
        scope: SCOPE_KB,
        for_agents: false,
        quick: true,
        run: kb::chatgpt_fetch,
    },
    ToolSpec {
        name: "app_list",
        title: "List apps",
        read_only: true,
        scope: SCOPE_REQUESTS,
        for_agents: true,
        quick: true,
        run: requests::app_list,
    },
    ToolSpec {
        name: "feature_request_list",
        title: "List feature requests",
        read_only: true,
        scope: SCOPE_REQUESTS,
        for_agents: true,
        quick: false,
        run: requests::list,
    },
    ToolSpec {
        name: "feature_request_read",
        title: "Read a feature request",
        read_only: true,
        scope: SCOPE_REQUESTS,
        for_agents: true,
        quick: true,
        run: requests::read,
    },
    ToolSpec {
        name: "feature_request_create",
        title: "File a feature request",
        read_only: false,
        scope: SCOPE_REQUESTS,
        for_agents: true,
        quick: false,
        run: requests::create,
    },
    ToolSpec {
        name: "feature_request_reply",
        title: "Reply to a feature request",
        read_only: false,
        scope: SCOPE_REQUESTS,
        for_agents: true,
        quick: false,
        run: requests::reply,
    },
];

/// Every tool's definition (name, description, input schema, output schema), in [`TOOLS`]
/// order; `with_extracted` as in [`kb::definitions`].
pub fn definitions(with_extracted: bool) -> Vec<(&'static str, &'static str, Value, Value)> {
    let mut all = kb::definitions(with_extracted);
    all.extend(requests::definitions());
    all
}

/// What a call was about when it failed before saying so: the path, request or app it named.
fn target_of(tool: &ToolSpec, args: &args::Args) -> Option<String> {
    // `fetch` names its document by `id`, which is the document's path.
    let path_arg = if tool.name == "fetch" { "id" } else { "path" };
    if let Ok(Some(path)) = args::opt_str(args, path_arg) {
        return Some(path);
    }
    for (name, label) in [("id", "request"), ("app_id", "app")] {
        if let Some(v) = args.get(name).filter(|v| v.is_number() || v.is_string()) {
            let v = v.to_string();
            let v: String = v.trim_matches('"').chars().take(40).collect();
            return Some(format!("{label} {v}"));
        }
    }
    None
}

/// The tool a caller may use under this name; `None` if unknown or outside its scopes (such
/// tools do not exist for the grant).
pub fn tool_for<'a>(caller: &Caller, name: &str) -> Option<&'a ToolSpec> {
    let agent = matches!(caller.actor, Actor::Agent { .. });
    TOOLS
        .iter()
        .find(|t| t.name == name && caller.has_scope(t.scope) && (t.for_agents || !agent))
}

/// Runs one tool call: the hourly limit, the tool, the audit record. Blocking (redb, index).
/// The call holds a pass of its organisation from here to its queued audit record, so an
/// organisation whose removal began meanwhile gets neither its writes nor the record after the
/// removal swept them (`audit::gate`); a call that comes too late is refused, unrecorded.
pub fn call(
    app: &App,
    caller: &Caller,
    tool: &ToolSpec,
    args: &args::Args,
) -> Result<ToolOk, ToolError> {
    let Some(_pass) = app.org_gate.enter(caller.org_id) else {
        return Err(ToolError::NotFound(
            "this organisation no longer exists".into(),
        ));
    };
    let started = Instant::now();
    let now = app.clock.now();
    // The place in the hour is reserved atomically before the tool runs (parallel calls cannot
    // overrun the limit) and given back when the call is refused or fails.
    let result = match app.tool_limits.reserve(caller.org_id, tool.name, now) {
        Err(retry_after_seconds) => Err(ToolError::RateLimited {
            tool: tool.name,
            limit: limits::hourly_limit(tool.name).unwrap_or(0),
            retry_after_seconds,
        }),
        Ok(reservation) => {
            let result = (tool.run)(app, caller, args);
            if let (Err(_), Some(r)) = (&result, reservation) {
                app.tool_limits.release(r);
            }
            result
        }
    };
    let (outcome, error, target) = match &result {
        Ok(ok) => (Outcome::Ok, None, ok.target.clone()),
        Err(e) => {
            if e.outcome() == Outcome::Error {
                tracing::error!(tool = tool.name, error = %e.detail(), "tool failed");
            }
            (e.outcome(), Some(e.to_string()), target_of(tool, args))
        }
    };
    let (person_id, grant_id, token_id, agent_id, run_id) = match caller.actor {
        Actor::Person {
            person_id,
            grant_id,
        } => (person_id, grant_id, None, None, None),
        Actor::Token {
            person_id,
            token_id,
        } => (person_id, 0, Some(token_id), None, None),
        Actor::Agent { agent_id, run_id } => (0, 0, None, Some(agent_id), Some(run_id)),
    };
    let record = AuditRecord {
        at: now,
        org_id: caller.org_id,
        person_id,
        grant_id,
        token_id,
        agent_id,
        run_id,
        tool: tool.name.to_owned(),
        target,
        outcome,
        error,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        actor: None,
        action: None,
    };
    app.batch.put(
        crate::store::AUDIT,
        audit::record_key(caller.org_id, now),
        &record,
    );
    result
}

#[cfg(test)]
mod tests {
    use super::TOOLS;

    /// A tool run on the async worker must neither write nor search: only a short read may
    /// hold the worker.
    #[test]
    fn only_single_record_reads_run_inline() {
        let inline: Vec<&str> = TOOLS.iter().filter(|t| t.quick).map(|t| t.name).collect();
        assert_eq!(
            inline,
            [
                "kennisbank_read",
                "fetch",
                "app_list",
                "feature_request_read"
            ]
        );
        assert!(TOOLS.iter().filter(|t| t.quick).all(|t| t.read_only));
    }
}
