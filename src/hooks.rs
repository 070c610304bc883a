//! The two public hook endpoints, `POST /api/hooks/events/{uuid}` and
//! `GET /api/hooks/runs/{id}`. Thin: credentials, key and body are taken from the request
//! here; every decision is in `crate::triggers`.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::app::App;
use crate::http::error::JsonError;
use crate::triggers::{self, Fired, Signature, Skip, TriggerError};

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

/// Signature headers, when the delivery carries no secret.
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

fn parse_payload(bytes: &[u8]) -> Result<Value, TriggerError> {
    // An empty body is taken as `null`: some senders ping without a payload.
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(bytes).map_err(|e| TriggerError::BadBody(e.to_string()))
}

async fn fire_inner(
    app: &Arc<App>,
    uuid: String,
    q: Vec<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, TriggerError> {
    let secret = secret(&headers, &q);
    // Without a secret, a signature may authenticate the delivery instead.
    let signed = if secret.is_none() {
        signature(&headers)
    } else {
        None
    };
    let raw_key: Result<Option<String>, TriggerError> = match headers.get(EVENT_KEY_HEADER) {
        Some(v) => v
            .to_str()
            .map(|s| Some(s.to_owned()))
            .map_err(|_| TriggerError::InvalidKey("it must be plain ASCII".into())),
        None => Ok(param(&q, "key").map(str::to_owned)),
    };
    // A signed delivery is known by what its signature covers (see `Signature::delivery_id`),
    // never by an unsigned header an attacker could change.
    let raw_delivery = match &signed {
        Some(sig) => Some(sig.delivery_id()),
        None => {
            header_str(&headers, "webhook-id").or_else(|| header_str(&headers, "x-github-delivery"))
        }
    };
    let now = app.clock.now();
    let has_sig = signed.is_some();
    // One snapshot: the trigger, the secret check (when a secret was sent), and the fate of the
    // delivery. With a signature, the 401/400 checks wait for the body below.
    let (trigger, checks, pre) = app
        .blocking(move |app| {
            app.store.read(|tx| {
                let trigger = if has_sig {
                    triggers::lookup(tx, &uuid)?
                } else {
                    triggers::authenticate(tx, &uuid, secret.as_deref())?
                };
                let checks = raw_key
                    .and_then(|k| triggers::validate_key(k.as_deref()))
                    .and_then(|k| {
                        triggers::validate_delivery_id(raw_delivery.as_deref()).map(|d| (k, d))
                    });
                let pre = match &checks {
                    Ok((k, d)) => {
                        triggers::precheck(tx, &trigger, k.as_deref(), d.as_deref(), now)?
                    }
                    Err(_) => None,
                };
                Ok::<_, TriggerError>((trigger, checks, pre))
            })
        })
        .await?;
    // A signature covers the body, so it is read before the signature check; otherwise the
    // key is checked first (DESIGN.md order: 401, 400 key, then the body).
    let bytes = match &signed {
        Some(sig) => {
            let bytes = read_bytes(&headers, body).await?;
            triggers::verify(&app.server_key, &trigger, sig, &bytes, now)?;
            let (key, delivery) = checks?;
            (bytes, key, delivery)
        }
        None => {
            let (key, delivery) = checks?;
            (read_bytes(&headers, body).await?, key, delivery)
        }
    };
    let (bytes, key, delivery) = bytes;
    let payload = parse_payload(&bytes)?;
    let fired = match pre {
        Some(outcome) => outcome,
        None => {
            let instructions = triggers::instructions_with_payload(&trigger.instructions, &payload);
            let (id, key) = (trigger.id, key.clone());
            app.commits
                .write(move |tx| triggers::fire_in(tx, id, key, delivery, instructions, now))
                .await?
        }
    };
    match fired {
        Fired::Created(run_id) => {
            app.metrics.delivery("dispatched");
            app.metrics.run_queued();
            app.runs.wake(run_id);
            let location = triggers::run_url(&app.public_url, run_id);
            Ok((
                StatusCode::ACCEPTED,
                [(header::LOCATION, location)],
                axum::Json(json!({"featureRequestId": run_id, "dispatched": true})),
            )
                .into_response())
        }
        Fired::Duplicate(run_id) => {
            app.metrics.delivery("duplicate");
            Ok((
                StatusCode::OK,
                axum::Json(json!({"duplicate": true, "featureRequestId": run_id})),
            )
                .into_response())
        }
        Fired::Skipped(skip) => {
            app.metrics.delivery(skip.as_str());
            Ok(skipped(skip, key.as_deref()))
        }
        Fired::Gone => Err(TriggerError::UnknownTrigger),
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
