//! Where module errors become HTTP answers: one place, so statuses, codes and what people may
//! read stay consistent (in the manner of meilisearch's error codes). Each module keeps its
//! own `thiserror` enum free of axum types; the mapping lives here, except for the
//! authorization server's own errors (RFC 6749 / 6750 codes, personal access tokens), which
//! `oauth::routes` maps with the same [`ToProblem`] so these helpers know no route's errors.
//!
//! Every error enum a handler answers with implements [`ToProblem`]: a [`Problem`] is the HTTP
//! status, a stable machine code and a message safe to show. A refused input keeps the
//! domain's own words; an internal failure (store, search index, i/o) is logged here with
//! `tracing` and shown only as "internal error". JSON endpoints answer with [`JsonError`] (the
//! OAuth endpoints in RFC 6749 form, `oauth::routes::oauth_error`); portal pages render the
//! same [`Problem`] as HTML.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::agents::CancelError;
use crate::identity::IdentityError;
use crate::kb::KbError;
use crate::kb::link::LinkError;
use crate::requests::RequestError;
use crate::roster::AgentError;
use crate::store::StoreError;
use crate::triggers::TriggerError;

/// The machine code of every internal failure.
pub const INTERNAL: &str = "internal";
/// The only thing anyone outside learns about an internal failure.
pub const INTERNAL_MESSAGE: &str = "internal error";

/// What a refused or failed operation looks like from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub status: StatusCode,
    /// Stable machine code (`not_found`, `invalid_input`, …; `internal` for failures).
    pub code: &'static str,
    /// Safe to show: the domain's words for a refusal, "internal error" otherwise.
    pub message: String,
}

impl Problem {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Problem {
            status,
            code,
            message: message.into(),
        }
    }

    /// An internal failure: its detail goes to the log, never to the caller.
    pub fn internal(what: &str, detail: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "{what}");
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            INTERNAL,
            INTERNAL_MESSAGE,
        )
    }

    /// Whether this is a failure (logged, its detail never shown) rather than a refusal.
    pub fn is_internal(&self) -> bool {
        self.status.is_server_error()
    }

    /// A refusal in the domain's own words.
    pub fn refused(status: StatusCode, code: &'static str, e: &dyn std::fmt::Display) -> Self {
        Problem::new(status, code, e.to_string())
    }
}

/// An error with a public face. Building the [`Problem`] logs internal failures, so build it
/// once per answer.
pub trait ToProblem {
    fn problem(&self) -> Problem;
}

impl ToProblem for StoreError {
    fn problem(&self) -> Problem {
        Problem::internal("store error", self)
    }
}

impl ToProblem for KbError {
    fn problem(&self) -> Problem {
        let status = match self {
            KbError::Store(s) => return s.problem(),
            KbError::Index(_) => return Problem::internal("search index error", self),
            KbError::NotFound(_) => StatusCode::NOT_FOUND,
            KbError::VersionConflict { .. } => StatusCode::CONFLICT,
            KbError::InvalidInput(_)
            | KbError::PathNotAllowed(_)
            | KbError::UnsupportedType(_)
            | KbError::TooLarge(_) => StatusCode::BAD_REQUEST,
        };
        // The codes are DESIGN.md's tool error codes, which the domain names.
        Problem::refused(status, self.code(), self)
    }
}

impl ToProblem for IdentityError {
    fn problem(&self) -> Problem {
        use IdentityError as I;
        let (status, code) = match self {
            I::Store(s) => return s.problem(),
            I::InvalidInput(_) => (StatusCode::BAD_REQUEST, "invalid_input"),
            I::WeakPassword(_) => (StatusCode::BAD_REQUEST, "weak_password"),
            I::DuplicateEmail(_) => (StatusCode::CONFLICT, "duplicate_email"),
            I::DuplicateOrg(_) => (StatusCode::CONFLICT, "duplicate_org"),
            I::UnknownOrg(_) => (StatusCode::NOT_FOUND, "unknown_org"),
            I::UnknownPerson(_) => (StatusCode::NOT_FOUND, "unknown_person"),
            I::BadCredentials => (StatusCode::UNAUTHORIZED, "bad_credentials"),
            I::BadSecondFactor => (StatusCode::UNAUTHORIZED, "bad_second_factor"),
            I::NotMember(_) => (StatusCode::NOT_FOUND, "not_member"),
            I::AlreadyMember(_) => (StatusCode::CONFLICT, "already_member"),
            I::LastAdmin => (StatusCode::CONFLICT, "last_admin"),
            I::MemberElsewhere(_) => (StatusCode::FORBIDDEN, "member_elsewhere"),
            I::Disabled => (StatusCode::FORBIDDEN, "account_disabled"),
            I::LinkUnknown => (StatusCode::NOT_FOUND, "link_unknown"),
            I::LinkUsed => (StatusCode::GONE, "link_used"),
            I::LinkExpired => (StatusCode::GONE, "link_expired"),
            I::TooManyAttempts { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_requests"),
            I::Busy { .. } => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            I::Interrupted => return Problem::internal("identity check interrupted", self),
        };
        Problem::refused(status, code, self)
    }
}

impl ToProblem for TriggerError {
    fn problem(&self) -> Problem {
        use TriggerError as T;
        let (status, code) = match self {
            T::Store(s) => return s.problem(),
            T::UnknownTrigger => (StatusCode::NOT_FOUND, "unknown_trigger"),
            T::RunNotFound => (StatusCode::NOT_FOUND, "not_found"),
            T::UnknownOrg(_) => (StatusCode::NOT_FOUND, "unknown_org"),
            T::UnknownAgent(_) => (StatusCode::NOT_FOUND, "unknown_agent"),
            T::UnknownProject(_) => (StatusCode::NOT_FOUND, "unknown_project"),
            T::InvalidToken => (StatusCode::UNAUTHORIZED, "invalid_token"),
            T::AccessDenied => (StatusCode::FORBIDDEN, "access_denied"),
            T::NotStarted(_) => (StatusCode::CONFLICT, "not_started"),
            T::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            T::InvalidKey(_) => (StatusCode::BAD_REQUEST, "invalid_key"),
            T::BadBody(_) => (StatusCode::BAD_REQUEST, "bad_body"),
            T::InvalidInput(_) => (StatusCode::BAD_REQUEST, "invalid_input"),
            T::NotGeneric(_) => (StatusCode::BAD_REQUEST, "not_generic"),
            T::ProjectNotReady(_) => (StatusCode::BAD_REQUEST, "project_not_ready"),
        };
        Problem::refused(status, code, self)
    }
}

impl ToProblem for RequestError {
    fn problem(&self) -> Problem {
        use RequestError as R;
        let (status, code) = match self {
            R::Store(s) => return s.problem(),
            R::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            R::UnknownOrg(_) => (StatusCode::NOT_FOUND, "unknown_org"),
            R::InvalidInput(_) => (StatusCode::BAD_REQUEST, "invalid_input"),
            R::AppClosed(_) => (StatusCode::CONFLICT, "app_closed"),
        };
        Problem::refused(status, code, self)
    }
}

impl ToProblem for AgentError {
    fn problem(&self) -> Problem {
        let (status, code) = match self {
            AgentError::Store(s) => return s.problem(),
            AgentError::InvalidInput(_) => (StatusCode::BAD_REQUEST, "invalid_input"),
            AgentError::UnknownOrg(_) => (StatusCode::NOT_FOUND, "unknown_org"),
        };
        Problem::refused(status, code, self)
    }
}

impl ToProblem for CancelError {
    fn problem(&self) -> Problem {
        let (status, code) = match self {
            CancelError::Store(s) => return s.problem(),
            CancelError::NotFound(_) | CancelError::NotARun(_) => {
                (StatusCode::NOT_FOUND, "not_found")
            }
            CancelError::Final { .. } => (StatusCode::CONFLICT, "run_ended"),
        };
        Problem::refused(status, code, self)
    }
}

impl ToProblem for LinkError {
    fn problem(&self) -> Problem {
        let (status, code) = match self {
            LinkError::Expired => (StatusCode::GONE, "link_expired"),
            LinkError::Malformed => (StatusCode::FORBIDDEN, "link_malformed"),
            LinkError::BadSignature => (StatusCode::FORBIDDEN, "link_bad_signature"),
        };
        Problem::refused(status, code, self)
    }
}

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

impl From<Problem> for JsonError {
    fn from(p: Problem) -> Self {
        JsonError::new(p.status, p.message)
    }
}

macro_rules! json_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for JsonError {
            fn from(e: $t) -> Self {
                e.problem().into()
            }
        }
    )*};
}

json_error_from!(
    StoreError,
    KbError,
    IdentityError,
    TriggerError,
    RequestError,
    AgentError,
    CancelError,
    LinkError
);

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

#[cfg(test)]
mod tests {
    use super::*;

    fn store_error() -> StoreError {
        StoreError::Db("table SECRET_TABLE is on fire".into())
    }

    /// A store failure: 500, `internal`, and none of its text.
    fn assert_hidden(p: &Problem) {
        assert_eq!(p.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(p.message, INTERNAL_MESSAGE);
        assert!(!p.message.contains("SECRET_TABLE"));
    }

    fn sc(p: Problem) -> (u16, &'static str) {
        (p.status.as_u16(), p.code)
    }

    #[test]
    fn store_errors_are_internal_and_never_shown() {
        let p = store_error().problem();
        assert_hidden(&p);
        assert_eq!(p.code, "internal");
        let j = JsonError::from(store_error());
        assert_eq!(j.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(j.message, "internal error");
    }

    #[test]
    fn kb_errors() {
        let p = KbError::InvalidInput("path is empty".into()).problem();
        assert_eq!(sc(p.clone()), (400, "invalid_input"));
        assert_eq!(p.message, "path is empty");
        assert_eq!(
            sc(KbError::NotFound("no such document".into()).problem()),
            (404, "not_found")
        );
        assert_eq!(
            sc(KbError::PathNotAllowed("x".into()).problem()),
            (400, "path_not_allowed")
        );
        assert_eq!(
            sc(KbError::VersionConflict {
                message: "x".into(),
                current_version: Some(2)
            }
            .problem()),
            (409, "version_conflict")
        );
        let p = KbError::Index("SECRET_TABLE index broke".into()).problem();
        assert_hidden(&p);
        assert_eq!(p.code, "internal");
        let p = KbError::Store(store_error()).problem();
        assert_hidden(&p);
        assert_eq!(p.code, "internal");
    }

    #[test]
    fn identity_errors() {
        let p = IdentityError::WeakPassword("it is empty".into()).problem();
        assert_eq!(sc(p.clone()), (400, "weak_password"));
        assert_eq!(p.message, "password refused: it is empty");
        assert_eq!(
            sc(IdentityError::UnknownOrg("acme".into()).problem()),
            (404, "unknown_org")
        );
        assert_eq!(
            sc(IdentityError::DuplicateEmail("a@b".into()).problem()),
            (409, "duplicate_email")
        );
        assert_eq!(
            sc(IdentityError::BadCredentials.problem()),
            (401, "bad_credentials")
        );
        assert_hidden(&IdentityError::Store(store_error()).problem());
    }

    #[test]
    fn trigger_errors() {
        assert_eq!(
            sc(TriggerError::UnknownTrigger.problem()),
            (404, "unknown_trigger")
        );
        assert_eq!(
            sc(TriggerError::InvalidToken.problem()),
            (401, "invalid_token")
        );
        assert_eq!(
            sc(TriggerError::AccessDenied.problem()),
            (403, "access_denied")
        );
        assert_eq!(
            sc(TriggerError::BodyTooLarge.problem()),
            (413, "body_too_large")
        );
        assert_eq!(
            sc(TriggerError::ProjectNotReady(7).problem()),
            (400, "project_not_ready")
        );
        let j = JsonError::from(TriggerError::UnknownTrigger);
        assert_eq!(
            (j.status, j.message.as_str()),
            (StatusCode::NOT_FOUND, "Unknown event trigger")
        );
        assert_hidden(&TriggerError::Store(store_error()).problem());
        let j = JsonError::from(TriggerError::Store(store_error()));
        assert_eq!(j.message, "internal error");
    }

    #[test]
    fn request_errors() {
        let p = RequestError::InvalidInput("choose an app".into()).problem();
        assert_eq!(sc(p.clone()), (400, "invalid_input"));
        assert_eq!(p.message, "choose an app");
        assert_eq!(
            sc(RequestError::NotFound("No such app.".into()).problem()),
            (404, "not_found")
        );
        assert_eq!(
            sc(RequestError::AppClosed("closed".into()).problem()),
            (409, "app_closed")
        );
        assert_eq!(
            sc(RequestError::UnknownOrg("x".into()).problem()),
            (404, "unknown_org")
        );
        assert_hidden(&RequestError::Store(store_error()).problem());
    }

    #[test]
    fn agent_errors() {
        assert_eq!(
            sc(AgentError::InvalidInput("x".into()).problem()),
            (400, "invalid_input")
        );
        assert_eq!(
            sc(AgentError::UnknownOrg("x".into()).problem()),
            (404, "unknown_org")
        );
        assert_hidden(&AgentError::Store(store_error()).problem());
    }

    #[test]
    fn link_errors() {
        assert_eq!(sc(LinkError::Expired.problem()), (410, "link_expired"));
        assert_eq!(
            sc(LinkError::BadSignature.problem()),
            (403, "link_bad_signature")
        );
        let p = LinkError::Malformed.problem();
        assert_eq!(sc(p.clone()), (403, "link_malformed"));
        assert_eq!(p.message, "malformed download link");
    }
}
