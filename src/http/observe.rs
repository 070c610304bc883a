//! One middleware that logs every request and feeds the request metrics. Query strings are
//! redacted before logging: webhook senders may put a trigger secret in `?token=`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::app::App;
use crate::metrics::{RequestLabels, RouteLabels};

/// Query parameters whose values never reach a log.
const SECRET_PARAMS: &[&str] = &[
    "token",
    "access_token",
    "refresh_token",
    "code",
    "code_verifier",
    "client_secret",
    "password",
    "secret",
    "state",
    // An invitation's token, when its page's provider button starts a sign-in.
    "invite",
];

/// The query string with the values of secret-bearing parameters replaced by `REDACTED`.
/// Names are compared as the handlers see them — percent-decoded (and `+` as a space) and in
/// any case — so `?t%6Fken=` is redacted like `?token=`.
pub fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded = form_urlencoded::parse(name.as_bytes())
                .next()
                .map(|(n, _)| n.to_lowercase())
                .unwrap_or_default();
            if SECRET_PARAMS.contains(&decoded.trim()) && !value.is_empty() {
                format!("{name}=REDACTED")
            } else {
                pair.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Path prefixes whose rest is a credential: signed download links, and the one-time
/// invitation and password-reset links.
const SECRET_PATHS: &[&str] = &["/files/", "/invite/", "/reset/"];

/// The path as logged: a link's token is replaced by `REDACTED`.
pub fn redact_path(path: &str) -> String {
    for prefix in SECRET_PATHS {
        if let Some(rest) = path.strip_prefix(prefix)
            && !rest.is_empty()
        {
            return format!("{prefix}REDACTED");
        }
    }
    path.to_owned()
}

pub async fn observe(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().as_str().to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let path = redact_path(req.uri().path());
    let query = req.uri().query().map(redact_query);
    let response = next.run(req).await;
    let elapsed = start.elapsed();
    let status = response.status().as_u16();
    app.metrics
        .requests
        .get_or_create(&RequestLabels {
            method: method.clone(),
            route: route.clone(),
            status,
        })
        .inc();
    app.metrics
        .latency
        .get_or_create(&RouteLabels {
            method: method.clone(),
            route,
        })
        .observe(elapsed.as_secs_f64());
    tracing::info!(
        target: "kennis::request",
        method = %method,
        path = %path,
        query = query.as_deref().unwrap_or(""),
        status,
        duration_ms = elapsed.as_secs_f64() * 1000.0,
        "request"
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_queries_are_redacted() {
        assert_eq!(redact_query("token=abc&key=k1"), "token=REDACTED&key=k1");
        assert_eq!(redact_query("TOKEN=abc"), "TOKEN=REDACTED");
        assert_eq!(
            redact_query("access%5Ftoken=abc"),
            "access%5Ftoken=REDACTED"
        );
        assert_eq!(redact_query("page=2"), "page=2");
        assert_eq!(redact_query("t%6Fken=abc&key=k"), "t%6Fken=REDACTED&key=k");
        assert_eq!(redact_query("%54OKEN=abc"), "%54OKEN=REDACTED");
        assert_eq!(
            redact_query("client%5fsecret=abc"),
            "client%5fsecret=REDACTED"
        );
        assert_eq!(
            redact_query("invite=kb_inv_abc&next=%2Fportal"),
            "invite=REDACTED&next=%2Fportal"
        );
        assert_eq!(redact_path("/files/abc.def"), "/files/REDACTED");
        assert_eq!(redact_path("/invite/kb_inv_abc"), "/invite/REDACTED");
        assert_eq!(redact_path("/reset/kb_rst_abc"), "/reset/REDACTED");
        assert_eq!(redact_path("/healthz"), "/healthz");
    }
}
