//! Feature requests in the portal: the organisation's list with filters, a form to file a
//! request, and a request's page with its conversation, open questions, a reply form,
//! attachments and settings. Attachments and settings exist only here, never in the connector.
//!
//! Every member of the organisation may file, reply, answer, upload and set settings. Request
//! and attachment ids are global integers, so every lookup goes through the organisation's id:
//! another organisation's id is "not found", exactly like one that does not exist.
//!
//! The files: [`list`] (the list with filters and filing a request), [`detail`] (a request's
//! page, replies and answers, settings), [`attachments`] (upload, download, delete); here the
//! routes and the bits they share.

mod attachments;
mod detail;
mod list;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use maud::html;

use super::i18n::t;
use super::{OrgMember, layout, page, problem_text};
use crate::app::App;
use crate::http::error::ToProblem;
use crate::requests::RequestError;

/// What a page shows for a refusal: its status and its words in the request's language.
type Shown = (StatusCode, String);

/// A refusal of the domain as the page shows it.
fn shown(e: &RequestError) -> Shown {
    let p = e.problem();
    (p.status, problem_text(&p))
}

/// Form posts carry at most a 20,000-character text (up to 12 bytes each once percent-encoded).
const FORM_MAX: usize = 256 * 1024;
/// Room for the multipart framing and the small fields around an attachment.
const MULTIPART_OVERHEAD: usize = 64 * 1024;

pub fn router() -> Router<Arc<App>> {
    let forms = Router::new()
        .route(
            "/portal/o/{slug}/requests",
            get(list::list).post(list::create),
        )
        .route("/portal/o/{slug}/requests/{id}", get(detail::detail))
        .route("/portal/o/{slug}/requests/{id}/reply", post(detail::reply))
        .route(
            "/portal/o/{slug}/requests/{id}/settings",
            post(detail::set_setting),
        )
        .route(
            "/portal/o/{slug}/requests/{id}/attachments/{attachment_id}",
            get(attachments::download),
        )
        .route(
            "/portal/o/{slug}/requests/{id}/attachments/{attachment_id}/delete",
            post(attachments::delete_attachment),
        )
        .layer(DefaultBodyLimit::max(FORM_MAX));
    let uploads = Router::new().route(
        "/portal/o/{slug}/requests/{id}/attachments",
        post(attachments::upload).layer(DefaultBodyLimit::max(
            crate::requests::attachments::MAX_BYTES + MULTIPART_OVERHEAD,
        )),
    );
    forms.merge(uploads)
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
                p.notice.error #error role="alert" { (msg) }
                p { a href=(list_url(&m.org.slug)) { (t("requests-back")) } }
            },
        ),
    )
}

fn no_such_request(m: &OrgMember) -> Response {
    message_page(
        m,
        StatusCode::NOT_FOUND,
        &t("not-found-title"),
        &t("request-not-found"),
    )
}

/// A path id; anything that is not a number cannot name a request.
fn parse_id(s: &str) -> Option<u64> {
    s.parse().ok()
}
