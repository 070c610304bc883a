//! Login, second factor (with first-time enrolment), terms, logout.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use maud::{Markup, PreEscaped, html};

use super::{
    AnySession, PRE_COOKIE, SESSION_COOKIE, csrf_field, csrf_rejected, csrf_token_for, field,
    form_pairs, layout, load_session, login_step, page, safe_next, see_other, set_cookie,
    verify_csrf, with_next,
};
use crate::app::App;
use crate::http::client_ip::CallerIp;
use crate::http::error::login_refusal;
use crate::identity::{self, IdentityError, sessions};

type Params = Query<HashMap<String, String>>;

fn next_of(q: &HashMap<String, String>) -> String {
    safe_next(q.get("next").map(String::as_str))
}

fn login_form(csrf: &str, next: &str, email: &str, error: Option<&str>) -> Markup {
    html! {
        @if let Some(e) = error { p.error { (e) } }
        form #login-form method="post" action={ "/login?" (form_urlencoded::Serializer::new(String::new()).append_pair("next", next).finish()) } {
            (csrf_field(csrf))
            label { "Email" input type="email" name="email" value=(email) autocomplete="username" required; }
            label { "Password" input type="password" name="password" autocomplete="current-password" required; }
            button type="submit" { "Log in" }
        }
    }
}

pub(super) async fn login_page(
    State(app): State<Arc<App>>,
    Query(q): Params,
    headers: HeaderMap,
) -> Response {
    let next = next_of(&q);
    let existing = super::cookie(&headers, PRE_COOKIE)
        .filter(|v| v.len() == 43)
        .map(str::to_owned);
    let pre = existing
        .clone()
        .unwrap_or_else(|| crate::oauth::new_secret(""));
    let csrf = csrf_token_for(&app, pre.as_bytes());
    let mut resp = page(
        StatusCode::OK,
        layout("Log in", None, None, login_form(&csrf, &next, "", None)),
    );
    if existing.is_none() {
        append_cookie(&mut resp, set_cookie(&app, PRE_COOKIE, &pre, 3600));
    }
    resp
}

pub(super) async fn login_submit(
    State(app): State<Arc<App>>,
    CallerIp(ip): CallerIp,
    Query(q): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let next = next_of(&q);
    let form = form_pairs(&body);
    let Some(pre) = super::cookie(&headers, PRE_COOKIE) else {
        return csrf_rejected();
    };
    let csrf = csrf_token_for(&app, pre.as_bytes());
    if !verify_csrf(&csrf, field(&form, "csrf_token")) {
        return csrf_rejected();
    }
    let email = field(&form, "email").unwrap_or_default();
    let password = field(&form, "password").unwrap_or_default();
    match app
        .login
        .password_login(&app.store, email, password, ip)
        .await
    {
        Ok((token, _)) => {
            let mut resp = see_other(&with_next("/login/totp", &next));
            append_cookie(
                &mut resp,
                set_cookie(&app, SESSION_COOKIE, &token, super::SESSION_LIFETIME_SECS),
            );
            resp
        }
        Err(IdentityError::BadCredentials) => page(
            StatusCode::UNAUTHORIZED,
            layout(
                "Log in",
                None,
                None,
                login_form(&csrf, &next, email, Some("Wrong email or password.")),
            ),
        ),
        Err(e) => login_refusal(&e).unwrap_or_else(|| internal(e)),
    }
}

/// Adds a `Set-Cookie` header (the value is built from tokens and fixed attributes; one that
/// would not be a header value is dropped rather than panicking).
fn append_cookie(resp: &mut Response, cookie: String) {
    if let Ok(v) = header::HeaderValue::try_from(cookie) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

fn internal(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "portal error");
    page(
        StatusCode::INTERNAL_SERVER_ERROR,
        layout(
            "Something went wrong",
            None,
            None,
            html! { p { "The server could not complete this request. Try again later." } },
        ),
    )
}

async fn session(app: &Arc<App>, headers: &HeaderMap) -> Option<AnySession> {
    let headers = headers.clone();
    app.blocking(move |app| load_session(app, &headers)).await
}

fn qr_svg(uri: &str) -> String {
    match qrcode::QrCode::new(uri.as_bytes()) {
        Ok(code) => code
            .render::<qrcode::render::svg::Color<'_>>()
            .min_dimensions(200, 200)
            .build(),
        Err(_) => String::new(),
    }
}

fn totp_markup(s: &AnySession, next: &str, error: Option<&str>) -> Markup {
    let enrolment = identity::pending_enrolment(&s.person);
    let needs_new = s.person.totp.is_none();
    html! {
        @if let Some(e) = error { p.error { (e) } }
        @if let Some(en) = &enrolment {
            p { "Set up your second factor: scan this code with an authenticator app, then enter the 6-digit code it shows." }
            div #totp-qr { (PreEscaped(qr_svg(&en.otpauth_uri))) }
            p.muted { "Or enter this key by hand: " code { (en.secret) } }
        } @else if needs_new {
            p { "Preparing your second factor…" }
        } @else {
            p { "Enter the 6-digit code from your authenticator app." }
        }
        form #totp-form method="post" action={ "/login/totp?" (form_urlencoded::Serializer::new(String::new()).append_pair("next", next).finish()) } {
            (csrf_field(&s.csrf))
            label { "Code" input type="text" name="code" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" required; }
            button type="submit" { "Continue" }
        }
    }
}

pub(super) async fn totp_page(
    State(app): State<Arc<App>>,
    Query(q): Params,
    headers: HeaderMap,
) -> Response {
    let next = next_of(&q);
    let Some(mut s) = session(&app, &headers).await else {
        return see_other(&with_next("/login", &next));
    };
    if s.session.second_factor {
        return see_other(&login_step(&app, Some(&s), &next).unwrap_or(next));
    }
    if s.person.totp.is_none() {
        // First login: start enrolment; the same secret is shown until it is confirmed.
        let email = s.person.email.clone();
        let person = app
            .blocking(move |app| {
                identity::reset_totp(&app.store, &email)?;
                identity::find_person(&app.store, &email)
            })
            .await;
        match person {
            Ok(p) => s.person = p,
            Err(e) => return internal(e),
        }
    }
    page(
        StatusCode::OK,
        layout("Second factor", None, None, totp_markup(&s, &next, None)),
    )
}

pub(super) async fn totp_submit(
    State(app): State<Arc<App>>,
    CallerIp(ip): CallerIp,
    Query(q): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let next = next_of(&q);
    let Some(s) = session(&app, &headers).await else {
        return see_other(&with_next("/login", &next));
    };
    let form = form_pairs(&body);
    if !verify_csrf(&s.csrf, field(&form, "csrf_token")) {
        return csrf_rejected();
    }
    let code = field(&form, "code").unwrap_or_default().trim();
    let r = app
        .login
        .second_factor(&app.store, s.hash, &s.person, code, ip)
        .await;
    match r {
        Ok(person) => {
            let mut s = s;
            s.person = person;
            s.session.second_factor = true;
            see_other(&login_step(&app, Some(&s), &next).unwrap_or(next))
        }
        Err(IdentityError::BadSecondFactor) => page(
            StatusCode::UNAUTHORIZED,
            layout(
                "Second factor",
                None,
                None,
                totp_markup(&s, &next, Some("Wrong or already used code.")),
            ),
        ),
        Err(e) => login_refusal(&e).unwrap_or_else(|| internal(e)),
    }
}

pub(super) async fn terms_page(
    State(app): State<Arc<App>>,
    Query(q): Params,
    headers: HeaderMap,
) -> Response {
    let next = next_of(&q);
    let Some(s) = session(&app, &headers).await else {
        return see_other(&with_next("/login", &next));
    };
    if !s.session.second_factor {
        return see_other(&with_next("/login/totp", &next));
    }
    let version = &app.config.terms_version;
    page(
        StatusCode::OK,
        layout(
            "Terms of use",
            None,
            None,
            html! {
                p { "Terms version " strong { (version) } ". By accepting, you agree that assistants you connect act on your behalf in your organisation, and that their calls are logged." }
                @if let Some(old) = &s.person.accepted_terms { p.muted { "You accepted version " (old) " before." } }
                form #terms-form method="post" action={ "/portal/terms?" (form_urlencoded::Serializer::new(String::new()).append_pair("next", &next).finish()) } {
                    (csrf_field(&s.csrf))
                    button type="submit" name="accept" value="1" { "Accept terms" }
                }
            },
        ),
    )
}

pub(super) async fn terms_submit(
    State(app): State<Arc<App>>,
    Query(q): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let next = next_of(&q);
    let Some(s) = session(&app, &headers).await else {
        return see_other(&with_next("/login", &next));
    };
    let form = form_pairs(&body);
    if !verify_csrf(&s.csrf, field(&form, "csrf_token")) {
        return csrf_rejected();
    }
    if !s.session.second_factor {
        return see_other(&with_next("/login/totp", &next));
    }
    if field(&form, "accept").is_none() {
        return see_other(&with_next("/portal/terms", &next));
    }
    let id = s.person.id;
    let r = app
        .blocking(move |app| identity::accept_terms(&app.store, id, &app.config.terms_version))
        .await;
    match r {
        Ok(()) => see_other(&next),
        Err(e) => internal(e),
    }
}

pub(super) async fn logout(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(s) = session(&app, &headers).await else {
        return see_other("/login");
    };
    let form = form_pairs(&body);
    if !verify_csrf(&s.csrf, field(&form, "csrf_token")) {
        return csrf_rejected();
    }
    let hash = s.hash;
    if let Err(e) = app
        .blocking(move |app| sessions::end(&app.store, &hash))
        .await
    {
        return internal(e);
    }
    let mut resp = see_other("/login");
    append_cookie(&mut resp, set_cookie(&app, SESSION_COOKIE, "", 0));
    resp
}
