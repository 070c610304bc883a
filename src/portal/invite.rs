//! One-time links, one flow for both kinds: accepting an invitation (`/invite/<token>`: name
//! and password twice — or, for an address that already has an account, its password — then
//! the second-factor enrolment and the terms as at a first login) and an admin-issued password
//! reset (`/reset/<token>`: a new password twice, then a new second factor). Opening, the form,
//! checking the two passwords, refusals and the session that follows are shared; a [`Link`]
//! says what differs. Used, expired and unknown links say so. The forms' CSRF tokens are bound
//! to the link itself.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use maud::{Markup, html};

use super::i18n::{date_time, t, ta};
use super::{
    SESSION_COOKIE, SESSION_LIFETIME_SECS, UncheckedForm, append_cookie, csrf_field,
    csrf_token_for, layout, limited_page, page, problem_text, see_other, set_cookie,
};
use crate::app::App;
use crate::http::client_ip::CallerIp;
use crate::http::error::ToProblem;
use crate::identity::{self, IdentityError, hash_secret};

pub fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/invite/{token}", get(invite_page).post(invite_submit))
        .route("/reset/{token}", get(reset_page).post(reset_submit))
}

/// An invitation's page. Its sign-in buttons carry a token bound to this browser's pre-login
/// cookie, set here when it has none: a page elsewhere cannot send someone through a
/// provider to accept an invitation they never opened.
async fn invite_page(
    State(app): State<Arc<App>>,
    Path(token): Path<String>,
    headers: HeaderMap,
) -> Response {
    let (pre, new) = super::pre_login(&headers);
    let oidc = csrf_token_for(&app, pre.as_bytes());
    let mut resp = show(&app, Link::Invite, &token, Some(&oidc)).await;
    if new {
        append_cookie(&mut resp, super::pre_login_cookie(&app, &pre));
    }
    resp
}

async fn invite_submit(
    State(app): State<Arc<App>>,
    Path(token): Path<String>,
    CallerIp(ip): CallerIp,
    headers: HeaderMap,
    form: UncheckedForm,
) -> Response {
    // Without the cookie the page is shown again without the providers' buttons, which
    // could not start.
    let oidc = super::pre_login_csrf(&app, &headers);
    submit(&app, Link::Invite, &token, oidc.as_deref(), ip, form).await
}

async fn reset_page(State(app): State<Arc<App>>, Path(token): Path<String>) -> Response {
    show(&app, Link::Reset, &token, None).await
}

async fn reset_submit(
    State(app): State<Arc<App>>,
    Path(token): Path<String>,
    CallerIp(ip): CallerIp,
    form: UncheckedForm,
) -> Response {
    submit(&app, Link::Reset, &token, None, ip, form).await
}

/// The kind of a one-time link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Invite,
    Reset,
}

impl Link {
    fn action(self, token: &str) -> String {
        match self {
            Link::Invite => format!("/invite/{token}"),
            Link::Reset => format!("/reset/{token}"),
        }
    }

    fn title(self) -> String {
        match self {
            Link::Invite => t("invite-title"),
            Link::Reset => t("reset-title"),
        }
    }

    /// The form's id (a contract name: browser tests fill it in).
    fn form_id(self) -> &'static str {
        match self {
            Link::Invite => "invite-accept-form",
            Link::Reset => "reset-form",
        }
    }

    fn button(self) -> String {
        match self {
            Link::Invite => t("action-accept-invitation"),
            Link::Reset => t("action-set-password"),
        }
    }
}

/// What an open link shows around its form.
struct Opened {
    /// Who invites to what, or whose password is set.
    intro: String,
    /// Until when the link works.
    until: String,
    /// An invitation for an address that already has an account: its password confirms.
    existing: bool,
    /// The address the link is for (the login limits count by it).
    email: String,
}

/// Opens a link without using it: refused when it is unknown, used or expired.
async fn open(app: &Arc<App>, link: Link, token: &str) -> Result<Opened, IdentityError> {
    let tk = token.to_owned();
    match link {
        Link::Invite => {
            let (inv, org, existing) = app
                .blocking(move |app| identity::open_invitation(&app.store, &tk, app.clock.now()))
                .await?;
            Ok(Opened {
                intro: ta("invite-welcome", &[("org", org.name)]),
                until: ta(
                    "invite-valid-until",
                    &[
                        ("email", inv.email.clone()),
                        ("until", date_time(inv.expires_at)),
                    ],
                ),
                existing,
                email: inv.email,
            })
        }
        Link::Reset => {
            let person = app
                .blocking(move |app| identity::open_reset(&app.store, &tk, app.clock.now()))
                .await?;
            Ok(Opened {
                intro: ta("reset-intro", &[("email", person.email.clone())]),
                until: t("reset-valid"),
                existing: false,
                email: person.email,
            })
        }
    }
}

fn link_csrf(app: &App, token: &str) -> String {
    csrf_token_for(app, &hash_secret(token))
}

/// A refused link or form: used and expired links get their own words (410).
fn refused(link: Link, e: &IdentityError) -> Response {
    if let Some(limited) = limited_page(&link.title(), None, e) {
        return limited;
    }
    let p = e.problem();
    if p.is_internal() {
        return super::internal_page(p.status, None, None);
    }
    let body = html! {
        p.notice.error #error role="alert" { (problem_text(&p)) }
        @if matches!(e, IdentityError::LinkUsed | IdentityError::LinkExpired | IdentityError::LinkUnknown) {
            p { (t("link-ask-admin")) " " a href="/login" { (t("action-log-in")) } }
        }
    };
    page(p.status, layout(&link.title(), None, None, body))
}

fn password_fields() -> Markup {
    html! {
        label { (t("field-password")) input type="password" name="password" autocomplete="new-password" minlength="10" required; }
        label { (t("field-password-again")) input type="password" name="password_again" autocomplete="new-password" minlength="10" required; }
        p.muted { (t("password-rules")) }
    }
}

/// The link's page: the form (with what was typed and why it was refused, when it was), and
/// with `oidc` (an invitation's: the CSRF token bound to the pre-login cookie) the providers'
/// buttons.
fn form_page(
    app: &App,
    (link, token, oidc): (Link, &str, Option<&str>),
    opened: &Opened,
    name: &str,
    error: Option<&str>,
) -> Response {
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let body = html! {
        div.card.narrow {
            p { (opened.intro) }
            @if let Some(e) = error { p.notice.error #error role="alert" { (e) } }
            form id=(link.form_id()) .stack method="post" action=(link.action(token)) {
                (csrf_field(&link_csrf(app, token)))
                @match (link, opened.existing) {
                    (Link::Invite, true) => {
                        p.muted { (t("invite-existing-account")) }
                        input type="hidden" name="name" value="";
                        label { (t("field-password")) input type="password" name="password" autocomplete="current-password" required; }
                    }
                    (Link::Invite, false) => {
                        label { (t("field-name")) input type="text" name="name" value=(name) autocomplete="name" maxlength="200" required; }
                        (password_fields())
                    }
                    (Link::Reset, _) => (password_fields()),
                }
                button type="submit" { (link.button()) }
            }
        }
        @if let Some(csrf) = oidc { (super::oidc::buttons(app, "/portal", Some((token, csrf)))) }
        p.muted { (opened.until) }
    };
    page(status, layout(&link.title(), None, None, body))
}

async fn show(app: &Arc<App>, link: Link, token: &str, oidc: Option<&str>) -> Response {
    match open(app, link, token).await {
        Ok(opened) => form_page(app, (link, token, oidc), &opened, "", None),
        Err(e) => refused(link, &e),
    }
}

/// Uses the link: the passwords must agree, then the domain accepts the invitation or sets the
/// new password — on the password-hashing threads, under the login limits (a wrong password of
/// an existing account counts as a failed login) — and the person continues, logged in, to the
/// second factor.
async fn submit(
    app: &Arc<App>,
    link: Link,
    token: &str,
    oidc: Option<&str>,
    ip: IpAddr,
    form: UncheckedForm,
) -> Response {
    let form = match form.verify(&link_csrf(app, token)) {
        Ok(f) => f,
        Err(rejected) => return rejected.into_response(),
    };
    let name = form.field("name").unwrap_or_default().to_owned();
    let password = form.field("password").unwrap_or_default().to_owned();
    let opened = match open(app, link, token).await {
        Ok(o) => o,
        Err(e) => return refused(link, &e),
    };
    let again =
        |message: String| form_page(app, (link, token, oidc), &opened, &name, Some(&message));
    if !opened.existing && form.field("password_again") != Some(password.as_str()) {
        return again(t("passwords-differ"));
    }
    let (tk, n, a) = (token.to_owned(), name.clone(), app.clone());
    let used = app
        .login
        .password_step(&opened.email, ip, move || {
            let now = a.clock.now();
            let person = match link {
                Link::Invite => identity::accept_invitation(&a.store, &tk, &n, &password, now)?,
                Link::Reset => crate::oauth::use_reset(&a.store, &tk, &password, now)?,
            };
            // Logged in by the link (it proved the password); the second factor comes next.
            Ok(identity::sessions::create(&a.store, person.id, now)?)
        })
        .await;
    match used {
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
        Err(
            e @ (IdentityError::WeakPassword(_)
            | IdentityError::InvalidInput(_)
            | IdentityError::BadCredentials),
        ) => again(problem_text(&e.problem())),
        Err(e) => refused(link, &e),
    }
}
