//! The organisation's feature requests with filters and paging, and the form to file one.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;
use serde::Deserialize;

use super::{Shown, list_url, request_url, shown};
use crate::app::App;
use crate::portal::i18n::{moment, status_badge, status_label, t, ta, tc};
use crate::portal::{CsrfForm, OrgMember, csrf_field, layout, page, see_other};
use crate::requests::apps::{self, App as RequestApp};
use crate::requests::feature::{self, Filter, NewRequest};
use crate::requests::{RequestError, service};

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

    /// The filter, or why the query cannot be one (in the request's language: these are the
    /// portal's own checks of its own links).
    fn filter(&self, person_id: u64) -> Result<Filter, String> {
        let app_id = nonempty(&self.app_id)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| ta("requests-bad-app", &[("value", v.to_owned())]))
            })
            .transpose()?;
        let status = nonempty(&self.status)
            .map(|v| {
                feature::parse_status(v)
                    .ok_or_else(|| ta("requests-bad-status", &[("value", v.to_owned())]))
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
    /// The page, or why there is none (`None`: the filter was refused before any lookup).
    page: Result<feature::Page, Option<RequestError>>,
}

fn load_list(app: &App, org_id: u64, filter: Option<Filter>) -> ListData {
    app.store
        .read(|tx| {
            let apps = apps::list(tx, org_id)?;
            let page = match filter {
                Some(f) => feature::list(tx, org_id, &f).map_err(Some),
                None => Err(None),
            };
            Ok::<_, crate::store::StoreError>(ListData { apps, page })
        })
        .unwrap_or_else(|e| ListData {
            apps: Vec::new(),
            page: Err(Some(e.into())),
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
    error: Option<Shown>,
) -> Response {
    let slug = &m.org.slug;
    let base = list_url(slug);
    let error = error.or_else(|| match &d.page {
        Err(Some(e)) => Some(shown(e)),
        _ => None,
    });
    let (status, shown_error) = match error {
        Some((status, text)) => (status, Some(text)),
        None => (StatusCode::OK, None),
    };
    let current_page = nonempty(&q.page)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(1);
    let live: Vec<&RequestApp> = d.apps.iter().filter(|a| a.accepts_requests()).collect();
    let selected_app = nonempty(&q.app_id).and_then(|v| v.parse::<u64>().ok());
    let selected_status = nonempty(&q.status).unwrap_or("");
    let body = html! {
        @if let Some(e) = &shown_error { p.notice.error #error role="alert" { (e) } }
        form #filter-form method="get" action=(base) {
            label { (t("col-app")) select name="app_id" {
                option value="" { (t("requests-all-apps")) }
                @for a in &d.apps {
                    option value=(a.app_id) selected[selected_app == Some(a.app_id)] { (a.name) }
                }
            } }
            label { (t("col-status")) select name="status" {
                option value="" { (t("requests-any-status")) }
                @for s in feature::FEATURE_STATUSES {
                    option value=(s.as_str()) selected[selected_status == s.as_str()] { (status_label(s.as_str())) }
                }
            } }
            label { (t("action-search")) input type="search" name="search" maxlength=(feature::SEARCH_MAX) value=(nonempty(&q.search).unwrap_or("")); }
            label { input type="checkbox" name="mine" value="1" checked[q.mine()]; (t("requests-only-mine")) }
            button type="submit" { (t("action-filter")) }
        }
        @if let Ok(p) = &d.page {
            p.muted #total { (tc("requests-total", p.total as u64, &[])) }
            @if p.requests.is_empty() { p.muted { (t("requests-none")) } }
            @else {
                div.table-wrap {
                    table #requests .cards {
                        thead { tr {
                            th scope="col" .num { (t("col-number")) } th scope="col" { (t("col-title")) } th scope="col" { (t("col-app")) }
                            th scope="col" { (t("col-status")) } th scope="col" { (t("col-filed")) } th scope="col" { (t("col-updated")) }
                        } }
                        tbody {
                            @for r in &p.requests {
                                tr {
                                    td.num data-label=(t("col-number")) { (r.id) }
                                    td { a href=(request_url(slug, r.id)) { (r.title) } }
                                    td data-label=(t("col-app")) { (app_name(&d.apps, r.app_id)) }
                                    td data-label=(t("col-status")) { (status_badge(r.status.as_str())) }
                                    td.date data-label=(t("col-filed")) { (moment(r.created_at)) }
                                    td.date data-label=(t("col-updated")) { (moment(r.updated_at)) }
                                }
                            }
                        }
                    }
                }
                @let pages = p.total.div_ceil(feature::PER_PAGE) as u64;
                nav #pages .pages aria-label=(t("requests-pages")) {
                    @if current_page > 1 {
                        a rel="prev" href={ (base) "?" (q.with_page(current_page - 1)) } { "← " (t("requests-newer")) }
                    }
                    span { (ta("requests-page-of", &[("page", current_page.to_string()), ("pages", pages.max(1).to_string())])) }
                    @if current_page < pages && current_page < feature::MAX_PAGE {
                        a rel="next" href={ (base) "?" (q.with_page(current_page + 1)) } { (t("requests-older")) " →" }
                    }
                }
            }
        }
        h2 { (t("request-new")) }
        @if live.is_empty() {
            p.muted { (t("requests-no-live-app")) " " a href={ "/portal/o/" (slug) "/apps" } { (t("requests-see-apps")) } }
        } @else {
            form #request-form method="post" action=(base) {
                (csrf_field(&m.user.csrf))
                label { (t("col-app")) select name="app_id" required {
                    @for a in &live {
                        option value=(a.app_id) selected[draft.app_id == Some(a.app_id)] { (a.name) }
                    }
                } }
                label { (t("col-title")) input type="text" name="title" required maxlength=(feature::TITLE_MAX) value=(draft.title); }
                label { (t("field-description")) textarea name="description" required rows="8" cols="70" maxlength=(feature::DESCRIPTION_MAX) { (draft.description) } }
                button type="submit" { (t("action-file-request")) }
            }
        }
    };
    page(
        status,
        layout(&t("nav-requests"), Some(&m.user), Some(&m.org), body),
    )
}

pub(super) async fn list(
    State(app): State<Arc<App>>,
    m: OrgMember,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = q.map(|Query(q)| q).unwrap_or_default();
    let filter = q.filter(m.user.person.id);
    let (wanted, refused) = match filter {
        Ok(f) => (Some(f), None),
        Err(why) => (None, Some((StatusCode::BAD_REQUEST, why))),
    };
    let org_id = m.org.id;
    let d = app
        .blocking(move |app| load_list(app, org_id, wanted))
        .await;
    list_page(&m, &q, &d, &Draft::default(), refused)
}

pub(super) async fn create(State(app): State<Arc<App>>, m: OrgMember, form: CsrfForm) -> Response {
    let draft = Draft {
        app_id: form.field("app_id").and_then(|v| v.trim().parse().ok()),
        title: form.field("title").unwrap_or("").to_owned(),
        description: form.field("description").unwrap_or("").to_owned(),
    };
    let new = draft.app_id.map(|app_id| NewRequest {
        app_id,
        title: draft.title.clone(),
        description: draft.description.clone(),
    });
    let (org_id, person_id) = (m.org.id, m.user.person.id);
    let (created, d) = app
        .blocking(move |app| {
            let created = new.map(|new| service::create(app, org_id, person_id, &new));
            let d = load_list(
                app,
                org_id,
                Some(Filter {
                    page: 1,
                    ..Filter::default()
                }),
            );
            (created, d)
        })
        .await;
    let choose_app = || Some((StatusCode::BAD_REQUEST, t("requests-choose-app")));
    match created {
        Some(Ok(r)) => see_other(&request_url(&m.org.slug, r.id)),
        None | Some(Err(RequestError::NotFound(_))) => {
            list_page(&m, &ListQuery::default(), &d, &draft, choose_app())
        }
        Some(Err(e)) => list_page(&m, &ListQuery::default(), &d, &draft, Some(shown(&e))),
    }
}
