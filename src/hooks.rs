//! The two public hook endpoints, `POST /api/hooks/events/{uuid}` and
//! `GET /api/hooks/runs/{id}`. Thin: credentials, key and body are taken from the request
//! here; every decision is in `crate::triggers`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::app::App;
use crate::http::error::JsonError;
use crate::triggers::{self, Delivered, Delivery, RawKey, Signature, Skip, TriggerError};

/// The hook endpoints' routes.
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/api/hooks/events/{uuid}", post(fire))
        .route("/api/hooks/runs/{id}", get(read_run))
}

/// Header carrying the event key (spec: X-Service-Event-Key).
pub const EVENT_KEY_HEADER: &str = "x-service-event-key";

type Params = Query<Vec<(String, String)>>;

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The secret: `Authorization: Bearer` preferred, else `?token=`.
fn secret(headers: &HeaderMap, q: &[(String, String)]) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    bearer.or_else(|| param(q, "token")).map(str::to_owned)
}

fn outcome_of(e: &TriggerError) -> &'static str {
    match e {
        TriggerError::UnknownTrigger => "unknown_trigger",
        TriggerError::InvalidToken => "invalid_token",
        TriggerError::InvalidKey(_) => "invalid_key",
        TriggerError::BadBody(_) | TriggerError::BodyTooLarge => "bad_body",
        _ => "error",
    }
}

fn skipped(skip: Skip, key: Option<&str>) -> Response {
    let body = match key {
        Some(k) => json!({"skipped": skip.as_str(), "key": k}),
        None => json!({"skipped": skip.as_str()}),
    };
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// `POST /api/hooks/events/:uuid`, checks in DESIGN.md's order.
pub async fn fire(
    State(app): State<Arc<App>>,
    Path(uuid): Path<String>,
    Query(q): Params,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match fire_inner(&app, uuid, q, headers, body).await {
        Ok(r) => r,
        Err(e) => {
            app.metrics.delivery(outcome_of(&e));
            JsonError::from(e).into_response()
        }
    }
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Signature headers (they count only when the delivery carries no secret).
fn signature(headers: &HeaderMap) -> Option<Signature> {
    if let (Some(id), Some(timestamp), Some(signatures)) = (
        header_str(headers, "webhook-id"),
        header_str(headers, "webhook-timestamp"),
        header_str(headers, "webhook-signature"),
    ) {
        return Some(Signature::Standard {
            id,
            timestamp,
            signatures,
        });
    }
    header_str(headers, "x-hub-signature-256").map(|signature| Signature::GitHub { signature })
}

async fn read_bytes(headers: &HeaderMap, body: Body) -> Result<axum::body::Bytes, TriggerError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > triggers::BODY_LIMIT as u64) {
        return Err(TriggerError::BodyTooLarge);
    }
    axum::body::to_bytes(body, triggers::BODY_LIMIT)
        .await
        .map_err(|_| TriggerError::BodyTooLarge)
}

async fn fire_inner(
    app: &Arc<App>,
    uuid: String,
    q: Vec<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, TriggerError> {
    let key = match headers.get(EVENT_KEY_HEADER) {
        Some(v) => match v.to_str() {
            Ok(s) => RawKey::Given(s.to_owned()),
            Err(_) => RawKey::NotText,
        },
        None => match param(&q, "key") {
            Some(k) => RawKey::Given(k.to_owned()),
            None => RawKey::Absent,
        },
    };
    let delivery = Delivery {
        uuid,
        secret: secret(&headers, &q),
        signature: signature(&headers),
        key,
        delivery_id: header_str(&headers, "webhook-id")
            .or_else(|| header_str(&headers, "x-github-delivery")),
        now: app.clock.now(),
    };
    match triggers::deliver(app, delivery, read_bytes(&headers, body)).await? {
        Delivered::Created(run_id) => {
            app.metrics.delivery("dispatched");
            let location = triggers::run_url(&app.public_url, run_id);
            Ok((
                StatusCode::ACCEPTED,
                [(header::LOCATION, location)],
                axum::Json(json!({"featureRequestId": run_id, "dispatched": true})),
            )
                .into_response())
        }
        Delivered::Duplicate(run_id) => {
            app.metrics.delivery("duplicate");
            Ok((
                StatusCode::OK,
                axum::Json(json!({"duplicate": true, "featureRequestId": run_id})),
            )
                .into_response())
        }
        Delivered::Skipped { skip, key } => {
            app.metrics.delivery(skip.as_str());
            Ok(skipped(skip, key.as_deref()))
        }
    }
}

/// `GET /api/hooks/runs/:id`.
pub async fn read_run(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, JsonError> {
    let secret = secret(&headers, &q);
    let view = app
        .blocking(move |app| {
            app.store
                .read(|tx| triggers::read_run(tx, &id, secret.as_deref()))
        })
        .await?;
    Ok((StatusCode::OK, axum::Json(view)).into_response())
}
