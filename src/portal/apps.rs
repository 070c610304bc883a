//! The apps of an organisation, which feature requests are filed for. Every member sees them
//! (and so knows where a request can go); only admins add apps or change their status.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use maud::html;

use super::i18n::{status_badge, status_label, t};
use super::{
    CsrfForm, OrgAdmin, OrgMember, csrf_field, field, layout, page, problem_text, see_other,
};
use crate::app::App;
use crate::http::error::ToProblem;
use crate::requests::RequestError;
use crate::requests::apps::{self, App as RequestApp, AppStatus};

pub fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/portal/o/{slug}/apps", get(apps_list).post(add))
        .route("/portal/o/{slug}/apps/{app_id}/status", post(set_status))
        .layer(axum::extract::DefaultBodyLimit::max(16 * 1024))
}

const STATUSES: [AppStatus; 3] = [AppStatus::Live, AppStatus::Draft, AppStatus::Archived];

fn base(m: &OrgMember) -> String {
    format!("/portal/o/{}/apps", m.org.slug)
}

fn apps_page(
    m: &OrgMember,
    list: &[RequestApp],
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let csrf = &m.user.csrf;
    let base = base(m);
    let admin = m.is_admin();
    let body = html! {
        @if let Some(e) = error { p.notice.error #error { (e) } }
        p.muted { (t("apps-explain")) }
        @if list.is_empty() { p.muted { (t("apps-none")) } }
        @else {
            div.table-wrap { table #apps {
                thead { tr { th scope="col" { (t("col-name")) } th scope="col" { (t("col-app-id")) } th scope="col" { (t("run-status")) } th scope="col" { (t("col-accepts-requests")) } @if admin { th scope="col" { (t("col-change-status")) } } } }
                tbody { @for a in list {
                    tr {
                        td { (a.name) }
                        td { (a.app_id) }
                        td.app-status { (status_badge(a.status.as_str())) }
                        td { @if a.accepts_requests() { span.badge.ok { (t("yes")) } } @else { span.badge.neutral { (t("no")) } } }
                        @if admin {
                            td {
                                form.inline method="post" action={ (base) "/" (a.app_id) "/status" } {
                                    (csrf_field(csrf))
                                    select name="status" aria-label=(t("col-change-status")) {
                                        @for s in STATUSES {
                                            option value=(s.as_str()) selected[s == a.status] { (status_label(s.as_str())) }
                                        }
                                    }
                                    button.secondary type="submit" { (t("action-save")) }
                                }
                            }
                        }
                    }
                } }
            } }
        }
        @if admin {
            h2 { (t("app-new")) }
            form #app-form .row method="post" action=(base) {
                (csrf_field(csrf))
                label { (t("col-name")) input type="text" name="name" required maxlength=(apps::NAME_MAX); }
                label { (t("run-status")) select name="status" {
                    @for s in STATUSES { option value=(s.as_str()) { (status_label(s.as_str())) } }
                } }
                button type="submit" { (t("app-add")) }
            }
        }
    };
    page(
        status,
        layout(&t("nav-apps"), Some(&m.user), Some(&m.org), body),
    )
}

fn load(app: &App, org_id: u64) -> Result<Vec<RequestApp>, RequestError> {
    Ok(app.store.read(|tx| apps::list(tx, org_id))?)
}

/// The list again, with why the last change was refused.
async fn refused(app: &Arc<App>, m: &OrgMember, e: &RequestError) -> Response {
    let p = e.problem();
    said(app, m, p.status, &problem_text(&p)).await
}

/// The list again, with the portal's own words about the last change.
async fn said(app: &Arc<App>, m: &OrgMember, status: StatusCode, text: &str) -> Response {
    let org_id = m.org.id;
    let list = app
        .blocking(move |app| load(app, org_id))
        .await
        .unwrap_or_default();
    apps_page(m, &list, Some(text), status)
}

async fn apps_list(State(app): State<Arc<App>>, m: OrgMember) -> Response {
    let org_id = m.org.id;
    match app.blocking(move |app| load(app, org_id)).await {
        Ok(list) => apps_page(&m, &list, None, StatusCode::OK),
        Err(e) => {
            let p = e.problem();
            apps_page(&m, &[], Some(&problem_text(&p)), p.status)
        }
    }
}

/// The chosen status; the form offers only these, so anything else was not sent by it.
fn parse_status(pairs: &[(String, String)]) -> Option<AppStatus> {
    AppStatus::parse(field(pairs, "status").unwrap_or("").trim())
}

async fn bad_status(app: &Arc<App>, m: &OrgMember) -> Response {
    said(app, m, StatusCode::BAD_REQUEST, &t("app-choose-status")).await
}

async fn no_app(app: &Arc<App>, m: &OrgMember) -> Response {
    said(app, m, StatusCode::NOT_FOUND, &t("app-not-found")).await
}

async fn add(State(app): State<Arc<App>>, OrgAdmin(m): OrgAdmin, form: CsrfForm) -> Response {
    let Some(status) = parse_status(form.pairs()) else {
        return bad_status(&app, &m).await;
    };
    let name = form.field("name").unwrap_or("").to_owned();
    let (org_id, by) = (m.org.id, m.actor());
    let added = app
        .blocking(move |app| apps::add_by(&app.store, &by, org_id, &name, status, app.clock.now()))
        .await;
    match added {
        Ok(_) => see_other(&base(&m)),
        Err(e) => refused(&app, &m, &e).await,
    }
}

async fn set_status(
    State(app): State<Arc<App>>,
    OrgAdmin(m): OrgAdmin,
    Path((_slug, app_id)): Path<(String, String)>,
    form: CsrfForm,
) -> Response {
    let Some(status) = parse_status(form.pairs()) else {
        return bad_status(&app, &m).await;
    };
    let Ok(app_id) = app_id.parse::<u64>() else {
        return no_app(&app, &m).await;
    };
    let (org_id, by) = (m.org.id, m.actor());
    let changed = app
        .blocking(move |app| {
            apps::set_status(&app.store, &by, org_id, app_id, status, app.clock.now())
        })
        .await;
    match changed {
        Ok(_) => see_other(&base(&m)),
        Err(RequestError::NotFound(_)) => no_app(&app, &m).await,
        Err(e) => refused(&app, &m, &e).await,
    }
}
