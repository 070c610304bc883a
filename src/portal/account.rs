//! The portal's start page and the account page (password, second factor, terms).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::i18n::{Lang, t, ta};
use super::{CsrfForm, PortalUser, csrf_field, layout, page, see_other};
use crate::app::App;
use crate::http::client_ip::CallerIp;
use crate::http::error::ToProblem;
use crate::identity::{self, IdentityError, Role, sessions};

pub(super) async fn home(State(app): State<Arc<App>>, user: PortalUser) -> Response {
    let orgs = {
        let u = user.clone();
        match app.blocking(move |app| u.organisations(app)).await {
            Ok(orgs) => orgs,
            Err(e) => return super::store_failed(Some(&user), &e),
        }
    };
    page(
        StatusCode::OK,
        layout(
            &t("home-title"),
            Some(&user),
            None,
            html! {
                @if orgs.is_empty() { p { (t("home-none")) } }
                @for (org, m) in &orgs {
                    section.card {
                        h2 { a href={ "/portal/o/" (org.slug) "/kb" } { (org.name) } " "
                            @if m.role == Role::Admin { span.badge.active { (t("role-admin")) } } }
                        nav aria-label=(org.name) {
                            ul.links {
                                @for (label, path) in super::NAV {
                                    li { a href={ "/portal/o/" (org.slug) (path) } { (t(label)) } }
                                }
                            }
                        }
                    }
                }
            },
        ),
    )
}

fn account_markup(app: &App, user: &PortalUser, message: Option<(&str, bool)>) -> maud::Markup {
    html! {
        @if let Some((m, is_error)) = message {
            p.notice.error[is_error] role="status" { (m) }
        }
        h2 { (t("language-heading")) }
        form #language-form .row method="post" action="/portal/account/language" {
            (csrf_field(&user.csrf))
            label { (t("field-language"))
                select name="language" {
                    option value="" selected[user.person.language.is_none()] { (t("language-browser")) }
                    @for l in Lang::ALL {
                        option value=(l.code()) lang=(l.code()) selected[user.person.language.as_deref() == Some(l.code())] { (l.native_name()) }
                    }
                }
            }
            button type="submit" { (t("action-save")) }
        }
        h2 { (t("password-heading")) }
        form #password-form .stack method="post" action="/portal/account/password" {
            (csrf_field(&user.csrf))
            label { (t("field-current-password")) input type="password" name="current_password" autocomplete="current-password" required; }
            label { (t("field-new-password")) input type="password" name="new_password" autocomplete="new-password" required; }
            button type="submit" { (t("action-change-password")) }
        }
        h2 { (t("totp-heading")) }
        p { (t("totp-reset-explain")) }
        form #totp-reset-form method="post" action="/portal/account/totp-reset" {
            (csrf_field(&user.csrf))
            button.secondary type="submit" { (t("action-reset-totp")) }
        }
        h2 { (t("revoke-all-heading")) }
        p { (t("revoke-all-explain")) }
        form #revoke-all-form method="post" action="/portal/account/revoke-all" {
            (csrf_field(&user.csrf))
            button.danger type="submit" { (t("action-revoke-all")) }
        }
        h2 { (t("terms-heading")) }
        p { (ta("terms-account", &[("accepted", user.person.accepted_terms.clone().unwrap_or_else(|| t("none"))), ("current", app.config.terms_version.clone())])) }
    }
}

pub(super) async fn account_page(State(app): State<Arc<App>>, user: PortalUser) -> Response {
    account_answer(&app, &user, StatusCode::OK, None)
}

/// The account page with `message` (its text, and whether it is an error) on top.
fn account_answer(
    app: &App,
    user: &PortalUser,
    status: StatusCode,
    message: Option<(&str, bool)>,
) -> Response {
    page(
        status,
        layout(
            &t("account-title"),
            Some(user),
            None,
            account_markup(app, user, message),
        ),
    )
}

/// The account page saying why an action was refused.
fn account_refused(app: &App, user: &PortalUser, e: &impl ToProblem) -> Response {
    let p = e.problem();
    account_answer(app, user, p.status, Some((&super::problem_text(&p), true)))
}

pub(super) async fn change_password(
    State(app): State<Arc<App>>,
    CallerIp(ip): CallerIp,
    user: PortalUser,
    form: CsrfForm,
) -> Response {
    let current = form.field("current_password").unwrap_or_default();
    let new = form.field("new_password").unwrap_or_default();
    let r = crate::oauth::change_password(&app, &user.person, user.session_hash, current, new, ip)
        .await;
    let (status, msg) = match &r {
        Ok(0) => (StatusCode::OK, (t("password-changed"), false)),
        Ok(n) => (
            StatusCode::OK,
            (
                ta("password-changed-others", &[("count", n.to_string())]),
                false,
            ),
        ),
        Err(IdentityError::BadCredentials) => (
            StatusCode::UNAUTHORIZED,
            (t("wrong-current-password"), true),
        ),
        Err(e) => {
            if let Some(refused) = super::limited_page(&t("account-title"), Some(&user), e) {
                return refused;
            }
            let p = e.problem();
            (p.status, (super::problem_text(&p), true))
        }
    };
    account_answer(&app, &user, status, Some((&msg.0, msg.1)))
}

pub(super) async fn reset_totp(
    State(app): State<Arc<App>>,
    user: PortalUser,
    _form: CsrfForm,
) -> Response {
    let (id, hash) = (user.person.id, user.session_hash);
    let r = app
        .blocking(move |app| sessions::reset_second_factor(&app.store, id, &hash))
        .await;
    match r {
        Ok(()) => see_other("/login/totp?next=%2Fportal%2Faccount"),
        Err(e) => account_refused(&app, &user, &e),
    }
}

/// Revokes every connection and personal access token of the person, in every organisation,
/// and ends their other sessions (this one stays); audited in each organisation.
pub(super) async fn revoke_all(
    State(app): State<Arc<App>>,
    user: PortalUser,
    _form: CsrfForm,
) -> Response {
    let (id, hash) = (user.person.id, user.session_hash);
    let by = crate::audit::Actor::person(id, &user.person.email);
    let r = app
        .blocking(move |app| {
            crate::oauth::revoke_all(&app.store, &by, id, None, Some(&hash), app.clock.now())
        })
        .await;
    match r {
        Ok(done) => {
            let message = ta(
                "revoke-all-done",
                &[
                    ("grants", done.grants.to_string()),
                    ("tokens", done.tokens.to_string()),
                    ("sessions", done.sessions.to_string()),
                ],
            );
            account_answer(&app, &user, StatusCode::OK, Some((&message, false)))
        }
        Err(e) => account_refused(&app, &user, &e),
    }
}

/// Sets the person's language (empty: follow the browser) and shows the account page in it.
pub(super) async fn set_language(
    State(app): State<Arc<App>>,
    user: PortalUser,
    form: CsrfForm,
) -> Response {
    let chosen = match form.field("language").unwrap_or_default() {
        "" => None,
        code => match Lang::parse(code) {
            Some(l) => Some(l.code()),
            None => {
                return account_answer(
                    &app,
                    &user,
                    StatusCode::BAD_REQUEST,
                    Some((&t("language-choose"), true)),
                );
            }
        },
    };
    let id = user.person.id;
    let r = app
        .blocking(move |app| identity::set_language(&app.store, id, chosen))
        .await;
    match r {
        Ok(()) => see_other("/portal/account"),
        Err(e) => super::problem_page(&t("account-title"), Some(&user), None, &e.problem()),
    }
}
