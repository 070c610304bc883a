//! One-time links: accepting an invitation (`/invite/<token>`: name and password twice, then
//! the second-factor enrolment and the terms as at a first login) and an admin-issued password
//! reset (`/reset/<token>`: a new password twice, then a new second factor). Used, expired and
//! unknown links say so. The forms' CSRF tokens are bound to the link itself.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use maud::{Markup, html};

use super::i18n::{date_time, t, ta};
use super::{
    SESSION_COOKIE, SESSION_LIFETIME_SECS, UncheckedForm, csrf_field, csrf_token_for, layout, page,
    problem_text, see_other, set_cookie,
};
use crate::app::App;
use crate::http::error::ToProblem;
use crate::identity::{self, IdentityError, hash_secret};

pub fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/invite/{token}", get(invite_page).post(invite_submit))
        .route("/reset/{token}", get(reset_page).post(reset_submit))
}

fn link_csrf(app: &App, token: &str) -> String {
    csrf_token_for(app, &hash_secret(token))
}

/// A refused link or form: used and expired links get their own words (410).
fn refused(title: &str, e: &IdentityError) -> Response {
    let p = e.problem();
    let body = if p.is_internal() {
        html! { p.notice.error { (t("internal-error")) } }
    } else {
        html! {
            p.notice.error #error { (problem_text(&p)) }
            @if matches!(e, IdentityError::LinkUsed | IdentityError::LinkExpired | IdentityError::LinkUnknown) {
                p { (t("link-ask-admin")) " " a href="/login" { (t("action-log-in")) } }
            }
        }
    };
    page(p.status, layout(title, None, None, body))
}

fn password_fields(autocomplete: &str) -> Markup {
    html! {
        label { (t("field-password")) input type="password" name="password" autocomplete=(autocomplete) minlength="10" required; }
        label { (t("field-password-again")) input type="password" name="password_again" autocomplete=(autocomplete) minlength="10" required; }
        p.muted { (t("password-rules")) }
    }
}

fn invite_form(
    app: &App,
    token: &str,
    org: &str,
    existing: bool,
    name: &str,
    error: Option<&str>,
) -> Markup {
    html! {
        div.card.narrow {
            p { (ta("invite-welcome", &[("org", org.to_owned())])) }
            @if let Some(e) = error { p.notice.error #error { (e) } }
            form #invite-accept-form .stack method="post" action={ "/invite/" (token) } {
                (csrf_field(&link_csrf(app, token)))
                @if existing {
                    p.muted { (t("invite-existing-account")) }
                    input type="hidden" name="name" value="";
                    label { (t("field-password")) input type="password" name="password" autocomplete="current-password" required; }
                } @else {
                    label { (t("field-name")) input type="text" name="name" value=(name) autocomplete="name" maxlength="200" required; }
                    (password_fields("new-password"))
                }
                button type="submit" { (t("action-accept-invitation")) }
            }
        }
    }
}

async fn invite_page(State(app): State<Arc<App>>, Path(token): Path<String>) -> Response {
    let tk = token.clone();
    let r = app
        .blocking(move |app| identity::open_invitation(&app.store, &tk, app.clock.now()))
        .await;
    match r {
        Ok((inv, org, existing)) => page(
            StatusCode::OK,
            layout(
                &t("invite-title"),
                None,
                None,
                html! {
                    (invite_form(&app, &token, &org.name, existing, "", None))
                    p.muted { (ta("invite-valid-until", &[("email", inv.email), ("until", date_time(inv.expires_at))])) }
                },
            ),
        ),
        Err(e) => refused(&t("invite-title"), &e),
    }
}

/// Logs the person in (password checked by the link) and sends them to the second factor.
fn start_session(app: &App, person_id: u64) -> Response {
    match identity::sessions::create(&app.store, person_id, app.clock.now()) {
        Ok(session) => {
            let mut resp = see_other("/login/totp?next=%2Fportal");
            if let Ok(v) = header::HeaderValue::try_from(set_cookie(
                app,
                SESSION_COOKIE,
                &session,
                SESSION_LIFETIME_SECS,
            )) {
                resp.headers_mut().append(header::SET_COOKIE, v);
            }
            resp
        }
        Err(e) => refused(&t("invite-title"), &IdentityError::Store(e)),
    }
}

async fn invite_submit(
    State(app): State<Arc<App>>,
    Path(token): Path<String>,
    form: UncheckedForm,
) -> Response {
    let form = match form.verify(&link_csrf(&app, &token)) {
        Ok(f) => f,
        Err(rejected) => return rejected.into_response(),
    };
    let name = form.field("name").unwrap_or_default().to_owned();
    let password = form.field("password").unwrap_or_default().to_owned();
    let again = form.field("password_again");
    let tk = token.clone();
    let opened = app
        .blocking(move |app| identity::open_invitation(&app.store, &tk, app.clock.now()))
        .await;
    let (_, org, existing) = match opened {
        Ok(found) => found,
        Err(e) => return refused(&t("invite-title"), &e),
    };
    let again_form = |message: String| {
        page(
            StatusCode::BAD_REQUEST,
            layout(
                &t("invite-title"),
                None,
                None,
                invite_form(&app, &token, &org.name, existing, &name, Some(&message)),
            ),
        )
    };
    if !existing && again != Some(password.as_str()) {
        return again_form(t("passwords-differ"));
    }
    let (tk, n) = (token.clone(), name.clone());
    let r = app
        .blocking(move |app| {
            identity::accept_invitation(&app.store, &tk, &n, &password, app.clock.now())
        })
        .await;
    match r {
        Ok(person) => {
            let id = person.id;
            app.blocking(move |app| start_session(app, id)).await
        }
        Err(
            e @ (IdentityError::WeakPassword(_)
            | IdentityError::InvalidInput(_)
            | IdentityError::BadCredentials),
        ) => again_form(problem_text(&e.problem())),
        Err(e) => refused(&t("invite-title"), &e),
    }
}

fn reset_form(app: &App, token: &str, email: &str, error: Option<&str>) -> Markup {
    html! {
        div.card.narrow {
            p { (ta("reset-intro", &[("email", email.to_owned())])) }
            @if let Some(e) = error { p.notice.error #error { (e) } }
            form #reset-form .stack method="post" action={ "/reset/" (token) } {
                (csrf_field(&link_csrf(app, token)))
                (password_fields("new-password"))
                button type="submit" { (t("action-set-password")) }
            }
        }
    }
}

async fn reset_page(State(app): State<Arc<App>>, Path(token): Path<String>) -> Response {
    let tk = token.clone();
    let r = app
        .blocking(move |app| identity::open_reset(&app.store, &tk, app.clock.now()))
        .await;
    match r {
        Ok(person) => page(
            StatusCode::OK,
            layout(
                &t("reset-title"),
                None,
                None,
                reset_form(&app, &token, &person.email, None),
            ),
        ),
        Err(e) => refused(&t("reset-title"), &e),
    }
}

async fn reset_submit(
    State(app): State<Arc<App>>,
    Path(token): Path<String>,
    form: UncheckedForm,
) -> Response {
    let form = match form.verify(&link_csrf(&app, &token)) {
        Ok(f) => f,
        Err(rejected) => return rejected.into_response(),
    };
    let password = form.field("password").unwrap_or_default().to_owned();
    let again = form.field("password_again").unwrap_or_default();
    let tk = token.clone();
    let opened = app
        .blocking(move |app| identity::open_reset(&app.store, &tk, app.clock.now()))
        .await;
    let person = match opened {
        Ok(p) => p,
        Err(e) => return refused(&t("reset-title"), &e),
    };
    let again_form = |message: String| {
        page(
            StatusCode::BAD_REQUEST,
            layout(
                &t("reset-title"),
                None,
                None,
                reset_form(&app, &token, &person.email, Some(&message)),
            ),
        )
    };
    if password != again {
        return again_form(t("passwords-differ"));
    }
    let tk = token.clone();
    let r = app
        .blocking(move |app| identity::use_reset(&app.store, &tk, &password, app.clock.now()))
        .await;
    match r {
        Ok(person) => {
            let id = person.id;
            app.blocking(move |app| start_session(app, id)).await
        }
        Err(e @ IdentityError::WeakPassword(_)) => again_form(problem_text(&e.problem())),
        Err(e) => refused(&t("reset-title"), &e),
    }
}
