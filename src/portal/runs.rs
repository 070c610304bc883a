//! A run's page (organisation admins): status, result, and what the agent did — the
//! transcript with the model's messages, each tool call with its arguments and shortened
//! result, tokens and timings — with a button that cancels a queued or running run.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};

use super::{CsrfForm, OrgAdmin, csrf_field, layout, page, problem_page, see_other};
use crate::agents::{self, Step, Transcript};
use crate::app::App;
use crate::http::error::ToProblem;
use crate::requests::{self, Kind, Request};

fn not_found(m: &OrgAdmin) -> Response {
    page(
        StatusCode::NOT_FOUND,
        layout(
            "Not found",
            Some(&m.0.user),
            Some(&m.0.org),
            html! { p { "No such run." } },
        ),
    )
}

fn transcript_table(t: &Transcript) -> Markup {
    html! {
        p #run-tokens {
            "Tokens: " (t.prompt_tokens) " prompt + " (t.completion_tokens) " completion = " (t.total_tokens)
            " · tool calls: " (t.tool_calls)
            @if t.dropped > 0 { " · " (t.dropped) " older entries left out" }
        }
        table #transcript {
            tr { th { "ms" } th { "What" } th { "Details" } }
            @for e in &t.entries {
                tr {
                    td { (e.elapsed_ms) }
                    @match &e.step {
                        Step::Job { executor, model, instructions } => {
                            td { "job" }
                            td { (executor) @if let Some(m) = model { " · " (m) } pre { (instructions) } }
                        }
                        Step::Model { content, tool_calls, finish_reason, prompt_tokens, completion_tokens, duration_ms } => {
                            td { "model" }
                            td {
                                (duration_ms) " ms · " (prompt_tokens) "+" (completion_tokens) " tokens"
                                @if let Some(f) = finish_reason { " · " (f) }
                                @if let Some(c) = content { pre { (c) } }
                                @for c in tool_calls { div { "→ " code { (c.name) } " " code { (c.arguments) } } }
                            }
                        }
                        Step::Tool { name, arguments, ok, result, duration_ms, .. } => {
                            td { "tool" }
                            td {
                                code { (name) } " " code { (arguments) } " · " (duration_ms) " ms · "
                                @if *ok { "ok" } @else { strong { "error" } }
                                pre { (result) }
                            }
                        }
                        Step::Retry { reason, wait_ms } => {
                            td { "retry" }
                            td { "after " (wait_ms) " ms: " (reason) }
                        }
                        Step::Event { event } => {
                            td { "event" }
                            td { code { (serde_json::to_string(event).unwrap_or_default()) } }
                        }
                        Step::End { status, note } => {
                            td { "end" }
                            td { (status) ": " (note) }
                        }
                    }
                }
            }
        }
    }
}

fn load(app: &App, org_id: u64, id: &str) -> Option<(Request, String, Option<Transcript>)> {
    let id: u64 = id.parse().ok()?;
    app.store
        .read(|tx| {
            let Some(r) = requests::get(tx, id)?.filter(|r| r.org_id == org_id) else {
                return Ok(None);
            };
            let agent = agents::get_agent(tx, r.agent_id)?
                .map(|a| format!("{} ({})", a.name, a.executor.name()))
                .unwrap_or_else(|| "—".into());
            let t = agents::get_transcript(tx, id)?;
            Ok::<_, crate::store::StoreError>(Some((r, agent, t)))
        })
        .ok()
        .flatten()
}

pub(super) async fn run_page(
    State(app): State<Arc<App>>,
    m: OrgAdmin,
    Path((_slug, id)): Path<(String, String)>,
) -> Response {
    let org_id = m.0.org.id;
    let Some((r, agent, t)) = app.blocking(move |app| load(app, org_id, &id)).await else {
        return not_found(&m);
    };
    let base = format!("/portal/o/{}/runs/{}", m.0.org.slug, r.id);
    let body = html! {
        dl #run {
            dt { "Status" } dd #run-status { (r.status.as_str()) }
            dt { "Agent" } dd { (agent) }
            dt { "Created" } dd { (r.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")) }
            dt { "Updated" } dd { (r.updated_at.strftime("%Y-%m-%d %H:%M:%S UTC")) }
            dt { "Result" } dd { pre #run-result { (r.result.as_deref().unwrap_or("—")) } }
        }
        @if r.kind == Kind::Run && !r.status.is_final() {
            form #run-cancel-form method="post" action={ (base) "/cancel" } {
                (csrf_field(&m.0.user.csrf))
                button type="submit" { "Cancel this run" }
            }
        }
        h2 { "What the agent did" }
        @match &t {
            Some(t) => (transcript_table(t)),
            None => p.muted { "Nothing recorded yet: the transcript is kept when a job ends." },
        }
        @if let Some(trigger) = r.trigger_id {
            p { a href={ "/portal/o/" (m.0.org.slug) "/triggers/" (trigger) } { "Back to the trigger" } }
        }
    };
    page(
        StatusCode::OK,
        layout(
            &format!("Run {}", r.id),
            Some(&m.0.user),
            Some(&m.0.org),
            body,
        ),
    )
}

pub(super) async fn cancel(
    State(app): State<Arc<App>>,
    m: OrgAdmin,
    Path((_slug, id)): Path<(String, String)>,
    _form: CsrfForm,
) -> Response {
    let Ok(id) = id.parse::<u64>() else {
        return not_found(&m);
    };
    let org_id = m.0.org.id;
    let who = m.0.user.person.email.clone();
    let result = app
        .blocking(move |app| {
            agents::cancel_run(
                &app.store,
                Some(&app.runs),
                Some(org_id),
                id,
                &who,
                app.clock.now(),
            )
        })
        .await;
    match result {
        Ok(_) => see_other(&format!("/portal/o/{}/runs/{id}", m.0.org.slug)),
        Err(e) => problem_page("Run", Some(&m.0.user), Some(&m.0.org), &e.problem()),
    }
}
