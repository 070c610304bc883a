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
];

/// The query string with the values of secret-bearing parameters replaced by `REDACTED`.
pub fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let lower = name.to_ascii_lowercase();
            let decoded_name = lower.replace("%5f", "_");
            if SECRET_PARAMS.contains(&decoded_name.as_str()) && !value.is_empty() {
                format!("{name}=REDACTED")
            } else {
                pair.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

pub async fn observe(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().as_str().to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let path = req.uri().path().to_owned();
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
    }
}
