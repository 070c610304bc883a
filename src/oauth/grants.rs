//! Grants, authorization codes and tokens: the state machine of the specification's grant
//! table, and the bearer check of every connector call.
//!
//! A grant is created when a code is exchanged (or by [`issue_grant`] directly), so every
//! grant has had tokens. Tokens are keyed by their SHA-256: the lookup itself is the
//! comparison, so no secret is ever compared byte by byte in a data-dependent way; PKCE
//! verifiers and client secrets are compared with `subtle`.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::Client;
use super::{
    ACCESS_LIFETIME_SECS, BearerError, CODE_LIFETIME_SECS, OAuthError, REFRESH_LIFETIME_SECS,
    SCOPES, check_resource, hash_secret, known_scopes, new_secret,
};
use crate::app::App;
use crate::audit::{self, Actor};
use crate::identity;
use crate::store::by_org::{self, Kind};
use crate::store::{
    OAUTH_CLIENTS, OAUTH_CODES, OAUTH_GRANTS, OAUTH_LAST_USED, OAUTH_TOKENS, Read, Store,
    StoreError, WriteTx, key,
};

pub use super::bearer_cache::AccessContext;

/// A grant to be created with its first tokens.
#[derive(Debug, Clone)]
pub struct NewGrant {
    pub org_id: u64,
    pub person_id: u64,
    pub client_id: String,
    pub scopes: Vec<String>,
    pub resource: String,
}

/// Tokens handed to a client. `access_token` and `refresh_token` exist only here and on the
/// wire; the store keeps their hashes.
#[derive(Debug, Clone, Serialize)]
pub struct TokenPair {
    pub grant_id: u64,
    pub access_token: String,
    pub refresh_token: String,
    pub expires_in: i64,
    pub scopes: Vec<String>,
}

/// A connector grant: one person in one organisation, for one client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub id: u64,
    pub org_id: u64,
    pub person_id: u64,
    pub client_id: String,
    /// The scopes the person approved; refreshes may narrow a token's scopes, never these.
    pub scopes: Vec<String>,
    pub resource: String,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TokenKind {
    Access,
    Refresh,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TokenRecord {
    kind: TokenKind,
    grant_id: u64,
    scopes: Vec<String>,
    audience: String,
    expires_at: Timestamp,
    /// Refresh tokens: when a refresh replaced this one. Using it again revokes the grant.
    replaced_at: Option<Timestamp>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CodeRecord {
    client_id: String,
    redirect_uri: String,
    /// base64url(SHA-256(verifier)), as sent at `/authorize`.
    code_challenge: String,
    org_id: u64,
    person_id: u64,
    scopes: Vec<String>,
    resource: String,
    expires_at: Timestamp,
    /// Set at the first exchange: the grant it created, revoked if the code comes back.
    used_by_grant: Option<u64>,
}

/// What the consent page approved, to be turned into a code.
#[derive(Debug, Clone)]
pub struct NewCode {
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub org_id: u64,
    pub person_id: u64,
    pub scopes: Vec<String>,
    pub resource: String,
}

/// The parameters of an `authorization_code` token request.
#[derive(Debug, Clone)]
pub struct CodeExchange<'a> {
    pub code: &'a str,
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    pub code_verifier: &'a str,
    pub resource: Option<&'a str>,
}

fn after(t: Timestamp, secs: i64) -> Timestamp {
    t.saturating_add(SignedDuration::from_secs(secs))
        .unwrap_or(t)
}

fn check_scopes(scopes: &[String]) -> Result<(), OAuthError> {
    if scopes.is_empty() {
        return Err(OAuthError::InvalidScope(
            "no supported scope was granted".into(),
        ));
    }
    if let Some(s) = scopes.iter().find(|s| !SCOPES.contains(&s.as_str())) {
        return Err(OAuthError::InvalidScope(format!("unknown scope `{s}`")));
    }
    Ok(())
}

/// Turns a bearer token into the acting person, organisation, grant and scopes, re-checking
/// that the person may still act there. One read transaction; no writes (the last-use stamp
/// goes through the batch writer, at most once a minute per grant).
pub fn check_bearer(app: &App, token: &str) -> Result<AccessContext, BearerError> {
    // Personal access tokens have their own records and the same per-call checks.
    if token.starts_with(super::pats::PREFIX) {
        return super::pats::check_bearer(app, token);
    }
    if !token.starts_with("kb_at_") || token.len() > 100 {
        return Err(BearerError::Invalid);
    }
    let hash = hash_secret(token);
    let now = app.clock.now();
    let audience = app.connector_url();
    let ctx = app.bearer_cache.check(hash, now, || {
        let found = app.store.read(|tx| -> Result<_, StoreError> {
            let Some(t) = tx.get::<TokenRecord>(OAUTH_TOKENS, &hash)? else {
                return Ok(Err(BearerError::Invalid));
            };
            if t.kind != TokenKind::Access {
                return Ok(Err(BearerError::Invalid));
            }
            let Some(g) = tx.get::<Grant>(OAUTH_GRANTS, &key::id(t.grant_id))? else {
                return Ok(Err(BearerError::Invalid));
            };
            if g.revoked_at.is_some() {
                return Ok(Err(BearerError::Revoked));
            }
            if now >= t.expires_at {
                return Ok(Err(BearerError::Expired));
            }
            if !bool::from(t.audience.as_bytes().ct_eq(audience.as_bytes())) {
                return Ok(Err(BearerError::Invalid));
            }
            if let Err(denied) =
                identity::connector_access(tx, g.org_id, g.person_id, &app.config.terms_version)?
            {
                return Ok(Err(BearerError::Denied(denied)));
            }
            Ok(Ok((
                AccessContext {
                    grant_id: g.id,
                    token_id: None,
                    org_id: g.org_id,
                    person_id: g.person_id,
                    client_id: g.client_id,
                    scopes: t.scopes,
                },
                t.expires_at,
            )))
        });
        found.unwrap_or_else(|e| {
            // A store failure must not let a call through; the caller sees an invalid token
            // and the log says why.
            tracing::error!(error = %e, "bearer check could not read the store");
            Err(BearerError::Invalid)
        })
    })?;
    super::stamp_last_use(
        app,
        &app.grant_use_stamped,
        OAUTH_LAST_USED,
        ctx.org_id,
        ctx.grant_id,
        now,
    );
    Ok(ctx)
}

/// When a grant was last used by a connector call, if ever.
pub fn grant_last_used(tx: &impl Read, grant_id: u64) -> Result<Option<Timestamp>, StoreError> {
    tx.get(OAUTH_LAST_USED, &key::id(grant_id))
}

fn put_tokens(
    tx: &mut WriteTx,
    grant_id: u64,
    scopes: &[String],
    audience: &str,
    now: Timestamp,
) -> Result<TokenPair, StoreError> {
    let access_token = new_secret("kb_at_");
    let refresh_token = new_secret("kb_rt_");
    tx.put(
        OAUTH_TOKENS,
        &hash_secret(&access_token),
        &TokenRecord {
            kind: TokenKind::Access,
            grant_id,
            scopes: scopes.to_vec(),
            audience: audience.to_owned(),
            expires_at: after(now, ACCESS_LIFETIME_SECS),
            replaced_at: None,
        },
    )?;
    tx.put(
        OAUTH_TOKENS,
        &hash_secret(&refresh_token),
        &TokenRecord {
            kind: TokenKind::Refresh,
            grant_id,
            scopes: scopes.to_vec(),
            audience: audience.to_owned(),
            expires_at: after(now, REFRESH_LIFETIME_SECS),
            replaced_at: None,
        },
    )?;
    Ok(TokenPair {
        grant_id,
        access_token,
        refresh_token,
        expires_in: ACCESS_LIFETIME_SECS,
        scopes: scopes.to_vec(),
    })
}

fn issue_grant_in(
    tx: &mut WriteTx,
    app: &App,
    grant: NewGrant,
    now: Timestamp,
) -> Result<TokenPair, OAuthError> {
    check_scopes(&grant.scopes)?;
    let resource = check_resource(&app.connector_url(), Some(&grant.resource))?;
    let id = tx.next_id("grant")?;
    let record = Grant {
        id,
        org_id: grant.org_id,
        person_id: grant.person_id,
        client_id: grant.client_id,
        scopes: grant.scopes,
        resource: resource.clone(),
        created_at: now,
        revoked_at: None,
    };
    tx.put(OAUTH_GRANTS, &key::id(id), &record)?;
    by_org::add(tx, Kind::Grant, record.org_id, &key::id(id))?;
    Ok(put_tokens(tx, id, &record.scopes, &resource, now)?)
}

/// Creates a grant and its first access and refresh tokens. This is what a successful code
/// exchange does; other areas' tests call it to mint grants without the browser flow.
pub fn issue_grant(app: &App, grant: NewGrant) -> Result<TokenPair, OAuthError> {
    let now = app.clock.now();
    app.store.write(|tx| issue_grant_in(tx, app, grant, now))
}

fn revoke_in(tx: &mut WriteTx, grant_id: u64, now: Timestamp) -> Result<bool, StoreError> {
    let Some(mut g) = tx.get::<Grant>(OAUTH_GRANTS, &key::id(grant_id))? else {
        return Ok(false);
    };
    if g.revoked_at.is_none() {
        g.revoked_at = Some(now);
        tx.put(OAUTH_GRANTS, &key::id(grant_id), &g)?;
    }
    Ok(true)
}

/// Revokes every live grant of a person — in one organisation (`Some(org_id)`) or in every
/// one (`None`) — in the caller's transaction; returns how many. The person's authorization
/// codes there that were not exchanged yet go too: each would become a new grant, so a code
/// asked for before (by whoever held the session a moment) must not outlive the revocation.
pub(super) fn revoke_person_grants_in(
    tx: &mut WriteTx,
    person_id: u64,
    org_id: Option<u64>,
    now: Timestamp,
) -> Result<usize, StoreError> {
    let theirs: Vec<u64> = by_org::records_in::<Grant>(tx, Kind::Grant, org_id)?
        .into_iter()
        .filter(|(_, g)| g.person_id == person_id && g.revoked_at.is_none())
        .map(|(_, g)| g.id)
        .collect();
    for id in &theirs {
        revoke_in(tx, *id, now)?;
    }
    let codes: Vec<Vec<u8>> = tx
        .scan::<CodeRecord>(OAUTH_CODES, b"")?
        .into_iter()
        .filter(|(_, c)| c.person_id == person_id && c.used_by_grant.is_none())
        .filter(|(_, c)| org_id.is_none_or(|o| o == c.org_id))
        .map(|(k, _)| k)
        .collect();
    for k in &codes {
        tx.delete(OAUTH_CODES, k)?;
    }
    Ok(theirs.len())
}

/// Revokes a grant and with it every token it issued. `false` when there is no such grant.
pub fn revoke_grant(app: &App, grant_id: u64) -> Result<bool, OAuthError> {
    let now = app.clock.now();
    Ok(app.store.write(|tx| revoke_in(tx, grant_id, now))?)
}

/// RFC 7009: revoking an access or refresh token revokes its grant; unknown tokens are fine.
pub fn revoke_token(app: &App, token: &str) -> Result<(), OAuthError> {
    let hash = hash_secret(token);
    let now = app.clock.now();
    app.store.write(|tx| {
        if let Some(t) = tx.get::<TokenRecord>(OAUTH_TOKENS, &hash)? {
            revoke_in(tx, t.grant_id, now)?;
        }
        Ok(())
    })
}

/// The per-call access check, in its own read snapshot (redb write transactions cannot lend
/// a read view; the check is repeated on every connector call anyway).
fn may_connect(
    app: &App,
    org_id: u64,
    person_id: u64,
) -> Result<Result<(), identity::AccessDenied>, StoreError> {
    app.store.read(|tx| {
        Ok(
            identity::connector_access(tx, org_id, person_id, &app.config.terms_version)?
                .map(|_| ()),
        )
    })
}

/// Stores an approved authorization request and returns the code (10 minutes, single use).
pub fn create_code(app: &App, new: NewCode) -> Result<String, OAuthError> {
    check_scopes(&new.scopes)?;
    let code = new_secret("kb_code_");
    let now = app.clock.now();
    let record = CodeRecord {
        client_id: new.client_id,
        redirect_uri: new.redirect_uri,
        code_challenge: new.code_challenge,
        org_id: new.org_id,
        person_id: new.person_id,
        scopes: new.scopes,
        resource: new.resource,
        expires_at: after(now, CODE_LIFETIME_SECS),
        used_by_grant: None,
    };
    app.store
        .write(|tx| tx.put(OAUTH_CODES, &hash_secret(&code), &record))?;
    Ok(code)
}

/// The PKCE S256 check: base64url(SHA-256(verifier)) equals the challenge.
fn pkce_matches(verifier: &str, challenge: &str) -> bool {
    use base64::Engine;
    let valid_chars = verifier
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    if !(43..=128).contains(&verifier.len()) || !valid_chars {
        return false;
    }
    let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash_secret(verifier));
    bool::from(computed.as_bytes().ct_eq(challenge.as_bytes()))
}

/// The `authorization_code` grant. A code that comes back after it was used revokes the
/// grant it created (the code leaked, or is being replayed).
pub fn exchange_code(app: &App, req: CodeExchange<'_>) -> Result<TokenPair, OAuthError> {
    let hash = hash_secret(req.code);
    let now = app.clock.now();
    // The outer result commits (a replay's revocation must stick even though the request is
    // refused); the inner one is the answer.
    app.store
        .write(|tx| -> Result<Result<TokenPair, OAuthError>, OAuthError> {
            let invalid = |m: &str| Ok(Err(OAuthError::InvalidGrant(m.to_owned())));
            let Some(mut code) = tx.get::<CodeRecord>(OAUTH_CODES, &hash)? else {
                return invalid("unknown authorization code");
            };
            if let Some(grant_id) = code.used_by_grant {
                revoke_in(tx, grant_id, now)?;
                return invalid("authorization code already used; its grant is revoked");
            }
            if now >= code.expires_at {
                return invalid("authorization code expired");
            }
            if code.client_id != req.client_id {
                return invalid("authorization code was issued to another client");
            }
            if code.redirect_uri != req.redirect_uri {
                return invalid("redirect_uri does not match the authorization request");
            }
            if !pkce_matches(req.code_verifier, &code.code_challenge) {
                return invalid("PKCE code_verifier does not match the code_challenge");
            }
            let resource = match check_resource(&app.connector_url(), req.resource) {
                Ok(r) => r,
                Err(e) => return Ok(Err(e)),
            };
            if resource != code.resource {
                return Ok(Err(OAuthError::InvalidTarget(
                    "resource differs from the authorization request".into(),
                )));
            }
            if let Err(denied) = may_connect(app, code.org_id, code.person_id)? {
                return invalid(&format!("the person may not connect: {denied}"));
            }
            let pair = issue_grant_in(
                tx,
                app,
                NewGrant {
                    org_id: code.org_id,
                    person_id: code.person_id,
                    client_id: code.client_id.clone(),
                    scopes: code.scopes.clone(),
                    resource: code.resource.clone(),
                },
                now,
            )?;
            code.used_by_grant = Some(pair.grant_id);
            tx.put(OAUTH_CODES, &hash, &code)?;
            Ok(Ok(pair))
        })?
}

/// The `refresh_token` grant: new access and refresh tokens, the old refresh token replaced.
/// `scope` may narrow the token's scopes, never widen them. A replaced refresh token that
/// comes back revokes the whole grant.
pub fn refresh(
    app: &App,
    client_id: &str,
    refresh_token: &str,
    scope: Option<&str>,
    resource: Option<&str>,
) -> Result<TokenPair, OAuthError> {
    let hash = hash_secret(refresh_token);
    let now = app.clock.now();
    app.store
        .write(|tx| -> Result<Result<TokenPair, OAuthError>, OAuthError> {
            let invalid = |m: &str| Ok(Err(OAuthError::InvalidGrant(m.to_owned())));
            let Some(mut old) = tx.get::<TokenRecord>(OAUTH_TOKENS, &hash)? else {
                return invalid("unknown refresh token");
            };
            if old.kind != TokenKind::Refresh {
                return invalid("not a refresh token");
            }
            let Some(grant) = tx.get::<Grant>(OAUTH_GRANTS, &key::id(old.grant_id))? else {
                return invalid("unknown refresh token");
            };
            if grant.revoked_at.is_some() {
                return invalid("the grant was revoked");
            }
            if old.replaced_at.is_some() {
                revoke_in(tx, grant.id, now)?;
                return invalid("refresh token already used; its grant is revoked");
            }
            if now >= old.expires_at {
                return invalid("refresh token expired");
            }
            if grant.client_id != client_id {
                return invalid("refresh token was issued to another client");
            }
            if let Err(e) = check_resource(&app.connector_url(), resource) {
                return Ok(Err(e));
            }
            let scopes = match scope {
                None => old.scopes.clone(),
                Some(s) => {
                    let asked: Vec<&str> = s.split_ascii_whitespace().collect();
                    if let Some(extra) = asked.iter().find(|a| !old.scopes.iter().any(|o| o == *a))
                    {
                        return Ok(Err(OAuthError::InvalidScope(format!(
                            "scope `{extra}` was not granted; a refresh cannot widen scopes"
                        ))));
                    }
                    let narrowed = known_scopes(s);
                    if narrowed.is_empty() {
                        return Ok(Err(OAuthError::InvalidScope("no scope requested".into())));
                    }
                    narrowed
                }
            };
            if let Err(denied) = may_connect(app, grant.org_id, grant.person_id)? {
                return invalid(&format!("the person may no longer connect: {denied}"));
            }
            old.replaced_at = Some(now);
            tx.put(OAUTH_TOKENS, &hash, &old)?;
            Ok(Ok(put_tokens(tx, grant.id, &scopes, &grant.resource, now)?))
        })?
}

/// The grants of an organisation, newest first, with their last use.
pub fn grants_of_org(
    tx: &impl Read,
    org_id: u64,
) -> Result<Vec<(Grant, Option<Timestamp>)>, StoreError> {
    let mut out = Vec::new();
    for (_, g) in by_org::records::<Grant>(tx, Kind::Grant, org_id)? {
        let last = grant_last_used(tx, g.id)?;
        out.push((g, last));
    }
    out.reverse();
    Ok(out)
}

/// A connection (grant) as the connections page shows it.
#[derive(Debug, Clone)]
pub struct Connection {
    pub grant: Grant,
    pub last_used: Option<Timestamp>,
    /// The client's name, or its id when the client is gone.
    pub client_name: String,
    /// The email of the person who connected; empty when the person is gone.
    pub person_email: String,
}

/// The connections of organisation `org_id` that person `person_id` may see: an admin sees
/// every one, any other member only their own. Newest first.
pub fn connections_visible_to(
    tx: &impl Read,
    org_id: u64,
    person_id: u64,
    is_admin: bool,
) -> Result<Vec<Connection>, StoreError> {
    let mut out = Vec::new();
    for (grant, last_used) in grants_of_org(tx, org_id)? {
        if !is_admin && grant.person_id != person_id {
            continue;
        }
        let client: Option<Client> = tx.get(OAUTH_CLIENTS, grant.client_id.as_bytes())?;
        let person = identity::person(tx, grant.person_id)?;
        out.push(Connection {
            client_name: client
                .map(|c| c.client_name)
                .unwrap_or_else(|| grant.client_id.clone()),
            person_email: person.map(|p| p.email).unwrap_or_default(),
            grant,
            last_used,
        });
    }
    Ok(out)
}

/// Revokes grant `grant_id` of organisation `org_id` for person `actor`, if they may: an
/// admin any grant of the organisation, any other member only their own. `false`, with
/// nothing changed, when there is no such grant they may revoke (unknown, of another
/// organisation, or someone else's); the check and the revocation are one transaction.
pub fn revoke_connection(
    app: &App,
    org_id: u64,
    actor: u64,
    is_admin: bool,
    grant_id: u64,
) -> Result<bool, OAuthError> {
    let now = app.clock.now();
    Ok(app.store.write(|tx| {
        let Some(g) = tx.get::<Grant>(OAUTH_GRANTS, &key::id(grant_id))? else {
            return Ok(false);
        };
        if g.org_id != org_id || !(is_admin || g.person_id == actor) {
            return Ok(false);
        }
        if g.person_id != actor {
            // An admin ending someone else's connection is an admin action.
            let by = match identity::person(tx, actor)? {
                Some(p) => Actor::person(p.id, &p.email),
                None => Actor::person(actor, &format!("#{actor}")),
            };
            let owner = identity::person(tx, g.person_id)?
                .map(|p| p.email)
                .unwrap_or_else(|| format!("#{}", g.person_id));
            let target = format!("grant {} of {owner} ({})", g.id, g.client_id);
            audit::admin_in(tx, org_id, &by, "connection.revoke", &target, now)?;
        }
        revoke_in(tx, grant_id, now)
    })?)
}

/// Removes a person from an organisation and revokes their connections and personal access
/// tokens there, in one transaction: their next connector call gets 401. Nothing else of
/// theirs changes — grants in other organisations, portal sessions, the account. Refused for
/// the last admin ([`identity::IdentityError::LastAdmin`]). Audited (`member.remove`). Returns
/// how many grants were revoked.
pub fn remove_member(
    store: &Store,
    by: &Actor,
    org_id: u64,
    person_id: u64,
    now: Timestamp,
) -> Result<usize, identity::IdentityError> {
    store.write(|tx| {
        identity::remove_member_in(tx, org_id, person_id)?;
        let email = identity::person(tx, person_id)?
            .map(|p| p.email)
            .unwrap_or_else(|| format!("#{person_id}"));
        audit::admin_in(tx, org_id, by, "member.remove", &email, now)?;
        let revoked = revoke_person_grants_in(tx, person_id, Some(org_id), now)?;
        super::pats::revoke_all_of_person(tx, person_id, Some(org_id), now)?;
        Ok(revoked)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_s256_matches_an_independent_computation() {
        // Challenge computed independently (Python hashlib + base64url).
        let verifier = "dBjftJeZ4CVP-mJ92K1uqcy8pJ3nTv-7Nq9Xz8JlT-M";
        let challenge = "EoL9dhDuHPb9tem2HptkkJBTh8rQcPgRvu_LYVMKuDw";
        assert!(pkce_matches(verifier, challenge));
        assert!(!pkce_matches(&format!("{verifier}X"), challenge));
        assert!(!pkce_matches(
            verifier,
            "EoL9dhDuHPb9tem2HptkkJBTh8rQcPgRvu_LYVMKuDx"
        ));
        assert!(!pkce_matches("short", challenge));
    }
}
