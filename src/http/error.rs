//! Where module errors become HTTP responses: one place, so statuses stay consistent. Each
//! module keeps its own `thiserror` enum free of axum types; the mapping lives here.

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
