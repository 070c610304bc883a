//! Personal access tokens (`kb_pat_…`) for clients that cannot do a browser login: scripts,
//! CI jobs, n8n. A token acts as one person in one organisation with the scopes chosen when
//! it was made, until it expires (1–365 days) or is revoked. The secret is shown once and
//! stored only as its SHA-256; the bearer check ([`check_bearer`], reached through
//! [`super::check_bearer`]'s `kb_pat_` branch) re-checks the person on every call exactly as
//! for a grant, plus the organisation's `personal_tokens` setting.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{AccessContext, BearerError, SCOPES, hash_secret, new_secret};
use crate::app::App;
use crate::audit::{self, Actor};
use crate::identity::{self, AccessDenied, IdentityError, PersonalTokens};
use crate::store::by_org::{self, Kind};
use crate::store::{PAT_HASHES, PAT_LAST_USED, PATS, Read, Store, StoreError, WriteTx, key};

/// The readable prefix of every personal access token.
pub const PREFIX: &str = "kb_pat_";
/// Lifetime when none is chosen, in days.
pub const DEFAULT_DAYS: i64 = 90;
/// The longest lifetime, in days.
pub const MAX_DAYS: i64 = 365;
/// The scope given when none is chosen.
pub const DEFAULT_SCOPE: &str = "kennisbank";
/// What the audit and the connections name as the client of a token's calls.
pub const CLIENT_NAME: &str = "personal access token";

/// A personal access token as stored (never the secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PersonalToken {
    pub id: u64,
    pub org_id: u64,
    pub person_id: u64,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

/// A token to be made.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub org_id: u64,
    pub person_id: u64,
    pub name: String,
    /// Empty: [`DEFAULT_SCOPE`].
    pub scopes: Vec<String>,
    /// `None`: [`DEFAULT_DAYS`].
    pub expires_in_days: Option<i64>,
}

/// A token as lists show it: with its person's email and its last use.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    pub token: PersonalToken,
    pub email: String,
    pub last_used: Option<Timestamp>,
}

/// Why a token could not be made or revoked.
#[derive(Debug, thiserror::Error)]
pub enum PatError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("this organisation does not allow personal access tokens")]
    Disabled,
    #[error("no such personal access token")]
    NotFound,
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The chosen scopes, checked and put in [`SCOPES`] order; none chosen: [`DEFAULT_SCOPE`].
fn checked_scopes(scopes: &[String]) -> Result<Vec<String>, PatError> {
    if let Some(bad) = scopes.iter().find(|s| !SCOPES.contains(&s.as_str())) {
        return Err(PatError::InvalidInput(format!(
            "unknown scope `{bad}`; choose from {}",
            SCOPES.join(", ")
        )));
    }
    if scopes.is_empty() {
        return Ok(vec![DEFAULT_SCOPE.to_owned()]);
    }
    Ok(SCOPES
        .iter()
        .filter(|s| scopes.iter().any(|c| c == *s))
        .map(|s| (*s).to_owned())
        .collect())
}

fn checked_days(days: Option<i64>) -> Result<i64, PatError> {
    let days = days.unwrap_or(DEFAULT_DAYS);
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(PatError::InvalidInput(format!(
            "a token expires in 1 to {MAX_DAYS} days, not {days}"
        )));
    }
    Ok(days)
}

/// The checked name, scopes (in [`SCOPES`] order; none: [`DEFAULT_SCOPE`]) and lifetime in
/// days of a token to be made.
pub fn check_token_input(
    name: &str,
    scopes: &[String],
    days: Option<i64>,
) -> Result<(String, Vec<String>, i64), PatError> {
    Ok((
        identity::check_name("token name", name, 100)?,
        checked_scopes(scopes)?,
        checked_days(days)?,
    ))
}

/// What an audit record names a token by: its id, name and person.
fn audit_target(token: &PersonalToken, email: &str) -> String {
    format!("token {} {} of {email}", token.id, token.name)
}

/// Makes a token for a member of an organisation that allows them, audited (`token.create`,
/// `by` the person or the operator) in the same transaction. Returns the stored token and its
/// secret, which exists only here: show it once.
pub fn create(
    store: &Store,
    by: &Actor,
    new: NewToken,
    now: Timestamp,
) -> Result<(PersonalToken, String), PatError> {
    let (name, scopes, days) = check_token_input(&new.name, &new.scopes, new.expires_in_days)?;
    let expires_at = now
        .checked_add(SignedDuration::from_hours(days * 24))
        .map_err(|e| PatError::InvalidInput(e.to_string()))?;
    let secret = new_secret(PREFIX);
    let token = store.write(|tx| {
        let org = identity::org(tx, new.org_id)?
            .ok_or_else(|| IdentityError::UnknownOrg(format!("#{}", new.org_id)))?;
        if org.personal_tokens == PersonalTokens::Deny {
            return Err(PatError::Disabled);
        }
        let Some((_, person)) = identity::member(tx, new.org_id, new.person_id)? else {
            return Err(IdentityError::NotMember(format!("#{}", new.person_id)).into());
        };
        let token = PersonalToken {
            id: tx.next_id("personal_token")?,
            org_id: org.id,
            person_id: person.id,
            name,
            scopes,
            created_at: now,
            expires_at,
            revoked_at: None,
        };
        tx.put(PATS, &key::id(token.id), &token)?;
        by_org::add(tx, Kind::PersonalToken, token.org_id, &key::id(token.id))?;
        tx.put(PAT_HASHES, &hash_secret(&secret), &token.id)?;
        let target = format!(
            "{} scopes={} expires_at={}",
            audit_target(&token, &person.email),
            token.scopes.join(","),
            token.expires_at
        );
        audit::admin_in(tx, token.org_id, by, "token.create", &target, now)?;
        Ok(token)
    })?;
    Ok((token, secret))
}

/// The tokens of an organisation, newest first: every member's for an admin (`person`
/// `None`), else only that person's.
pub fn list(tx: &impl Read, org_id: u64, person: Option<u64>) -> Result<Vec<TokenRow>, StoreError> {
    let mut out = Vec::new();
    for (_, token) in by_org::records::<PersonalToken>(tx, Kind::PersonalToken, org_id)? {
        if person.is_some_and(|p| p != token.person_id) {
            continue;
        }
        let email = identity::person(tx, token.person_id)?
            .map(|p| p.email)
            .unwrap_or_default();
        let last_used = tx.get(PAT_LAST_USED, &key::id(token.id))?;
        out.push(TokenRow {
            token,
            email,
            last_used,
        });
    }
    out.reverse();
    Ok(out)
}

/// Who revokes: the operator (any token), or a member of an organisation (an admin every
/// token of it, anyone else only their own).
#[derive(Debug, Clone)]
pub enum Revoker {
    Operator,
    Member {
        org_id: u64,
        person_id: u64,
        email: String,
        is_admin: bool,
    },
}

impl Revoker {
    /// Who the audit record names.
    fn actor(&self) -> Actor {
        match self {
            Revoker::Operator => Actor::Operator,
            Revoker::Member {
                person_id, email, ..
            } => Actor::person(*person_id, email),
        }
    }
}

/// Revokes token `id`, audited (`token.revoke`) in its organisation in the same transaction;
/// [`PatError::NotFound`], with nothing changed, when there is no such token the revoker may
/// revoke. Revoking twice is fine (and audited once). Check and change are one transaction.
pub fn revoke(
    store: &Store,
    id: u64,
    by: Revoker,
    now: Timestamp,
) -> Result<PersonalToken, PatError> {
    store.write(|tx| {
        let mut token: PersonalToken = tx.get(PATS, &key::id(id))?.ok_or(PatError::NotFound)?;
        let allowed = match &by {
            Revoker::Operator => true,
            Revoker::Member {
                org_id,
                person_id,
                is_admin,
                ..
            } => token.org_id == *org_id && (*is_admin || token.person_id == *person_id),
        };
        if !allowed {
            return Err(PatError::NotFound);
        }
        if token.revoked_at.is_none() {
            token.revoked_at = Some(now);
            tx.put(PATS, &key::id(id), &token)?;
            let email = identity::person(tx, token.person_id)?
                .map(|p| p.email)
                .unwrap_or_default();
            let target = audit_target(&token, &email);
            audit::admin_in(tx, token.org_id, &by.actor(), "token.revoke", &target, now)?;
        }
        Ok(token)
    })
}

/// Revokes every live token of a person — in one organisation (`Some(org_id)`, when they
/// leave it) or everywhere (`None`: a password reset or change) — in the caller's
/// transaction. Returns how many were revoked.
pub fn revoke_all_of_person(
    tx: &mut WriteTx,
    person_id: u64,
    org_id: Option<u64>,
    now: Timestamp,
) -> Result<usize, StoreError> {
    let theirs: Vec<PersonalToken> =
        by_org::records_in::<PersonalToken>(tx, Kind::PersonalToken, org_id)?
            .into_iter()
            .map(|(_, t)| t)
            .filter(|t| t.person_id == person_id && t.revoked_at.is_none())
            .collect();
    for mut t in theirs.iter().cloned() {
        t.revoked_at = Some(now);
        tx.put(PATS, &key::id(t.id), &t)?;
    }
    Ok(theirs.len())
}

/// Deletes every token `which` selects (an erased person's, a removed organisation's) with its
/// hash and last use, in the caller's transaction. Returns how many.
pub fn delete_in(
    tx: &mut WriteTx,
    which: impl Fn(&PersonalToken) -> bool,
) -> Result<usize, StoreError> {
    let owners: std::collections::HashMap<u64, u64> = tx
        .scan::<PersonalToken>(PATS, b"")?
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| which(t))
        .map(|t| (t.id, t.org_id))
        .collect();
    if owners.is_empty() {
        return Ok(0);
    }
    for (k, id) in tx.scan::<u64>(PAT_HASHES, b"")? {
        if owners.contains_key(&id) {
            tx.delete(PAT_HASHES, &k)?;
        }
    }
    for (id, org_id) in &owners {
        tx.delete(PATS, &key::id(*id))?;
        tx.delete(PAT_LAST_USED, &key::id(*id))?;
        by_org::remove(tx, Kind::PersonalToken, *org_id, &key::id(*id))?;
    }
    Ok(owners.len())
}

/// The bearer check of a `kb_pat_` token: known, not revoked, not expired, the organisation
/// allows tokens, and the person passes every per-call check of a grant
/// ([`identity::connector_access`]). One read transaction; the last use goes through the
/// batch writer at most once a minute.
pub fn check_bearer(app: &App, token: &str) -> Result<AccessContext, BearerError> {
    if !token.starts_with(PREFIX) || token.len() > 100 {
        return Err(BearerError::Invalid);
    }
    let hash = hash_secret(token);
    let now = app.clock.now();
    let ctx = app.bearer_cache.check(hash, now, || {
        let found = app.store.read(|tx| -> Result<_, StoreError> {
            let Some(id) = tx.get::<u64>(PAT_HASHES, &hash)? else {
                return Ok(Err(BearerError::Invalid));
            };
            let Some(t) = tx.get::<PersonalToken>(PATS, &key::id(id))? else {
                return Ok(Err(BearerError::Invalid));
            };
            if t.revoked_at.is_some() {
                return Ok(Err(BearerError::Revoked));
            }
            if now >= t.expires_at {
                return Ok(Err(BearerError::Expired));
            }
            let (org, ..) = match identity::connector_access(
                tx,
                t.org_id,
                t.person_id,
                &app.config.terms_version,
            )? {
                Ok(found) => found,
                Err(denied) => return Ok(Err(BearerError::Denied(denied))),
            };
            if org.personal_tokens == PersonalTokens::Deny {
                return Ok(Err(BearerError::Denied(AccessDenied::PersonalTokensOff)));
            }
            Ok(Ok((
                AccessContext {
                    grant_id: 0,
                    token_id: Some(t.id),
                    org_id: t.org_id,
                    person_id: t.person_id,
                    client_id: CLIENT_NAME.to_owned(),
                    scopes: t.scopes,
                },
                t.expires_at,
            )))
        });
        found.unwrap_or_else(|e| {
            tracing::error!(error = %e, "personal token check could not read the store");
            Err(BearerError::Invalid)
        })
    })?;
    if let Some(id) = ctx.token_id {
        super::stamp_last_use(
            app,
            &app.pat_use_stamped,
            PAT_LAST_USED,
            ctx.org_id,
            id,
            now,
        );
    }
    Ok(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_default_to_kennisbank_and_are_checked() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(checked_scopes(&[]).unwrap(), s(&["kennisbank"]));
        assert_eq!(
            checked_scopes(&s(&["feature_requests", "kennisbank", "kennisbank"])).unwrap(),
            s(&["kennisbank", "feature_requests"])
        );
        assert!(matches!(
            checked_scopes(&s(&["admin"])),
            Err(PatError::InvalidInput(_))
        ));
    }

    #[test]
    fn lifetimes_are_one_to_365_days() {
        assert_eq!(checked_days(None).unwrap(), 90);
        assert_eq!(checked_days(Some(1)).unwrap(), 1);
        assert_eq!(checked_days(Some(365)).unwrap(), 365);
        for bad in [0, -1, 366] {
            assert!(checked_days(Some(bad)).is_err(), "{bad}");
        }
    }
}
