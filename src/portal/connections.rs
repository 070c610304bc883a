//! Connections of an organisation: a person's own grants (with revoke); admins see every
//! grant of the organisation and set who may connect.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::i18n::{self, t};
use super::{CsrfForm, OrgAdmin, OrgMember, csrf_field, layout, page, refused, see_other};
use crate::app::App;
use crate::identity::{self, ConnectorAccess};
use crate::oauth;
use crate::store::StoreError;

fn fmt_time(at: Option<jiff::Timestamp>) -> String {
    at.map(i18n::date_time).unwrap_or_else(|| t("never"))
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
        p { (t("connections-url")) " " code { (app.connector_url()) } }
        h2 { @if m.is_admin() { (t("connections-all")) } @else { (t("connections-yours")) } }
        @if rows.is_empty() { p.muted { (t("connections-none")) } }
        @else {
            div.table-wrap { table #connections {
                thead { tr { th scope="col" { (t("col-client")) } @if m.is_admin() { th scope="col" { (t("col-person")) } } th scope="col" { (t("col-scopes")) } th scope="col" { (t("run-created")) } th scope="col" { (t("col-last-used")) } th scope="col" { (t("col-actions")) } } }
                tbody { @for r in &rows {
                    tr {
                        td { (r.client_name) }
                        @if m.is_admin() { td { (r.person_email) } }
                        td { (r.grant.scopes.join(", ")) }
                        td.date { (fmt_time(Some(r.grant.created_at))) }
                        td.date { (fmt_time(r.last_used)) }
                        td {
                            @if r.grant.revoked_at.is_some() { span.badge.revoked { (t("connection-revoked")) } }
                            @else {
                                form.inline method="post" action={ "/portal/o/" (slug) "/connections/" (r.grant.id) "/revoke" } {
                                    (csrf_field(csrf))
                                    button.danger type="submit" { (t("connection-revoke")) }
                                }
                            }
                        }
                    }
                } }
            } }
        }
        @if m.is_admin() {
            h2 #policy { (t("policy-heading")) }
            form #policy-form .row method="post" action={ "/portal/o/" (slug) "/policy" } {
                (csrf_field(csrf))
                fieldset.choices {
                    legend.visually-hidden { (t("policy-heading")) }
                    @for (value, label) in [("all_members", "policy-all-members"), ("selected_members", "policy-selected-members"), ("nobody", "policy-nobody")] {
                        label.check { input type="radio" name="connector_access" value=(value)
                            checked[access_value(m.org.connector_access) == value]; (t(label)) }
                    }
                }
                button type="submit" { (t("action-save")) }
            }
            div.table-wrap { table #members {
                thead { tr { th scope="col" { (t("col-member")) } th scope="col" { (t("col-role")) } th scope="col" { (t("col-may-connect")) } th scope="col" { (t("col-actions")) } } }
                tbody { @for (mem, p) in &members {
                    tr {
                        td { (p.email) }
                        td { @if mem.role == identity::Role::Admin { (t("role-admin")) } @else { (t("role-member")) } }
                        td { @if mem.may_connect { span.badge.ok { (t("yes")) } } @else { span.badge.neutral { (t("no")) } } }
                        td {
                            form.inline method="post" action={ "/portal/o/" (slug) "/members/" (p.id) "/may-connect" } {
                                (csrf_field(csrf))
                                input type="hidden" name="may_connect" value=(if mem.may_connect { "false" } else { "true" });
                                button.secondary type="submit" { @if mem.may_connect { (t("connection-disallow")) } @else { (t("connection-allow")) } }
                            }
                        }
                    }
                } }
            } }
        }
    };
    page(
        StatusCode::OK,
        layout(&t("nav-connections"), Some(&m.user), Some(&m.org), body),
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
            &t("not-saved"),
            Some(&m.user),
            Some(&m.org),
            html! { p.notice.error #error { (msg) } },
        ),
    )
}

/// A refused change (or a failure), as `http::error` maps it.
pub(super) async fn revoke(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_, grant_id)): Path<(String, String)>,
    _form: CsrfForm,
) -> Response {
    // Not a number: like an id that names nothing here (no id is 0).
    let grant_id: u64 = grant_id.parse().unwrap_or(0);
    let org_id = m.org.id;
    let me = m.user.person.id;
    let admin = m.is_admin();
    let r = app
        .blocking(move |app| oauth::revoke_connection(app, org_id, me, admin, grant_id))
        .await;
    match r {
        Ok(true) => back(&m.org.slug),
        Ok(false) => bad_request(&m, &t("connection-not-found")),
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
        return bad_request(&m, &t("policy-choose"));
    };
    let (slug, by) = (m.org.slug.clone(), m.actor());
    let r = app
        .blocking(move |app| {
            identity::set_org_policy(&app.store, &by, &slug, Some(access), None, app.clock.now())
        })
        .await;
    match r {
        Ok(_) => back(&m.org.slug),
        Err(e) => refused(&m, &e),
    }
}

pub(super) async fn set_may_connect(
    State(app): State<Arc<App>>,
    OrgAdmin(m): OrgAdmin,
    Path((_, person_id)): Path<(String, String)>,
    form: CsrfForm,
) -> Response {
    // Not a number: like an id that names nothing here (no id is 0).
    let person_id: u64 = person_id.parse().unwrap_or(0);
    let may = match form.field("may_connect") {
        Some("true") => true,
        Some("false") => false,
        _ => return bad_request(&m, &t("may-connect-bad")),
    };
    let (org_id, by) = (m.org.id, m.actor());
    let change = identity::MemberChange {
        role: None,
        may_connect: Some(may),
    };
    let r = app
        .blocking(move |app| {
            identity::set_member(&app.store, &by, org_id, person_id, change, app.clock.now())
        })
        .await;
    match r {
        Ok(_) => back(&m.org.slug),
        Err(identity::IdentityError::NotMember(_)) => bad_request(&m, &t("member-not-found")),
        Err(e) => refused(&m, &e),
    }
}
