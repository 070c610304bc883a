//! Where module errors become HTTP responses: one place, so statuses stay consistent. Each
//! module keeps its own `thiserror` enum free of axum types; the mapping lives here.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::store::StoreError;

/// A JSON error response `{"message": …}` with a status.
#[derive(Debug)]
pub struct JsonError {
    pub status: StatusCode,
    pub message: String,
}

impl JsonError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        JsonError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for JsonError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({"message": self.message}))).into_response()
    }
}

impl From<StoreError> for JsonError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store error");
        JsonError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
    }
}

impl From<crate::triggers::TriggerError> for JsonError {
    fn from(e: crate::triggers::TriggerError) -> Self {
        use crate::triggers::TriggerError as T;
        let status = match &e {
            T::Store(s) => {
                tracing::error!(error = %s, "store error");
                return JsonError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error");
            }
            T::UnknownTrigger | T::RunNotFound => StatusCode::NOT_FOUND,
            T::UnknownOrg(_) | T::UnknownAgent(_) | T::UnknownProject(_) => StatusCode::NOT_FOUND,
            T::InvalidToken => StatusCode::UNAUTHORIZED,
            T::AccessDenied => StatusCode::FORBIDDEN,
            T::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            T::InvalidKey(_)
            | T::BadBody(_)
            | T::InvalidInput(_)
            | T::NotGeneric(_)
            | T::ProjectNotReady(_) => StatusCode::BAD_REQUEST,
        };
        JsonError::new(status, e.to_string())
    }
}

/// An OAuth error as RFC 6749 / 7591 JSON: `{"error", "error_description"}`, never cached.
pub fn oauth_error(e: &crate::oauth::OAuthError) -> Response {
    use crate::oauth::OAuthError;
    let status = match e {
        OAuthError::InvalidClient(_) => StatusCode::UNAUTHORIZED,
        OAuthError::Store(inner) => {
            tracing::error!(error = %inner, "store error in the authorization server");
            StatusCode::INTERNAL_SERVER_ERROR
        }
        _ => StatusCode::BAD_REQUEST,
    };
    let description = match e {
        OAuthError::Store(_) => "internal error".to_owned(),
        other => other.to_string(),
    };
    (
        status,
        [
            (axum::http::header::CACHE_CONTROL, "no-store"),
            (axum::http::header::PRAGMA, "no-cache"),
        ],
        axum::Json(json!({"error": e.code(), "error_description": description})),
    )
        .into_response()
}

/// Counts a request of `key` against `limiter`; the 429 response when over.
pub fn rate_limited<K: crate::ratelimit::LimitKey>(
    limiter: &crate::ratelimit::Limiter<K>,
    key: K,
) -> Option<Response> {
    limiter.check(&key).err().map(too_many_requests)
}

/// The answer to a login refused by its limits: 429 (too many attempts) or 503 (every
/// password hasher busy), both with `Retry-After`; `None` for other identity errors.
pub fn login_refusal(e: &crate::identity::IdentityError) -> Option<Response> {
    use crate::identity::IdentityError as I;
    match e {
        I::TooManyAttempts { retry_after } => Some(too_many_requests(*retry_after)),
        I::Busy { retry_after } => {
            let mut r = too_many_requests(*retry_after);
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            Some(r)
        }
        _ => None,
    }
}

/// 429 with `Retry-After` in whole seconds.
pub fn too_many_requests(wait: std::time::Duration) -> Response {
    let secs = crate::ratelimit::retry_after_secs(wait);
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(axum::http::header::RETRY_AFTER, secs.to_string())],
        axum::Json(json!({"error": "too_many_requests", "error_description": format!("too many requests; retry after {secs} seconds")})),
    )
        .into_response()
}

/// The status of a refused feature-request operation (portal pages). A store failure is
/// logged here and never shown.
pub fn request_error_status(e: &crate::requests::RequestError) -> StatusCode {
    use crate::requests::RequestError as R;
    match e {
        R::NotFound(_) | R::UnknownOrg(_) => StatusCode::NOT_FOUND,
        R::InvalidInput(_) => StatusCode::BAD_REQUEST,
        R::AppClosed(_) => StatusCode::CONFLICT,
        R::Store(s) => {
            tracing::error!(error = %s, "store error");
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// What a person may read about a refused feature-request operation: the domain's own words,
/// except for store failures.
pub fn request_error_message(e: &crate::requests::RequestError) -> String {
    match e {
        crate::requests::RequestError::Store(_) => "internal error".to_owned(),
        other => other.to_string(),
    }
}
