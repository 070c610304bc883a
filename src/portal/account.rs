//! The portal's start page and the account page (password, second factor, terms).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::{CsrfForm, PortalUser, csrf_field, layout, page, see_other, update_session};
use crate::app::App;
use crate::http::error::ToProblem;
use crate::identity::{self, IdentityError, Role};

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
    axum::Extension(limits): super::Limits,
    user: PortalUser,
    form: CsrfForm,
) -> Response {
    if let Some(wait) = limits.login_failures.blocked(&user.person.email) {
        return crate::http::error::too_many_requests(wait);
    }
    let current = form
        .field("current_password")
        .unwrap_or_default()
        .to_owned();
    let new = form.field("new_password").unwrap_or_default().to_owned();
    let email = user.person.email.clone();
    let r = app
        .blocking(move |app| {
            identity::verify_login(&app.store, &email, &current)?;
            identity::set_password(&app.store, &email, &new)
        })
        .await;
    let (status, msg) = match &r {
        Ok(()) => (StatusCode::OK, ("Password changed.".to_owned(), false)),
        Err(IdentityError::BadCredentials) => {
            if let Some(wait) = limits.login_failures.record_failure(&user.person.email) {
                return crate::http::error::too_many_requests(wait);
            }
            (
                StatusCode::UNAUTHORIZED,
                ("The current password is wrong.".to_owned(), true),
            )
        }
        Err(e) => {
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
    let email = user.person.email.clone();
    let hash = user.session_hash;
    let r = app
        .blocking(move |app| {
            identity::reset_totp(&app.store, &email)?;
            update_session(app, &hash, |s| s.second_factor = false)?;
            Ok::<_, IdentityError>(())
        })
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
