//! The portal's start page and the account page (password, second factor, terms).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::{CsrfForm, PortalUser, csrf_field, layout, page, see_other};
use crate::app::App;
use crate::http::client_ip::CallerIp;
use crate::http::error::{ToProblem, login_refusal};
use crate::identity::{IdentityError, Role, sessions};

pub(super) async fn home(State(app): State<Arc<App>>, user: PortalUser) -> Response {
    let orgs = {
        let u = user.clone();
        app.blocking(move |app| u.organisations(app)).await
    };
    page(
        StatusCode::OK,
        layout(
            "Your organisations",
            Some(&user),
            None,
            html! {
                @if orgs.is_empty() { p { "You are not a member of any organisation yet." } }
                ul {
                    @for (org, m) in &orgs {
                        li {
                            (org.name) " "
                            span.muted { @if m.role == Role::Admin { "(admin)" } }
                            " — "
                            @for (label, path) in super::NAV {
                                a href={ "/portal/o/" (org.slug) (path) } { (label) } " "
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
            p class=(if is_error { "error" } else { "muted" }) { (m) }
        }
        h2 { "Password" }
        form #password-form method="post" action="/portal/account/password" {
            (csrf_field(&user.csrf))
            label { "Current password" input type="password" name="current_password" autocomplete="current-password" required; }
            label { "New password" input type="password" name="new_password" autocomplete="new-password" required; }
            button type="submit" { "Change password" }
        }
        h2 { "Second factor" }
        p { "Resetting the second factor logs this session out of it; you then set up a new authenticator entry." }
        form #totp-reset-form method="post" action="/portal/account/totp-reset" {
            (csrf_field(&user.csrf))
            button type="submit" { "Reset second factor" }
        }
        h2 { "Terms" }
        p { "You accepted terms version " (user.person.accepted_terms.as_deref().unwrap_or("none"))
            "; the current version is " (app.config.terms_version) "." }
    }
}

pub(super) async fn account_page(State(app): State<Arc<App>>, user: PortalUser) -> Response {
    page(
        StatusCode::OK,
        layout(
            "Account",
            Some(&user),
            None,
            account_markup(&app, &user, None),
        ),
    )
}

pub(super) async fn change_password(
    State(app): State<Arc<App>>,
    CallerIp(ip): CallerIp,
    user: PortalUser,
    form: CsrfForm,
) -> Response {
    let current = form.field("current_password").unwrap_or_default();
    let new = form.field("new_password").unwrap_or_default();
    let r = app
        .login
        .change_password(
            &app.store,
            &user.person,
            user.session_hash,
            current,
            new,
            ip,
        )
        .await;
    let (status, msg) = match &r {
        Ok(0) => (StatusCode::OK, ("Password changed.".to_owned(), false)),
        Ok(n) => (
            StatusCode::OK,
            (
                format!("Password changed; {n} other session(s) were logged out."),
                false,
            ),
        ),
        Err(IdentityError::BadCredentials) => (
            StatusCode::UNAUTHORIZED,
            ("The current password is wrong.".to_owned(), true),
        ),
        Err(e) => {
            if let Some(refused) = login_refusal(e) {
                return refused;
            }
            let p = e.problem();
            (p.status, (p.message, true))
        }
    };
    page(
        status,
        layout(
            "Account",
            Some(&user),
            None,
            account_markup(&app, &user, Some((&msg.0, msg.1))),
        ),
    )
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
        Err(e) => {
            let p = e.problem();
            page(
                p.status,
                layout(
                    "Account",
                    Some(&user),
                    None,
                    account_markup(&app, &user, Some((&p.message, true))),
                ),
            )
        }
    }
}
