//! Event triggers of an organisation (admins only): the list with pause, resume, renew and
//! delete; a form to create one for a generic agent and a ready project (no other project is
//! offered or accepted); the secret shown once with a curl example; recent runs; and the
//! organisation's agents and projects.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};

use super::i18n::{self, status_badge, t, ta};
use super::{CsrfForm, OrgAdmin, csrf_field, layout, page, problem_page, problem_text, see_other};
use crate::app::App;
use crate::http::error::{Problem, ToProblem};
use crate::roster::{self, Agent, AgentKind, Project, Rollout};
use crate::triggers::{self, Change, NewTrigger, Trigger, TriggerError};

/// A trigger's state as a badge: active or paused.
fn state_badge(paused: bool) -> Markup {
    html! {
        @if paused { span.badge.paused { (t("trigger-paused")) } } @else { span.badge.active { (t("trigger-active")) } }
    }
}

/// Seconds as the language writes them.
fn seconds(s: u64) -> String {
    format!("{} s", i18n::number(s))
}

struct Data {
    triggers: Vec<Trigger>,
    agents: Vec<Agent>,
    projects: Vec<Project>,
}

fn load(app: &App, org_slug: &str, org_id: u64) -> Result<Data, triggers::TriggerError> {
    Ok(Data {
        triggers: triggers::list(&app.store, org_slug)?,
        agents: roster::list_agents(&app.store, org_id)?,
        projects: roster::list_projects(&app.store, org_id)?,
    })
}

/// A failure (or a refusal without the list to show it on), as `http::error` maps it.
fn refused(m: &OrgAdmin, e: &impl ToProblem) -> Response {
    problem_page(
        &t("triggers-title"),
        Some(&m.0.user),
        Some(&m.0.org),
        &e.problem(),
    )
}

fn rollout(r: Rollout) -> &'static str {
    match r {
        Rollout::Pending => "rollout-pending",
        Rollout::RollingOut => "rollout-rolling-out",
        Rollout::Ready => "rollout-ready",
    }
}

fn base(m: &OrgAdmin) -> String {
    format!("/portal/o/{}/triggers", m.0.org.slug)
}

fn list_page(
    app: &App,
    m: &OrgAdmin,
    d: &Data,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let csrf = &m.0.user.csrf;
    let base = base(m);
    let endpoints: Vec<&crate::config::LlmEndpoint> =
        app.config.llm.endpoints_for(&m.0.org.slug).collect();
    let generic: Vec<&Agent> = d
        .agents
        .iter()
        .filter(|a| a.kind == AgentKind::Generic)
        .collect();
    let ready: Vec<&Project> = d
        .projects
        .iter()
        .filter(|p| p.rollout == Rollout::Ready)
        .collect();
    let body = html! {
        @if let Some(e) = error { p.notice.error #error { (e) } }
        h2 { (t("nav-triggers")) }
        @if d.triggers.is_empty() { p.muted { (t("triggers-none")) } }
        @else {
            div.table-wrap { table #triggers {
                thead { tr { th scope="col" { (t("col-name")) } th scope="col" { "URL" } th scope="col" { (t("col-cooldown")) } th scope="col" { (t("col-state")) } th scope="col" { (t("col-actions")) } } }
                tbody { @for tr in &d.triggers {
                    tr {
                        td { a href={ (base) "/" (tr.id) } { (tr.name) } }
                        td { code { (triggers::trigger_url(&app.public_url, tr.id)) } }
                        td.num { (seconds(tr.cooldown_secs)) }
                        td { (state_badge(tr.paused)) }
                        td { div.actions {
                            @for (action, label) in [(if tr.paused { "resume" } else { "pause" }, if tr.paused { "trigger-resume" } else { "trigger-pause" }), ("renew-secret", "trigger-renew"), ("delete", "trigger-delete")] {
                                form.inline method="post" action={ (base) "/" (tr.id) "/" (action) } {
                                    (csrf_field(csrf))
                                    button.secondary[action != "delete"].danger[action == "delete"] type="submit" name="action" value=(action) { (t(label)) }
                                }
                            }
                        } }
                    }
                } }
            } }
        }
        h2 { (t("trigger-new")) }
        @if generic.is_empty() || ready.is_empty() {
            p.muted { (t("trigger-needs")) }
        } @else {
            form #trigger-form .stack method="post" action=(base) {
                (csrf_field(csrf))
                label { (t("col-name")) input type="text" name="name" required maxlength="100"; }
                label { (t("run-instructions-plain")) textarea name="instructions" required rows="4" cols="60" {} }
                label { (t("run-agent")) select name="agent" {
                    @for a in &generic { option value=(a.id) { (a.name) } }
                } }
                label { (t("col-project")) select name="project" {
                    @for p in &ready { option value=(p.id) { (p.name) } }
                } }
                label { (t("field-cooldown")) input type="number" name="cooldown" value=(triggers::DEFAULT_COOLDOWN_SECS) min="0"; }
                label { (t("field-callback-url")) input type="url" name="callback_url" maxlength=(triggers::callback::MAX_URL_LEN) placeholder="https://ci.example.com/kennis-result"; }
                p.muted { (t("field-callback-url-explain")) }
                button type="submit" { (t("trigger-create")) }
            }
        }
        h2 { (t("agents-heading")) }
        div.table-wrap { table #agents {
            thead { tr { th scope="col" .num { (t("col-id")) } th scope="col" { (t("col-name")) } th scope="col" { (t("col-kind")) } th scope="col" { (t("col-executor")) } th scope="col" .num { (t("col-timeout")) } } }
            tbody { @for a in &d.agents {
                tr { td.num { (a.id) } td { (a.name) } td { @if a.kind == AgentKind::Generic { (t("agent-generic")) } @else { (t("agent-feature")) } } td { (a.executor.name()) @if let roster::Executor::Llm(l) = &a.executor { " · " (l.model) " · " code { (l.shown_target().1) } } } td.num { (seconds(a.timeout_secs)) } }
            } }
        } }
        h2 { (t("agent-new")) }
        p.muted { (t("agent-new-explain")) }
        @if endpoints.is_empty() {
            p.muted #no-endpoints { (t("agent-no-endpoints")) }
        } @else {
        form #agent-form .stack method="post" action={ "/portal/o/" (m.0.org.slug) "/agents" } {
            (csrf_field(csrf))
            input type="hidden" name="exec" value="llm";
            label { (t("col-name")) input type="text" name="name" required maxlength="100"; }
            label { (t("col-kind")) select name="kind" { option value="generic" { (t("agent-generic-long")) } option value="feature" { (t("agent-feature-long")) } } }
            label { (t("field-endpoint")) select name="endpoint" required {
                @for e in &endpoints { option value=(e.id) { (e.id) } }
            } }
            label { (t("field-model")) input type="text" name="model" required maxlength="200"; }
            label { (t("field-max-steps")) input type="number" name="max_steps" value=(roster::DEFAULT_MAX_STEPS) min="1" max=(roster::MAX_MAX_STEPS); }
            label { (t("field-max-tokens")) input type="number" name="max_tokens" value=(roster::DEFAULT_MAX_TOKENS); }
            label { (t("field-timeout")) input type="number" name="timeout" value=(roster::DEFAULT_LLM_TIMEOUT_SECS) min="1" max=(roster::MAX_TIMEOUT_SECS); }
            label { (t("field-system-prompt")) textarea name="system_prompt" rows="4" cols="60" {} }
            button type="submit" { (t("agent-add")) }
        }
        }
        h2 { (t("projects-heading")) }
        div.table-wrap { table #projects {
            thead { tr { th scope="col" .num { (t("col-id")) } th scope="col" { (t("col-name")) } th scope="col" { (t("col-rollout")) } } }
            tbody { @for p in &d.projects { tr { td.num { (p.id) } td { (p.name) } td { (t(rollout(p.rollout))) } } } }
        } }
    };
    page(
        status,
        layout(&t("triggers-title"), Some(&m.0.user), Some(&m.0.org), body),
    )
}

fn secret_page(app: &App, m: &OrgAdmin, tr: &Trigger, secret: &str, renewed: bool) -> Response {
    let url = triggers::trigger_url(&app.public_url, tr.id);
    let signing = triggers::signing_secret(&app.server_key, tr);
    let curl = format!(
        "curl -X POST -H 'Authorization: Bearer {secret}' -H 'Content-Type: application/json' -d '{{\"example\": true}}' {url}"
    );
    let body = html! {
        p.notice { @if renewed { (t("trigger-renewed")) " " } (t("trigger-copy-secret")) }
        dl #trigger-secret .facts {
            dt { "URL" } dd { code #trigger-url { (url) } }
            dt { (t("trigger-secret")) } dd { code #secret { (secret) } }
            dt { (t("trigger-signing-secret")) } dd { code { (signing) } }
            @if let Some(c) = &tr.callback_url { dt { (t("field-callback-url")) } dd { code { (c) } } }
        }
        label for="curl" { (t("trigger-fire-it")) }
        textarea #curl readonly rows="3" cols="80" { (curl) }
        p { (t("trigger-read-run")) " " code { "curl -H 'Authorization: Bearer " (secret) "' " (app.public_url) "/api/hooks/runs/<featureRequestId>" } }
        p { a href=(base(m)) { (t("trigger-back")) } }
    };
    page(
        StatusCode::OK,
        layout(&tr.name, Some(&m.0.user), Some(&m.0.org), body),
    )
}

pub(super) async fn triggers_page(State(app): State<Arc<App>>, m: OrgAdmin) -> Response {
    let (slug, id) = (m.0.org.slug.clone(), m.0.org.id);
    match app.blocking(move |app| load(app, &slug, id)).await {
        Ok(d) => list_page(&app, &m, &d, None, StatusCode::OK),
        Err(e) => refused(&m, &e),
    }
}

pub(super) async fn create(State(app): State<Arc<App>>, m: OrgAdmin, form: CsrfForm) -> Response {
    let num = |n: &str| form.field(n).and_then(|v| v.trim().parse::<u64>().ok());
    let new = NewTrigger {
        name: form.field("name").unwrap_or("").to_owned(),
        agent_id: num("agent").unwrap_or(0),
        project_id: num("project").unwrap_or(0),
        instructions: form.field("instructions").unwrap_or("").to_owned(),
        cooldown_secs: match form.field("cooldown").map(str::trim) {
            None | Some("") => None,
            Some(v) => match v.parse() {
                Ok(n) => Some(n),
                Err(_) => Some(u64::MAX),
            },
        },
        callback_url: form.field("callback_url").map(str::to_owned),
    };
    let (slug, org_id, by) = (m.0.org.slug.clone(), m.0.org.id, m.0.actor());
    let result = app
        .blocking(move |app| {
            let r = triggers::add_by(
                &app.store,
                &by,
                &slug,
                &new,
                app.config.callback_allow_http_loopback,
                app.clock.now(),
            );
            (r, load(app, &slug, org_id))
        })
        .await;
    match result {
        (Ok(c), _) => secret_page(&app, &m, &c.trigger, &c.secret, false),
        (Err(e), Ok(d)) => {
            let p = e.problem();
            list_page(&app, &m, &d, Some(&problem_text(&p)), p.status)
        }
        (Err(e), Err(_)) => refused(&m, &e),
    }
}

fn not_found(m: &OrgAdmin) -> Response {
    super::not_found_in(&m.0, &t("trigger-not-found"))
}

pub(super) async fn change(
    State(app): State<Arc<App>>,
    m: OrgAdmin,
    Path((_slug, id, action)): Path<(String, String, String)>,
    _form: CsrfForm,
) -> Response {
    let what = match action.as_str() {
        "pause" => Change::Pause,
        "resume" => Change::Resume,
        "renew-secret" => Change::RenewSecret,
        "delete" => Change::Delete,
        _ => return not_found(&m),
    };
    let (org_id, by) = (m.0.org.id, m.0.actor());
    let result = app
        .blocking(move |app| {
            triggers::change_by(&app.store, &by, Some(org_id), &id, what, app.clock.now())
        })
        .await;
    match result {
        Err(crate::triggers::TriggerError::UnknownTrigger) => not_found(&m),
        Err(e) => refused(&m, &e),
        Ok((t, Some(secret))) => secret_page(&app, &m, &t, &secret, true),
        Ok(_) => see_other(&base(&m)),
    }
}

/// The agent form's settings, or why they are refused before the domain sees them (in the
/// request's language).
fn portal_agent(form: &CsrfForm) -> Result<(roster::NewAgent, roster::LlmOptions), String> {
    let text = |n: &str| form.field(n).map(str::trim).filter(|v| !v.is_empty());
    let num = |n: &'static str, label: &str| -> Result<Option<u64>, String> {
        text(n)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| ta("agent-whole-number", &[("field", t(label))]))
            })
            .transpose()
    };
    if text("exec") != Some("llm") {
        return Err(t("agent-llm-only"));
    }
    let kind = match text("kind") {
        Some("generic") => AgentKind::Generic,
        Some("feature") => AgentKind::Feature,
        _ => return Err(t("agent-choose-kind")),
    };
    let new = roster::NewAgent {
        name: form.field("name").unwrap_or("").to_owned(),
        kind,
        exec: "llm".into(),
        program: None,
        args: Vec::new(),
        url: text("url").map(str::to_owned),
        timeout_secs: num("timeout", "field-timeout")?,
    };
    // A URL or key of the admin's own is passed on as sent, for the domain to refuse.
    let llm = roster::LlmOptions {
        model: text("model").unwrap_or("").to_owned(),
        endpoint: text("endpoint").map(str::to_owned),
        api_key_env: text("api_key_env").map(str::to_owned),
        api_key_file: text("api_key_file").map(str::to_owned),
        max_steps: num("max_steps", "field-max-steps")?.map(|n| n.min(u32::MAX as u64) as u32),
        max_tokens: num("max_tokens", "field-max-tokens")?,
        system_prompt: text("system_prompt").map(str::to_owned),
    };
    Ok((new, llm))
}

/// Adds a language-model agent (admins).
pub(super) async fn add_agent(
    State(app): State<Arc<App>>,
    m: OrgAdmin,
    form: CsrfForm,
) -> Response {
    let (slug, org_id, by) = (m.0.org.slug.clone(), m.0.org.id, m.0.actor());
    let checked = portal_agent(&form);
    let result = app
        .blocking(move |app| {
            let added = checked.map_err(Refused::Said).and_then(|(new, llm)| {
                let a = roster::add_org_admin_agent(
                    &app.store,
                    &by,
                    &app.config.llm,
                    &slug,
                    &new,
                    &llm,
                    app.clock.now(),
                )
                .map_err(|e| Refused::Domain(e.problem()))?;
                if a.kind == AgentKind::Feature {
                    let adopted = crate::requests::service::adopt_waiting(&app.store, org_id)
                        .map_err(|e| Refused::Domain(e.problem()))?;
                    adopted.into_iter().for_each(|id| app.enqueue(id));
                }
                Ok(a)
            });
            (added, load(app, &slug, org_id))
        })
        .await;
    match result {
        (Ok(_), _) => see_other(&base(&m)),
        (Err(e), Ok(d)) => {
            // Said here, outside the worker thread, where the request's language is known.
            let (status, text) = match e {
                Refused::Said(text) => (StatusCode::BAD_REQUEST, text),
                Refused::Domain(p) => (p.status, problem_text(&p)),
            };
            list_page(&app, &m, &d, Some(&text), status)
        }
        // The list could not be read to show why: that failure is the answer.
        (Err(_), Err(e)) => refused(&m, &e),
    }
}

/// Why an agent was not added: the form's own check, or the domain's refusal.
enum Refused {
    Said(String),
    Domain(Problem),
}

fn runs_table(org: &str, runs: &[crate::requests::Request]) -> Markup {
    html! {
        @if runs.is_empty() { p.muted { (t("runs-none")) } }
        @else {
            div.table-wrap { table #runs {
                thead { tr { th scope="col" { (t("col-run")) } th scope="col" { (t("run-event-key")) } th scope="col" { (t("run-status")) } th scope="col" { (t("run-created")) } th scope="col" { (t("run-updated")) } th scope="col" { (t("run-result")) } } }
                tbody { @for r in runs {
                    tr {
                        td { a href={ "/portal/o/" (org) "/runs/" (r.id) } { (r.id) } }
                        td { (r.event_key.as_deref().unwrap_or("—")) }
                        td { (status_badge(r.status.as_str())) }
                        td.date { (i18n::date_time(r.created_at)) }
                        td.date { (i18n::date_time(r.updated_at)) }
                        td { (r.result.as_deref().map(|s| s.chars().take(500).collect::<String>()).unwrap_or_default()) }
                    }
                } }
            } }
        }
    }
}

pub(super) async fn detail(
    State(app): State<Arc<App>>,
    m: OrgAdmin,
    Path((_slug, id)): Path<(String, String)>,
) -> Response {
    let org_id = m.0.org.id;
    let found = app
        .blocking(move |app| {
            let id = uuid::Uuid::parse_str(&id).map_err(|_| TriggerError::UnknownTrigger)?;
            app.store.read(|tx| {
                let t = triggers::get(tx, org_id, id)?;
                Ok::<_, TriggerError>((t, triggers::recent_runs(tx, org_id, id, 50)?))
            })
        })
        .await;
    // Unknown is "not found"; a store that fails is a failure, not a missing trigger.
    let (tr, runs) = match found {
        Ok(found) => found,
        Err(TriggerError::UnknownTrigger) => return not_found(&m),
        Err(e) => return refused(&m, &e),
    };
    let body = html! {
        dl.facts {
            dt { "URL" } dd { code { (triggers::trigger_url(&app.public_url, tr.id)) } }
            dt { (t("col-state")) } dd { (state_badge(tr.paused)) }
            dt { (t("col-cooldown")) } dd { (seconds(tr.cooldown_secs)) }
            @if let Some(c) = &tr.callback_url { dt { (t("field-callback-url")) } dd { code #trigger-callback-url { (c) } } }
        }
        h2 { (t("run-instructions-plain")) }
        pre { (tr.instructions) }
        h2 { (t("runs-recent")) }
        (runs_table(&m.0.org.slug, &runs))
        p { a href=(base(&m)) { (t("trigger-back")) } }
    };
    page(
        StatusCode::OK,
        layout(&tr.name, Some(&m.0.user), Some(&m.0.org), body),
    )
}
