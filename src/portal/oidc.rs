//! Sign-in with an OpenID Connect provider: the login page's (and an invitation's) buttons
//! `#oidc-<id>`, the start (`/login/oidc/<id>`, which sends the browser to the provider with
//! the flow cookie) and the redirect URI (`/login/oidc/<id>/callback`). The checks, their
//! order and limits are the domain's (`identity::oidc`); these handlers parse and render. A
//! refused sign-in gets a page saying why and no session.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use jiff::Timestamp;
use maud::{Markup, html};

use super::i18n::t;
use super::{
    AnySession, SESSION_COOKIE, SESSION_LIFETIME_SECS, append_cookie, csrf_rejected,
    csrf_token_for, layout, limited_page, login_step, page, problem_text, safe_next, see_other,
    set_cookie, verify_csrf,
};
use crate::app::App;
use crate::http::client_ip::CallerIp;
use crate::http::error::ToProblem;
use crate::identity::oidc::{Accounts, Callback, FLOW_LIFETIME_SECS, OidcError};
use crate::identity::{IdentityError, hash_secret};
use crate::store::{StoreError, WriteTx};

/// The cookie of a sign-in under way (sealed by the domain: provider, seed, where to go).
pub const FLOW_COOKIE: &str = "kb_oidc";

pub fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/login/oidc/{id}", get(start))
        .route("/login/oidc/{id}/callback", get(callback))
}

/// One button (a link: no form, no script) per provider, `#oidc-<id>`, continuing to `next`
/// or accepting the invitation `invite` (its token, and the CSRF token bound to the
/// browser's pre-login cookie, which [`start`] checks).
pub(super) fn buttons(app: &App, next: &str, invite: Option<(&str, &str)>) -> Markup {
    let mut q = form_urlencoded::Serializer::new(String::new());
    match invite {
        Some((token, csrf)) => q.append_pair("invite", token).append_pair("csrf", csrf),
        None => q.append_pair("next", next),
    };
    let q = q.finish();
    html! {
        @if !app.config.oidc.is_empty() {
            div #oidc-providers .stack.narrow {
                p.muted { (t("login-with-provider")) }
                @for p in &app.config.oidc {
                    a.button.secondary id={ "oidc-" (p.id) } href={ "/login/oidc/" (p.id) "?" (q) } { (p.name) }
                }
            }
        }
    }
}

type Params = Query<HashMap<String, String>>;

async fn start(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    CallerIp(ip): CallerIp,
    headers: HeaderMap,
    Query(q): Params,
) -> Response {
    let next = safe_next(q.get("next").map(String::as_str));
    let invite = q.get("invite").map(String::as_str);
    // Accepting an invitation needs its page's button in this browser: the CSRF token bound
    // to the pre-login cookie that page set. A sign-in alone needs none (it only signs the
    // browser's owner in, to their own account).
    if invite.is_some() {
        let bound = super::pre_login_csrf(&app, &headers);
        if !bound.is_some_and(|b| verify_csrf(&b, q.get("csrf").map(String::as_str))) {
            return csrf_rejected();
        }
    }
    match app.oidc.start(&app.store, &id, &next, invite, ip).await {
        Ok(started) => {
            let mut resp = see_other(&started.location);
            append_cookie(
                &mut resp,
                set_cookie(&app, FLOW_COOKIE, &started.flow, FLOW_LIFETIME_SECS),
            );
            resp
        }
        Err(e) => refused(&app, &e),
    }
}

async fn callback(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    CallerIp(ip): CallerIp,
    headers: HeaderMap,
    Query(mut q): Params,
) -> Response {
    let params = Callback {
        state: q.remove("state"),
        code: q.remove("code"),
        error: q.remove("error"),
        iss: q.remove("iss"),
    };
    let flow = super::cookie(&headers, FLOW_COOKIE);
    let r = app
        .oidc
        .finish(
            Accounts {
                store: &app.store,
                login: &app.login,
                end: end_credentials,
            },
            &id,
            flow,
            params,
            ip,
        )
        .await;
    match r {
        Ok(signed) => {
            let hash = hash_secret(&signed.token);
            let s = AnySession {
                hash,
                csrf: csrf_token_for(&app, &hash),
                session: signed.session,
                person: signed.person,
            };
            let next = safe_next(Some(&signed.next));
            let mut resp = see_other(&login_step(&app, Some(&s), &next).unwrap_or(next));
            append_cookie(
                &mut resp,
                set_cookie(&app, SESSION_COOKIE, &signed.token, SESSION_LIFETIME_SECS),
            );
            append_cookie(&mut resp, set_cookie(&app, FLOW_COOKIE, "", 0));
            resp
        }
        Err(e) => refused(&app, &e),
    }
}

/// What a claimed account's sign-in ends first ([`crate::identity::claim`]): every session,
/// connection and personal token of it.
fn end_credentials(tx: &mut WriteTx, person_id: u64, now: Timestamp) -> Result<(), StoreError> {
    crate::oauth::revoke_person_credentials_in(tx, person_id, None, now).map(|_| ())
}

/// The page of a refused sign-in: why, in the request's language, and the way back to the
/// login page. The flow cookie is cleared; no session is made.
fn refused(app: &App, e: &OidcError) -> Response {
    let title = t("oidc-refused-title");
    let mut resp = match e {
        OidcError::Identity(
            limited @ (IdentityError::TooManyAttempts { .. } | IdentityError::Busy { .. }),
        ) => limited_page(&title, None, limited),
        _ => None,
    }
    .unwrap_or_else(|| {
        let p = e.problem();
        page(
            p.status,
            layout(
                &title,
                None,
                None,
                html! {
                    p.notice.error #error role="alert" { (problem_text(&p)) }
                    p { a href="/login" { (t("oidc-back-to-login")) } }
                },
            ),
        )
    });
    append_cookie(&mut resp, set_cookie(app, FLOW_COOKIE, "", 0));
    resp
}
