//! Administrative operations, the same whether the command line runs them on the data
//! directory itself or sends them to the running server over its admin socket (redb allows one
//! process to write, so when a server runs, it does the work).

mod import;
mod socket;

use crate::progress::{Progress, Report};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use std::sync::Arc;

use crate::agents;
use crate::clock::SharedClock;
use crate::identity::{self, ConnectorAccess, IdentityError, NewPerson, PersonalTokens, Role};
use crate::kb::index::SearchIndex;
use crate::kb::{self, KbError};
use crate::oauth::pats::{self, PatError};
use crate::requests::apps::{self, AppStatus};
use crate::requests::{self, RequestError};
use crate::roster::{self, AgentError, AgentKind, Rollout};
use crate::store::{self, Store, StoreError};
use crate::triggers::{self, TriggerError};

pub use socket::{SOCKET_FILE, SocketError, bind_socket, serve_socket, socket_path, try_send};

/// One administrative request; the wire format of the admin socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AdminRequest {
    OrgCreate {
        name: String,
    },
    OrgList,
    /// Removes an organisation and everything of it (or finishes a removal an interruption
    /// left); see `erase`.
    OrgDelete {
        org: String,
    },
    OrgSet {
        slug: String,
        connector_access: Option<ConnectorAccess>,
        require_second_factor: Option<bool>,
        #[serde(default)]
        personal_tokens: Option<PersonalTokens>,
    },
    UserAdd {
        email: String,
        name: Option<String>,
        password: String,
    },
    UserList,
    /// No sign-in from now on: sessions end, grants are revoked.
    UserDisable {
        email: String,
    },
    UserEnable {
        email: String,
    },
    /// Erases a person; the audit names them `deleted-<id>`.
    UserDelete {
        email: String,
    },
    UserTotp {
        email: String,
    },
    UserPasswd {
        email: String,
        password: String,
    },
    /// Adds a member; for an existing member it changes nothing (see `identity::join`).
    MemberAdd {
        org: String,
        email: String,
        role: Option<Role>,
        may_connect: Option<bool>,
    },
    MemberList {
        org: String,
    },
    /// Changes role and/or right to connect; the last admin cannot be demoted.
    MemberSet {
        org: String,
        email: String,
        role: Option<Role>,
        may_connect: Option<bool>,
    },
    /// Removes a person from an organisation and revokes their connections there.
    MemberRemove {
        org: String,
        email: String,
    },
    /// A one-time invitation link (7 days).
    UserInvite {
        org: String,
        email: String,
        role: Role,
    },
    /// A one-time password-reset link (24 hours); ends the person's sessions.
    UserReset {
        email: String,
    },
    /// `path` is absolute: the server may run in another working directory.
    Backup {
        path: PathBuf,
    },
    /// Loads a folder tree (absolute `dir`) into an organisation's knowledge base.
    KbImport {
        org: String,
        dir: PathBuf,
        prefix: Option<String>,
    },
    /// Moves a document to the trash (with its whole history).
    KbDelete {
        org: String,
        path: String,
    },
    /// An organisation's deleted documents.
    KbTrash {
        org: String,
    },
    /// Brings a deleted document back with its whole history.
    KbRestore {
        org: String,
        path: String,
    },
    /// Moves (renames) a document with its history.
    KbMove {
        org: String,
        from: String,
        to: String,
    },
    /// Writes the latest version of every live document under `dir` (absolute; created, or
    /// empty).
    KbExport {
        org: String,
        dir: PathBuf,
    },
    /// Extracts the text of binary documents not extracted yet (retrying failed ones), then
    /// rebuilds the search index from the store.
    Reindex {
        org: Option<String>,
    },
    /// Gives the database file's free pages back and merges the search index.
    Compact,
    /// An organisation's audit records, oldest first.
    AuditExport {
        org: String,
        since: Option<String>,
    },
    AgentAdd {
        org: String,
        agent: roster::NewAgent,
        /// The settings of an `llm` agent.
        #[serde(default)]
        llm: Option<Box<roster::LlmOptions>>,
        /// `--env`: variables of the server a `command` agent receives.
        #[serde(default)]
        env: Vec<String>,
    },
    /// A run (or a feature request's agent jobs) with its transcript.
    RunShow {
        id: u64,
    },
    /// Cancels a queued or running run.
    RunCancel {
        id: u64,
    },
    ProjectAdd {
        org: String,
        name: String,
        ready: bool,
    },
    AppAdd {
        org: String,
        name: String,
        status: AppStatus,
    },
    AppList {
        org: String,
    },
    /// An organisation's agents, oldest first.
    AgentList {
        org: String,
    },
    /// An organisation's projects, oldest first.
    ProjectList {
        org: String,
    },
    TriggerAdd {
        org: String,
        trigger: triggers::NewTrigger,
    },
    TriggerList {
        org: String,
    },
    /// Pause, resume, renew the secret of, or delete the trigger with UUID `id`.
    TriggerChange {
        id: String,
        change: triggers::Change,
    },
    /// A personal access token for a member (the secret is in the answer, once).
    TokenCreate {
        org: String,
        email: String,
        name: String,
        #[serde(default)]
        scopes: Vec<String>,
        expires_in_days: Option<i64>,
    },
    /// Every personal access token of an organisation.
    TokenList {
        org: String,
    },
    TokenRevoke {
        id: u64,
    },
}

/// Why an administrative request failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The request was understood and refused (exit status 1).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Socket(#[from] SocketError),
}

impl From<IdentityError> for AdminError {
    fn from(e: IdentityError) -> Self {
        match e {
            IdentityError::Store(s) => AdminError::Store(s),
            other => AdminError::Refused(other.to_string()),
        }
    }
}

impl From<PatError> for AdminError {
    fn from(e: PatError) -> Self {
        match e {
            PatError::Store(s) | PatError::Identity(IdentityError::Store(s)) => {
                AdminError::Store(s)
            }
            PatError::NotFound => AdminError::Refused("no such personal access token".into()),
            other => AdminError::Refused(other.to_string()),
        }
    }
}

impl From<AgentError> for AdminError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::Store(s) => AdminError::Store(s),
            other => AdminError::Refused(other.to_string()),
        }
    }
}

impl From<RequestError> for AdminError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::Store(s) => AdminError::Store(s),
            other => AdminError::Refused(other.to_string()),
        }
    }
}

impl From<TriggerError> for AdminError {
    fn from(e: TriggerError) -> Self {
        match e {
            TriggerError::Store(s) => AdminError::Store(s),
            TriggerError::UnknownTrigger => AdminError::Refused("unknown trigger".into()),
            other => AdminError::Refused(other.to_string()),
        }
    }
}

/// Wakes a running server's agent workers for a job an admin request queued.
pub type JobWaker = Arc<dyn Fn(u64) + Send + Sync>;

/// What an admin request needs: the store, the data directory, the clock, the search index,
/// the base URL that trigger URLs are built on, and (in a running server) the agent workers'
/// waker. Without a server the waker is `None`: queued jobs are recovered at the next start.
#[derive(Clone)]
pub struct AdminContext {
    pub store: Store,
    pub data_dir: PathBuf,
    pub clock: SharedClock,
    pub kb_index: Arc<SearchIndex>,
    pub public_url: String,
    pub wake_jobs: Option<JobWaker>,
    /// Stops a running server's executor of a cancelled run (`None` without a server).
    pub stop_run: Option<JobWaker>,
    /// A running server's [`App::close_org`](crate::app::App::close_org), for `org delete`
    /// (`None` without a server: then no call is in flight).
    pub close_org: Option<JobWaker>,
    /// Takes the text of PDF and Office files (imports, reindex).
    pub extractor: crate::kb::extract::Extractor,
    /// The operator's `[[llm.endpoints]]` (for `agent add --endpoint`).
    pub llm_endpoints: Vec<crate::config::LlmEndpoint>,
    /// Tests only: trigger callback URLs may be `http://127.0.0.1:<port>/…`.
    pub callback_allow_http_loopback: bool,
    /// The terms people must have accepted to connect (`terms_version`): `token create` says
    /// when the token it made is refused until the person does something.
    pub terms_version: String,
}

impl From<agents::CancelError> for AdminError {
    fn from(e: agents::CancelError) -> Self {
        match e {
            agents::CancelError::Store(s) => AdminError::Store(s),
            other => AdminError::Refused(other.to_string()),
        }
    }
}

/// `run show`: the request as a run, its agent, and its transcript (null before a job ended).
fn run_json(store: &Store, id: u64) -> Result<Value, AdminError> {
    let found = store.read(|tx| {
        let Some(r) = requests::get(tx, id)? else {
            return Ok(None);
        };
        let agent = roster::get_agent(tx, r.agent_id)?;
        let org: Option<identity::Org> = tx.get(store::ORGS, &store::key::id(r.org_id))?;
        let transcript = agents::get_transcript(tx, id)?;
        let callback = requests::callback::get(tx, id)?;
        Ok::<_, StoreError>(Some((r, agent, org, transcript, callback)))
    })?;
    let Some((r, agent, org, transcript, callback)) = found else {
        return Err(AdminError::Refused(format!("no run {id}")));
    };
    Ok(json!({
        "id": r.id,
        "kind": r.kind,
        "organisation": org.map(|o| o.slug),
        "agent": agent.map(|a| json!({"id": a.id, "name": a.name, "exec": a.executor.name()})),
        "trigger_id": r.trigger_id,
        "status": r.status,
        "created_at": r.created_at.to_string(),
        "updated_at": r.updated_at.to_string(),
        "result": r.result,
        "callback": callback.as_ref().map(|c| json!({
            "url": c.url, "webhook_id": c.webhook_id, "state": c.state,
            "next_attempt_at": c.next_at.map(|t| t.to_string()),
        })),
        "callbacks": callback.map(|c| c.attempts).unwrap_or_default().iter().map(|a| json!({
            "attempt": a.attempt, "at": a.at.to_string(), "status": a.status, "reason": a.reason,
        })).collect::<Vec<_>>(),
        "transcript": transcript,
    }))
}

impl From<crate::erase::EraseError> for AdminError {
    fn from(e: crate::erase::EraseError) -> Self {
        match e {
            crate::erase::EraseError::Store(s)
            | crate::erase::EraseError::Identity(IdentityError::Store(s)) => AdminError::Store(s),
            other => AdminError::Refused(other.to_string()),
        }
    }
}

impl From<KbError> for AdminError {
    fn from(e: KbError) -> Self {
        match e {
            KbError::Store(s) => AdminError::Store(s),
            other => AdminError::Refused(other.to_string()),
        }
    }
}

fn trigger_json(t: &triggers::Trigger, public_url: &str) -> Value {
    json!({
        "id": t.id, "name": t.name, "url": triggers::trigger_url(public_url, t.id),
        "agent_id": t.agent_id, "project_id": t.project_id,
        "cooldown_secs": t.cooldown_secs, "paused": t.paused,
        "callback_url": t.callback_url,
        "created_at": t.created_at.to_string(),
    })
}

fn org_json(o: &identity::Org) -> Value {
    json!({
        "id": o.id, "slug": o.slug, "name": o.name,
        "connector_access": o.connector_access,
        "require_second_factor": o.require_second_factor,
        "personal_tokens": o.personal_tokens,
        "created_at": o.created_at.to_string(),
    })
}

/// The actor of every admin request: the operator, whose command line reaches the server's
/// admin socket (audited as `operator`).
const OPERATOR: crate::audit::Actor = crate::audit::Actor::Operator;

/// Runs one request. `progress` receives reports of long work (imports, reindexing,
/// backups, compaction).
pub fn execute(
    ctx: &AdminContext,
    req: AdminRequest,
    progress: Report<'_>,
) -> Result<Value, AdminError> {
    let now = ctx.clock.now();
    let store = &ctx.store;
    Ok(match req {
        AdminRequest::OrgCreate { name } => {
            let org = identity::create_org(store, &name, now)?;
            json!({"id": org.id, "slug": org.slug})
        }
        AdminRequest::OrgList => {
            let items: Vec<Value> = identity::list_orgs(store)?.iter().map(org_json).collect();
            json!({ "items": items })
        }
        AdminRequest::OrgDelete { org } => {
            let stop = |id: u64| {
                if let Some(stop) = &ctx.stop_run {
                    stop(id);
                }
            };
            let close = |id: u64| {
                if let Some(close) = &ctx.close_org {
                    close(id);
                }
            };
            let r = crate::erase::delete_org(store, &ctx.kb_index, &org, &stop, &close, progress)?;
            serde_json::to_value(r).unwrap_or_default()
        }
        AdminRequest::OrgSet {
            slug,
            connector_access,
            require_second_factor,
            personal_tokens,
        } => {
            // Only the settings given are changed and audited (none given: the policy as it
            // is, audited as before).
            let policy = connector_access.is_some() || require_second_factor.is_some();
            let mut org = if policy || personal_tokens.is_none() {
                identity::set_org_policy(
                    store,
                    &OPERATOR,
                    &slug,
                    connector_access,
                    require_second_factor,
                    now,
                )?
            } else {
                identity::find_org(store, &slug)?
            };
            if let Some(setting) = personal_tokens {
                org = identity::set_personal_tokens(store, &OPERATOR, &slug, setting, now)?;
            }
            let members = store.read(|tx| identity::members(tx, org.id))?;
            let connecting = members
                .iter()
                .filter(|(m, p)| {
                    p.disabled_at.is_none() && org.connector_access.allows(m.may_connect)
                })
                .count();
            let mut v = org_json(&org);
            if let Some(o) = v.as_object_mut() {
                o.insert("members_who_may_connect".into(), json!(connecting));
            }
            v
        }
        AdminRequest::UserAdd {
            email,
            name,
            password,
        } => {
            let p = identity::add_person(
                store,
                NewPerson {
                    email: &email,
                    name: name.as_deref(),
                    password: &password,
                },
                now,
            )?;
            json!({"id": p.id, "email": p.email})
        }
        AdminRequest::UserList => {
            let items: Vec<Value> = identity::list_people(store)?
                .iter()
                .map(|p| {
                    json!({
                        "id": p.id, "email": p.email, "name": p.name,
                        "second_factor": p.has_second_factor(),
                        "disabled": p.disabled_at.is_some(),
                        "accepted_terms": p.accepted_terms,
                        "created_at": p.created_at.to_string(),
                    })
                })
                .collect();
            json!({ "items": items })
        }
        AdminRequest::UserDisable { email } => {
            serde_json::to_value(crate::erase::disable_person(store, &OPERATOR, &email, now)?)
                .unwrap_or_default()
        }
        AdminRequest::UserEnable { email } => {
            serde_json::to_value(crate::erase::enable_person(store, &OPERATOR, &email, now)?)
                .unwrap_or_default()
        }
        AdminRequest::UserDelete { email } => {
            serde_json::to_value(crate::erase::delete_person(store, &OPERATOR, &email, now)?)
                .unwrap_or_default()
        }
        AdminRequest::UserTotp { email } => {
            let e = identity::reset_totp_by(store, &OPERATOR, &email, now)?;
            json!({"otpauth_uri": e.otpauth_uri, "secret": e.secret})
        }
        AdminRequest::UserPasswd { email, password } => {
            let p = crate::oauth::set_password(store, &OPERATOR, &email, &password, now)?;
            json!({"email": p.email})
        }
        AdminRequest::MemberAdd {
            org,
            email,
            role,
            may_connect,
        } => {
            let (m, created) = identity::join(store, &org, &email, role, may_connect, now)?;
            let access = identity::find_org(store, &org)?.connector_access;
            json!({
                "org_id": m.org_id, "person_id": m.person_id, "role": m.role,
                "may_connect": m.may_connect, "created": created,
                "connector_access": access, "connects": access.allows(m.may_connect),
            })
        }
        AdminRequest::MemberList { org } => {
            let org = identity::find_org(store, &org)?;
            let items: Vec<Value> = store
                .read(|tx| identity::members(tx, org.id))?
                .iter()
                .map(|(m, p)| {
                    json!({"email": p.email, "name": p.name, "role": m.role,
                           "may_connect": m.may_connect,
                           "second_factor": p.has_second_factor()})
                })
                .collect();
            json!({ "items": items })
        }
        AdminRequest::MemberSet {
            org,
            email,
            role,
            may_connect,
        } => {
            let org = identity::find_org(store, &org)?;
            let (_, p) = store.read(|tx| identity::member_by_email(tx, org.id, &email))?;
            let m = identity::set_member(
                store,
                &OPERATOR,
                org.id,
                p.id,
                identity::MemberChange { role, may_connect },
                now,
            )?;
            json!({"email": p.email, "role": m.role, "may_connect": m.may_connect})
        }
        AdminRequest::MemberRemove { org, email } => {
            let org = identity::find_org(store, &org)?;
            let (_, p) = store.read(|tx| identity::member_by_email(tx, org.id, &email))?;
            let revoked = crate::oauth::remove_member(store, &OPERATOR, org.id, p.id, now)?;
            json!({"email": p.email, "removed": true, "connections_revoked": revoked})
        }
        AdminRequest::UserInvite { org, email, role } => {
            let org = identity::find_org(store, &org)?;
            let (inv, token) = identity::invite(store, &OPERATOR, org.id, &email, role, now)?;
            json!({"url": format!("{}/invite/{token}", ctx.public_url),
                   "email": inv.email, "expires_at": inv.expires_at.to_string()})
        }
        AdminRequest::UserReset { email } => {
            let token = crate::oauth::issue_reset(store, &OPERATOR, None, &email, now)?;
            json!({"url": format!("{}/reset/{token}", ctx.public_url)})
        }
        AdminRequest::Backup { path } => {
            if !path.is_absolute() {
                return Err(AdminError::Refused("backup path must be absolute".into()));
            }
            let summary =
                store::backup_to_dir(store, &ctx.data_dir, &path, &now.to_string(), progress)?;
            json!({"path": summary.path, "records": summary.records, "bytes": summary.bytes})
        }
        AdminRequest::KbImport { org, dir, prefix } => {
            let org = identity::find_org(store, &org)?;
            let summary = import::import_dir(ctx, org.id, &dir, prefix.as_deref(), progress)?;
            serde_json::to_value(summary)
                .map_err(|e| AdminError::Refused(format!("the import summary: {e}")))?
        }
        AdminRequest::KbDelete { org, path } => {
            let org = identity::find_org(store, &org)?;
            let item = kb::trash::delete(store, &ctx.kb_index, org.id, &path, &OPERATOR, now)?;
            json!({"path": item.path, "version": item.version, "deleted": true})
        }
        AdminRequest::KbTrash { org } => {
            let org = identity::find_org(store, &org)?;
            let items = store.read(|tx| {
                let mut out = Vec::new();
                for item in kb::trash::trash(tx, org.id)? {
                    let by = match item.deleted_by {
                        Some(id) => identity::person(tx, id)?.map(|p| p.email),
                        None => None,
                    };
                    out.push(json!({
                        "path": item.path, "version": item.version,
                        "deleted_at": item.deleted_at.to_string(), "deleted_by": by,
                    }));
                }
                Ok::<_, StoreError>(out)
            })?;
            json!({ "items": items })
        }
        AdminRequest::KbRestore { org, path } => {
            let org = identity::find_org(store, &org)?;
            let item = kb::trash::restore(store, &ctx.kb_index, org.id, &path, &OPERATOR, now)?;
            json!({"path": item.path, "version": item.version, "restored": true})
        }
        AdminRequest::KbMove { org, from, to } => {
            let org = identity::find_org(store, &org)?;
            let moved =
                kb::trash::move_document(store, &ctx.kb_index, org.id, &from, &to, &OPERATOR, now)?;
            json!({"from": moved.from, "to": moved.to, "version": moved.version})
        }
        AdminRequest::KbExport { org, dir } => {
            if !dir.is_absolute() {
                return Err(AdminError::Refused("export folder must be absolute".into()));
            }
            let org = identity::find_org(store, &org)?;
            let summary = kb::export::export_dir(store, org.id, &dir, &mut |done, total| {
                progress(Progress::step("exporting documents", done, total))
            })?;
            json!({"documents": summary.documents, "bytes": summary.bytes})
        }
        AdminRequest::Reindex { org } => {
            let org_id = match org {
                Some(slug) => Some(identity::find_org(store, &slug)?.id),
                None => None,
            };
            let extracted = if ctx.kb_index.with_extracted() {
                kb::extracted::extract_all(
                    store,
                    &ctx.extractor,
                    org_id,
                    now,
                    &mut |done, total| progress(Progress::step("extracting text", done, total)),
                )?
            } else {
                kb::ExtractCounts::default()
            };
            let n = ctx.kb_index.rebuild(store, org_id, &mut |done, total| {
                progress(Progress::step("indexing documents", done, total))
            })?;
            let compaction = import::compact_after(ctx, progress);
            json!({
                "documents": n,
                "extracted": extracted.extracted,
                "extraction_failed": extracted.failed,
                "extraction_failures": extracted.failures,
                "bytes_before": compaction.as_ref().map(|c| c.bytes_before),
                "bytes_after": compaction.as_ref().map(|c| c.bytes_after),
            })
        }
        AdminRequest::Compact => {
            let c = import::compact(ctx, progress)?;
            json!({"bytes_before": c.bytes_before, "bytes_after": c.bytes_after})
        }
        AdminRequest::AuditExport { org, since } => {
            let org = identity::find_org(store, &org)?;
            let since = match since {
                Some(s) => Some(parse_time(&s)?),
                None => None,
            };
            let items = store.read(|tx| {
                let mut items = Vec::new();
                for r in crate::audit::records(tx, org.id, since)? {
                    // The person by email, or by pseudonym once erased.
                    let person = crate::erase::person_label(tx, r.person_id)?;
                    let mut item = serde_json::to_value(&r).unwrap_or_default();
                    if let (Some(person), Some(map)) = (person, item.as_object_mut()) {
                        map.insert("person".into(), Value::String(person));
                    }
                    items.push(item);
                }
                Ok::<_, StoreError>(items)
            })?;
            json!({ "items": items })
        }
        AdminRequest::AgentAdd {
            org,
            agent,
            llm,
            env,
        } => {
            let extra = roster::AgentExtras {
                llm: llm.as_deref(),
                env: &env,
                endpoints: &ctx.llm_endpoints,
            };
            let a = roster::add_agent_full(store, &OPERATOR, &org, &agent, &extra, now)?;
            // Requests filed while the organisation had no feature agent go to this one.
            let adopted = match a.kind {
                AgentKind::Feature => requests::service::adopt_waiting(store, a.org_id)?,
                AgentKind::Generic => Vec::new(),
            };
            if let Some(wake) = &ctx.wake_jobs {
                adopted.iter().for_each(|id| wake(*id));
            }
            json!({"id": a.id, "name": a.name, "kind": a.kind, "exec": a.executor.name(),
                   "waiting_requests": adopted.len()})
        }
        AdminRequest::RunShow { id } => run_json(store, id)?,
        AdminRequest::RunCancel { id } => {
            let r = agents::cancel_run(store, None, None, id, &OPERATOR, now)?;
            if let Some(stop) = &ctx.stop_run {
                stop(id);
            }
            json!({"id": r.id, "status": r.status, "result": r.result})
        }
        AdminRequest::ProjectAdd { org, name, ready } => {
            let rollout = if ready {
                Rollout::Ready
            } else {
                Rollout::Pending
            };
            let p = roster::add_project(store, &org, &name, rollout, now)?;
            json!({"id": p.id, "name": p.name, "rollout": p.rollout})
        }
        AdminRequest::AppAdd { org, name, status } => {
            let a = apps::add_by_slug(store, &org, &name, status, now)?;
            json!({"app_id": a.app_id, "name": a.name, "status": a.status})
        }
        AdminRequest::AppList { org } => {
            let org = identity::find_org(store, &org)?;
            let items: Vec<Value> = store
                .read(|tx| apps::list(tx, org.id))?
                .iter()
                .map(|a| {
                    json!({"app_id": a.app_id, "name": a.name, "status": a.status,
                           "accepts_requests": a.accepts_requests()})
                })
                .collect();
            json!({ "items": items })
        }
        AdminRequest::AgentList { org } => {
            let org = identity::find_org(store, &org)?;
            let items: Vec<Value> = roster::list_agents(store, org.id)?
                .iter()
                .map(|a| {
                    json!({"id": a.id, "name": a.name, "kind": a.kind,
                           "exec": a.executor.name(), "timeout_secs": a.timeout_secs})
                })
                .collect();
            json!({ "items": items })
        }
        AdminRequest::ProjectList { org } => {
            let org = identity::find_org(store, &org)?;
            let items: Vec<Value> = roster::list_projects(store, org.id)?
                .iter()
                .map(|p| json!({"id": p.id, "name": p.name, "rollout": p.rollout}))
                .collect();
            json!({ "items": items })
        }
        AdminRequest::TriggerAdd { org, trigger } => {
            let c = triggers::add_by(
                store,
                &OPERATOR,
                &org,
                &trigger,
                ctx.callback_allow_http_loopback,
                now,
            )?;
            let server_key = crate::app::load_or_create_key(&ctx.data_dir)?;
            json!({
                "id": c.trigger.id,
                "url": triggers::trigger_url(&ctx.public_url, c.trigger.id),
                "secret": c.secret,
                "signing_secret": triggers::signing_secret(&server_key, &c.trigger),
                "callback_url": c.trigger.callback_url,
            })
        }
        AdminRequest::TriggerList { org } => {
            let items: Vec<Value> = triggers::list(store, &org)?
                .iter()
                .map(|t| trigger_json(t, &ctx.public_url))
                .collect();
            json!({ "items": items })
        }
        AdminRequest::TriggerChange { id, change } => {
            let (t, secret) = triggers::change(store, None, &id, change, now)?;
            match secret {
                Some(secret) => {
                    let server_key = crate::app::load_or_create_key(&ctx.data_dir)?;
                    json!({"id": t.id, "secret": secret,
                           "signing_secret": triggers::signing_secret(&server_key, &t)})
                }
                None => json!({"id": t.id, "paused": t.paused, "deleted": t.deleted}),
            }
        }
        AdminRequest::TokenCreate {
            org,
            email,
            name,
            scopes,
            expires_in_days,
        } => {
            let org = identity::find_org(store, &org)?;
            let (_, p) = store.read(|tx| identity::member_by_email(tx, org.id, &email))?;
            let new = pats::NewToken {
                org_id: org.id,
                person_id: p.id,
                name,
                scopes,
                expires_in_days,
            };
            let (token, secret) = pats::create(store, &OPERATOR, new, now)?;
            // A token is checked like a grant at every call: one for a person who cannot
            // connect yet (most often: never signed in, so the terms are not accepted) works
            // only once they do. Said to people; `--json` shows `id` and `token` alone.
            let refused = store
                .read(|tx| identity::connector_access(tx, org.id, p.id, &ctx.terms_version))?
                .err()
                .map(|why| format!("{why}: {}", identity::access_remedy(&why)));
            json!({"id": token.id, "token": secret, "refused": refused})
        }
        AdminRequest::TokenList { org } => {
            let org = identity::find_org(store, &org)?;
            let items: Vec<Value> = store
                .read(|tx| pats::list(tx, org.id, None))?
                .iter()
                .map(|r| {
                    let t = &r.token;
                    json!({
                        "id": t.id, "name": t.name, "email": r.email, "scopes": t.scopes,
                        "created_at": t.created_at.to_string(),
                        "expires_at": t.expires_at.to_string(),
                        "last_used_at": r.last_used.map(|at| at.to_string()),
                        "revoked_at": t.revoked_at.map(|at| at.to_string()),
                    })
                })
                .collect();
            json!({ "items": items })
        }
        AdminRequest::TokenRevoke { id } => {
            let t = pats::revoke(store, id, pats::Revoker::Operator, now)?;
            json!({"id": t.id, "revoked": true})
        }
    })
}

/// An RFC 3339 time, or a date (midnight UTC).
fn parse_time(s: &str) -> Result<jiff::Timestamp, AdminError> {
    s.parse::<jiff::Timestamp>()
        .or_else(|_| {
            s.parse::<jiff::civil::Date>()
                .map(|d| d.to_zoned(jiff::tz::TimeZone::UTC).map(|z| z.timestamp()))
                .and_then(|r| r)
        })
        .map_err(|_| {
            AdminError::Refused(format!(
                "`{s}` is not a time (RFC 3339, e.g. 2026-11-01T00:00:00Z) or a date (2026-11-01)"
            ))
        })
}
