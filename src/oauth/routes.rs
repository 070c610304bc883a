//! HTTP endpoints of the authorization server: discovery, `/register`, `/token`, `/revoke`,
//! and the parameter checks of `/authorize` (whose pages live in the portal). Handlers parse
//! and call the domain functions of this module's parent. The authorization server's errors
//! answer here, with `http::error`'s [`ToProblem`]: their RFC 6749 / 6750 codes, and the RFC
//! 6749 JSON form of [`oauth_error`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tower_http::cors::{Any, CorsLayer};

use super::pats::PatError;
use super::{
    BearerError, ClientMetadata, CodeExchange, OAuthError, SCOPES, TokenPair, authenticate_client,
    exchange_code, refresh, register_client, resource_metadata_path, revoke_token,
};
use crate::app::App;
use crate::clock::SharedClock;
use crate::http::client_ip::CallerIp;
use crate::http::error::{Problem, ToProblem, rate_limited, refusal, refusals};
use crate::ratelimit::{Limiter, WINDOW};

/// Largest form or JSON body these endpoints read.
const MAX_BODY: usize = 64 * 1024;

/// Requests per client address per window of the endpoints below (docs/security.md).
pub struct EndpointLimits {
    register: Limiter<IpAddr>,
    token: Limiter<IpAddr>,
    revoke: Limiter<IpAddr>,
}

impl EndpointLimits {
    fn new(clock: SharedClock) -> EndpointLimits {
        EndpointLimits {
            register: Limiter::new(20, WINDOW, clock.clone()),
            token: Limiter::new(300, WINDOW, clock.clone()),
            revoke: Limiter::new(100, WINDOW, clock),
        }
    }
}

type Limits = axum::Extension<Arc<EndpointLimits>>;

/// The routes of the authorization server (without `/authorize`, which the portal serves),
/// with CORS so browser-based clients can use them.
pub fn routes(clock: SharedClock) -> Router<Arc<App>> {
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            header::HeaderName::from_static("mcp-protocol-version"),
        ])
        .expose_headers([header::WWW_AUTHENTICATE]);
    Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(authorization_server_metadata),
        )
        .route(&resource_metadata_path(), get(protected_resource_metadata))
        .route(
            "/.well-known/oauth-protected-resource",
            get(protected_resource_metadata),
        )
        .route("/register", post(register))
        .route("/token", post(token))
        .route("/revoke", post(revoke))
        .layer(cors)
        .layer(tower_http::limit::RequestBodyLimitLayer::new(MAX_BODY))
        .layer(axum::Extension(Arc::new(EndpointLimits::new(clock))))
}

async fn authorization_server_metadata(State(app): State<Arc<App>>) -> Response {
    let base = &app.public_url;
    Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "revocation_endpoint": format!("{base}/revoke"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post"],
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_post"],
        "scopes_supported": SCOPES,
        "authorization_response_iss_parameter_supported": true,
        "client_id_metadata_document_supported": true,
    }))
    .into_response()
}

async fn protected_resource_metadata(State(app): State<Arc<App>>) -> Response {
    Json(json!({
        "resource": app.connector_url(),
        "authorization_servers": [app.public_url],
        "scopes_supported": SCOPES,
        "bearer_methods_supported": ["header"],
        "resource_name": "kennis knowledge base",
    }))
    .into_response()
}

async fn register(
    State(app): State<Arc<App>>,
    axum::Extension(limits): Limits,
    CallerIp(ip): CallerIp,
    body: axum::body::Bytes,
) -> Response {
    if let Some(r) = rate_limited(&limits.register, ip) {
        return r;
    }
    let meta: ClientMetadata = match serde_json::from_slice(&body) {
        Ok(m) => m,
        Err(e) => {
            return oauth_error(&OAuthError::InvalidClientMetadata(format!(
                "the body is not client metadata JSON: {e}"
            )));
        }
    };
    match app.blocking(move |app| register_client(app, meta)).await {
        Ok(reg) => {
            let c = &reg.client;
            let mut body = json!({
                "client_id": c.client_id,
                "client_id_issued_at": c.created_at.as_second(),
                "client_name": c.client_name,
                "redirect_uris": c.redirect_uris,
                "token_endpoint_auth_method": c.token_endpoint_auth_method,
                "grant_types": c.grant_types,
                "response_types": ["code"],
                "scope": SCOPES.join(" "),
            });
            if let (Some(secret), Some(fields)) = (reg.client_secret, body.as_object_mut()) {
                fields.insert("client_secret".into(), json!(secret));
                fields.insert("client_secret_expires_at".into(), json!(0));
            }
            (
                StatusCode::CREATED,
                [(header::CACHE_CONTROL, "no-store")],
                Json(body),
            )
                .into_response()
        }
        Err(e) => oauth_error(&e),
    }
}

/// A parsed form body: its parameters, and the first one that was sent more than once.
#[derive(Debug, Default)]
pub struct Form {
    pub params: HashMap<String, String>,
    pub repeated: Option<String>,
}

/// Parses an `application/x-www-form-urlencoded` body. A repeated parameter is ambiguous;
/// RFC 6749 §3.1 says such requests are invalid, so the first repeated name is kept aside.
pub fn parse_form(body: &[u8]) -> Form {
    let mut out = Form::default();
    for (k, v) in form_urlencoded::parse(body) {
        if out
            .params
            .insert(k.clone().into_owned(), v.into_owned())
            .is_some()
            && out.repeated.is_none()
        {
            out.repeated = Some(k.into_owned());
        }
    }
    out
}

fn token_response(pair: TokenPair) -> Response {
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::PRAGMA, "no-cache"),
        ],
        Json(json!({
            "access_token": pair.access_token,
            "token_type": "Bearer",
            "expires_in": pair.expires_in,
            "refresh_token": pair.refresh_token,
            "scope": pair.scopes.join(" "),
        })),
    )
        .into_response()
}

async fn token(
    State(app): State<Arc<App>>,
    axum::Extension(limits): Limits,
    CallerIp(ip): CallerIp,
    body: axum::body::Bytes,
) -> Response {
    if let Some(r) = rate_limited(&limits.token, ip) {
        return r;
    }
    let form = parse_form(&body);
    match app.blocking(move |app| token_request(app, &form)).await {
        Ok(pair) => token_response(pair),
        Err(e) => oauth_error(&e),
    }
}

fn token_request(app: &App, form: &Form) -> Result<TokenPair, OAuthError> {
    if let Some(k) = &form.repeated {
        return Err(OAuthError::InvalidRequest(format!(
            "parameter `{}` was sent more than once",
            k.escape_debug()
        )));
    }
    let form = &form.params;
    let get = |k: &str| form.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let need =
        |k: &str| get(k).ok_or_else(|| OAuthError::InvalidRequest(format!("`{k}` is required")));
    let client_id = need("client_id")?;
    let client = authenticate_client(app, client_id, get("client_secret"))?;
    match need("grant_type")? {
        "authorization_code" => exchange_code(
            app,
            CodeExchange {
                code: need("code")?,
                client_id: &client.client_id,
                redirect_uri: need("redirect_uri")?,
                code_verifier: need("code_verifier")?,
                resource: get("resource"),
            },
        ),
        "refresh_token" => refresh(
            app,
            &client.client_id,
            need("refresh_token")?,
            get("scope"),
            get("resource"),
        ),
        other => Err(OAuthError::UnsupportedGrantType(format!(
            "grant type `{other}` is not supported"
        ))),
    }
}

async fn revoke(
    State(app): State<Arc<App>>,
    axum::Extension(limits): Limits,
    CallerIp(ip): CallerIp,
    body: axum::body::Bytes,
) -> Response {
    if let Some(r) = rate_limited(&limits.revoke, ip) {
        return r;
    }
    let form = parse_form(&body).params;
    let Some(token) = form.get("token").cloned().filter(|t| !t.is_empty()) else {
        return oauth_error(&OAuthError::InvalidRequest("`token` is required".into()));
    };
    // Revocation needs no client authentication here: presenting the token proves enough
    // to give it up, and refusing would leave a leaked token alive.
    match app.blocking(move |app| revoke_token(app, &token)).await {
        Ok(()) => (StatusCode::OK, [(header::CACHE_CONTROL, "no-store")]).into_response(),
        Err(e) => oauth_error(&e),
    }
}

impl ToProblem for OAuthError {
    fn problem(&self) -> Problem {
        let status = match self {
            OAuthError::Store(s) => {
                return Problem {
                    // RFC 6749's code for a server failure.
                    code: self.code(),
                    ..Problem::internal("store error in the authorization server", s)
                };
            }
            OAuthError::InvalidClient(_) => StatusCode::UNAUTHORIZED,
            _ => StatusCode::BAD_REQUEST,
        };
        // The codes are the RFC 6749 / 7591 / 8707 ones, which the domain names.
        Problem::refused(status, self.code(), self)
    }
}

impl ToProblem for BearerError {
    fn problem(&self) -> Problem {
        // RFC 6750: every unusable token, whatever the reason, is `invalid_token`.
        Problem::new(StatusCode::UNAUTHORIZED, "invalid_token", self.reason())
    }
}

refusals! {
    PatError as e {
        Self::Store(s) => return s.problem(),
        Self::Identity(e) => return e.problem(),
        Self::InvalidInput(_) => "invalid_input",
        Self::Disabled => "personal_tokens_denied",
        Self::NotFound => "not_found",
    }
}

/// An OAuth error as RFC 6749 / 7591 JSON: `{"error", "error_description"}`, never cached.
pub fn oauth_error(e: &OAuthError) -> Response {
    let p = e.problem();
    (
        p.status,
        [
            (axum::http::header::CACHE_CONTROL, "no-store"),
            (axum::http::header::PRAGMA, "no-cache"),
        ],
        axum::Json(json!({"error": p.code, "error_description": p.message})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::error::INTERNAL_MESSAGE;
    use crate::store::StoreError;

    fn sc(p: Problem) -> (u16, &'static str) {
        (p.status.as_u16(), p.code)
    }

    #[test]
    fn oauth_errors_keep_their_rfc_codes() {
        assert_eq!(
            sc(OAuthError::InvalidClient("who?".into()).problem()),
            (401, "invalid_client")
        );
        assert_eq!(
            sc(OAuthError::InvalidGrant("used".into()).problem()),
            (400, "invalid_grant")
        );
        assert_eq!(
            sc(OAuthError::AccessDenied.problem()),
            (400, "access_denied")
        );
        let p = OAuthError::Store(StoreError::Db("table SECRET_TABLE is on fire".into())).problem();
        assert_eq!(p.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(p.message, INTERNAL_MESSAGE);
        assert_eq!(p.code, "server_error");
    }

    #[test]
    fn bearer_errors() {
        let p = BearerError::Expired.problem();
        assert_eq!(sc(p.clone()), (401, "invalid_token"));
        assert_eq!(p.message, "token expired");
    }

    #[test]
    fn personal_token_errors() {
        assert_eq!(
            sc(PatError::Disabled.problem()),
            (403, "personal_tokens_denied")
        );
        assert_eq!(sc(PatError::NotFound.problem()), (404, "not_found"));
    }

    #[test]
    fn an_oauth_error_answers_in_rfc_6749_form_never_cached() {
        let r = oauth_error(&OAuthError::InvalidGrant("used".into()));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
    }
}
