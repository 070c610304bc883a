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
