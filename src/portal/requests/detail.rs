//! A request's page: its conversation, open questions with their answer forms, the reply form,
//! attachments and settings; replying, answering and setting a setting.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};

use super::{Shown, list_url, message_page, no_such_request, parse_id, request_url, shown};
use crate::app::App;
use crate::portal::i18n::{bytes, moment, status_badge, status_label, t, ta};
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
            label.check { input type="checkbox" name="option_ids" value=(o.option_id); (o.label) }
        }
        @if q.allow_other {
            label { (t("request-other-answer")) input type="text" name="other" maxlength=(feature::OTHER_MAX); }
        }
    }
}

/// A conversation entry in the reader's language: the notes the domain writes for a question
/// and an answer (in English, as assistants read them) are recognised and said again from
/// the question itself; anything else is shown as written.
fn message_text(r: &Request, msg: &crate::requests::Message) -> String {
    let labels = |q: &crate::requests::Question, ids: Option<&[String]>| -> Vec<String> {
        match ids {
            None => q.options.iter().map(|o| o.label.clone()).collect(),
            Some(ids) => ids
                .iter()
                .filter_map(|id| q.options.iter().find(|o| &o.option_id == id))
                .map(|o| o.label.clone())
                .collect(),
        }
    };
    for q in &r.questions {
        if msg.text == feature::question_note(q) {
            let key = if q.allow_other {
                "request-asked-other"
            } else {
                "request-asked"
            };
            return ta(
                key,
                &[
                    ("number", q.question_id.to_string()),
                    ("question", q.text.clone()),
                    ("options", labels(q, None).join(" / ")),
                ],
            );
        }
    }
    for a in &r.answers {
        let Some(q) = r.questions.iter().find(|q| q.question_id == a.question_id) else {
            continue;
        };
        if msg.text == feature::answer_note(q, a) {
            let mut chosen = labels(q, Some(&a.option_ids));
            if let Some(other) = &a.other {
                chosen.push(ta("request-answer-other", &[("text", other.clone())]));
            }
            return ta(
                "request-answered",
                &[("question", q.text.clone()), ("answer", chosen.join("; "))],
            );
        }
    }
    msg.text.clone()
}

fn detail_page(m: &OrgMember, d: &Detail, error: Option<Shown>, message_draft: &str) -> Response {
    let slug = &m.org.slug;
    let r = &d.r;
    let base = request_url(slug, r.id);
    let csrf = &m.user.csrf;
    let status = error.as_ref().map_or(StatusCode::OK, |(s, _)| *s);
    let open: Vec<&crate::requests::Question> = r.open_questions().collect();
    let closed = r.status.is_final();
    let role = |role: Role| match role {
        Role::Agent => t("request-role-agent"),
        _ => t("request-role-person"),
    };
    let body = html! {
        @if let Some((_, e)) = &error { p.notice.error #error role="alert" { (e) } }
        p { a href=(list_url(slug)) { "← " (t("requests-all")) } }
        dl #request .facts {
            dt { (t("col-number")) } dd { (r.id) }
            dt { (t("col-app")) } dd #request-app { (d.app.as_ref().map_or("—", |a| a.name.as_str())) }
            dt { (t("col-status")) } dd #request-status { (status_badge(r.status.as_str())) }
            dt { (t("request-filed-by")) } dd { (d.author.as_deref().unwrap_or("—")) }
            dt { (t("col-filed")) } dd { (moment(r.created_at)) }
            dt { (t("col-updated")) } dd { (moment(r.updated_at)) }
        }
        h2 { (t("field-description")) }
        div #description .pre-wrap.text.card { (r.description) }

        h2 { (t("request-conversation")) }
        @if r.conversation.is_empty() { p.muted { (t("request-no-messages")) } }
        @else {
            ol #conversation .conversation {
                @for msg in &r.conversation {
                    li class={ "message " (if msg.role == Role::Agent { "agent" } else { "person" }) } {
                        strong.author { (msg.author) }
                        " " span.muted.role { "(" (role(msg.role)) ")" }
                        " " span.muted { (moment(msg.at)) }
                        div.pre-wrap.text { (message_text(r, msg)) }
                    }
                }
            }
        }

        @if !open.is_empty() && !closed {
            h2 { (t("request-open-questions")) }
            @for q in &open {
                form.answer-form id={ "answer-" (q.question_id) } method="post" action={ (base) "/reply" } {
                    (csrf_field(csrf))
                    fieldset {
                        legend { (ta("request-question", &[("number", q.question_id.to_string()), ("question", q.text.clone())])) }
                        (answer_inputs(q))
                        button type="submit" { (t("action-answer")) }
                    }
                }
            }
        }

        h2 { (t("request-reply")) }
        @if closed {
            p.muted { (ta("request-closed", &[("status", status_label(r.status.as_str()))])) }
        } @else {
            form #reply-form method="post" action={ (base) "/reply" } {
                (csrf_field(csrf))
                label { (t("field-message")) textarea name="message" rows="5" cols="70" maxlength=(feature::MESSAGE_MAX) { (message_draft) } }
                @for q in &open {
                    fieldset {
                        legend { (ta("request-also-answer", &[("number", q.question_id.to_string()), ("question", q.text.clone())])) }
                        (answer_inputs(q))
                    }
                }
                button type="submit" { (t("action-send")) }
            }
        }

        h2 #attachments-heading { (t("request-attachments")) }
        p.muted { (t("request-attachments-explain")) }
        @if d.attachments.is_empty() { p.muted { (t("request-no-attachments")) } }
        @else {
            div.table-wrap {
                table #attachments .cards {
                    thead { tr {
                        th scope="col" { (t("col-name")) } th scope="col" { (t("col-type")) } th scope="col" .num { (t("col-size")) }
                        th scope="col" { (t("col-uploaded")) } th scope="col" { (t("col-by")) } th scope="col" { (t("col-actions")) }
                    } }
                    tbody {
                        @for (a, by) in &d.attachments {
                            tr {
                                td { a href={ (base) "/attachments/" (a.attachment_id) } { (a.name) } }
                                td data-label=(t("col-type")) { (a.content_type) }
                                td.num data-label=(t("col-size")) { (bytes(a.size)) }
                                td.date data-label=(t("col-uploaded")) { (moment(a.uploaded_at)) }
                                td data-label=(t("col-by")) { (by) }
                                td {
                                    form.inline method="post" action={ (base) "/attachments/" (a.attachment_id) "/delete" } {
                                        (csrf_field(csrf))
                                        button.danger type="submit" aria-label=(ta("request-delete-attachment", &[("name", a.name.clone())])) { (t("trigger-delete")) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        form #attachment-form method="post" enctype="multipart/form-data" action={ (base) "/attachments" } {
            (csrf_field(csrf))
            label { (t("field-file")) input type="file" name="file" required; }
            button type="submit" { (t("action-upload")) }
        }

        h2 #settings-heading { (t("request-settings")) }
        @if r.settings.is_empty() { p.muted { (t("request-no-settings")) } }
        @else {
            div.table-wrap {
                table #settings {
                    thead { tr { th scope="col" { (t("col-name")) } th scope="col" { (t("col-value")) } } }
                    tbody {
                        @for (k, v) in &r.settings {
                            tr { td { code { (k) } } td { (v) } }
                        }
                    }
                }
            }
        }
        form #setting-form method="post" action={ (base) "/settings" } {
            (csrf_field(csrf))
            label { (t("col-name")) input type="text" name="name" required maxlength=(attachments::SETTING_KEY_MAX) pattern="[a-z0-9][a-z0-9_.\\-]*" title=(t("request-setting-name-rule")); }
            label { (t("request-setting-value")) input type="text" name="value" maxlength=(attachments::SETTING_VALUE_MAX); }
            button type="submit" { (t("action-save-setting")) }
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
            let (status, text) = shown(&e);
            message_page(&m, status, &t("nav-requests"), &text)
        }
    }
}

/// After a refused change: the request's page again with why, or "not found" when the request
/// itself is not the organisation's.
pub(super) async fn after_refusal(
    app: &Arc<App>,
    m: &OrgMember,
    id: u64,
    e: Shown,
    message_draft: String,
) -> Response {
    let org_id = m.org.id;
    match app.blocking(move |app| load_detail(app, org_id, id)).await {
        Ok(d) => detail_page(m, &d, Some(e), &message_draft),
        Err(RequestError::NotFound(_)) => no_such_request(m),
        Err(e) => {
            let (status, text) = shown(&e);
            message_page(m, status, &t("nav-requests"), &text)
        }
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
        Err(e) => return after_refusal(&app, &m, id, shown(&e), draft).await,
    };
    let (org_id, person_id) = (m.org.id, m.user.person.id);
    let replied = app
        .blocking(move |app| {
            service::reply(app, org_id, person_id, id, message.as_deref(), &answers)
        })
        .await;
    match replied {
        Ok(_) => see_other(&format!("{}#conversation", request_url(&m.org.slug, id))),
        Err(e) => after_refusal(&app, &m, id, shown(&e), draft).await,
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
        Err(e) => after_refusal(&app, &m, id, shown(&e), String::new()).await,
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
