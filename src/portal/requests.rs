//! Feature requests in the portal: the organisation's list with filters, a form to file a
//! request, and a request's page with its conversation, open questions, a reply form,
//! attachments and settings. Attachments and settings exist only here, never in the connector.
//!
//! Every member of the organisation may file, reply, answer, upload and set settings. Request
//! and attachment ids are global integers, so every lookup goes through the organisation's id:
//! another organisation's id is "not found", exactly like one that does not exist.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Multipart, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    OrgMember, csrf_field, csrf_rejected, field, form_pairs, layout, page, see_other, verify_csrf,
};
use crate::app::App;
use crate::http::error::{request_error_message, request_error_status};
use crate::requests::apps::{self, App as RequestApp};
use crate::requests::attachments::{self, Attachment};
use crate::requests::feature::{self, Filter, NewAnswer, NewRequest};
use crate::requests::{Request, RequestError, Role, service};

/// Form posts carry at most a 20,000-character text (up to 12 bytes each once percent-encoded).
const FORM_MAX: usize = 256 * 1024;
/// Room for the multipart framing and the small fields around an attachment.
const MULTIPART_OVERHEAD: usize = 64 * 1024;

pub fn router() -> Router<Arc<App>> {
    let forms = Router::new()
        .route("/portal/o/{slug}/requests", get(list).post(create))
        .route("/portal/o/{slug}/requests/{id}", get(detail))
        .route("/portal/o/{slug}/requests/{id}/reply", post(reply))
        .route("/portal/o/{slug}/requests/{id}/settings", post(set_setting))
        .route(
            "/portal/o/{slug}/requests/{id}/attachments/{attachment_id}",
            get(download),
        )
        .route(
            "/portal/o/{slug}/requests/{id}/attachments/{attachment_id}/delete",
            post(delete_attachment),
        )
        .layer(DefaultBodyLimit::max(FORM_MAX));
    let uploads = Router::new().route(
        "/portal/o/{slug}/requests/{id}/attachments",
        post(upload).layer(DefaultBodyLimit::max(
            attachments::MAX_BYTES + MULTIPART_OVERHEAD,
        )),
    );
    forms.merge(uploads)
}

fn time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

fn list_url(slug: &str) -> String {
    format!("/portal/o/{slug}/requests")
}

fn request_url(slug: &str, id: u64) -> String {
    format!("/portal/o/{slug}/requests/{id}")
}

fn message_page(m: &OrgMember, status: StatusCode, title: &str, msg: &str) -> Response {
    page(
        status,
        layout(
            title,
            Some(&m.user),
            Some(&m.org),
            html! {
                p.error #error { (msg) }
                p { a href=(list_url(&m.org.slug)) { "Back to the feature requests" } }
            },
        ),
    )
}

fn no_such_request(m: &OrgMember) -> Response {
    message_page(
        m,
        StatusCode::NOT_FOUND,
        "Not found",
        "No such feature request.",
    )
}

/// A path id; anything that is not a number cannot name a request.
fn parse_id(s: &str) -> Option<u64> {
    s.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// The list and the form to file a request.

#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    app_id: Option<String>,
    status: Option<String>,
    search: Option<String>,
    mine: Option<String>,
    page: Option<String>,
}

fn nonempty(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl ListQuery {
    fn mine(&self) -> bool {
        nonempty(&self.mine).is_some_and(|v| v != "0" && v != "false")
    }

    fn filter(&self, person_id: u64) -> Result<Filter, RequestError> {
        let app_id = nonempty(&self.app_id)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    RequestError::InvalidInput(format!(
                        "`app_id` must be an app's number, not `{v}`"
                    ))
                })
            })
            .transpose()?;
        let status = nonempty(&self.status)
            .map(|v| {
                feature::parse_status(v).ok_or_else(|| {
                    let names: Vec<&str> = feature::FEATURE_STATUSES
                        .iter()
                        .map(|s| s.as_str())
                        .collect();
                    RequestError::InvalidInput(format!(
                        "`{v}` is not a feature-request status; use one of {}",
                        names.join(", ")
                    ))
                })
            })
            .transpose()?;
        let page = match nonempty(&self.page) {
            None => 1,
            // Out of range on purpose: the domain explains the allowed pages.
            Some(v) => v.parse::<u64>().unwrap_or(0),
        };
        Ok(Filter {
            app_id,
            status,
            search: nonempty(&self.search).map(str::to_owned),
            author_id: self.mine().then_some(person_id),
            page,
        })
    }

    /// This query on another page.
    fn with_page(&self, page: u64) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("app_id", &self.app_id),
            ("status", &self.status),
            ("search", &self.search),
        ] {
            if let Some(v) = nonempty(v) {
                q.append_pair(k, v);
            }
        }
        if self.mine() {
            q.append_pair("mine", "1");
        }
        q.append_pair("page", &page.to_string());
        q.finish()
    }
}

/// What was typed into the new-request form, kept when it is refused.
#[derive(Debug, Default)]
struct Draft {
    app_id: Option<u64>,
    title: String,
    description: String,
}

struct ListData {
    apps: Vec<RequestApp>,
    page: Result<feature::Page, RequestError>,
}

fn load_list(app: &App, org_id: u64, filter: Result<Filter, RequestError>) -> ListData {
    app.store
        .read(|tx| {
            let apps = apps::list(tx, org_id)?;
            let page = filter.and_then(|f| feature::list(tx, org_id, &f));
            Ok::<_, crate::store::StoreError>(ListData { apps, page })
        })
        .unwrap_or_else(|e| ListData {
            apps: Vec::new(),
            page: Err(e.into()),
        })
}

fn app_name(apps: &[RequestApp], id: Option<u64>) -> String {
    id.and_then(|id| apps.iter().find(|a| a.app_id == id))
        .map_or_else(|| "—".to_owned(), |a| a.name.clone())
}

fn list_page(
    m: &OrgMember,
    q: &ListQuery,
    d: &ListData,
    draft: &Draft,
    error: Option<&RequestError>,
) -> Response {
    let slug = &m.org.slug;
    let base = list_url(slug);
    let shown_error = error.or(d.page.as_ref().err());
    let status = shown_error.map_or(StatusCode::OK, request_error_status);
    let current_page = nonempty(&q.page)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(1);
    let live: Vec<&RequestApp> = d.apps.iter().filter(|a| a.accepts_requests()).collect();
    let selected_app = nonempty(&q.app_id).and_then(|v| v.parse::<u64>().ok());
    let selected_status = nonempty(&q.status).unwrap_or("");
    let body = html! {
        @if let Some(e) = shown_error { p.error #error { (request_error_message(e)) } }
        form #filter-form method="get" action=(base) {
            label { "App " select name="app_id" {
                option value="" { "All apps" }
                @for a in &d.apps {
                    option value=(a.app_id) selected[selected_app == Some(a.app_id)] { (a.name) }
                }
            } }
            label { "Status " select name="status" {
                option value="" { "Any status" }
                @for s in feature::FEATURE_STATUSES {
                    option value=(s.as_str()) selected[selected_status == s.as_str()] { (s.as_str()) }
                }
            } }
            label { "Search " input type="text" name="search" maxlength=(feature::SEARCH_MAX) value=(nonempty(&q.search).unwrap_or("")); }
            label { input type="checkbox" name="mine" value="1" checked[q.mine()]; " Only mine" }
            button type="submit" { "Filter" }
        }
        @if let Ok(p) = &d.page {
            p.muted #total { (p.total) " request" @if p.total != 1 { "s" } }
            @if p.requests.is_empty() { p.muted { "No feature requests here." } }
            @else {
                table #requests {
                    tr { th { "Id" } th { "Title" } th { "App" } th { "Status" } th { "Filed" } th { "Updated" } }
                    @for r in &p.requests {
                        tr {
                            td { (r.id) }
                            td { a href=(request_url(slug, r.id)) { (r.title) } }
                            td { (app_name(&d.apps, r.app_id)) }
                            td { (r.status.as_str()) }
                            td { (time(r.created_at)) }
                            td { (time(r.updated_at)) }
                        }
                    }
                }
                @let pages = p.total.div_ceil(feature::PER_PAGE) as u64;
                p #pages {
                    @if current_page > 1 {
                        a rel="prev" href={ (base) "?" (q.with_page(current_page - 1)) } { "← Newer" } " "
                    }
                    "Page " (current_page) " of " (pages.max(1))
                    @if current_page < pages && current_page < feature::MAX_PAGE {
                        " " a rel="next" href={ (base) "?" (q.with_page(current_page + 1)) } { "Older →" }
                    }
                }
            }
        }
        h2 { "File a request" }
        @if live.is_empty() {
            p.muted { "No app accepts requests at the moment. " a href={ "/portal/o/" (slug) "/apps" } { "See the apps" } "." }
        } @else {
            form #request-form method="post" action=(base) {
                (csrf_field(&m.user.csrf))
                label { "App " select name="app_id" required {
                    @for a in &live {
                        option value=(a.app_id) selected[draft.app_id == Some(a.app_id)] { (a.name) }
                    }
                } }
                label { "Title " input type="text" name="title" required maxlength=(feature::TITLE_MAX) value=(draft.title); }
                label { "Description " textarea name="description" required rows="8" cols="70" maxlength=(feature::DESCRIPTION_MAX) { (draft.description) } }
                button type="submit" { "File request" }
            }
        }
    };
    page(
        status,
        layout("Feature requests", Some(&m.user), Some(&m.org), body),
    )
}

async fn list(
    State(app): State<Arc<App>>,
    m: OrgMember,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = q.map(|Query(q)| q).unwrap_or_default();
    let filter = q.filter(m.user.person.id);
    let org_id = m.org.id;
    let d = app
        .blocking(move |app| load_list(app, org_id, filter))
        .await;
    list_page(&m, &q, &d, &Draft::default(), None)
}

async fn create(State(app): State<Arc<App>>, m: OrgMember, body: Bytes) -> Response {
    let pairs = form_pairs(&body);
    if !verify_csrf(&m.user.csrf, field(&pairs, "csrf_token")) {
        return csrf_rejected();
    }
    let draft = Draft {
        app_id: field(&pairs, "app_id").and_then(|v| v.trim().parse().ok()),
        title: field(&pairs, "title").unwrap_or("").to_owned(),
        description: field(&pairs, "description").unwrap_or("").to_owned(),
    };
    let new = draft.app_id.map(|app_id| NewRequest {
        app_id,
        title: draft.title.clone(),
        description: draft.description.clone(),
    });
    let (org_id, person_id) = (m.org.id, m.user.person.id);
    let (created, d) = app
        .blocking(move |app| {
            let created = match new {
                Some(new) => service::create(app, org_id, person_id, &new),
                None => Err(RequestError::InvalidInput("choose an app".into())),
            };
            let d = load_list(
                app,
                org_id,
                Ok(Filter {
                    page: 1,
                    ..Filter::default()
                }),
            );
            (created, d)
        })
        .await;
    match created {
        Ok(r) => see_other(&request_url(&m.org.slug, r.id)),
        Err(RequestError::NotFound(_)) => {
            let e = RequestError::InvalidInput("choose one of the organisation's apps".into());
            list_page(&m, &ListQuery::default(), &d, &draft, Some(&e))
        }
        Err(e) => list_page(&m, &ListQuery::default(), &d, &draft, Some(&e)),
    }
}

// ---------------------------------------------------------------------------------------------
// A request's page.

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
    let status = error.map_or(StatusCode::OK, request_error_status);
    let open: Vec<&crate::requests::Question> = r.open_questions().collect();
    let closed = r.status.is_final();
    let body = html! {
        @if let Some(e) = error { p.error #error { (request_error_message(e)) } }
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
        pre #description style="white-space:pre-wrap" { (r.description) }

        h2 { "Conversation" }
        @if r.conversation.is_empty() { p.muted { "No messages yet." } }
        @else {
            ol #conversation {
                @for msg in &r.conversation {
                    li class={ "message " (if msg.role == Role::Agent { "agent" } else { "person" }) } {
                        strong.author { (msg.author) }
                        " " span.muted.role { "(" (if msg.role == Role::Agent { "agent" } else { "person" }) ")" }
                        " " span.muted { (time(msg.at)) }
                        pre style="white-space:pre-wrap" { (msg.text) }
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

async fn detail(
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
        Err(e) => message_page(
            &m,
            request_error_status(&e),
            "Feature request",
            &request_error_message(&e),
        ),
    }
}

/// After a refused change: the request's page again with why, or "not found" when the request
/// itself is not the organisation's.
async fn after_refusal(
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

async fn reply(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return no_such_request(&m);
    };
    let pairs = form_pairs(&body);
    if !verify_csrf(&m.user.csrf, field(&pairs, "csrf_token")) {
        return csrf_rejected();
    }
    let draft = field(&pairs, "message").unwrap_or("").to_owned();
    let (message, answers) = match parse_reply(&pairs) {
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

async fn set_setting(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return no_such_request(&m);
    };
    let pairs = form_pairs(&body);
    if !verify_csrf(&m.user.csrf, field(&pairs, "csrf_token")) {
        return csrf_rejected();
    }
    let name = field(&pairs, "name").unwrap_or("").to_owned();
    let value = field(&pairs, "value").unwrap_or("").to_owned();
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

// ---------------------------------------------------------------------------------------------
// Attachments.

fn too_large() -> RequestError {
    RequestError::InvalidInput(format!(
        "the file is larger than 10 MiB ({} bytes); attach a smaller file",
        attachments::MAX_BYTES
    ))
}

async fn upload(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id)): Path<(String, String)>,
    mut form: Multipart,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return no_such_request(&m);
    };
    let mut csrf = None;
    let mut file: Option<(String, Option<String>, Vec<u8>)> = None;
    let mut oversize = false;
    loop {
        let f = match form.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            // Past the route's body limit (which can surface as an incomplete field once the
            // file already went over), or a malformed body.
            Err(e) if oversize || e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                oversize = true;
                break;
            }
            Err(_) => {
                let e = RequestError::InvalidInput("the upload could not be read".into());
                return after_refusal(&app, &m, id, e, String::new()).await;
            }
        };
        match f.name().unwrap_or_default() {
            "csrf_token" => csrf = f.text().await.ok(),
            "file" => {
                let name = f.file_name().unwrap_or_default().to_owned();
                let content_type = f.content_type().map(str::to_owned);
                let mut f = f;
                let mut bytes = Vec::new();
                loop {
                    match f.chunk().await {
                        // Past the limit the rest is read and dropped (the route's body
                        // limit bounds it), so the client gets the answer, not a reset.
                        Ok(Some(c)) => {
                            if oversize || bytes.len() + c.len() > attachments::MAX_BYTES {
                                oversize = true;
                                bytes = Vec::new();
                            } else {
                                bytes.extend_from_slice(&c);
                            }
                        }
                        Ok(None) => break,
                        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                            oversize = true;
                            break;
                        }
                        Err(_) => {
                            let e =
                                RequestError::InvalidInput("the upload could not be read".into());
                            return after_refusal(&app, &m, id, e, String::new()).await;
                        }
                    }
                }
                if !oversize {
                    file = Some((name, content_type, bytes));
                }
            }
            _ => {}
        }
    }
    if oversize {
        // Whatever the token, nothing is stored; the page says why.
        let page = after_refusal(&app, &m, id, too_large(), String::new()).await;
        return with_status(page, StatusCode::PAYLOAD_TOO_LARGE);
    }
    if !verify_csrf(&m.user.csrf, csrf.as_deref()) {
        return csrf_rejected();
    }
    let Some((name, content_type, bytes)) = file.filter(|(n, _, _)| !n.is_empty()) else {
        let e = RequestError::InvalidInput("choose a file to upload".into());
        return after_refusal(&app, &m, id, e, String::new()).await;
    };
    let (org_id, person_id) = (m.org.id, m.user.person.id);
    let added = app
        .blocking(move |app| {
            attachments::add(
                &app.store,
                org_id,
                id,
                person_id,
                &name,
                content_type.as_deref(),
                &bytes,
                app.clock.now(),
            )
        })
        .await;
    match added {
        Ok(_) => see_other(&format!("{}#attachments", request_url(&m.org.slug, id))),
        Err(e) => after_refusal(&app, &m, id, e, String::new()).await,
    }
}

/// `resp` with another status, unless it already says "not found".
fn with_status(mut resp: Response, status: StatusCode) -> Response {
    if resp.status() != StatusCode::NOT_FOUND {
        *resp.status_mut() = status;
    }
    resp
}

/// `Content-Disposition` for a stored name: a plain ASCII fallback in quotes (no quote,
/// backslash, percent or control character can break out of it) and the exact name as RFC 8187
/// `filename*`.
fn content_disposition(name: &str) -> String {
    let fallback: String = name
        .chars()
        .map(|c| {
            if (c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '%')) || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
}

async fn download(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id, attachment_id)): Path<(String, String, String)>,
) -> Response {
    let (Some(id), Some(attachment_id)) = (parse_id(&id), parse_id(&attachment_id)) else {
        return no_such_request(&m);
    };
    let org_id = m.org.id;
    let found = app
        .blocking(move |app| {
            app.store
                .read(|tx| attachments::get(tx, org_id, id, attachment_id))
        })
        .await;
    let (a, bytes) = match found {
        Ok(x) => x,
        Err(RequestError::NotFound(_)) => {
            return message_page(
                &m,
                StatusCode::NOT_FOUND,
                "Not found",
                "No such attachment.",
            );
        }
        Err(e) => {
            return message_page(
                &m,
                request_error_status(&e),
                "Attachment",
                &request_error_message(&e),
            );
        }
    };
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, a.content_type.clone()),
            (header::CONTENT_DISPOSITION, content_disposition(&a.name)),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            // Even if a browser rendered it, the file gets no scripts, no framing, no origin.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; frame-ancestors 'none'; sandbox".to_owned(),
            ),
            (header::X_FRAME_OPTIONS, "DENY".to_owned()),
            (header::REFERRER_POLICY, "no-referrer".to_owned()),
            (header::CACHE_CONTROL, "private, no-store".to_owned()),
        ],
        bytes,
    )
        .into_response()
}

async fn delete_attachment(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id, attachment_id)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let (Some(id), Some(attachment_id)) = (parse_id(&id), parse_id(&attachment_id)) else {
        return no_such_request(&m);
    };
    let pairs = form_pairs(&body);
    if !verify_csrf(&m.user.csrf, field(&pairs, "csrf_token")) {
        return csrf_rejected();
    }
    let org_id = m.org.id;
    let deleted = app
        .blocking(move |app| attachments::delete(&app.store, org_id, id, attachment_id))
        .await;
    match deleted {
        Ok(()) => see_other(&format!("{}#attachments", request_url(&m.org.slug, id))),
        Err(e) => after_refusal(&app, &m, id, e, String::new()).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_cannot_break_out_of_the_header() {
        assert_eq!(
            content_disposition("plan \"v2\".pdf"),
            "attachment; filename=\"plan _v2_.pdf\"; filename*=UTF-8''plan%20%22v2%22.pdf"
        );
        assert_eq!(
            content_disposition("één;x.txt"),
            "attachment; filename=\"__n;x.txt\"; filename*=UTF-8''%C3%A9%C3%A9n%3Bx.txt"
        );
    }

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
