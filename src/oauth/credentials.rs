//! A person's credentials as a whole. A password reset (issuing the link and using it) or a
//! password change ends every way in that the person had before — their portal sessions (all
//! of them, or all but the one making a change) and their OAuth grants in every organisation,
//! with every access and refresh token those issued — in the same transaction as the change.
//! [`revoke_person_credentials_in`] is the one list of those credentials.
//!
//! Here, and not in `identity`, because grants are this module's and `identity` imports
//! nothing above it; the password rules themselves stay in `identity`.

use std::net::IpAddr;

use jiff::Timestamp;

use super::grants::revoke_person_grants_in;
use crate::app::App;
use crate::audit::{self, Actor};
use crate::identity::{self, IdentityError, Person, sessions};
use crate::store::{Store, StoreError, WriteTx};

/// What a revocation ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Revoked {
    pub sessions: usize,
    pub grants: usize,
    /// Personal access tokens.
    pub tokens: usize,
}

/// Ends a person's credentials in the caller's transaction: every portal session but
/// `keep_session` (the one making a change, if any), every live grant, so each access token
/// gets 401 and each refresh token `invalid_grant`, and every personal access token.
pub fn revoke_person_credentials_in(
    tx: &mut WriteTx,
    person_id: u64,
    keep_session: Option<&[u8; 32]>,
    now: Timestamp,
) -> Result<Revoked, StoreError> {
    Ok(Revoked {
        sessions: sessions::end_others_in(tx, person_id, keep_session)?,
        grants: revoke_person_grants_in(tx, person_id, None, now)?,
        tokens: super::pats::revoke_all_of_person(tx, person_id, None, now)?,
    })
}

/// Revokes every connection (grant) and personal access token of a person at once — the
/// portal's "revoke all": someone removed at their organisation's identity provider can no
/// longer sign in, but what they connected before stays until it is revoked.
///
/// - `within: Some(org_id)` (an organisation's admin, on a member's row): only that
///   organisation's grants and tokens of the person, who must be a member of it
///   ([`IdentityError::NotMember`] otherwise, with nothing changed); sessions stay, since they
///   are the person's and not the organisation's.
/// - `within: None` (the person themself): everything of theirs in every organisation, and
///   every portal session but `keep_session`, as [`revoke_person_credentials_in`] does.
///
/// Audited (`connection.revoke_all`) in the organisation, or in each of the person's, in the
/// same transaction. Returns what ended.
pub fn revoke_all(
    store: &Store,
    by: &Actor,
    person_id: u64,
    within: Option<u64>,
    keep_session: Option<&[u8; 32]>,
    now: Timestamp,
) -> Result<Revoked, IdentityError> {
    store.write(|tx| {
        let person = identity::person(tx, person_id)?
            .ok_or_else(|| IdentityError::UnknownPerson(format!("#{person_id}")))?;
        let (revoked, orgs) = match within {
            Some(org_id) => {
                if identity::member(tx, org_id, person_id)?.is_none() {
                    return Err(IdentityError::NotMember(person.email.clone()));
                }
                let revoked = Revoked {
                    sessions: 0,
                    grants: revoke_person_grants_in(tx, person_id, Some(org_id), now)?,
                    tokens: super::pats::revoke_all_of_person(tx, person_id, Some(org_id), now)?,
                };
                (revoked, vec![org_id])
            }
            None => (
                revoke_person_credentials_in(tx, person_id, keep_session, now)?,
                identity::org_ids_of(tx, person_id)?,
            ),
        };
        let target = format!(
            "{} grants={} tokens={}",
            person.email, revoked.grants, revoked.tokens
        );
        for org_id in orgs {
            audit::admin_in(tx, org_id, by, "connection.revoke_all", &target, now)?;
        }
        Ok(revoked)
    })
}

/// Issues a password-reset link (`identity::issue_reset_in`: an organisation's admin passes
/// `within`, and is refused for a person who belongs to another organisation too) and revokes
/// the person's credentials now. Audited (`member.reset`) in `within`, or for the operator in
/// each of the person's organisations. Returns the token.
pub fn issue_reset(
    store: &Store,
    by: &Actor,
    within: Option<u64>,
    email: &str,
    now: Timestamp,
) -> Result<String, IdentityError> {
    store.write(|tx| {
        let (person, token) = identity::issue_reset_in(tx, email, within, now)?;
        revoke_person_credentials_in(tx, person.id, None, now)?;
        let orgs = match within {
            Some(org_id) => vec![org_id],
            None => identity::org_ids_of(tx, person.id)?,
        };
        for org_id in orgs {
            audit::admin_in(tx, org_id, by, "member.reset", &person.email, now)?;
        }
        Ok(token)
    })
}

/// Uses a reset link: the new password is set and the second factor cleared
/// (`identity::use_reset_in`), and every session and grant of the person ends.
pub fn use_reset(
    store: &Store,
    token: &str,
    password: &str,
    now: Timestamp,
) -> Result<Person, IdentityError> {
    let person = identity::open_reset(store, token, now)?;
    let hash = identity::new_password_hash(password, &person.email)?;
    store.write(|tx| {
        let person = identity::use_reset_in(tx, token, hash, now)?;
        revoke_person_credentials_in(tx, person.id, None, now)?;
        Ok(person)
    })
}

/// The operator sets a person's password: every session and grant of the person ends.
/// Audited (`user.password`) in each of the person's organisations.
pub fn set_password(
    store: &Store,
    by: &Actor,
    email: &str,
    password: &str,
    now: Timestamp,
) -> Result<Person, IdentityError> {
    let person = identity::find_person(store, email)?;
    let hash = identity::new_password_hash(password, &person.email)?;
    store.write(|tx| {
        let person = identity::set_password_in(tx, person.id, hash)?;
        revoke_person_credentials_in(tx, person.id, None, now)?;
        for org_id in identity::org_ids_of(tx, person.id)? {
            audit::admin_in(tx, org_id, by, "user.password", &person.email, now)?;
        }
        Ok(person)
    })
}

/// A person changes their own password from session `session` (the login limits of
/// `LoginGuard::change_password` apply): every other session and every grant of theirs ends.
/// Returns how many other sessions ended.
pub async fn change_password(
    app: &App,
    person: &Person,
    session: [u8; 32],
    current: &str,
    new: &str,
    ip: IpAddr,
) -> Result<usize, IdentityError> {
    let now = app.clock.now();
    app.login
        .change_password(&app.store, person, current, new, ip, move |tx, id| {
            Ok(revoke_person_credentials_in(tx, id, Some(&session), now)?.sessions)
        })
        .await
}
