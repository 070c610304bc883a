//! The portal: server-rendered HTML (maud) for login, second factor, terms, the consent page
//! of `/authorize`, the account page and each organisation's Connections.
//!
//! Reusable pieces for other areas' pages (knowledge base, feature requests, triggers,
//! audit):
//! - [`PortalUser`]: extractor for a logged-in person (session cookie, second factor passed,
//!   current terms accepted); redirects to the login otherwise.
//! - [`OrgMember`] / [`OrgAdmin`]: extractors for routes under `/portal/o/{slug}/...`; they
//!   check membership (and the admin role) of the organisation named by the `slug` path
//!   parameter and answer 404 otherwise, so outsiders cannot tell which organisations exist.
//! - [`layout`]: the page frame (title, navigation, body).
//! - [`csrf_field`] renders the hidden `csrf_token` input of a form; every POST form must carry
//!   it. Handlers take the body as [`CsrfForm`], which checks the token against the session's
//!   before the handler runs; multipart forms check theirs with [`verify_csrf`].
//! - [`problem_page`]: the page for a failed operation; status and what may be shown come from
//!   [`crate::http::error`], never from the page.
//! - [`page`]: an HTML response with the security headers every portal page needs
//!   (`frame-ancestors 'none'`, `X-Frame-Options: DENY`, no referrer, no caching).
//! - [`NAV`]: the navigation entries of an organisation; add an area's link there.
//!
//! Sessions: cookie [`SESSION_COOKIE`] holds a `kb_sess_` token; the store keeps its SHA-256
//! only. Cookies are HttpOnly, SameSite=Lax, and Secure when the public URL is https.

mod account;
mod apps;
mod connections;
mod consent;
mod form;
pub mod i18n;
mod invite;
mod kb;
mod login;
mod members;
mod oidc;
mod refusal;
mod requests;
mod runs;
mod tokens;
mod triggers;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use maud::{DOCTYPE, Markup, html};
use subtle::ConstantTimeEq;

pub use form::{CsrfForm, CsrfRejected, UncheckedForm};
pub use i18n::{t, ta};
pub use refusal::problem_text;

use crate::app::App;
use crate::clock::SharedClock;
use crate::http::error::{Problem, ToProblem, login_refusal};
use crate::identity::{self, IdentityError, Membership, Org, Person, Role, sessions};
use crate::ratelimit::{Limiter, WINDOW};
use crate::store::{StoreError, key};

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "kb_session";
/// Name of the cookie that binds the CSRF token of the login form (no session yet).
const PRE_COOKIE: &str = "kb_pre";

/// Navigation entries inside an organisation: (message key in `locales/`, path after
/// `/portal/o/{slug}`). Other areas add their pages here (a label without a message shows as
/// written).
pub const NAV: &[(&str, &str)] = &[
    ("nav-kb", "/kb"),
    ("nav-requests", "/requests"),
    ("nav-apps", "/apps"),
    ("nav-connections", "/connections"),
    ("nav-tokens", "/tokens"),
    ("nav-triggers", "/triggers"),
    ("nav-members", "/members"),
    ("nav-audit", "/audit"),
];

/// The stylesheet every page links (served by the binary; the CSP allows only it).
pub const STYLESHEET: &str = "/portal/assets/style.css";

pub use crate::identity::sessions::{SESSION_LIFETIME_SECS, Session};

/// Limits the portal's own endpoints keep (in memory, per window; docs/security.md).
/// Login failures are the domain's (`identity::LoginGuard`, held by `App`).
pub struct PortalLimits {
    /// `/authorize` requests per client address.
    pub authorize: Limiter<std::net::IpAddr>,
}

impl PortalLimits {
    fn new(clock: SharedClock) -> PortalLimits {
        PortalLimits {
            authorize: Limiter::new(100, WINDOW, clock),
        }
    }
}

/// The extractor of the portal's limits.
pub type Limits = axum::Extension<Arc<PortalLimits>>;

/// The portal's routes.
pub fn routes(app: Arc<App>) -> Router<Arc<App>> {
    let clock: SharedClock = app.clock.clone();
    Router::new()
        .route(STYLESHEET, get(stylesheet))
        .route("/login", get(login::login_page).post(login::login_submit))
        .route(
            "/login/totp",
            get(login::totp_page).post(login::totp_submit),
        )
        .route("/logout", post(login::logout))
        .route(
            "/portal/terms",
            get(login::terms_page).post(login::terms_submit),
        )
        .route("/portal", get(account::home))
        .route("/portal/account", get(account::account_page))
        .route("/portal/account/password", post(account::change_password))
        .route("/portal/account/totp-reset", post(account::reset_totp))
        .route("/portal/account/language", post(account::set_language))
        .route("/portal/account/revoke-all", post(account::revoke_all))
        .route(
            "/authorize",
            get(consent::authorize_page).post(consent::authorize_submit),
        )
        .route(
            "/portal/o/{slug}/connections",
            get(connections::connections_page),
        )
        .route(
            "/portal/o/{slug}/connections/{grant_id}/revoke",
            post(connections::revoke),
        )
        .route("/portal/o/{slug}/policy", post(connections::set_policy))
        .route(
            "/portal/o/{slug}/triggers",
            get(triggers::triggers_page).post(triggers::create),
        )
        .route("/portal/o/{slug}/triggers/{id}", get(triggers::detail))
        .route("/portal/o/{slug}/agents", post(triggers::add_agent))
        .route("/portal/o/{slug}/runs/{id}", get(runs::run_page))
        .route("/portal/o/{slug}/runs/{id}/{action}", post(runs::act))
        .route(
            "/portal/o/{slug}/triggers/{id}/{action}",
            post(triggers::change),
        )
        .route(
            "/portal/o/{slug}/members/{person_id}/may-connect",
            post(connections::set_may_connect),
        )
        .merge(members::router())
        .merge(invite::router())
        .merge(oidc::router())
        .merge(tokens::router())
        .layer(tower_http::limit::RequestBodyLimitLayer::new(64 * 1024))
        .merge(kb::router())
        .merge(apps::router())
        .merge(requests::router())
        .layer(axum::Extension(Arc::new(PortalLimits::new(clock))))
        .layer(axum::middleware::from_fn_with_state(app, i18n::middleware))
        .layer(axum::middleware::from_fn(remember_path))
}

tokio::task_local! {
    /// The path of the request being answered: the navigation marks the page it is on.
    static PATH: String;
}

async fn remember_path(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let path = req.uri().path().to_owned();
    PATH.scope(path, next.run(req)).await
}

/// Whether the request being answered is at `prefix` or below it.
fn is_here(prefix: &str) -> bool {
    PATH.try_with(|p| p == prefix || p.starts_with(&format!("{prefix}/")))
        .unwrap_or(false)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", include_str!("assets/style.css"))
}

/// An HTML response with the headers every portal page carries.
pub fn page(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        markup.into_string(),
    )
        .into_response()
}

/// The page frame: `<html lang>` of the request's language, the stylesheet, a top bar with
/// the organisation's navigation (one line; it scrolls sideways rather than wrapping) and the
/// account, then the title and `body`. `nav` is the organisation whose navigation to show.
pub fn layout(title: &str, user: Option<&PortalUser>, nav: Option<&Org>, body: Markup) -> Markup {
    let lang = i18n::current();
    html! {
        (DOCTYPE)
        html lang=(lang.code()) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · kennis" }
                link rel="stylesheet" href=(STYLESHEET);
            }
            body {
                a.skip href="#main" { (t("skip-to-content")) }
                header.topbar {
                    a.brand href="/portal" { "kennis" }
                    @if let Some(org) = nav {
                        span.org-name title=(org.name) { (org.name) }
                        nav.nav aria-label=(t("nav-label")) {
                            ul {
                                @for (label, path) in NAV {
                                    @let href = format!("/portal/o/{}{path}", org.slug);
                                    li { a href=(href) aria-current=[is_here(&href).then_some("page")] { (t(label)) } }
                                }
                            }
                        }
                    }
                    @if let Some(u) = user {
                        div.account {
                            a href="/portal/account" title=(t("nav-account")) { (u.person.email) }
                            form.inline method="post" action="/logout" {
                                (csrf_field(&u.csrf))
                                button.secondary type="submit" { (t("action-log-out")) }
                            }
                        }
                    }
                }
                main #main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The hidden `csrf_token` input.
pub fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name="csrf_token" value=(token); }
}

/// The CSRF token bound to `binding` (a session's hash, or the pre-login cookie): an HMAC
/// with the server key, so nothing needs storing and it cannot be forged without the key.
#[allow(clippy::expect_used, reason = "HMAC takes keys of any length")]
pub fn csrf_token_for(app: &App, binding: &[u8]) -> String {
    use base64::Engine;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&app.server_key).expect("any key length");
    mac.update(b"kennis-csrf:");
    mac.update(binding);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// The request's pre-login cookie (`kb_pre`, which binds the CSRF tokens of pages shown
/// before there is a session), when it is one kennis could have set.
fn pre_login_of(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, PRE_COOKIE).filter(|v| v.len() == 43)
}

/// This browser's pre-login cookie, and whether it is new — then the response must set it
/// ([`pre_login_cookie`]).
pub fn pre_login(headers: &HeaderMap) -> (String, bool) {
    match pre_login_of(headers) {
        Some(existing) => (existing.to_owned(), false),
        None => (crate::oauth::new_secret(""), true),
    }
}

/// The CSRF token bound to the request's pre-login cookie; `None` without one.
pub fn pre_login_csrf(app: &App, headers: &HeaderMap) -> Option<String> {
    pre_login_of(headers).map(|pre| csrf_token_for(app, pre.as_bytes()))
}

/// The `Set-Cookie` value of a new pre-login cookie (an hour).
pub fn pre_login_cookie(app: &App, pre: &str) -> String {
    set_cookie(app, PRE_COOKIE, pre, 3600)
}

/// Checks a submitted CSRF token in constant time.
pub fn verify_csrf(expected: &str, submitted: Option<&str>) -> bool {
    submitted.is_some_and(|s| bool::from(s.as_bytes().ct_eq(expected.as_bytes())))
}

/// 403 page for a missing or wrong CSRF token.
pub fn csrf_rejected() -> Response {
    page(
        StatusCode::FORBIDDEN,
        layout(
            &t("form-expired-title"),
            None,
            None,
            html! { p.notice.error { (t("form-expired")) } },
        ),
    )
}

/// The page for a failed operation. [`Problem`] (from [`crate::http::error`]) decides the status
/// and what may be shown; an internal failure only says that something went wrong.
pub fn problem_page(
    title: &str,
    user: Option<&PortalUser>,
    org: Option<&Org>,
    problem: &Problem,
) -> Response {
    if problem.is_internal() {
        return internal_page(problem.status, user, org);
    }
    let body = html! { p.notice.error #error { (problem_text(problem)) } };
    page(problem.status, layout(title, user, org, body))
}

/// The page for a failure of the server: it says only that something went wrong; what went
/// wrong is in the log.
pub fn internal_page(status: StatusCode, user: Option<&PortalUser>, org: Option<&Org>) -> Response {
    let body = html! { p.notice.error role="alert" { (t("internal-error")) } };
    page(status, layout(&t("internal-title"), user, org, body))
}

/// 404 inside an organisation: the message says what does not exist.
pub fn not_found_in(m: &OrgMember, message: &str) -> Response {
    let body = html! { p { (message) } };
    let title = t("not-found-title");
    page(
        StatusCode::NOT_FOUND,
        layout(&title, Some(&m.user), Some(&m.org), body),
    )
}

/// The page for an organisation's operation that was refused or failed ("not saved").
pub fn refused(m: &OrgMember, e: &impl ToProblem) -> Response {
    problem_page(&t("not-saved"), Some(&m.user), Some(&m.org), &e.problem())
}

/// A notice that shows a one-time link or secret (`value`) once: `heading` says what was made,
/// `explain` how long it works.
pub fn once_notice(id: &str, heading: &str, value: &str, explain: &str) -> Markup {
    html! {
        div.notice role="status" {
            p { strong { (heading) } }
            code.link-box id=(id) { (value) }
            p.muted { (explain) }
        }
    }
}

/// "Works until …": message `key` with the moment as `until`.
pub fn until(key: &str, moment: jiff::Timestamp) -> String {
    i18n::ta(key, &[("until", i18n::date_time(moment))])
}

/// A login step refused by its limits (too many attempts, every password hasher busy): the
/// page in the request's language with the status and `Retry-After` of [`login_refusal`];
/// `None` for other refusals.
pub fn limited_page(title: &str, user: Option<&PortalUser>, e: &IdentityError) -> Option<Response> {
    let limited = login_refusal(e)?;
    let retry = limited.headers().get(header::RETRY_AFTER).cloned();
    let seconds = retry
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .unwrap_or("60")
        .to_owned();
    let key = if limited.status() == StatusCode::SERVICE_UNAVAILABLE {
        "login-busy"
    } else {
        "login-too-many"
    };
    let body = html! { p.notice.error #error role="alert" { (ta(key, &[("seconds", seconds)])) } };
    let mut resp = page(limited.status(), layout(title, user, None, body));
    if let Some(v) = retry {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    Some(resp)
}

/// A 303 redirect (after a POST the browser must GET the target).
pub fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}

/// Reads a cookie from request headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value with the portal's attributes.
pub fn set_cookie(app: &App, name: &str, value: &str, max_age: i64) -> String {
    let secure = if app.public_url.starts_with("https://") || app.config.tls.is_some() {
        "; Secure"
    } else {
        ""
    };
    format!("{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}")
}

/// Adds a `Set-Cookie` header (built from tokens and fixed attributes; a value that would not
/// be a header is dropped rather than panicking).
pub fn append_cookie(resp: &mut Response, cookie: String) {
    if let Ok(v) = header::HeaderValue::try_from(cookie) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// A session found from the request's cookie, whatever its progress through the login.
#[derive(Debug, Clone)]
pub struct AnySession {
    pub hash: [u8; 32],
    pub session: Session,
    pub person: Person,
    pub csrf: String,
}

/// The session the request's cookie names; `None` without a cookie or a live session. A store
/// that fails is an error, for the page to show, not a reason to send the person to log in.
fn load_session(app: &App, headers: &HeaderMap) -> Result<Option<AnySession>, StoreError> {
    let Some(token) = cookie(headers, SESSION_COOKIE) else {
        return Ok(None);
    };
    let found = sessions::load(&app.store, token, app.clock.now())?;
    Ok(found.map(|(hash, session, person)| AnySession {
        hash,
        csrf: csrf_token_for(app, &hash),
        session,
        person,
    }))
}

/// The session the language middleware read for this request: the page's extractors use the
/// same read instead of a second one. Absent when that read failed (an extractor then reads
/// again, and a failure is the page's answer) or outside the middleware's routes.
#[derive(Debug, Clone)]
struct ReadSession(Option<AnySession>);

/// The request's session: the one the middleware read, else read now.
async fn request_session(
    app: &Arc<App>,
    read: Option<&ReadSession>,
    headers: &HeaderMap,
) -> Result<Option<AnySession>, StoreError> {
    if let Some(ReadSession(s)) = read {
        return Ok(s.clone());
    }
    let headers = headers.clone();
    app.blocking(move |app| load_session(app, &headers)).await
}

/// The page for a store that failed under a page (`problem()` logs it); `user` is who the
/// header names, if the session could be read.
pub fn store_failed(user: Option<&PortalUser>, e: &StoreError) -> Response {
    problem_page(&t("internal-title"), user, None, &e.problem())
}

/// A path inside this site to return to after login; anything else becomes `/portal`.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.starts_with("/\\")
                && n.len() <= 4000
                && !n.chars().any(char::is_control) =>
        {
            n.to_owned()
        }
        _ => "/portal".to_owned(),
    }
}

fn with_next(path: &str, next: &str) -> String {
    let q: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("next", next)
        .finish();
    format!("{path}?{q}")
}

/// A logged-in person: second factor passed in this session and current terms accepted.
#[derive(Debug, Clone)]
pub struct PortalUser {
    pub person: Person,
    /// SHA-256 of the session token (the session's key).
    pub session_hash: [u8; 32],
    pub session: Session,
    /// The CSRF token of this session's forms.
    pub csrf: String,
}

impl PortalUser {
    /// The person's organisations with their memberships.
    pub fn organisations(&self, app: &App) -> Result<Vec<(Org, Membership)>, StoreError> {
        app.store
            .read(|tx| identity::organisations_of(tx, self.person.id))
    }
}

fn here(parts: &Parts) -> String {
    if parts.method == axum::http::Method::GET {
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/portal".into())
    } else {
        "/portal".into()
    }
}

/// Where a session that is not (yet) a full login must go next, if anywhere.
fn login_step(app: &App, s: Option<&AnySession>, next: &str) -> Option<String> {
    match s {
        None => Some(with_next("/login", next)),
        Some(s) if !s.session.second_factor => Some(with_next("/login/totp", next)),
        Some(s)
            if s.person.accepted_terms.as_deref() != Some(app.config.terms_version.as_str()) =>
        {
            Some(with_next("/portal/terms", next))
        }
        Some(_) => None,
    }
}

impl FromRequestParts<Arc<App>> for PortalUser {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Response> {
        let s = request_session(app, parts.extensions.get(), &parts.headers)
            .await
            .map_err(|e| store_failed(None, &e))?;
        let s = match (login_step(app, s.as_ref(), &here(parts)), s) {
            (None, Some(s)) => s,
            (Some(to), _) => return Err(see_other(&to)),
            (None, None) => return Err(see_other("/login")),
        };
        // For a `CsrfForm` among the handler's arguments: no second session lookup.
        parts.extensions.insert(form::SessionCsrf(s.csrf.clone()));
        Ok(PortalUser {
            person: s.person,
            session_hash: s.hash,
            session: s.session,
            csrf: s.csrf,
        })
    }
}

/// A logged-in member of the organisation named by the `{slug}` path parameter.
#[derive(Debug, Clone)]
pub struct OrgMember {
    pub user: PortalUser,
    pub org: Org,
    pub membership: Membership,
}

impl OrgMember {
    pub fn is_admin(&self) -> bool {
        self.membership.role == Role::Admin
    }

    /// The person acting, as an admin action's audit record names them.
    pub fn actor(&self) -> crate::audit::Actor {
        crate::audit::Actor::person(self.user.person.id, &self.user.person.email)
    }
}

fn not_found() -> Response {
    page(
        StatusCode::NOT_FOUND,
        layout(
            &t("not-found-title"),
            None,
            None,
            html! { p { (t("not-found")) } },
        ),
    )
}

impl FromRequestParts<Arc<App>> for OrgMember {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Response> {
        let user = PortalUser::from_request_parts(parts, app).await?;
        let params = RawPathParams::from_request_parts(parts, app)
            .await
            .map_err(|_| not_found())?;
        let slug = params
            .iter()
            .find(|(k, _)| *k == "slug")
            .map(|(_, v)| v.to_owned())
            .ok_or_else(not_found)?;
        let person_id = user.person.id;
        let found = app
            .blocking(move |app| {
                app.store.read(|tx| -> Result<_, StoreError> {
                    let Some(org) = identity::org_by_slug(tx, &slug)? else {
                        return Ok(None);
                    };
                    let m: Option<Membership> =
                        tx.get(crate::store::MEMBERSHIPS, &key::pair(org.id, person_id))?;
                    Ok(m.map(|m| (org, m)))
                })
            })
            .await
            .map_err(|e| store_failed(Some(&user), &e))?;
        let (org, membership) = found.ok_or_else(not_found)?;
        Ok(OrgMember {
            user,
            org,
            membership,
        })
    }
}

/// A logged-in admin of the organisation named by the `{slug}` path parameter.
#[derive(Debug, Clone)]
pub struct OrgAdmin(pub OrgMember);

impl FromRequestParts<Arc<App>> for OrgAdmin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Response> {
        let m = OrgMember::from_request_parts(parts, app).await?;
        if !m.is_admin() {
            return Err(page(
                StatusCode::FORBIDDEN,
                layout(
                    &t("not-allowed-title"),
                    Some(&m.user),
                    Some(&m.org),
                    html! { p.notice.error { (t("admins-only")) } },
                ),
            ));
        }
        Ok(OrgAdmin(m))
    }
}

/// Parses a form body, keeping repeated fields (checkbox groups such as `scope`). Handlers take
/// a [`CsrfForm`] instead; the consent page still parses and checks by hand.
pub fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The first value of a form field.
pub fn field<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(safe_next(Some("/authorize?x=1")), "/authorize?x=1");
        assert_eq!(safe_next(Some("//evil.example/")), "/portal");
        assert_eq!(safe_next(Some("/\\evil.example")), "/portal");
        assert_eq!(safe_next(Some("https://evil.example/")), "/portal");
        assert_eq!(safe_next(None), "/portal");
    }

    #[test]
    fn cookies_are_found_by_exact_name() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "x_kb_session=no; kb_session=kb_sess_abc".parse().unwrap(),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("kb_sess_abc"));
        assert_eq!(cookie(&h, "missing"), None);
    }
}
