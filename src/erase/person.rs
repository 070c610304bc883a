//! `kennis user disable | enable | delete EMAIL`.
//!
//! - **Disable**: the person can no longer sign in (password login, any session they hold, any
//!   connector token: `identity` checks `disabled_at` at each), and in the same transaction
//!   their sessions end and their grants are revoked.
//! - **Enable**: they may sign in again; revoked grants stay revoked (they connect anew).
//! - **Delete**: the person is erased — name, email, password hash, second factor,
//!   memberships, sessions, grants and their tokens and codes, reset links, invitations to
//!   their address — in one transaction, refused while they are an organisation's last admin.
//!   Records that stay (audit, feature-request conversations) name them by the pseudonym
//!   `deleted-<id>` instead: their email is rewritten wherever it appears, and their name
//!   where a record names its author or actor. The audit's `person_id` then leads to no one,
//!   which [`person_label`] shows as the pseudonym.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{EraseError, erasing_key, pending, sweep};
use crate::audit::{self, Actor};
use crate::identity::{self, IdentityError, Membership, Person};
use crate::oauth::Grant;
use crate::store::by_org::{self, Kind};
use crate::store::{
    AUDIT, ERASING, INVITATIONS, MEMBERSHIPS, MEMBERSHIPS_BY_PERSON, OAUTH_CODES, OAUTH_GRANTS,
    OAUTH_LAST_USED, OAUTH_TOKENS, PEOPLE, PEOPLE_BY_EMAIL, REQUESTS, RESET_LINKS, Read, Store,
    StoreError, WriteTx, key,
};

const PERSON: u8 = b'p';

pub use crate::identity::pseudonym;

/// How the audit names the person of a record: their email, the pseudonym of an erased person,
/// or `None` for an agent's call (person 0).
pub fn person_label(tx: &impl Read, person_id: u64) -> Result<Option<String>, StoreError> {
    if person_id == 0 {
        return Ok(None);
    }
    Ok(Some(match identity::person(tx, person_id)? {
        Some(p) => p.email,
        None => pseudonym(person_id),
    }))
}

/// What `user disable` / `user enable` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PersonState {
    pub id: u64,
    pub email: String,
    pub disabled: bool,
    pub sessions_ended: usize,
    pub grants_revoked: usize,
}

/// What `user delete` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PersonErased {
    pub id: u64,
    pub pseudonym: String,
    /// Records that stay and now name the pseudonym.
    pub records_rewritten: u64,
}

/// The erasure's record in [`ERASING`], until the records that stay are rewritten.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Erasure {
    id: u64,
    email: String,
    name: String,
}

fn person_by_email(tx: &impl Read, email: &str) -> Result<Person, EraseError> {
    let unknown = || IdentityError::UnknownPerson(email.trim().to_owned());
    let email = identity::normalize_email(email).map_err(|_| unknown())?;
    let id: u64 = tx
        .get(PEOPLE_BY_EMAIL, email.as_bytes())?
        .ok_or_else(unknown)?;
    Ok(identity::person(tx, id)?.ok_or_else(unknown)?)
}

/// Audits `action` on person `p` in each of their organisations.
fn audit_in_their_orgs(
    tx: &mut WriteTx,
    by: &Actor,
    action: &str,
    p: &Person,
    now: Timestamp,
) -> Result<(), StoreError> {
    for org_id in identity::org_ids_of(tx, p.id)? {
        audit::admin_in(tx, org_id, by, action, &p.email, now)?;
    }
    Ok(())
}

/// `kennis user disable EMAIL`: no sign-in from now on; sessions end and grants are revoked
/// in the same transaction, audited (`user.disable`) in each of the person's organisations.
/// Disabling a disabled person changes nothing more.
pub fn disable_person(
    store: &Store,
    by: &Actor,
    email: &str,
    now: Timestamp,
) -> Result<PersonState, EraseError> {
    store.write(|tx| {
        let mut p = person_by_email(tx, email)?;
        if p.disabled_at.is_none() {
            p.disabled_at = Some(now);
            tx.put(PEOPLE, &key::id(p.id), &p)?;
            audit_in_their_orgs(tx, by, "user.disable", &p, now)?;
        }
        let revoked = crate::oauth::revoke_person_credentials_in(tx, p.id, None, now)?;
        Ok(PersonState {
            id: p.id,
            email: p.email,
            disabled: true,
            sessions_ended: revoked.sessions,
            grants_revoked: revoked.grants,
        })
    })
}

/// `kennis user enable EMAIL`: the person may sign in again; audited (`user.enable`) in each
/// of their organisations.
pub fn enable_person(
    store: &Store,
    by: &Actor,
    email: &str,
    now: Timestamp,
) -> Result<PersonState, EraseError> {
    store.write(|tx| {
        let mut p = person_by_email(tx, email)?;
        if p.disabled_at.take().is_some() {
            tx.put(PEOPLE, &key::id(p.id), &p)?;
            audit_in_their_orgs(tx, by, "user.enable", &p, now)?;
        }
        Ok(PersonState {
            id: p.id,
            email: p.email,
            disabled: false,
            sessions_ended: 0,
            grants_revoked: 0,
        })
    })
}

/// `kennis user delete EMAIL --yes`: erases the person (see the module's description), or
/// finishes an erasure an interruption left. Refused, with nothing changed, while they are an
/// organisation's last admin. Audited (`user.delete`, naming the pseudonym) in each
/// organisation they belonged to.
pub fn delete_person(
    store: &Store,
    by: &Actor,
    email: &str,
    now: Timestamp,
) -> Result<PersonErased, EraseError> {
    let id = store.write(|tx| {
        let p = match person_by_email(tx, email) {
            Ok(p) => p,
            Err(e) => {
                // An erasure begun for this address goes on.
                let normal = identity::normalize_email(email).unwrap_or_default();
                let begun = tx
                    .scan::<Erasure>(ERASING, &[PERSON])?
                    .into_iter()
                    .find(|(_, r)| r.email == normal);
                return match begun {
                    Some((_, r)) => Ok(r.id),
                    None => Err(e),
                };
            }
        };
        erase_in(tx, by, &p, now)?;
        Ok::<_, EraseError>(p.id)
    })?;
    let records_rewritten = finish(store, id)?;
    Ok(PersonErased {
        id,
        pseudonym: pseudonym(id),
        records_rewritten,
    })
}

/// The one transaction that erases the person's own records.
fn erase_in(tx: &mut WriteTx, by: &Actor, p: &Person, now: Timestamp) -> Result<(), EraseError> {
    let orgs: Vec<Membership> = tx
        .scan::<()>(MEMBERSHIPS_BY_PERSON, &key::id(p.id))?
        .into_iter()
        .filter_map(|(k, ())| key::id_at(&k, 8))
        .map(|org| tx.get::<Membership>(MEMBERSHIPS, &key::pair(org, p.id)))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    for m in &orgs {
        if let Err(IdentityError::LastAdmin) = identity::check_removable(tx, m) {
            let slug = tx
                .get::<identity::Org>(crate::store::ORGS, &key::id(m.org_id))?
                .map_or_else(|| format!("#{}", m.org_id), |o| o.slug);
            return Err(IdentityError::InvalidInput(format!(
                "{} is the last admin of `{slug}`: make someone else admin there first (an organisation keeps at least one admin)",
                p.email
            ))
            .into());
        }
    }
    let alias = pseudonym(p.id);
    for m in &orgs {
        tx.delete(MEMBERSHIPS, &key::pair(m.org_id, p.id))?;
        tx.delete(MEMBERSHIPS_BY_PERSON, &key::pair(p.id, m.org_id))?;
        audit::admin_in(tx, m.org_id, by, "user.delete", &alias, now)?;
    }
    identity::sessions::end_others_in(tx, p.id, None)?;
    crate::oauth::pats::delete_in(tx, |t| t.person_id == p.id)?;
    let mut grants = Vec::new();
    for (k, g) in tx.scan::<Grant>(OAUTH_GRANTS, b"")? {
        if g.person_id == p.id {
            tx.delete(OAUTH_GRANTS, &k)?;
            tx.delete(OAUTH_LAST_USED, &k)?;
            by_org::remove(tx, Kind::Grant, g.org_id, &k)?;
            grants.push(g.id);
        }
    }
    #[derive(Deserialize)]
    struct OfGrant {
        grant_id: u64,
    }
    for (k, t) in tx.scan::<OfGrant>(OAUTH_TOKENS, b"")? {
        if grants.contains(&t.grant_id) {
            tx.delete(OAUTH_TOKENS, &k)?;
        }
    }
    #[derive(Deserialize)]
    struct OfPerson {
        #[serde(default)]
        person_id: Option<u64>,
        #[serde(default)]
        email: Option<String>,
    }
    for table in [OAUTH_CODES, RESET_LINKS, INVITATIONS] {
        for (k, r) in tx.scan::<OfPerson>(table, b"")? {
            if r.person_id == Some(p.id) || r.email.as_deref() == Some(p.email.as_str()) {
                tx.delete(table, &k)?;
            }
        }
    }
    tx.delete(PEOPLE_BY_EMAIL, p.email.as_bytes())?;
    tx.delete(PEOPLE, &key::id(p.id))?;
    tx.put(
        ERASING,
        &erasing_key(PERSON, p.id),
        &Erasure {
            id: p.id,
            email: p.email.clone(),
            name: p.name.clone(),
        },
    )?;
    Ok(())
}

/// Rewrites the records that stay so they name the pseudonym, then ends the erasure. Safe to
/// repeat. Returns how many records it rewrote.
pub(super) fn finish(store: &Store, id: u64) -> Result<u64, EraseError> {
    let Some(e) = store.read(|tx| pending::<Erasure>(tx, PERSON, id))? else {
        return Ok(0);
    };
    let alias = pseudonym(id);
    let mut n = 0;
    for table in [AUDIT, REQUESTS] {
        n += sweep::<Value>(store, table, |tx, k, mut v| {
            if scrub(&mut v, None, &e, &alias) {
                tx.put(table, k, &v)?;
                Ok(true)
            } else {
                Ok(false)
            }
        })?;
    }
    store.write(|tx| tx.delete(ERASING, &erasing_key(PERSON, id)))?;
    Ok(n)
}

/// Fields whose value names who did something: there the person's name is replaced too.
const NAMING_FIELDS: &[&str] = &["author", "actor", "by", "person", "name", "email"];

/// Replaces the person's email (wherever it appears in a string) and their name (as the whole
/// value of a [`NAMING_FIELDS`] field) by `alias`; answers whether anything changed.
fn scrub(v: &mut Value, field: Option<&str>, e: &Erasure, alias: &str) -> bool {
    match v {
        Value::String(s) => {
            let naming = field.is_some_and(|f| NAMING_FIELDS.contains(&f));
            if naming && !e.name.is_empty() && *s == e.name {
                *s = alias.to_owned();
                true
            } else if !e.email.is_empty() && s.to_lowercase().contains(&e.email) {
                *s = replace_ignoring_case(s, &e.email, alias);
                true
            } else {
                false
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, i| scrub(i, field, e, alias) | changed),
        Value::Object(map) => map.iter_mut().fold(false, |changed, (k, i)| {
            scrub(i, Some(k), e, alias) | changed
        }),
        _ => false,
    }
}

/// `s` with every occurrence of the lower-case ASCII-folded `needle` replaced.
fn replace_ignoring_case(s: &str, needle: &str, with: &str) -> String {
    let lower = s.to_lowercase();
    if lower.len() != s.len() {
        // Case folding changed the length: fall back to the exact spelling.
        return s.replace(needle, with);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = 0;
    for (i, _) in lower.match_indices(needle) {
        if i < rest {
            continue;
        }
        out.push_str(s.get(rest..i).unwrap_or_default());
        out.push_str(with);
        rest = i + needle.len();
    }
    out.push_str(s.get(rest..).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_replaces_the_email_anywhere_and_the_name_where_it_names_someone() {
        let e = Erasure {
            id: 7,
            email: "jan@bouw.nl".into(),
            name: "Jan".into(),
        };
        let mut v = serde_json::json!({
            "actor": "Jan@Bouw.nl",
            "target": "member jan@bouw.nl removed",
            "conversation": [{"author": "Jan", "text": "Jan wants this"}],
            "tool": "search",
        });
        assert!(scrub(&mut v, None, &e, "deleted-7"));
        assert_eq!(v["actor"], "deleted-7");
        assert_eq!(v["target"], "member deleted-7 removed");
        assert_eq!(v["conversation"][0]["author"], "deleted-7");
        assert_eq!(v["conversation"][0]["text"], "Jan wants this");
        let mut other = serde_json::json!({"author": "Piet", "n": 3});
        assert!(!scrub(&mut other, None, &e, "deleted-7"));
    }
}
