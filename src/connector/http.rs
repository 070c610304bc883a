//! The HTTP edge of the connector: method, Host/Origin (DNS-rebinding protection), body size,
//! and the bearer token with its per-call rechecks, before the MCP SDK sees the request.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tower::ServiceExt;

use super::direct;
use super::mcp::KennisMcp;
use super::{CONNECTOR_PATH, Caller, SCOPE_KB, SCOPE_REQUESTS};
use crate::app::App;
use crate::http::client_ip::{CallerIp, request_origin};
use crate::http::error::{ToProblem, too_many_requests};
use crate::oauth::{self, BearerError};
use crate::ratelimit::{FailureLimiter, WINDOW};

/// Failed token checks one address may make per window before it gets 429.
pub const TOKEN_FAILURES_PER_WINDOW: u32 = 300;
pub const MAX_BODY: usize = 1024 * 1024;

type Mcp = StreamableHttpService<KennisMcp, NeverSessionManager>;

/// Host names (with port) a request may name: the public URL's, and for a loopback public URL
/// the other loopback spellings of the same port.
fn allowed_hosts(public_url: &str) -> Vec<String> {
    let authority = public_url
        .split_once("://")
        .map_or(public_url, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mut hosts = vec![authority.clone()];
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
            (h.to_owned(), Some(p.to_owned()))
        }
        _ => (authority.clone(), None),
    };
    if matches!(host.as_str(), "127.0.0.1" | "localhost" | "[::1]") {
        for h in ["127.0.0.1", "localhost", "[::1]"] {
            hosts.push(match &port {
                Some(p) => format!("{h}:{p}"),
                None => h.to_owned(),
            });
        }
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

fn origin_allowed(origin: &str, public_url: &str, hosts: &[String]) -> bool {
    let origin = origin.trim_end_matches('/').to_ascii_lowercase();
    let scheme = public_url.split("://").next().unwrap_or("https");
    origin == public_url.to_ascii_lowercase()
        || hosts.iter().any(|h| origin == format!("{scheme}://{h}"))
}

/// What the connector checks before a call reaches the MCP service: the host names it answers
/// to, and failed token checks per client address.
struct Guard {
    hosts: Vec<String>,
    token_failures: FailureLimiter<IpAddr>,
    /// Failed personal access tokens (`kb_pat_`), counted apart from OAuth tokens.
    pat_failures: FailureLimiter<IpAddr>,
}

pub fn routes(app: Arc<App>) -> Router<Arc<App>> {
    let hosts = allowed_hosts(&app.public_url);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_BODY)
        // Host and Origin are checked in `handle` (same rules), before authentication.
        .disable_allowed_hosts();
    let service: Mcp = StreamableHttpService::new(
        {
            let app = app.clone();
            move || Ok(KennisMcp { app: app.clone() })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let guard = Arc::new(Guard {
        hosts,
        token_failures: FailureLimiter::new(TOKEN_FAILURES_PER_WINDOW, WINDOW, app.clock.clone()),
        pat_failures: FailureLimiter::new(TOKEN_FAILURES_PER_WINDOW, WINDOW, app.clock.clone()),
    });
    Router::new().route(
        CONNECTOR_PATH,
        post(
            move |State(app): State<Arc<App>>, CallerIp(ip): CallerIp, req: Request| {
                let service = service.clone();
                let guard = guard.clone();
                async move { handle(app, ip, &guard, service, req).await }
            },
        )
        .get(not_allowed)
        .delete(not_allowed),
    )
}

async fn not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "POST")],
        axum::Json(json!({"error": "method_not_allowed", "error_description": "this endpoint takes POST only; sessions and server streams are not offered"})),
    )
        .into_response()
}

fn auth_error(app: &App, status: StatusCode, code: &str, description: &str) -> Response {
    let challenge_code = (code != "unauthorized").then_some((code, description));
    (
        status,
        [(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_str(&crate::oauth::www_authenticate(
                &app.public_url,
                challenge_code,
            ))
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer")),
        )],
        axum::Json(json!({"error": code, "error_description": description})),
    )
        .into_response()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

async fn handle(app: Arc<App>, ip: IpAddr, guard: &Guard, service: Mcp, req: Request) -> Response {
    let hosts = &guard.hosts;
    // Behind a trusted proxy, the host the client asked the proxy for counts.
    let host = request_origin(&app, req.extensions(), req.headers()).host;
    let headers = req.headers();
    if !hosts.contains(&host) {
        return (StatusCode::FORBIDDEN, axum::Json(json!({"error": "forbidden", "error_description": "Host header does not name this server"}))).into_response();
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok())
        && !origin_allowed(origin, &app.public_url, hosts)
    {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(json!({"error": "forbidden", "error_description": "Origin not allowed"})),
        )
            .into_response();
    }
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if length.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    let token = bearer(headers);
    // Personal access tokens and OAuth tokens each have their own count of failures.
    let failures = match token {
        Some(t) if t.starts_with(oauth::pats::PREFIX) => &guard.pat_failures,
        _ => &guard.token_failures,
    };
    if let Some(wait) = failures.blocked(&ip) {
        return too_many_requests(wait);
    }
    let Some(token) = token else {
        return auth_error(
            &app,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a bearer token is required",
        );
    };
    let access = match oauth::check_bearer(&app, token) {
        Ok(a) => a,
        Err(e) => {
            // Only a presented token that fails counts against the address.
            if !matches!(e, BearerError::Denied(_))
                && let Some(wait) = failures.record_failure(&ip)
            {
                return too_many_requests(wait);
            }
            let p = e.problem();
            return auth_error(&app, p.status, p.code, &p.message);
        }
    };
    let scopes = connector_scopes(&access.scopes);
    if scopes.is_empty() {
        return auth_error(
            &app,
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            "the token has none of the connector's scopes",
        );
    }
    let caller = match access.token_id {
        Some(token_id) => Caller::token(access.org_id, access.person_id, token_id, scopes),
        None => Caller::person(access.org_id, access.person_id, access.grant_id, scopes),
    };
    let (mut parts, body) = req.into_parts();
    // Read here for every call (the SDK would read it whole as well), so a body that grows
    // past the limit without saying its length is the same 413 whoever answers.
    let body = match http_body_util::Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return unreadable_body(&*e),
    };
    if direct::plain_headers(&parts.headers)
        && let Some(answer) = direct::answer(&app, &caller, &body).await
    {
        return answer;
    }
    parts.extensions.insert(caller);
    match service
        .oneshot(Request::from_parts(parts, Body::from(body)))
        .await
    {
        Ok(resp) => resp.map(Body::new),
        Err(never) => match never {},
    }
}

fn too_large() -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        axum::Json(json!({"error": "payload_too_large", "error_description": "request body is larger than 1 MB"})),
    )
        .into_response()
}

/// A body that went past the limit without saying its length, or broke off.
fn unreadable_body(e: &(dyn std::error::Error + Send + Sync + 'static)) -> Response {
    if e.is::<http_body_util::LengthLimitError>() {
        return too_large();
    }
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": "bad_request", "error_description": "the request body could not be read"})),
    )
        .into_response()
}

/// The scopes of a grant that unlock connector tools. Grants are only issued with at least
/// one, so an empty result means a grant from an older scope set: 403, not a tool list.
fn connector_scopes(scopes: &[String]) -> Vec<String> {
    scopes
        .iter()
        .filter(|s| *s == SCOPE_KB || *s == SCOPE_REQUESTS)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connector_scopes_count() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(connector_scopes(&s(&["profile", "offline_access"])).is_empty());
        assert_eq!(
            connector_scopes(&s(&["profile", "kennisbank"])),
            s(&["kennisbank"])
        );
    }

    #[test]
    fn loopback_public_urls_accept_every_loopback_spelling() {
        let h = allowed_hosts("http://127.0.0.1:8080");
        assert!(h.contains(&"localhost:8080".to_string()));
        assert!(!h.contains(&"evil.example:8080".to_string()));
        let h = allowed_hosts("https://kennis.example.org");
        assert_eq!(h, vec!["kennis.example.org".to_string()]);
        assert!(origin_allowed(
            "https://kennis.example.org",
            "https://kennis.example.org",
            &h
        ));
        assert!(!origin_allowed(
            "https://evil.example",
            "https://kennis.example.org",
            &h
        ));
    }
}
