//! The organisation's feature requests with filters and paging, and the form to file one.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;
use serde::Deserialize;

use super::{list_url, request_url, time};
use crate::app::App;
use crate::http::error::ToProblem;
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
    let shown_error = error.or(d.page.as_ref().err()).map(ToProblem::problem);
    let status = shown_error.as_ref().map_or(StatusCode::OK, |p| p.status);
    let current_page = nonempty(&q.page)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(1);
    let live: Vec<&RequestApp> = d.apps.iter().filter(|a| a.accepts_requests()).collect();
    let selected_app = nonempty(&q.app_id).and_then(|v| v.parse::<u64>().ok());
    let selected_status = nonempty(&q.status).unwrap_or("");
    let body = html! {
        @if let Some(e) = &shown_error { p.error #error { (e.message) } }
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

pub(super) async fn list(
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
