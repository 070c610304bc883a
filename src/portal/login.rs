//! Login, second factor (with first-time enrolment), terms, logout. The checks and their
//! limits are the domain's (`identity::LoginGuard`); these handlers parse and render.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, PreEscaped, html};

use super::form::SessionCsrf;
use super::i18n::{t, ta};
use super::{
    AnySession, CsrfForm, ReadSession, SESSION_COOKIE, UncheckedForm, append_cookie, csrf_field,
    csrf_rejected, csrf_token_for, layout, limited_page, login_step, page, problem_page,
    request_session, safe_next, see_other, set_cookie, store_failed, with_next,
};
use crate::app::App;
use crate::http::client_ip::CallerIp;
use crate::http::error::ToProblem;
use crate::identity::{self, IdentityError, sessions};

type Params = Query<HashMap<String, String>>;

fn next_of(q: &HashMap<String, String>) -> String {
    safe_next(q.get("next").map(String::as_str))
}

fn login_form(csrf: &str, next: &str, email: &str, error: Option<&str>) -> Markup {
    html! {
        @if let Some(e) = error { p.notice.error #error { (e) } }
        form #login-form .stack.card method="post" action={ "/login?" (form_urlencoded::Serializer::new(String::new()).append_pair("next", next).finish()) } {
            (csrf_field(csrf))
            label { (t("field-email")) input type="email" name="email" value=(email) autocomplete="username" required; }
            label { (t("field-password")) input type="password" name="password" autocomplete="current-password" required; }
            button type="submit" { (t("action-log-in")) }
        }
    }
}

/// The login page's body: the password form and a button per sign-in provider.
fn login_body(app: &App, csrf: &str, next: &str, email: &str, error: Option<&str>) -> Markup {
    html! {
        (login_form(csrf, next, email, error))
        (super::oidc::buttons(app, next, None))
    }
}

pub(super) async fn login_page(
    State(app): State<Arc<App>>,
    Query(q): Params,
    headers: HeaderMap,
) -> Response {
    let next = next_of(&q);
    let (pre, new) = super::pre_login(&headers);
    let csrf = csrf_token_for(&app, pre.as_bytes());
    let mut resp = page(
        StatusCode::OK,
        layout(
            &t("login-title"),
            None,
            None,
            login_body(&app, &csrf, &next, "", None),
        ),
    );
    if new {
        append_cookie(&mut resp, super::pre_login_cookie(&app, &pre));
    }
    resp
}

pub(super) async fn login_submit(
    State(app): State<Arc<App>>,
    CallerIp(ip): CallerIp,
    Query(q): Params,
    headers: HeaderMap,
    form: UncheckedForm,
) -> Response {
    let next = next_of(&q);
    // The login form's token is bound to the pre-login cookie: there is no session yet.
    let Some(csrf) = super::pre_login_csrf(&app, &headers) else {
        return csrf_rejected();
    };
    let form = match form.verify(&csrf) {
        Ok(f) => f,
        Err(rejected) => return rejected.into_response(),
    };
    let email = form.field("email").unwrap_or_default();
    let password = form.field("password").unwrap_or_default();
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
                &t("login-title"),
                None,
                None,
                login_body(&app, &csrf, &next, email, Some(&t("wrong-login"))),
            ),
        ),
        Err(e) => limited_page(&t("login-title"), None, &e)
            .unwrap_or_else(|| refused(&t("login-title"), &e)),
    }
}

/// A refused or failed step of the login, as `http::error` maps it.
fn refused(title: &str, e: &impl ToProblem) -> Response {
    problem_page(title, None, None, &e.problem())
}

/// The request's session, if any; a store that fails answers with its error page.
async fn session(
    app: &Arc<App>,
    read: Option<&ReadSession>,
    headers: &HeaderMap,
) -> Result<Option<AnySession>, Response> {
    request_session(app, read, headers)
        .await
        .map_err(|e| store_failed(None, &e))
}

/// A session part-way through the login (second factor or terms still to come) and the
/// `next` of the query: where to go when the login is complete. Without a session: to the
/// login page. A [`CsrfForm`] after it checks the form against this session.
pub(super) struct LoginStep {
    s: AnySession,
    next: String,
}

impl FromRequestParts<Arc<App>> for LoginStep {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Response> {
        // Like `Query<HashMap<…>>`: the last `next` counts.
        let next = parts.uri.query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .filter(|(k, _)| k == "next")
                .map(|(_, v)| v.into_owned())
                .last()
        });
        let next = safe_next(next.as_deref());
        let Some(s) = session(app, parts.extensions.get(), &parts.headers).await? else {
            return Err(see_other(&with_next("/login", &next)));
        };
        parts.extensions.insert(SessionCsrf(s.csrf.clone()));
        Ok(LoginStep { s, next })
    }
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
        @if let Some(e) = error { p.notice.error #error { (e) } }
        @if let Some(en) = &enrolment {
            p { (t("totp-setup")) }
            div #totp-qr .qr role="img" aria-label=(t("totp-qr-label")) { (PreEscaped(qr_svg(&en.otpauth_uri))) }
            p { (t("totp-by-hand")) " " code #totp-secret { (en.secret) } }
        } @else if needs_new {
            p { (t("totp-preparing")) }
        } @else {
            p { (t("totp-enter")) }
        }
        form #totp-form .stack method="post" action={ "/login/totp?" (form_urlencoded::Serializer::new(String::new()).append_pair("next", next).finish()) } {
            (csrf_field(&s.csrf))
            label { (t("field-code")) input type="text" name="code" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" required; }
            button type="submit" { (t("action-continue")) }
        }
    }
}

pub(super) async fn totp_page(
    State(app): State<Arc<App>>,
    LoginStep { mut s, next }: LoginStep,
) -> Response {
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
            Err(e) => return refused(&t("totp-title"), &e),
        }
    }
    page(
        StatusCode::OK,
        layout(&t("totp-title"), None, None, totp_markup(&s, &next, None)),
    )
}

pub(super) async fn totp_submit(
    State(app): State<Arc<App>>,
    CallerIp(ip): CallerIp,
    LoginStep { s, next }: LoginStep,
    form: CsrfForm,
) -> Response {
    let code = form.field("code").unwrap_or_default().trim();
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
                &t("totp-title"),
                None,
                None,
                totp_markup(&s, &next, Some(&t("wrong-code"))),
            ),
        ),
        Err(e) => limited_page(&t("totp-title"), None, &e)
            .unwrap_or_else(|| refused(&t("totp-title"), &e)),
    }
}

pub(super) async fn terms_page(
    State(app): State<Arc<App>>,
    LoginStep { s, next }: LoginStep,
) -> Response {
    if !s.session.second_factor {
        return see_other(&with_next("/login/totp", &next));
    }
    let version = &app.config.terms_version;
    page(
        StatusCode::OK,
        layout(
            &t("terms-title"),
            None,
            None,
            html! {
                div.card { p { (ta("terms-text", &[("version", version.clone())])) } }
                @if let Some(old) = &s.person.accepted_terms { p.muted { (ta("terms-before", &[("version", old.clone())])) } }
                form #terms-form method="post" action={ "/portal/terms?" (form_urlencoded::Serializer::new(String::new()).append_pair("next", &next).finish()) } {
                    (csrf_field(&s.csrf))
                    button type="submit" name="accept" value="1" { (t("action-accept-terms")) }
                }
            },
        ),
    )
}

pub(super) async fn terms_submit(
    State(app): State<Arc<App>>,
    LoginStep { s, next }: LoginStep,
    form: CsrfForm,
) -> Response {
    if !s.session.second_factor {
        return see_other(&with_next("/login/totp", &next));
    }
    if form.field("accept").is_none() {
        return see_other(&with_next("/portal/terms", &next));
    }
    let id = s.person.id;
    let r = app
        .blocking(move |app| identity::accept_terms(&app.store, id, &app.config.terms_version))
        .await;
    match r {
        Ok(()) => see_other(&next),
        Err(e) => refused(&t("terms-title"), &e),
    }
}

pub(super) async fn logout(
    State(app): State<Arc<App>>,
    read: Option<Extension<ReadSession>>,
    headers: HeaderMap,
    form: UncheckedForm,
) -> Response {
    let s = match session(&app, read.as_deref(), &headers).await {
        Ok(Some(s)) => s,
        Ok(None) => return see_other("/login"),
        Err(failed) => return failed,
    };
    if let Err(rejected) = form.verify(&s.csrf) {
        return rejected.into_response();
    }
    let hash = s.hash;
    if let Err(e) = app
        .blocking(move |app| sessions::end(&app.store, &hash))
        .await
    {
        return refused(&t("action-log-out"), &e);
    }
    let mut resp = see_other("/login");
    append_cookie(&mut resp, set_cookie(&app, SESSION_COOKIE, "", 0));
    resp
}
