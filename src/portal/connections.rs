//! Connections of an organisation: a person's own grants (with revoke); admins see every
//! grant of the organisation and set who may connect.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::{CsrfForm, OrgAdmin, OrgMember, csrf_field, layout, page, problem_page, see_other};
use crate::app::App;
use crate::http::error::ToProblem;
use crate::identity::{self, ConnectorAccess};
use crate::oauth;
use crate::store::StoreError;

fn fmt_time(t: Option<jiff::Timestamp>) -> String {
    t.map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| "never".into())
}

pub(super) async fn connections_page(State(app): State<Arc<App>>, m: OrgMember) -> Response {
    let data = {
        let m = m.clone();
        app.blocking(move |app| {
            app.store.read(|tx| {
                let (org_id, admin) = (m.org.id, m.is_admin());
                let rows = oauth::connections_visible_to(tx, org_id, m.user.person.id, admin)?;
                let members = if admin {
                    identity::members(tx, org_id)?
                } else {
                    Vec::new()
                };
                Ok::<_, StoreError>((rows, members))
            })
        })
        .await
    };
    let (rows, members) = match data {
        Ok(d) => d,
        Err(e) => return refused(&m, &e),
    };
    let slug = &m.org.slug;
    let csrf = &m.user.csrf;
    let body = html! {
        p { "The connector URL to paste into an assistant: " code { (app.connector_url()) } }
        h2 { @if m.is_admin() { "All connections" } @else { "Your connections" } }
        @if rows.is_empty() { p.muted { "No connections yet." } }
        @else {
            table #connections {
                tr { th { "Client" } @if m.is_admin() { th { "Person" } } th { "Scopes" } th { "Created" } th { "Last used" } th { "" } }
                @for r in &rows {
                    tr {
                        td { (r.client_name) }
                        @if m.is_admin() { td { (r.person_email) } }
                        td { (r.grant.scopes.join(", ")) }
                        td { (fmt_time(Some(r.grant.created_at))) }
                        td { (fmt_time(r.last_used)) }
                        td {
                            @if r.grant.revoked_at.is_some() { span.muted { "revoked" } }
                            @else {
                                form.inline method="post" action={ "/portal/o/" (slug) "/connections/" (r.grant.id) "/revoke" } {
                                    (csrf_field(csrf))
                                    button type="submit" { "Revoke" }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if m.is_admin() {
            h2 { "Who may connect" }
            form #policy-form method="post" action={ "/portal/o/" (slug) "/policy" } {
                (csrf_field(csrf))
                @for (value, label) in [("all_members", "All members"), ("selected_members", "Selected members"), ("nobody", "Nobody")] {
                    label { input type="radio" name="connector_access" value=(value)
                        checked[access_value(m.org.connector_access) == value]; " " (label) }
                }
                button type="submit" { "Save" }
            }
            table #members {
                tr { th { "Member" } th { "Role" } th { "May connect" } th { "" } }
                @for (mem, p) in &members {
                    tr {
                        td { (p.email) }
                        td { (format!("{:?}", mem.role).to_lowercase()) }
                        td { @if mem.may_connect { "yes" } @else { "no" } }
                        td {
                            form.inline method="post" action={ "/portal/o/" (slug) "/members/" (p.id) "/may-connect" } {
                                (csrf_field(csrf))
                                input type="hidden" name="may_connect" value=(if mem.may_connect { "false" } else { "true" });
                                button type="submit" { @if mem.may_connect { "Disallow" } @else { "Allow" } }
                            }
                        }
                    }
                }
            }
        }
    };
    page(
        StatusCode::OK,
        layout("Connections", Some(&m.user), Some(&m.org), body),
    )
}

fn access_value(a: ConnectorAccess) -> &'static str {
    match a {
        ConnectorAccess::AllMembers => "all_members",
        ConnectorAccess::SelectedMembers => "selected_members",
        ConnectorAccess::Nobody => "nobody",
    }
}

fn back(slug: &str) -> Response {
    see_other(&format!("/portal/o/{slug}/connections"))
}

fn bad_request(m: &OrgMember, msg: &str) -> Response {
    page(
        StatusCode::BAD_REQUEST,
        layout(
            "Not saved",
            Some(&m.user),
            Some(&m.org),
            html! { p.error { (msg) } },
        ),
    )
}

/// A refused change (or a failure), as `http::error` maps it.
fn refused(m: &OrgMember, e: &impl ToProblem) -> Response {
    problem_page("Not saved", Some(&m.user), Some(&m.org), &e.problem())
}

pub(super) async fn revoke(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_, grant_id)): Path<(String, u64)>,
    _form: CsrfForm,
) -> Response {
    let org_id = m.org.id;
    let me = m.user.person.id;
    let admin = m.is_admin();
    let r = app
        .blocking(move |app| oauth::revoke_connection(app, org_id, me, admin, grant_id))
        .await;
    match r {
        Ok(true) => back(&m.org.slug),
        Ok(false) => bad_request(&m, "No such connection of yours in this organisation."),
        Err(e) => refused(&m, &e),
    }
}

pub(super) async fn set_policy(
    State(app): State<Arc<App>>,
    OrgAdmin(m): OrgAdmin,
    form: CsrfForm,
) -> Response {
    let Ok(access) = form
        .field("connector_access")
        .unwrap_or_default()
        .parse::<ConnectorAccess>()
    else {
        return bad_request(&m, "Choose all members, selected members or nobody.");
    };
    let slug = m.org.slug.clone();
    let r = app
        .blocking(move |app| identity::set_org_policy(&app.store, &slug, Some(access), None))
        .await;
    match r {
        Ok(_) => back(&m.org.slug),
        Err(e) => refused(&m, &e),
    }
}

pub(super) async fn set_may_connect(
    State(app): State<Arc<App>>,
    OrgAdmin(m): OrgAdmin,
    Path((_, person_id)): Path<(String, u64)>,
    form: CsrfForm,
) -> Response {
    let may = match form.field("may_connect") {
        Some("true") => true,
        Some("false") => false,
        _ => return bad_request(&m, "may_connect must be true or false."),
    };
    let org_id = m.org.id;
    let slug = m.org.slug.clone();
    let r = app
        .blocking(move |app| {
            let found = app
                .store
                .read(|tx| identity::member(tx, org_id, person_id))?;
            let Some((mem, p)) = found else {
                return Ok(false);
            };
            identity::add_member(&app.store, &slug, &p.email, mem.role, may, app.clock.now())?;
            Ok::<_, identity::IdentityError>(true)
        })
        .await;
    match r {
        Ok(true) => back(&m.org.slug),
        Ok(false) => bad_request(&m, "No such member."),
        Err(e) => refused(&m, &e),
    }
}
