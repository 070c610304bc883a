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

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::agents::CancelError;
use crate::identity::IdentityError;
use crate::identity::oidc::OidcError;
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

    /// A refusal in the domain's own words (with the status [`status_of`] gives its code, see
    /// [`refusal`]).
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

/// The status of every refusal, by its machine code: one table, so a code answers the same
/// whichever module refuses with it. A code missing here is a plain bad request.
pub fn status_of(code: &str) -> StatusCode {
    match code {
        "bad_credentials" | "bad_second_factor" | "invalid_token" | "oidc_id_token" => {
            StatusCode::UNAUTHORIZED
        }
        "access_denied"
        | "account_disabled"
        | "invitation_email"
        | "oidc_no_email"
        | "oidc_refused"
        | "oidc_unknown_email"
        | "oidc_unverified"
        | "link_bad_signature"
        | "link_malformed"
        | "member_elsewhere"
        | "personal_tokens_denied" => StatusCode::FORBIDDEN,
        "link_unknown"
        | "not_found"
        | "oidc_unknown_provider"
        | "not_member"
        | "unknown_agent"
        | "unknown_org"
        | "unknown_person"
        | "unknown_project"
        | "unknown_trigger" => StatusCode::NOT_FOUND,
        "already_member" | "app_closed" | "duplicate_email" | "duplicate_org" | "last_admin"
        | "not_started" | "run_ended" | "version_conflict" => StatusCode::CONFLICT,
        "link_expired" | "link_used" => StatusCode::GONE,
        "body_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
        "too_many_requests" => StatusCode::TOO_MANY_REQUESTS,
        "busy" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// A refusal with machine code `code`, in the domain's own words.
pub fn refusal(code: &'static str, e: &dyn std::fmt::Display) -> Problem {
    Problem::refused(status_of(code), code, e)
}

impl ToProblem for KbError {
    fn problem(&self) -> Problem {
        match self {
            KbError::Store(s) => s.problem(),
            KbError::Index(_) => Problem::internal("search index error", self),
            // The codes are DESIGN.md's tool error codes, which the domain names.
            _ => refusal(self.code(), self),
        }
    }
}

/// Errors whose every variant is a refusal with a machine code ([`refusal`]) or returns its
/// own problem (a store failure, an internal one): `Type as e { pattern => "code" or return
/// …(e), }`.
macro_rules! refusals {
    ($($t:ty as $e:ident { $($arms:tt)* })*) => {$(
        impl ToProblem for $t {
            fn problem(&self) -> Problem {
                let $e = self;
                let code = match $e {
                    $($arms)*
                };
                refusal(code, $e)
            }
        }
    )*};
}
pub(crate) use refusals;

refusals! {
    IdentityError as e {
        Self::Store(s) => return s.problem(),
        Self::Interrupted => return Problem::internal("identity check interrupted", e),
        Self::InvalidInput(_) => "invalid_input",
        Self::WeakPassword(_) => "weak_password",
        Self::DuplicateEmail(_) => "duplicate_email",
        Self::DuplicateOrg(_) => "duplicate_org",
        Self::UnknownOrg(_) => "unknown_org",
        Self::UnknownPerson(_) => "unknown_person",
        Self::BadCredentials => "bad_credentials",
        Self::BadSecondFactor => "bad_second_factor",
        Self::NotMember(_) => "not_member",
        Self::AlreadyMember(_) => "already_member",
        Self::LastAdmin => "last_admin",
        Self::MemberElsewhere(_) => "member_elsewhere",
        Self::Disabled => "account_disabled",
        Self::InvitationForOther { .. } => "invitation_email",
        Self::LinkUnknown => "link_unknown",
        Self::LinkUsed => "link_used",
        Self::LinkExpired => "link_expired",
        Self::TooManyAttempts { .. } => "too_many_requests",
        Self::Busy { .. } => "busy",
    }
    TriggerError as e {
        Self::Store(s) => return s.problem(),
        Self::UnknownTrigger => "unknown_trigger",
        Self::RunNotFound => "not_found",
        Self::UnknownOrg(_) => "unknown_org",
        Self::UnknownAgent(_) => "unknown_agent",
        Self::UnknownProject(_) => "unknown_project",
        Self::InvalidToken => "invalid_token",
        Self::AccessDenied => "access_denied",
        Self::NotStarted(_) => "not_started",
        Self::BodyTooLarge => "body_too_large",
        Self::InvalidKey(_) => "invalid_key",
        Self::BadBody(_) => "bad_body",
        Self::InvalidInput(_) => "invalid_input",
        Self::NotGeneric(_) => "not_generic",
        Self::ProjectNotReady(_) => "project_not_ready",
    }
    RequestError as e {
        Self::Store(s) => return s.problem(),
        Self::NotFound(_) => "not_found",
        Self::UnknownOrg(_) => "unknown_org",
        Self::InvalidInput(_) => "invalid_input",
        Self::AppClosed(_) => "app_closed",
    }
    AgentError as e {
        Self::Store(s) => return s.problem(),
        Self::InvalidInput(_) => "invalid_input",
        Self::UnknownOrg(_) => "unknown_org",
    }
    CancelError as e {
        Self::Store(s) => return s.problem(),
        Self::NotFound(_) | Self::NotARun(_) => "not_found",
        Self::Final { .. } => "run_ended",
    }
    LinkError as e {
        Self::Expired => "link_expired",
        Self::Malformed => "link_malformed",
        Self::BadSignature => "link_bad_signature",
    }
}

impl ToProblem for OidcError {
    fn problem(&self) -> Problem {
        use OidcError as O;
        let code = match self {
            O::Identity(e) => return e.problem(),
            // The detail (addresses, the provider's answers) is for the operator's log.
            O::Unavailable { .. } => {
                tracing::warn!(error = %self, "sign-in provider unavailable");
                return Problem::new(
                    StatusCode::BAD_GATEWAY,
                    "oidc_unavailable",
                    "the sign-in provider could not be used; try again later",
                );
            }
            O::UnknownProvider(_) => "oidc_unknown_provider",
            O::State => "oidc_state",
            O::Refused(_) => "oidc_refused",
            O::IdToken(_) => "oidc_id_token",
            O::NoEmail => "oidc_no_email",
            O::Unverified(_) => "oidc_unverified",
            O::UnknownEmail(_) => "oidc_unknown_email",
        };
        refusal(code, self)
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
        assert_eq!(p.code, INTERNAL);
        assert_eq!(p.message, INTERNAL_MESSAGE);
    }

    #[test]
    fn store_and_internal_failures_are_never_shown() {
        for p in [
            store_error().problem(),
            KbError::Index("SECRET_TABLE index broke".into()).problem(),
            KbError::Store(store_error()).problem(),
            IdentityError::Store(store_error()).problem(),
            IdentityError::Interrupted.problem(),
            TriggerError::Store(store_error()).problem(),
            RequestError::Store(store_error()).problem(),
            AgentError::Store(store_error()).problem(),
            CancelError::Store(store_error()).problem(),
        ] {
            assert_hidden(&p);
        }
        let j = JsonError::from(TriggerError::Store(store_error()));
        assert_eq!(
            (j.status, j.message.as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        );
    }

    /// Each refusal: its status and code (one status per code, whoever refuses), in the
    /// domain's own words.
    #[test]
    fn refusals_answer_with_the_status_of_their_code() {
        let busy = IdentityError::Busy {
            retry_after: std::time::Duration::from_secs(1),
        };
        let ended = CancelError::Final {
            id: 1,
            status: "succeeded",
        };
        let conflict = KbError::VersionConflict {
            message: "x".into(),
            current_version: Some(2),
        };
        let x = || "x".to_owned();
        let cases: Vec<(Problem, u16, &str)> = vec![
            (KbError::InvalidInput(x()).problem(), 400, "invalid_input"),
            (KbError::NotFound(x()).problem(), 404, "not_found"),
            (
                KbError::PathNotAllowed(x()).problem(),
                400,
                "path_not_allowed",
            ),
            (conflict.problem(), 409, "version_conflict"),
            (
                IdentityError::WeakPassword(x()).problem(),
                400,
                "weak_password",
            ),
            (IdentityError::UnknownOrg(x()).problem(), 404, "unknown_org"),
            (
                IdentityError::DuplicateEmail(x()).problem(),
                409,
                "duplicate_email",
            ),
            (
                IdentityError::BadCredentials.problem(),
                401,
                "bad_credentials",
            ),
            (busy.problem(), 503, "busy"),
            (
                TriggerError::UnknownTrigger.problem(),
                404,
                "unknown_trigger",
            ),
            (TriggerError::InvalidToken.problem(), 401, "invalid_token"),
            (TriggerError::AccessDenied.problem(), 403, "access_denied"),
            (TriggerError::BodyTooLarge.problem(), 413, "body_too_large"),
            (
                TriggerError::ProjectNotReady(7).problem(),
                400,
                "project_not_ready",
            ),
            (
                RequestError::InvalidInput(x()).problem(),
                400,
                "invalid_input",
            ),
            (RequestError::NotFound(x()).problem(), 404, "not_found"),
            (RequestError::AppClosed(x()).problem(), 409, "app_closed"),
            (RequestError::UnknownOrg(x()).problem(), 404, "unknown_org"),
            (
                AgentError::InvalidInput(x()).problem(),
                400,
                "invalid_input",
            ),
            (AgentError::UnknownOrg(x()).problem(), 404, "unknown_org"),
            (ended.problem(), 409, "run_ended"),
            (LinkError::Expired.problem(), 410, "link_expired"),
            (LinkError::BadSignature.problem(), 403, "link_bad_signature"),
            (LinkError::Malformed.problem(), 403, "link_malformed"),
        ];
        for (p, status, code) in cases {
            assert_eq!((p.status.as_u16(), p.code), (status, code), "{p:?}");
        }
        assert_eq!(status_of("a_code_nobody_knows"), StatusCode::BAD_REQUEST);
        let words = [
            (
                KbError::InvalidInput("path is empty".into()).problem(),
                "path is empty",
            ),
            (
                IdentityError::WeakPassword("it is empty".into()).problem(),
                "password refused: it is empty",
            ),
            (LinkError::Malformed.problem(), "malformed download link"),
        ];
        for (p, message) in words {
            assert_eq!(p.message, message);
        }
        let j = JsonError::from(TriggerError::UnknownTrigger);
        assert_eq!(
            (j.status, j.message.as_str()),
            (StatusCode::NOT_FOUND, "Unknown event trigger")
        );
    }
}
