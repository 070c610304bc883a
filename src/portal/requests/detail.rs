//! A request's page: its conversation, open questions with their answer forms, the reply form,
//! attachments and settings; replying, answering and setting a setting.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};

use super::{list_url, message_page, no_such_request, parse_id, request_url, time};
use crate::app::App;
use crate::http::error::ToProblem;
use crate::portal::{CsrfForm, OrgMember, csrf_field, layout, page, see_other};
use crate::requests::apps::{self, App as RequestApp};
use crate::requests::attachments::{self, Attachment};
use crate::requests::feature::{self, NewAnswer};
use crate::requests::{Request, RequestError, Role, service};

struct Detail {
    r: Request,
    app: Option<RequestApp>,
    author: Option<String>,
    /// Each attachment with who uploaded it.
    attachments: Vec<(Attachment, String)>,
}

fn load_detail(app: &App, org_id: u64, id: u64) -> Result<Detail, RequestError> {
    app.store.read(|tx| {
        let r = feature::get(tx, org_id, id)?;
        let app = match r.app_id {
            Some(a) => apps::get(tx, org_id, a)?,
            None => None,
        };
        let author = r
            .author_id
            .map(|p| service::person_label(tx, p))
            .transpose()?;
        let mut labels: HashMap<u64, String> = HashMap::new();
        let mut list = Vec::new();
        for a in attachments::list(tx, org_id, id)? {
            let label = match labels.get(&a.uploaded_by) {
                Some(l) => l.clone(),
                None => {
                    let l = service::person_label(tx, a.uploaded_by)?;
                    labels.insert(a.uploaded_by, l.clone());
                    l
                }
            };
            list.push((a, label));
        }
        Ok(Detail {
            r,
            app,
            author,
            attachments: list,
        })
    })
}

/// The answer inputs of one open question: a hidden `question_id` first, then its options and
/// `other`. Browsers send fields in document order, which is how a reply groups them.
fn answer_inputs(q: &crate::requests::Question) -> Markup {
    html! {
        input type="hidden" name="question_id" value=(q.question_id);
        @for o in &q.options {
            label { input type="checkbox" name="option_ids" value=(o.option_id); " " (o.label) }
        }
        @if q.allow_other {
            label { "Other " input type="text" name="other" maxlength=(feature::OTHER_MAX); }
        }
    }
}

fn detail_page(
    m: &OrgMember,
    d: &Detail,
    error: Option<&RequestError>,
    message_draft: &str,
) -> Response {
    let slug = &m.org.slug;
    let r = &d.r;
    let base = request_url(slug, r.id);
    let csrf = &m.user.csrf;
    let shown_error = error.map(ToProblem::problem);
    let status = shown_error.as_ref().map_or(StatusCode::OK, |p| p.status);
    let open: Vec<&crate::requests::Question> = r.open_questions().collect();
    let closed = r.status.is_final();
    let body = html! {
        @if let Some(e) = &shown_error { p.error #error { (e.message) } }
        p { a href=(list_url(slug)) { "← All feature requests" } }
        dl #request {
            dt { "Request" } dd { (r.id) }
            dt { "App" } dd #request-app { (d.app.as_ref().map_or("—", |a| a.name.as_str())) }
            dt { "Status" } dd #request-status { (r.status.as_str()) }
            dt { "Filed by" } dd { (d.author.as_deref().unwrap_or("—")) }
            dt { "Filed" } dd { (time(r.created_at)) }
            dt { "Updated" } dd { (time(r.updated_at)) }
        }
        h2 { "Description" }
        pre #description .pre-wrap { (r.description) }

        h2 { "Conversation" }
        @if r.conversation.is_empty() { p.muted { "No messages yet." } }
        @else {
            ol #conversation {
                @for msg in &r.conversation {
                    li class={ "message " (if msg.role == Role::Agent { "agent" } else { "person" }) } {
                        strong.author { (msg.author) }
                        " " span.muted.role { "(" (if msg.role == Role::Agent { "agent" } else { "person" }) ")" }
                        " " span.muted { (time(msg.at)) }
                        pre.pre-wrap { (msg.text) }
                    }
                }
            }
        }

        @if !open.is_empty() && !closed {
            h2 { "Open questions" }
            @for q in &open {
                form.answer-form id={ "answer-" (q.question_id) } method="post" action={ (base) "/reply" } {
                    (csrf_field(csrf))
                    fieldset {
                        legend { "Question " (q.question_id) ": " (q.text) }
                        (answer_inputs(q))
                        button type="submit" { "Answer" }
                    }
                }
            }
        }

        h2 { "Reply" }
        @if closed {
            p.muted { "This request is " (r.status.as_str()) " and takes no more replies." }
        } @else {
            form #reply-form method="post" action={ (base) "/reply" } {
                (csrf_field(csrf))
                label { "Message " textarea name="message" rows="5" cols="70" maxlength=(feature::MESSAGE_MAX) { (message_draft) } }
                @for q in &open {
                    fieldset {
                        legend { "Also answer question " (q.question_id) ": " (q.text) }
                        (answer_inputs(q))
                    }
                }
                button type="submit" { "Send" }
            }
        }

        h2 { "Attachments" }
        p.muted { "Files shared with the team; assistants never see them. At most 10 MiB each." }
        @if d.attachments.is_empty() { p.muted { "No attachments." } }
        @else {
            table #attachments {
                tr { th { "Name" } th { "Type" } th { "Size" } th { "Uploaded" } th { "By" } th { "" } }
                @for (a, by) in &d.attachments {
                    tr {
                        td { a href={ (base) "/attachments/" (a.attachment_id) } { (a.name) } }
                        td { (a.content_type) }
                        td { (a.size) " bytes" }
                        td { (time(a.uploaded_at)) }
                        td { (by) }
                        td {
                            form.inline method="post" action={ (base) "/attachments/" (a.attachment_id) "/delete" } {
                                (csrf_field(csrf))
                                button type="submit" { "Delete" }
                            }
                        }
                    }
                }
            }
        }
        form #attachment-form method="post" enctype="multipart/form-data" action={ (base) "/attachments" } {
            (csrf_field(csrf))
            label { "File " input type="file" name="file" required; }
            button type="submit" { "Upload" }
        }

        h2 { "Settings" }
        @if r.settings.is_empty() { p.muted { "No settings." } }
        @else {
            table #settings {
                tr { th { "Name" } th { "Value" } }
                @for (k, v) in &r.settings {
                    tr { td { code { (k) } } td { (v) } }
                }
            }
        }
        form #setting-form method="post" action={ (base) "/settings" } {
            (csrf_field(csrf))
            label { "Name " input type="text" name="name" required maxlength=(attachments::SETTING_KEY_MAX) pattern="[a-z0-9][a-z0-9_.\\-]*"; }
            label { "Value (empty removes the setting) " input type="text" name="value" maxlength=(attachments::SETTING_VALUE_MAX); }
            button type="submit" { "Save setting" }
        }
    };
    page(status, layout(&r.title, Some(&m.user), Some(&m.org), body))
}

pub(super) async fn detail(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id)): Path<(String, String)>,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return no_such_request(&m);
    };
    let org_id = m.org.id;
    match app.blocking(move |app| load_detail(app, org_id, id)).await {
        Ok(d) => detail_page(&m, &d, None, ""),
        Err(RequestError::NotFound(_)) => no_such_request(&m),
        Err(e) => {
            let p = e.problem();
            message_page(&m, p.status, "Feature request", &p.message)
        }
    }
}

/// After a refused change: the request's page again with why, or "not found" when the request
/// itself is not the organisation's.
pub(super) async fn after_refusal(
    app: &Arc<App>,
    m: &OrgMember,
    id: u64,
    e: RequestError,
    message_draft: String,
) -> Response {
    let org_id = m.org.id;
    match app.blocking(move |app| load_detail(app, org_id, id)).await {
        Ok(d) => detail_page(m, &d, Some(&e), &message_draft),
        Err(_) => no_such_request(m),
    }
}

/// Reads a reply form: `message`, and answers as groups that each start with `question_id`
/// followed by that question's `option_ids` and `other`. In the reply form a question left
/// untouched is simply not answered; in a question's own answer form (no `message` field) an
/// empty answer is passed on so the person learns that nothing was chosen.
fn parse_reply(
    pairs: &[(String, String)],
) -> Result<(Option<String>, Vec<NewAnswer>), RequestError> {
    let mut message = None;
    let mut has_message_field = false;
    let mut answers: Vec<NewAnswer> = Vec::new();
    for (k, v) in pairs {
        match k.as_str() {
            "message" => {
                has_message_field = true;
                if !v.trim().is_empty() {
                    message = Some(v.clone());
                }
            }
            "question_id" => {
                let question_id = v.trim().parse().map_err(|_| {
                    RequestError::InvalidInput(format!("`{v}` is not a question number"))
                })?;
                answers.push(NewAnswer {
                    question_id,
                    option_ids: Vec::new(),
                    other: None,
                });
            }
            "option_ids" | "other" => {
                let Some(a) = answers.last_mut() else {
                    return Err(RequestError::InvalidInput(
                        "an answer was sent without its `question_id`".into(),
                    ));
                };
                if k == "option_ids" {
                    a.option_ids.push(v.clone());
                } else if !v.trim().is_empty() {
                    a.other = Some(v.clone());
                }
            }
            _ => {}
        }
    }
    if has_message_field {
        answers.retain(|a| !a.option_ids.is_empty() || a.other.is_some());
    }
    Ok((message, answers))
}

pub(super) async fn reply(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id)): Path<(String, String)>,
    form: CsrfForm,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return no_such_request(&m);
    };
    let draft = form.field("message").unwrap_or("").to_owned();
    let (message, answers) = match parse_reply(form.pairs()) {
        Ok(x) => x,
        Err(e) => return after_refusal(&app, &m, id, e, draft).await,
    };
    let (org_id, person_id) = (m.org.id, m.user.person.id);
    let replied = app
        .blocking(move |app| {
            service::reply(app, org_id, person_id, id, message.as_deref(), &answers)
        })
        .await;
    match replied {
        Ok(_) => see_other(&format!("{}#conversation", request_url(&m.org.slug, id))),
        Err(e) => after_refusal(&app, &m, id, e, draft).await,
    }
}

pub(super) async fn set_setting(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id)): Path<(String, String)>,
    form: CsrfForm,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return no_such_request(&m);
    };
    let name = form.field("name").unwrap_or("").to_owned();
    let value = form.field("value").unwrap_or("").to_owned();
    let org_id = m.org.id;
    let set = app
        .blocking(move |app| {
            attachments::set_setting(&app.store, org_id, id, &name, &value, app.clock.now())
        })
        .await;
    match set {
        Ok(()) => see_other(&format!("{}#settings", request_url(&m.org.slug, id))),
        Err(e) => after_refusal(&app, &m, id, e, String::new()).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_group_answers_by_question() {
        let p = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let (msg, answers) = parse_reply(&p(&[
            ("message", "  "),
            ("question_id", "1"),
            ("option_ids", "a"),
            ("question_id", "2"),
            ("other", ""),
            ("question_id", "3"),
            ("option_ids", "x"),
            ("option_ids", "y"),
            ("other", "z"),
        ]))
        .unwrap();
        assert_eq!(msg, None);
        assert_eq!(answers.len(), 2, "question 2 was left untouched");
        assert_eq!(answers[1].option_ids, vec!["x", "y"]);
        assert_eq!(answers[1].other.as_deref(), Some("z"));
        // A question's own form passes an empty answer on, so the domain can say why.
        let (_, answers) = parse_reply(&p(&[("question_id", "1")])).unwrap();
        assert_eq!(answers.len(), 1);
        assert!(parse_reply(&p(&[("option_ids", "a")])).is_err());
        assert!(parse_reply(&p(&[("question_id", "x")])).is_err());
    }
}
