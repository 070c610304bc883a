//! Portal form posts: the urlencoded body with its CSRF token checked before a handler sees it.
//!
//! - [`CsrfForm`]: the form of a session. Put it last in a handler's arguments, after
//!   [`PortalUser`](super::PortalUser), [`OrgMember`](super::OrgMember),
//!   [`OrgAdmin`](super::OrgAdmin) or the login's `LoginStep`: those decide who may post at
//!   all, then the token is checked against the session's (the 403 "Form expired" page
//!   otherwise).
//! - [`UncheckedForm`]: the body only, for the two posts that find their binding themselves:
//!   the login form (bound to the pre-login cookie, there is no session yet) and logout (no
//!   session: back to the login page, not a 403). They call [`UncheckedForm::verify`].
//!
//! Multipart forms (uploads) read their `csrf_token` part themselves and check it with
//! [`verify_csrf`].

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};

use super::{csrf_rejected, field, form_pairs, request_session, store_failed, verify_csrf};
use crate::app::App;

/// The CSRF token of the request's session, left in the request's extensions by the
/// [`PortalUser`](super::PortalUser) (and the login's `LoginStep`) extractor so that
/// [`CsrfForm`] does not look the session up again.
#[derive(Debug, Clone)]
pub(super) struct SessionCsrf(pub String);

/// A form post whose CSRF token matched the session's. Repeated fields are kept in order.
#[derive(Debug, Clone)]
pub struct CsrfForm {
    pairs: Vec<(String, String)>,
}

impl CsrfForm {
    /// The first value of a field.
    pub fn field(&self, name: &str) -> Option<&str> {
        field(&self.pairs, name)
    }

    /// Every field in the order sent (checkbox groups repeat their name).
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

impl FromRequest<Arc<App>> for CsrfForm {
    type Rejection = Response;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, Response> {
        let expected = match req.extensions().get::<SessionCsrf>() {
            Some(SessionCsrf(t)) => Some(t.clone()),
            None => request_session(app, req.extensions().get(), req.headers())
                .await
                .map_err(|e| store_failed(None, &e))?
                .map(|s| s.csrf),
        };
        let form = UncheckedForm::from_request(req, app).await?;
        match expected {
            Some(expected) => form.verify(&expected).map_err(IntoResponse::into_response),
            None => Err(csrf_rejected()),
        }
    }
}

/// A missing or wrong CSRF token: answered with the 403 "Form expired" page.
#[derive(Debug, Clone, Copy)]
pub struct CsrfRejected;

impl IntoResponse for CsrfRejected {
    fn into_response(self) -> Response {
        csrf_rejected()
    }
}

/// A form post whose CSRF token is still to be checked with [`UncheckedForm::verify`].
#[derive(Debug, Clone)]
pub struct UncheckedForm {
    pairs: Vec<(String, String)>,
}

impl UncheckedForm {
    /// The form, if its `csrf_token` is `expected` (compared in constant time).
    pub fn verify(self, expected: &str) -> Result<CsrfForm, CsrfRejected> {
        if verify_csrf(expected, field(&self.pairs, "csrf_token")) {
            Ok(CsrfForm { pairs: self.pairs })
        } else {
            Err(CsrfRejected)
        }
    }
}

impl FromRequest<Arc<App>> for UncheckedForm {
    type Rejection = Response;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, Response> {
        let body = Bytes::from_request(req, app)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(UncheckedForm {
            pairs: form_pairs(&body),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_passes_only_with_the_expected_token_and_keeps_repeated_fields() {
        let form = |body: &[u8]| UncheckedForm {
            pairs: form_pairs(body),
        };
        let ok = form(b"csrf_token=abc&scope=a&scope=b")
            .verify("abc")
            .unwrap();
        assert_eq!(ok.field("scope"), Some("a"));
        assert_eq!(ok.pairs().len(), 3);
        assert!(form(b"csrf_token=abd").verify("abc").is_err());
        assert!(form(b"csrf_token=").verify("abc").is_err());
        assert!(form(b"scope=a").verify("abc").is_err());
        assert_eq!(
            CsrfRejected.into_response().status(),
            axum::http::StatusCode::FORBIDDEN
        );
    }
}
