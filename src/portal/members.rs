//! Members of an organisation (admins): who they are, their role, right to connect, second
//! factor, last login and connections; invite by email (the page shows the one-time link);
//! change role and right to connect; issue a password-reset link; remove (after a
//! confirmation), which revokes the person's connections there at once. The rules (the last
//! admin stays, links are one-time and hashed) live in `identity`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use maud::{Markup, html};

use super::i18n::{moment, t, ta};
use super::{
    CsrfForm, OrgAdmin, OrgMember, csrf_field, layout, once_notice, page, refused, see_other, until,
};
use crate::app::App;
use crate::identity::{self, IdentityError, MemberChange, Membership, Person, Role};
use crate::oauth;
use crate::store::StoreError;

pub fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/portal/o/{slug}/members", get(members_page))
        .route("/portal/o/{slug}/members/invite", post(invite))
        .route("/portal/o/{slug}/members/{person_id}", post(change))
}

/// One row of the members table.
struct Row {
    membership: Membership,
    person: Person,
    /// The person's live connections here: the assistants' names.
    connections: Vec<String>,
}

fn rows(app: &App, org_id: u64, me: u64) -> Result<Vec<Row>, StoreError> {
    app.store.read(|tx| {
        let live: Vec<oauth::Connection> = oauth::connections_visible_to(tx, org_id, me, true)?
            .into_iter()
            .filter(|c| c.grant.revoked_at.is_none())
            .collect();
        Ok(identity::members(tx, org_id)?
            .into_iter()
            .map(|(membership, person)| Row {
                connections: live
                    .iter()
                    .filter(|c| c.grant.person_id == person.id)
                    .map(|c| c.client_name.clone())
                    .collect(),
                membership,
                person,
            })
            .collect())
    })
}

fn role_label(r: Role) -> String {
    match r {
        Role::Admin => t("role-admin"),
        Role::Member => t("role-member"),
    }
}

fn yes_no(b: bool) -> Markup {
    html! {
        @if b { span.badge.ok { (t("yes")) } } @else { span.badge.neutral { (t("no")) } }
    }
}

/// The page, with an optional notice (the invitation or reset link just made) on top.
fn members_markup(m: &OrgMember, rows: &[Row], notice: Option<Markup>) -> Markup {
    let slug = &m.org.slug;
    let csrf = &m.user.csrf;
    html! {
        @if let Some(n) = notice { (n) }
        div.table-wrap {
            table #members-table .cards {
                caption.muted { (t("members-caption")) }
                thead { tr {
                    th scope="col" { (t("col-person")) }
                    th scope="col" { (t("col-role")) }
                    th scope="col" { (t("col-may-connect")) }
                    th scope="col" { (t("col-second-factor")) }
                    th scope="col" { (t("col-last-login")) }
                    th scope="col" { (t("col-connections")) }
                    th scope="col" { (t("col-actions")) }
                } }
                tbody {
                    @for r in rows {
                        @let id = r.person.id;
                        tr data-email=(r.person.email) {
                            td { strong { (r.person.name) } br; span.muted { (r.person.email) } }
                            td data-label=(t("col-role")) { (role_label(r.membership.role)) }
                            td data-label=(t("col-may-connect")) { (yes_no(r.membership.may_connect)) }
                            td data-label=(t("col-second-factor")) { (yes_no(r.person.has_second_factor())) }
                            td.date data-label=(t("col-last-login")) {
                                @match r.person.last_login { Some(at) => (moment(at)), None => (t("never")) }
                            }
                            td data-label=(t("col-connections")) {
                                @if r.connections.is_empty() { span.muted { (t("none")) } }
                                @else {
                                    ul.plain { @for c in &r.connections { li { (c) } } }
                                }
                            }
                            td {
                                form.row.member-form method="post" action={ "/portal/o/" (slug) "/members/" (id) } {
                                    (csrf_field(csrf))
                                    label { (t("col-role"))
                                        select name="role" {
                                            @for role in [Role::Member, Role::Admin] {
                                                option value=(role_code(role)) selected[r.membership.role == role] { (role_label(role)) }
                                            }
                                        }
                                    }
                                    label.check {
                                        input type="checkbox" name="may_connect" value="true" checked[r.membership.may_connect];
                                        (t("col-may-connect"))
                                    }
                                    button type="submit" name="action" value="save" { (t("action-save")) }
                                    button.secondary type="submit" name="action" value="reset" { (t("action-reset-password")) }
                                    button.secondary type="submit" name="action" value="revoke_all" { (t("action-revoke-connections")) }
                                    button.danger type="submit" name="action" value="remove" { (t("action-remove")) }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 #invite { (t("invite-heading")) }
        p.muted { (t("invite-explain")) }
        form #invite-form .row method="post" action={ "/portal/o/" (slug) "/members/invite" } {
            (csrf_field(csrf))
            label { (t("field-email")) input type="email" name="email" autocomplete="off" required; }
            label { (t("col-role"))
                select name="role" {
                    option value="member" selected { (t("role-member")) }
                    option value="admin" { (t("role-admin")) }
                }
            }
            button type="submit" { (t("action-invite")) }
        }
    }
}

fn role_code(r: Role) -> &'static str {
    match r {
        Role::Admin => "admin",
        Role::Member => "member",
    }
}

async fn render(
    app: &Arc<App>,
    m: &OrgMember,
    status: StatusCode,
    notice: Option<Markup>,
) -> Response {
    let (org_id, me) = (m.org.id, m.user.person.id);
    match app.blocking(move |app| rows(app, org_id, me)).await {
        Ok(rows) => page(
            status,
            layout(
                &t("members-title"),
                Some(&m.user),
                Some(&m.org),
                members_markup(m, &rows, notice),
            ),
        ),
        Err(e) => refused(m, &e),
    }
}

async fn members_page(State(app): State<Arc<App>>, OrgAdmin(m): OrgAdmin) -> Response {
    render(&app, &m, StatusCode::OK, None).await
}

async fn invite(State(app): State<Arc<App>>, OrgAdmin(m): OrgAdmin, form: CsrfForm) -> Response {
    let email = form.field("email").unwrap_or_default().to_owned();
    let role = match form.field("role").unwrap_or("member").parse::<Role>() {
        Ok(r) => r,
        Err(e) => return refused(&m, &e),
    };
    let (org_id, by) = (m.org.id, m.actor());
    let r = app
        .blocking(move |app| {
            identity::invite(&app.store, &by, org_id, &email, role, app.clock.now())
        })
        .await;
    match r {
        Ok((inv, token)) => {
            let url = format!("{}/invite/{token}", app.public_url);
            let made = ta("invite-made", &[("email", inv.email.clone())]);
            let until = until("invite-link-explain", inv.expires_at);
            let notice = once_notice("invite-link", &made, &url, &until);
            render(&app, &m, StatusCode::OK, Some(notice)).await
        }
        Err(e) => refused(&m, &e),
    }
}

async fn change(
    State(app): State<Arc<App>>,
    OrgAdmin(m): OrgAdmin,
    Path((_, person_id)): Path<(String, String)>,
    form: CsrfForm,
) -> Response {
    // Not a number: like an id that names nothing here (no id is 0).
    let person_id: u64 = person_id.parse().unwrap_or(0);
    let (org_id, by) = (m.org.id, m.actor());
    let found = app
        .blocking(move |app| app.store.read(|tx| identity::member(tx, org_id, person_id)))
        .await;
    let (membership, person) = match found {
        Ok(Some(found)) => found,
        Ok(None) => return refused(&m, &IdentityError::NotMember(format!("#{person_id}"))),
        Err(e) => return refused(&m, &e),
    };
    match form.field("action") {
        Some("remove") if form.field("confirm") == Some("yes") => {
            let r = app
                .blocking(move |app| {
                    oauth::remove_member(&app.store, &by, org_id, person_id, app.clock.now())
                })
                .await;
            match r {
                Ok(_) => see_other(&format!("/portal/o/{}/members", m.org.slug)),
                Err(e) => refused(&m, &e),
            }
        }
        Some("remove") => {
            // The last admin is refused at once, not after the confirmation.
            let checked = app
                .blocking(move |app| {
                    app.store
                        .read(|tx| identity::check_removable(tx, &membership))
                })
                .await;
            match checked {
                Ok(()) => confirm_remove(&m, &person),
                Err(e) => refused(&m, &e),
            }
        }
        Some("reset") => {
            let email = person.email.clone();
            let r = app
                .blocking(move |app| {
                    oauth::issue_reset(&app.store, &by, Some(org_id), &email, app.clock.now())
                })
                .await;
            match r {
                Ok(token) => {
                    let url = format!("{}/reset/{token}", app.public_url);
                    let made = ta("reset-made", &[("email", person.email.clone())]);
                    let notice = once_notice("reset-link", &made, &url, &t("reset-link-explain"));
                    render(&app, &m, StatusCode::OK, Some(notice)).await
                }
                Err(e) => refused(&m, &e),
            }
        }
        Some("revoke_all") => {
            let r = app
                .blocking(move |app| {
                    oauth::revoke_all(
                        &app.store,
                        &by,
                        person_id,
                        Some(org_id),
                        None,
                        app.clock.now(),
                    )
                })
                .await;
            match r {
                Ok(done) => {
                    let notice = html! {
                        p.notice #revoke-done role="status" {
                            (ta("revoke-member-done", &[
                                ("email", person.email.clone()),
                                ("grants", done.grants.to_string()),
                                ("tokens", done.tokens.to_string()),
                            ]))
                        }
                    };
                    render(&app, &m, StatusCode::OK, Some(notice)).await
                }
                Err(e) => refused(&m, &e),
            }
        }
        Some("save") => {
            let role = match form.field("role").map(str::parse::<Role>) {
                Some(Ok(r)) => Some(r),
                None => None,
                Some(Err(e)) => return refused(&m, &e),
            };
            let change = MemberChange {
                role,
                may_connect: Some(form.field("may_connect") == Some("true")),
            };
            let r = app
                .blocking(move |app| {
                    identity::set_member(
                        &app.store,
                        &by,
                        org_id,
                        person_id,
                        change,
                        app.clock.now(),
                    )
                })
                .await;
            match r {
                Ok(_) => see_other(&format!("/portal/o/{}/members", m.org.slug)),
                Err(e) => refused(&m, &e),
            }
        }
        _ => refused(
            &m,
            &IdentityError::InvalidInput("action must be save, reset, revoke_all or remove".into()),
        ),
    }
}

/// The confirmation step of a removal: the same button again, with `confirm=yes`.
fn confirm_remove(m: &OrgMember, person: &Person) -> Response {
    let body = html! {
        div.card.narrow {
            p { (ta("remove-confirm", &[("name", person.name.clone()), ("email", person.email.clone()), ("org", m.org.name.clone())])) }
            form #remove-confirm-form .row method="post" action={ "/portal/o/" (m.org.slug) "/members/" (person.id) } {
                (csrf_field(&m.user.csrf))
                input type="hidden" name="confirm" value="yes";
                button.danger type="submit" name="action" value="remove" { (t("action-remove")) }
                a.button.secondary href={ "/portal/o/" (m.org.slug) "/members" } { (t("action-cancel")) }
            }
        }
    };
    page(
        StatusCode::OK,
        layout(&t("remove-title"), Some(&m.user), Some(&m.org), body),
    )
}
