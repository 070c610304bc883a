//! Portal sessions: created at a checked password, promoted by the second factor, ended at
//! logout, at expiry, and — for every other session of the person — when the password changes
//! or the second factor is reset (whoever held a stolen session loses it). The cookie carries
//! a `kb_sess_` token; the store keeps its SHA-256 only.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{IdentityError, Person, hash_secret, new_secret};
use crate::store::{PEOPLE, SESSIONS, Store, StoreError, WriteTx, key};

/// Sessions end 12 hours after login, whatever happens in between.
pub const SESSION_LIFETIME_SECS: i64 = 12 * 60 * 60;

/// Prefix of a session token.
pub const PREFIX: &str = "kb_sess_";

/// A portal session as stored (under the SHA-256 of its token).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    pub person_id: u64,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    /// Whether the second factor was passed in this session.
    pub second_factor: bool,
}

/// Starts a session for a person whose password was checked; returns the cookie token.
pub fn create(store: &Store, person_id: u64, now: Timestamp) -> Result<String, StoreError> {
    create_with(store, person_id, now, false).map(|(token, _)| token)
}

/// Starts a session with the second factor already passed or not (passed: a sign-in with an
/// identity provider trusted for it, `skip_second_factor`); the token and the session.
pub fn create_with(
    store: &Store,
    person_id: u64,
    now: Timestamp,
    second_factor: bool,
) -> Result<(String, Session), StoreError> {
    let token = new_secret(PREFIX);
    let s = Session {
        person_id,
        created_at: now,
        expires_at: now
            .saturating_add(SignedDuration::from_secs(SESSION_LIFETIME_SECS))
            .unwrap_or(now),
        second_factor,
    };
    store.write(|tx| tx.put(SESSIONS, &hash_secret(&token), &s))?;
    Ok((token, s))
}

/// The live session of a cookie token and its person: `(hash, session, person)`.
pub fn load(
    store: &Store,
    token: &str,
    now: Timestamp,
) -> Result<Option<([u8; 32], Session, Person)>, StoreError> {
    if !token.starts_with(PREFIX) || token.len() > 100 {
        return Ok(None);
    }
    let hash = hash_secret(token);
    let found = store.read(|tx| -> Result<_, StoreError> {
        let Some(s) = tx.get::<Session>(SESSIONS, &hash)? else {
            return Ok(None);
        };
        let p: Option<Person> = tx.get(PEOPLE, &key::id(s.person_id))?;
        Ok(p.map(|p| (s, p)))
    })?;
    // A disabled person has no session, whatever cookie they hold.
    Ok(found
        .filter(|(s, p)| now < s.expires_at && p.disabled_at.is_none())
        .map(|(s, p)| (hash, s, p)))
}

/// Changes a stored session (if it still exists).
pub fn update(
    store: &Store,
    hash: &[u8; 32],
    f: impl FnOnce(&mut Session),
) -> Result<(), StoreError> {
    store.write(|tx| update_in(tx, hash, f))
}

fn update_in(
    tx: &mut WriteTx,
    hash: &[u8; 32],
    f: impl FnOnce(&mut Session),
) -> Result<(), StoreError> {
    if let Some(mut s) = tx.get::<Session>(SESSIONS, hash)? {
        f(&mut s);
        tx.put(SESSIONS, hash, &s)?;
    }
    Ok(())
}

/// Ends one session (logout).
pub fn end(store: &Store, hash: &[u8; 32]) -> Result<(), StoreError> {
    store.write(|tx| tx.delete(SESSIONS, hash).map(drop))
}

/// Ends every session of a person except `keep` (the one making the change, if any), in the
/// caller's transaction; returns how many ended. Also for an admin's reset of a person.
pub fn end_others_in(
    tx: &mut WriteTx,
    person_id: u64,
    keep: Option<&[u8; 32]>,
) -> Result<usize, StoreError> {
    let theirs: Vec<Vec<u8>> = tx
        .scan::<Session>(SESSIONS, b"")?
        .into_iter()
        .filter(|(k, s)| s.person_id == person_id && keep.is_none_or(|h| k.as_slice() != h))
        .map(|(k, _)| k)
        .collect();
    for k in &theirs {
        tx.delete(SESSIONS, k)?;
    }
    Ok(theirs.len())
}

/// Resets a person's second factor from one of their sessions: a new secret to enrol, this
/// session back before the second factor, every other session ended. One transaction.
pub fn reset_second_factor(
    store: &Store,
    person_id: u64,
    session: &[u8; 32],
) -> Result<(), IdentityError> {
    store.write(|tx| {
        let mut person: Person = tx
            .get(PEOPLE, &key::id(person_id))?
            .ok_or_else(|| IdentityError::UnknownPerson(format!("#{person_id}")))?;
        let (state, _) = super::totp::new_secret(&person.email)?;
        person.totp = Some(state);
        tx.put(PEOPLE, &key::id(person_id), &person)?;
        update_in(tx, session, |s| s.second_factor = false)?;
        end_others_in(tx, person_id, Some(session))?;
        Ok(())
    })
}
