//! Personal access tokens of an organisation (`/portal/o/<org>/tokens`): a member makes
//! tokens for themselves (the secret is shown once, in `#new-token`) and revokes their own;
//! admins see and may revoke every member's.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use maud::{Markup, html};

use super::consent::scope_label;
use super::i18n::{date_time, t, ta};
use super::{
    CsrfForm, OrgAdmin, OrgMember, csrf_field, layout, once_notice, page, refused, see_other, until,
};
use crate::app::App;
use crate::identity::{self, PersonalTokens};
use crate::oauth::SCOPES;
use crate::oauth::pats::{self, NewToken, Revoker, TokenRow};

pub fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/portal/o/{slug}/tokens", get(tokens_page).post(create))
        .route("/portal/o/{slug}/tokens/setting", post(set_setting))
        .route("/portal/o/{slug}/tokens/{id}", post(act))
}

fn tokens_markup(m: &OrgMember, rows: &[TokenRow], notice: Option<Markup>) -> Markup {
    let slug = &m.org.slug;
    let csrf = &m.user.csrf;
    let allowed = m.org.personal_tokens == PersonalTokens::Allow;
    html! {
        @if let Some(n) = notice { (n) }
        p.muted { (t("tokens-explain")) }
        @if allowed {
            h2 #new { (t("tokens-new-heading")) }
            form #token-form method="post" action={ "/portal/o/" (slug) "/tokens" } {
                (csrf_field(csrf))
                label { (t("col-name")) input type="text" name="name" maxlength="100" required placeholder="n8n"; }
                fieldset.choices {
                    legend { (t("col-scopes")) }
                    @for s in SCOPES {
                        label.check { input type="checkbox" name="scope" value=(s) checked[s == pats::DEFAULT_SCOPE]; " " (scope_label(s)) }
                    }
                }
                label { (t("tokens-expires-in-days"))
                    input type="number" name="expires_in_days" min="1" max=(pats::MAX_DAYS) value=(pats::DEFAULT_DAYS) required;
                }
                button type="submit" { (t("tokens-create")) }
            }
        } @else {
            p.notice #tokens-denied { (t("tokens-denied")) }
        }
        h2 { @if m.is_admin() { (t("tokens-all")) } @else { (t("tokens-yours")) } }
        @if rows.is_empty() { p.muted { (t("tokens-none")) } }
        @else {
            div.table-wrap { table #tokens {
                thead { tr {
                    th scope="col" { (t("col-name")) }
                    @if m.is_admin() { th scope="col" { (t("col-person")) } }
                    th scope="col" { (t("col-scopes")) }
                    th scope="col" { (t("tokens-col-created")) }
                    th scope="col" { (t("tokens-col-expires")) }
                    th scope="col" { (t("col-last-used")) }
                    th scope="col" { (t("col-actions")) }
                } }
                tbody { @for r in rows {
                    tr data-token-id=(r.token.id) {
                        td { (r.token.name) }
                        @if m.is_admin() { td { (r.email) } }
                        td { (r.token.scopes.join(", ")) }
                        td.date { (date_time(r.token.created_at)) }
                        td.date { (date_time(r.token.expires_at)) }
                        td.date { @match r.last_used { Some(at) => (date_time(at)), None => (t("never")) } }
                        td {
                            @if r.token.revoked_at.is_some() { span.badge.revoked { (t("connection-revoked")) } }
                            @else {
                                form.inline method="post" action={ "/portal/o/" (slug) "/tokens/" (r.token.id) } {
                                    (csrf_field(csrf))
                                    button.danger type="submit" name="action" value="revoke" { (t("connection-revoke")) }
                                }
                            }
                        }
                    }
                } }
            } }
        }
        @if m.is_admin() {
            h2 #setting { (t("tokens-setting-heading")) }
            form #personal-tokens-form .row method="post" action={ "/portal/o/" (slug) "/tokens/setting" } {
                (csrf_field(csrf))
                fieldset.choices {
                    legend.visually-hidden { (t("tokens-setting-heading")) }
                    label.check { input type="radio" name="personal_tokens" value="allow" checked[allowed]; (t("tokens-setting-allow")) }
                    label.check { input type="radio" name="personal_tokens" value="deny" checked[!allowed]; (t("tokens-setting-deny")) }
                }
                button type="submit" { (t("action-save")) }
            }
        }
    }
}

/// The page, with an optional notice on top (the new token, shown once).
async fn render(
    app: &Arc<App>,
    m: &OrgMember,
    status: StatusCode,
    notice: Option<Markup>,
) -> Response {
    let org_id = m.org.id;
    let mine = (!m.is_admin()).then_some(m.user.person.id);
    match app
        .blocking(move |app| app.store.read(|tx| pats::list(tx, org_id, mine)))
        .await
    {
        Ok(rows) => page(
            status,
            layout(
                &t("tokens-title"),
                Some(&m.user),
                Some(&m.org),
                tokens_markup(m, &rows, notice),
            ),
        ),
        Err(e) => refused(m, &e),
    }
}

async fn tokens_page(State(app): State<Arc<App>>, m: OrgMember) -> Response {
    render(&app, &m, StatusCode::OK, None).await
}

async fn create(State(app): State<Arc<App>>, m: OrgMember, form: CsrfForm) -> Response {
    let scopes: Vec<String> = form
        .pairs()
        .iter()
        .filter(|(k, _)| k == "scope")
        .map(|(_, v)| v.clone())
        .collect();
    let days = form.field("expires_in_days").unwrap_or_default().trim();
    let expires_in_days = if days.is_empty() {
        None
    } else {
        match days.parse::<i64>() {
            Ok(d) => Some(d),
            // Not a number: refused by the domain's range check, with its message.
            Err(_) => Some(0),
        }
    };
    let new = NewToken {
        org_id: m.org.id,
        person_id: m.user.person.id,
        name: form.field("name").unwrap_or_default().to_owned(),
        scopes,
        expires_in_days,
    };
    let by = m.actor();
    let r = app
        .blocking(move |app| pats::create(&app.store, &by, new, app.clock.now()))
        .await;
    match r {
        Ok((token, secret)) => {
            let made = ta("tokens-made", &[("name", token.name.clone())]);
            let until = until("tokens-made-explain", token.expires_at);
            let notice = once_notice("new-token", &made, &secret, &until);
            render(&app, &m, StatusCode::OK, Some(notice)).await
        }
        Err(e) => refused(&m, &e),
    }
}

async fn act(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_, id)): Path<(String, String)>,
    form: CsrfForm,
) -> Response {
    if form.field("action") != Some("revoke") {
        return refused(
            &m,
            &pats::PatError::InvalidInput(t("tokens-unknown-action")),
        );
    }
    // Not a number: like an id that names nothing here (no id is 0).
    let id: u64 = id.parse().unwrap_or(0);
    let by = Revoker::Member {
        org_id: m.org.id,
        person_id: m.user.person.id,
        email: m.user.person.email.clone(),
        is_admin: m.is_admin(),
    };
    let r = app
        .blocking(move |app| pats::revoke(&app.store, id, by, app.clock.now()))
        .await;
    match r {
        Ok(_) => see_other(&format!("/portal/o/{}/tokens", m.org.slug)),
        Err(e) => refused(&m, &e),
    }
}

/// An admin allows or denies the organisation's personal access tokens.
async fn set_setting(
    State(app): State<Arc<App>>,
    OrgAdmin(m): OrgAdmin,
    form: CsrfForm,
) -> Response {
    let setting = match form
        .field("personal_tokens")
        .unwrap_or_default()
        .parse::<PersonalTokens>()
    {
        Ok(s) => s,
        Err(e) => return refused(&m, &e),
    };
    let slug = m.org.slug.clone();
    let by = m.actor();
    let r = app
        .blocking(move |app| {
            identity::set_personal_tokens(&app.store, &by, &slug, setting, app.clock.now())
        })
        .await;
    match r {
        Ok(_) => see_other(&format!("/portal/o/{}/tokens", m.org.slug)),
        Err(e) => refused(&m, &e),
    }
}
