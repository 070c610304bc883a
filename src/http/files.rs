//! `GET /files/<signed>`: the download links `kennisbank_read` hands out. The link itself is the
//! credential (signed, bound to one version, valid 15 minutes), so no session is needed.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::http::error::JsonError;
use crate::kb::{self, link};

pub async fn download(
    State(app): State<Arc<App>>,
    Path(token): Path<String>,
) -> Result<Response, JsonError> {
    let claims = link::verify(&app.server_key, &token, app.clock.now())?;
    let found = app
        .blocking(move |app| {
            app.store.read(|tx| {
                let Some(doc) = kb::get_document(tx, claims.org_id, &claims.path)? else {
                    return Ok(None);
                };
                let Some(version) =
                    kb::get_version(tx, claims.org_id, &claims.path, claims.version)?
                else {
                    return Ok(None);
                };
                let bytes = kb::content(tx, &version.hash)?;
                Ok::<_, crate::store::StoreError>(bytes.map(|b| (doc, b)))
            })
        })
        .await?;
    let Some((doc, bytes)) = found else {
        return Err(JsonError::new(
            StatusCode::NOT_FOUND,
            "document version not found",
        ));
    };
    let name = doc
        .path
        .rsplit('/')
        .next()
        .unwrap_or("document")
        .replace(['"', '\\'], "_");
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let content_type =
        if doc.content_type.starts_with("text/html") || doc.content_type == "image/svg+xml" {
            // Never render stored markup in our origin.
            "application/octet-stream".to_owned()
        } else {
            doc.content_type.clone()
        };
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{ascii}\""),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (header::CACHE_CONTROL, "private, no-store".to_owned()),
        ],
        bytes,
    )
        .into_response())
}
