//! A run's page (organisation admins): status, result, and what the agent did — the
//! transcript with the model's messages, each tool call with its arguments and shortened
//! result, tokens and timings — with a button that cancels a queued or running run, and the
//! run's result callback (every attempt, "send again").

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};

use super::i18n::{self, status_badge, t, ta, tc};
use super::{CsrfForm, OrgAdmin, csrf_field, layout, page, problem_page, see_other};
use crate::agents::{self, Step, Transcript};
use crate::app::App;
use crate::http::error::ToProblem;
use crate::requests::callback::{Callback, State as CallbackState};
use crate::requests::{self, Kind, Request};
use crate::roster;
use crate::triggers;

fn not_found(m: &OrgAdmin) -> Response {
    super::not_found_in(&m.0, &t("run-not-found"))
}

fn transcript_table(tr: &Transcript) -> Markup {
    let n = i18n::number;
    let ms = |v: u64| format!("{} ms", n(v));
    html! {
        p #run-tokens {
            (ta("run-tokens", &[("prompt", n(tr.prompt_tokens)), ("completion", n(tr.completion_tokens)), ("total", n(tr.total_tokens))]))
            " · " (tc("run-tool-calls", tr.tool_calls, &[]))
            @if tr.dropped > 0 { " · " (tc("run-dropped", tr.dropped, &[])) }
        }
        div.table-wrap {
            table #transcript {
                thead { tr { th scope="col" .num { "ms" } th scope="col" { (t("run-step")) } th scope="col" { (t("run-details")) } } }
                tbody {
                    @for e in &tr.entries {
                        tr {
                            td.num { (n(e.elapsed_ms)) }
                            @match &e.step {
                                Step::Job { executor, model, instructions } => {
                                    td { (t("step-job")) }
                                    td { (executor) @if let Some(m) = model { " · " (m) } pre { (instructions) } }
                                }
                                Step::Model { content, tool_calls, finish_reason, prompt_tokens, completion_tokens, duration_ms } => {
                                    td { (t("step-model")) }
                                    td {
                                        (ms(*duration_ms)) " · " (ta("run-step-tokens", &[("prompt", n(*prompt_tokens)), ("completion", n(*completion_tokens))]))
                                        @if let Some(f) = finish_reason { " · " code { (f) } }
                                        @if let Some(c) = content { pre { (c) } }
                                        @for c in tool_calls { div { "→ " code { (c.name) } " " code { (c.arguments) } } }
                                    }
                                }
                                Step::Tool { name, arguments, ok, result, duration_ms, .. } => {
                                    td { (t("step-tool")) }
                                    td {
                                        code { (name) } " " code { (arguments) } " · " (ms(*duration_ms)) " · "
                                        @if *ok { span.badge.ok { (t("step-ok")) } } @else { span.badge.failed { (t("step-error")) } }
                                        pre { (result) }
                                    }
                                }
                                Step::Retry { reason, wait_ms } => {
                                    td { (t("step-retry")) }
                                    td { (ta("run-retry-after", &[("wait", ms(*wait_ms))])) " " span lang="en" { (reason) } }
                                }
                                Step::Event { event } => {
                                    td { (t("step-event")) }
                                    td { code { (serde_json::to_string(event).unwrap_or_default()) } }
                                }
                                Step::End { status, note } => {
                                    td { (t("step-end")) }
                                    td { (status_badge(status)) @if !note.is_empty() { pre { (note) } } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A run's result callback: where it goes, how it stands, every attempt, and "send again".
fn callback_section(cb: &Callback, action: &str, csrf: &str) -> Markup {
    let state = match cb.state {
        CallbackState::Waiting => "callback-state-waiting",
        CallbackState::Pending => "callback-state-pending",
        CallbackState::Delivered => "callback-state-delivered",
        CallbackState::Failed => "callback-state-failed",
    };
    html! {
        h2 { (t("run-callbacks")) }
        dl #run-callback .facts {
            dt { (t("run-callback-url")) } dd { code { (cb.url) } }
            dt { (t("col-state")) } dd #run-callback-state data-state=(cb.state.as_str()) { (t(state)) }
            dt { "webhook-id" } dd { code { (cb.webhook_id) } }
            @if let Some(at) = cb.next_at { dt { (t("run-callback-next")) } dd { (i18n::moment(at)) } }
        }
        @if cb.attempts.is_empty() {
            p.muted { (t("run-callback-none")) }
        } @else {
            div.table-wrap { table #run-callbacks {
                thead { tr { th scope="col" .num { (t("col-attempt")) } th scope="col" { (t("col-time")) } th scope="col" .num { (t("col-http-status")) } th scope="col" { (t("col-reason")) } } }
                tbody { @for a in &cb.attempts {
                    tr { td.num { (a.attempt) } td.date { (i18n::moment(a.at)) } td.num { (a.status) } td { span lang="en" { (a.reason) } } }
                } }
            } }
        }
        @if cb.state != CallbackState::Waiting {
            form #run-callback-again-form method="post" action=(action) {
                (csrf_field(csrf))
                button.secondary type="submit" { (t("run-callback-again")) }
            }
        }
    }
}

type Loaded = (Request, String, Option<Transcript>, Option<Callback>);

/// The organisation's run `id` with what its page shows; `None` when there is no such run here.
fn load(app: &App, org_id: u64, id: &str) -> Result<Option<Loaded>, crate::store::StoreError> {
    let Ok(id) = id.parse::<u64>() else {
        return Ok(None);
    };
    app.store.read(|tx| {
        let Some(r) = requests::get(tx, id)?.filter(|r| r.org_id == org_id) else {
            return Ok(None);
        };
        let agent = roster::get_agent(tx, r.agent_id)?
            .map(|a| format!("{} ({})", a.name, a.executor.name()))
            .unwrap_or_else(|| "—".into());
        let t = agents::get_transcript(tx, id)?;
        let cb = requests::callback::get(tx, id)?;
        Ok::<_, crate::store::StoreError>(Some((r, agent, t, cb)))
    })
}

/// How long a run took (or has been going), in the largest sensible unit.
fn duration(from: jiff::Timestamp, to: jiff::Timestamp) -> String {
    let ms = to.duration_since(from).as_millis().max(0) as u64;
    match ms {
        0..1_000 => format!("{} ms", i18n::number(ms)),
        1_000..120_000 => format!("{} s", i18n::number(ms / 1_000)),
        _ => format!("{} min", i18n::number(ms / 60_000)),
    }
}

/// The events a run recorded (deliveries, notes), apart from the model's and tools' steps.
fn events(t: Option<&Transcript>) -> Vec<(u64, String)> {
    t.map(|t| {
        t.entries
            .iter()
            .filter_map(|e| match &e.step {
                Step::Event { event } => Some((
                    e.elapsed_ms,
                    serde_json::to_string(event).unwrap_or_default(),
                )),
                _ => None,
            })
            .collect()
    })
    .unwrap_or_default()
}

pub(super) async fn run_page(
    State(app): State<Arc<App>>,
    m: OrgAdmin,
    Path((_slug, id)): Path<(String, String)>,
) -> Response {
    let org_id = m.0.org.id;
    let (r, agent, transcript, callback) =
        match app.blocking(move |app| load(app, org_id, &id)).await {
            Ok(Some(loaded)) => loaded,
            Ok(None) => return not_found(&m),
            Err(e) => return super::refused(&m.0, &e),
        };
    let base = format!("/portal/o/{}/runs/{}", m.0.org.slug, r.id);
    let now = app.clock.now();
    let took = duration(
        r.created_at,
        if r.status.is_final() {
            r.updated_at
        } else {
            now
        },
    );
    let events = events(transcript.as_ref());
    let body = html! {
        dl #run .facts {
            dt { (t("run-status")) } dd #run-status { (status_badge(r.status.as_str())) }
            dt { (t("run-agent")) } dd { (agent) }
            @if let Some(k) = &r.event_key { dt { (t("run-event-key")) } dd { code { (k) } } }
            dt { (t("run-created")) } dd { (i18n::moment(r.created_at)) }
            dt { (t("run-updated")) } dd { (i18n::moment(r.updated_at)) }
            dt { (t("run-duration")) } dd #run-duration { (took) @if !r.status.is_final() { " " (t("run-so-far")) } }
            dt { (t("run-attempts")) } dd { (i18n::number(r.attempts.into())) }
            dt { (t("run-result")) } dd { pre #run-result { (r.result.as_deref().unwrap_or("—")) } }
        }
        div.actions {
            @if r.kind == Kind::Run && !r.status.is_final() {
                form #run-cancel-form method="post" action={ (base) "/cancel" } {
                    (csrf_field(&m.0.user.csrf))
                    button.secondary type="submit" { (t("run-cancel")) }
                }
            }
            @if r.kind == Kind::Run && r.trigger_id.is_some() {
                form #run-again-form method="post" action={ (base) "/again" } {
                    (csrf_field(&m.0.user.csrf))
                    button type="submit" { (t("run-again")) }
                }
            }
        }
        @if let Some(cb) = &callback { (callback_section(cb, &format!("{base}/callback-again"), &m.0.user.csrf)) }
        h2 { (t("run-instructions")) }
        pre #run-instructions { (r.instructions) }
        h2 { (t("run-events")) }
        @if events.is_empty() {
            p.muted { (t("run-no-events")) }
        } @else {
            ul #run-events { @for (ms, e) in &events { li { (i18n::number(*ms)) " ms · " code { (e) } } } }
        }
        h2 { (t("run-transcript")) }
        @match &transcript {
            Some(tr) => (transcript_table(tr)),
            None => p.muted { (t("run-no-transcript")) },
        }
        @if let Some(trigger) = r.trigger_id {
            p { a href={ "/portal/o/" (m.0.org.slug) "/triggers/" (trigger) } { (t("run-back")) } }
        }
    };
    page(
        StatusCode::OK,
        layout(
            &ta("run-title", &[("id", r.id.to_string())]),
            Some(&m.0.user),
            Some(&m.0.org),
            body,
        ),
    )
}

/// The run page's buttons: `cancel` a queued or running run (then its page again), or `again`
/// — a new run of the same trigger with the same instructions, if the trigger's rules allow one
/// now (see [`triggers::run_again`]; then the new run's page).
pub(super) async fn act(
    State(app): State<Arc<App>>,
    m: OrgAdmin,
    Path((_slug, id, action)): Path<(String, String, String)>,
    _form: CsrfForm,
) -> Response {
    let Ok(id) = id.parse::<u64>() else {
        return not_found(&m);
    };
    let (org_id, now) = (m.0.org.id, app.clock.now());
    let (title, result) = match action.as_str() {
        "cancel" => {
            let by = m.0.actor();
            let r = app
                .blocking(move |app| {
                    agents::cancel_run(&app.store, Some(&app.runs), Some(org_id), id, &by, now)
                })
                .await;
            ("run-cancel", r.map(|_| id).map_err(|e| e.problem()))
        }
        "again" => (
            "run-again",
            triggers::run_again(&app, m.0.actor(), org_id, id, now)
                .await
                .map_err(|e| e.problem()),
        ),
        "callback-again" => (
            "run-callback-again",
            triggers::callback::send_again(&app, m.0.actor(), org_id, id, now)
                .await
                .map(|()| id)
                .map_err(|e| e.problem()),
        ),
        _ => return not_found(&m),
    };
    match result {
        Ok(run) => see_other(&format!("/portal/o/{}/runs/{run}", m.0.org.slug)),
        Err(p) => problem_page(&t(title), Some(&m.0.user), Some(&m.0.org), &p),
    }
}
