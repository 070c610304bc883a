//! `/authorize`: organisation picker and consent. The request's parameters travel through
//! the login as the `next` URL and through the consent form as hidden fields, and are checked
//! again on submit, so nothing about a pending authorization is stored.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::i18n::t;
use super::{CsrfForm, PortalUser, csrf_field, layout, page};
use crate::app::App;
use crate::http::client_ip::CallerIp;
use crate::http::error::rate_limited;
use crate::identity::{self, Org};
use crate::oauth::authorize::{
    AuthRequest, AuthorizeProblem, error_redirect, load_client, redirect_with, validate_authorize,
};
use crate::oauth::{NewCode, OAuthError, create_code};

/// The authorization parameters carried through the consent form. The request's `scope` is
/// carried as `requested_scope`, because `scope` names the consent checkboxes.
const CARRIED: [&str; 8] = [
    "client_id",
    "redirect_uri",
    "response_type",
    "state",
    "scope",
    "code_challenge",
    "code_challenge_method",
    "resource",
];

fn carried_name(param: &str) -> &str {
    if param == "scope" {
        "requested_scope"
    } else {
        param
    }
}

/// A `Location` header value; redirect URIs were checked, so they are valid header text.
fn location(uri: &str) -> HeaderValue {
    HeaderValue::from_str(uri).unwrap_or_else(|_| HeaderValue::from_static("/"))
}

fn found(to: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, location(to))]).into_response()
}

fn problem_response(app: &App, p: AuthorizeProblem) -> Response {
    match p {
        AuthorizeProblem::Page(msg) => page(
            StatusCode::BAD_REQUEST,
            layout(
                &t("consent-cannot-title"),
                None,
                None,
                html! {
                    p.notice.error #error role="alert" { (t("consent-cannot")) }
                    p.muted { (t("consent-detail")) " " code { (msg) } }
                },
            ),
        ),
        AuthorizeProblem::Redirect {
            redirect_uri,
            state,
            error,
        } => found(&error_redirect(
            &app.public_url,
            &redirect_uri,
            state.as_deref(),
            &error,
        )),
        AuthorizeProblem::Internal => {
            super::internal_page(StatusCode::INTERNAL_SERVER_ERROR, None, None)
        }
    }
}

/// The organisations where the person may connect now. A store that fails is an error, not
/// "no organisation": the page would otherwise tell the person to ask for a membership.
fn connectable_orgs(app: &App, person_id: u64) -> Result<Vec<Org>, crate::store::StoreError> {
    app.store.read(|tx| -> Result<_, crate::store::StoreError> {
        let mut out = Vec::new();
        for (org, _) in identity::organisations_of(tx, person_id)? {
            if identity::connector_access(tx, org.id, person_id, &app.config.terms_version)?.is_ok()
            {
                out.push(org);
            }
        }
        Ok(out)
    })
}

fn redirect_host(uri: &str) -> String {
    url::Url::parse(uri)
        .ok()
        .and_then(|u| u.host_str().map(|h| format!("{}://{h}", u.scheme())))
        .unwrap_or_else(|| uri.to_owned())
}

pub(super) fn scope_label(scope: &str) -> String {
    match scope {
        "kennisbank" => t("scope-kennisbank"),
        "feature_requests" => t("scope-feature-requests"),
        _ => t("scope-unknown"),
    }
}

fn consent_markup(
    user: &PortalUser,
    req: &AuthRequest,
    params: &HashMap<String, String>,
    orgs: &[Org],
) -> Markup {
    html! {
        p {
            strong { (req.client.client_name) }
            @if let Some(host) = req.client.metadata_host() {
                " (" (t("consent-described-by")) " " code.client-host { (host) } ")"
            }
            " " (t("consent-wants"))
        }
        p.muted { (t("consent-back-to")) " " code { (redirect_host(&req.redirect_uri)) } }
        @if orgs.is_empty() {
            p.notice.error { (t("consent-no-org")) }
        }
        form #consent-form .stack method="post" action="/authorize" {
            (csrf_field(&user.csrf))
            @for k in CARRIED {
                @if let Some(v) = params.get(k) {
                    input type="hidden" name=(carried_name(k)) value=(v);
                }
            }
            @if !orgs.is_empty() {
                fieldset {
                    legend { (t("consent-org")) }
                    @for (i, org) in orgs.iter().enumerate() {
                        label.check { input type="radio" name="org" value=(org.slug) checked[i == 0]; " " (org.name) }
                    }
                }
                fieldset {
                    legend { (t("consent-access")) }
                    @for s in &req.scopes {
                        label.check { input type="checkbox" name="scope" value=(s) checked; " " (scope_label(s)) }
                    }
                }
            }
            div.actions {
                @if !orgs.is_empty() {
                    button type="submit" name="decision" value="approve" { (t("consent-approve")) }
                }
                button.secondary type="submit" name="decision" value="deny" { (t("consent-deny")) }
            }
        }
    }
}

pub(super) async fn authorize_page(
    State(app): State<Arc<App>>,
    axum::Extension(limits): super::Limits,
    CallerIp(ip): CallerIp,
    Query(params): Query<HashMap<String, String>>,
    req: axum::extract::Request,
) -> Response {
    if let Some(r) = rate_limited(&limits.authorize, ip) {
        return r;
    }
    let checked = match load_client(&app, &params).await {
        Ok(()) => {
            let params = params.clone();
            app.blocking(move |app| validate_authorize(app, &params))
                .await
        }
        Err(p) => Err(p),
    };
    let auth = match checked {
        Ok(a) => a,
        Err(p) => return problem_response(&app, p),
    };
    let (mut parts, _) = req.into_parts();
    let user = match PortalUser::from_request_parts(&mut parts, &app).await {
        Ok(u) => u,
        Err(login) => return login,
    };
    let person_id = user.person.id;
    let orgs = match app
        .blocking(move |app| connectable_orgs(app, person_id))
        .await
    {
        Ok(orgs) => orgs,
        Err(e) => return super::store_failed(Some(&user), &e),
    };
    page(
        StatusCode::OK,
        layout(
            &t("consent-title"),
            Some(&user),
            None,
            consent_markup(&user, &auth, &params, &orgs),
        ),
    )
}

pub(super) async fn authorize_submit(
    State(app): State<Arc<App>>,
    axum::Extension(limits): super::Limits,
    CallerIp(ip): CallerIp,
    user: PortalUser,
    form: CsrfForm,
) -> Response {
    if let Some(r) = rate_limited(&limits.authorize, ip) {
        return r;
    }
    let params: HashMap<String, String> = CARRIED
        .iter()
        .filter_map(|k| {
            form.field(carried_name(k))
                .map(|v| ((*k).to_owned(), v.to_owned()))
        })
        .collect();
    let approved: Vec<String> = form
        .pairs()
        .iter()
        .filter(|(k, _)| k == "scope")
        .map(|(_, v)| v.clone())
        .collect();
    if let Err(p) = load_client(&app, &params).await {
        return problem_response(&app, p);
    }
    let decision = form.field("decision").unwrap_or_default().to_owned();
    let org_slug = form.field("org").unwrap_or_default().to_owned();
    let person_id = user.person.id;
    // Worded here: the worker thread below does not know the request's language.
    let choose_org = t("consent-choose-org");
    let outcome = app
        .blocking(move |app| -> Result<String, AuthorizeProblem> {
            let req = validate_authorize(app, &params)?;
            let refuse = |error: OAuthError| AuthorizeProblem::Redirect {
                redirect_uri: req.redirect_uri.clone(),
                state: req.state.clone(),
                error,
            };
            if decision != "approve" {
                return Err(refuse(OAuthError::AccessDenied));
            }
            let org = connectable_orgs(app, person_id)
                .map_err(|e| {
                    AuthorizeProblem::internal("reading the organisations to connect", &e)
                })?
                .into_iter()
                .find(|o| o.slug == org_slug)
                .ok_or(AuthorizeProblem::Page(choose_org))?;
            // Only scopes that were asked for and left ticked; never more than asked.
            let scopes: Vec<String> = req
                .scopes
                .iter()
                .filter(|s| approved.contains(s))
                .cloned()
                .collect();
            if scopes.is_empty() {
                return Err(refuse(OAuthError::AccessDenied));
            }
            let code = create_code(
                app,
                NewCode {
                    client_id: req.client.client_id.clone(),
                    redirect_uri: req.redirect_uri.clone(),
                    code_challenge: req.code_challenge.clone(),
                    org_id: org.id,
                    person_id,
                    scopes,
                    resource: req.resource.clone(),
                },
            )
            .map_err(|e| AuthorizeProblem::internal("storing an authorization code", &e))?;
            let mut out: Vec<(&str, &str)> = vec![("code", &code)];
            if let Some(s) = &req.state {
                out.push(("state", s));
            }
            out.push(("iss", &app.public_url));
            Ok(redirect_with(&req.redirect_uri, &out))
        })
        .await;
    match outcome {
        Ok(to) => found(&to),
        Err(p) => problem_response(&app, p),
    }
}
