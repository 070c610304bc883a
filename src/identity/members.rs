//! The people of an organisation: role and right to connect, removal, invitations (one-time
//! links valid 7 days) and admin-issued password resets (one-time links valid 24 hours). One
//! rule holds across every change: an organisation keeps at least one admin.
//!
//! Links carry a random 256-bit token; the store keeps only its SHA-256 (the lookup is the
//! comparison). A link is used once: the use and the change it makes are one transaction.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{
    IdentityError, Membership, Org, Person, Role, check_name, check_strength, hash_password,
    hash_secret, new_secret, normalize_email, person_by_email, verify_password_hash,
};
use crate::audit::{self, Actor};
use crate::store::{
    INVITATIONS, MEMBERSHIPS, MEMBERSHIPS_BY_PERSON, ORGS, PEOPLE, PEOPLE_BY_EMAIL, RESET_LINKS,
    Read, Store, StoreError, WriteTx, key,
};

/// An invitation link is valid this long.
pub const INVITATION_LIFETIME_SECS: i64 = 7 * 24 * 60 * 60;
/// A password-reset link is valid this long.
pub const RESET_LIFETIME_SECS: i64 = 24 * 60 * 60;
/// Prefix of an invitation token.
pub const INVITATION_PREFIX: &str = "kb_inv_";
/// Prefix of a password-reset token.
pub const RESET_PREFIX: &str = "kb_rst_";

/// An invitation as stored (under the SHA-256 of its token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invitation {
    pub org_id: u64,
    /// Normalised email address of the person invited.
    pub email: String,
    pub role: Role,
    /// The admin who invited; `None` from the command line.
    pub invited_by: Option<u64>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub used_at: Option<Timestamp>,
}

/// A password-reset link as stored (under the SHA-256 of its token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResetLink {
    pub person_id: u64,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub used_at: Option<Timestamp>,
}

/// What may change about a membership; `None` keeps a setting.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemberChange {
    pub role: Option<Role>,
    pub may_connect: Option<bool>,
}

fn after(t: Timestamp, secs: i64) -> Timestamp {
    t.saturating_add(SignedDuration::from_secs(secs))
        .unwrap_or(t)
}

fn admins(tx: &impl Read, org_id: u64) -> Result<usize, StoreError> {
    Ok(tx
        .scan::<Membership>(MEMBERSHIPS, &key::id(org_id))?
        .iter()
        .filter(|(_, m)| m.role == Role::Admin)
        .count())
}

fn membership_of(tx: &impl Read, org_id: u64, person_id: u64) -> Result<Membership, IdentityError> {
    tx.get(MEMBERSHIPS, &key::pair(org_id, person_id))?
        .ok_or_else(|| IdentityError::NotMember(format!("#{person_id}")))
}

/// Changes a member's role and right to connect. Refused with [`IdentityError::LastAdmin`]
/// when it would leave the organisation without an admin, and with
/// [`IdentityError::NotMember`] for anyone not a member of `org_id`. Audited (`member.set`).
pub fn set_member(
    store: &Store,
    by: &Actor,
    org_id: u64,
    person_id: u64,
    change: MemberChange,
    now: Timestamp,
) -> Result<Membership, IdentityError> {
    store.write(|tx| {
        let mut m = membership_of(tx, org_id, person_id)?;
        keep_an_admin(tx, &m, Some(change.role.unwrap_or(m.role)))?;
        if let Some(r) = change.role {
            m.role = r;
        }
        if let Some(c) = change.may_connect {
            m.may_connect = c;
        }
        tx.put(MEMBERSHIPS, &key::pair(org_id, person_id), &m)?;
        let email = super::person(tx, person_id)?
            .map(|p| p.email)
            .unwrap_or_else(|| format!("#{person_id}"));
        let target = format!(
            "{email} role={} may_connect={}",
            m.role.as_str(),
            m.may_connect
        );
        audit::admin_in(tx, org_id, by, "member.set", &target, now)?;
        Ok(m)
    })
}

/// The one rule of an organisation's admins: a change that leaves membership `m` with role
/// `to` (`None`: removed) is refused with [`IdentityError::LastAdmin`] when `m` is the last
/// admin and would not stay one.
pub(super) fn keep_an_admin(
    tx: &impl Read,
    m: &Membership,
    to: Option<Role>,
) -> Result<(), IdentityError> {
    if m.role == Role::Admin && to != Some(Role::Admin) && admins(tx, m.org_id)? <= 1 {
        return Err(IdentityError::LastAdmin);
    }
    Ok(())
}

/// Refuses ([`IdentityError::LastAdmin`]) what removing this member would refuse, so a page
/// can say so before it asks for confirmation.
pub fn check_removable(tx: &impl Read, m: &Membership) -> Result<(), IdentityError> {
    keep_an_admin(tx, m, None)
}

/// Removes a member from an organisation in the caller's transaction (which also revokes their
/// connections there: `oauth::remove_member`). Refused for the last admin and for someone who
/// is not a member; nothing else of the person changes.
pub fn remove_member_in(
    tx: &mut WriteTx,
    org_id: u64,
    person_id: u64,
) -> Result<Membership, IdentityError> {
    let m = membership_of(tx, org_id, person_id)?;
    check_removable(tx, &m)?;
    tx.delete(MEMBERSHIPS, &key::pair(org_id, person_id))?;
    tx.delete(MEMBERSHIPS_BY_PERSON, &key::pair(person_id, org_id))?;
    Ok(m)
}

/// The person with this email and their membership of the organisation.
pub fn member_by_email(
    tx: &impl Read,
    org_id: u64,
    email: &str,
) -> Result<(Membership, Person), IdentityError> {
    let email = normalize_email(email)?;
    let person: Person = match tx.get::<u64>(PEOPLE_BY_EMAIL, email.as_bytes())? {
        Some(id) => tx.get(PEOPLE, &key::id(id))?,
        None => None,
    }
    .ok_or_else(|| IdentityError::NotMember(email.clone()))?;
    let m = tx
        .get(MEMBERSHIPS, &key::pair(org_id, person.id))?
        .ok_or(IdentityError::NotMember(email))?;
    Ok((m, person))
}

/// Invites an email address to an organisation; returns the invitation and its one-time token
/// (valid [`INVITATION_LIFETIME_SECS`]). Someone already a member cannot be invited again.
/// Someone with an account elsewhere confirms with their own password, so an invitation
/// gives the inviter nothing of that account. Audited (`member.invite`).
pub fn invite(
    store: &Store,
    by: &Actor,
    org_id: u64,
    email: &str,
    role: Role,
    now: Timestamp,
) -> Result<(Invitation, String), IdentityError> {
    let invited_by = match by {
        Actor::Operator => None,
        Actor::Person { person_id, .. } => Some(*person_id),
    };
    let email = normalize_email(email)?;
    let token = new_secret(INVITATION_PREFIX);
    store.write(|tx| {
        if tx.get::<Org>(ORGS, &key::id(org_id))?.is_none() {
            return Err(IdentityError::UnknownOrg(format!("#{org_id}")));
        }
        if let Some(pid) = tx.get::<u64>(PEOPLE_BY_EMAIL, email.as_bytes())?
            && tx
                .get::<Membership>(MEMBERSHIPS, &key::pair(org_id, pid))?
                .is_some()
        {
            return Err(IdentityError::AlreadyMember(email.clone()));
        }
        let inv = Invitation {
            org_id,
            email: email.clone(),
            role,
            invited_by,
            created_at: now,
            expires_at: after(now, INVITATION_LIFETIME_SECS),
            used_at: None,
        };
        tx.put(INVITATIONS, &hash_secret(&token), &inv)?;
        let target = format!("{email} role={}", role.as_str());
        audit::admin_in(tx, org_id, by, "member.invite", &target, now)?;
        Ok((inv, token))
    })
}

/// A link's record if it may still be used: unknown, used and expired links are refused with
/// their own error, so the page can say which.
fn usable<T>(
    found: Option<T>,
    used_at: impl Fn(&T) -> Option<Timestamp>,
    expires_at: impl Fn(&T) -> Timestamp,
    now: Timestamp,
) -> Result<T, IdentityError> {
    let rec = found.ok_or(IdentityError::LinkUnknown)?;
    if used_at(&rec).is_some() {
        return Err(IdentityError::LinkUsed);
    }
    if now >= expires_at(&rec) {
        return Err(IdentityError::LinkExpired);
    }
    Ok(rec)
}

fn token_key(token: &str, prefix: &str) -> Option<[u8; 32]> {
    (token.starts_with(prefix) && token.len() <= 100).then(|| hash_secret(token))
}

fn live_invitation(
    tx: &impl Read,
    token: &str,
    now: Timestamp,
) -> Result<([u8; 32], Invitation), IdentityError> {
    let k = token_key(token, INVITATION_PREFIX).ok_or(IdentityError::LinkUnknown)?;
    let inv = usable(
        tx.get::<Invitation>(INVITATIONS, &k)?,
        |i| i.used_at,
        |i| i.expires_at,
        now,
    )?;
    Ok((k, inv))
}

/// An invitation that may still be accepted, its organisation, and whether the person already
/// has an account (then they confirm with their password instead of choosing one).
pub fn open_invitation(
    store: &Store,
    token: &str,
    now: Timestamp,
) -> Result<(Invitation, Org, bool), IdentityError> {
    store.read(|tx| {
        let (_, inv) = live_invitation(tx, token, now)?;
        let org: Org = tx
            .get(ORGS, &key::id(inv.org_id))?
            .ok_or(IdentityError::LinkUnknown)?;
        let existing = tx
            .get::<u64>(PEOPLE_BY_EMAIL, inv.email.as_bytes())?
            .is_some();
        Ok((inv, org, existing))
    })
}

/// Accepts an invitation: a new person with this name and password (or, when the email has an
/// account already, that account after its password is checked) becomes a member with the
/// invited role. The link is used up in the same transaction.
pub fn accept_invitation(
    store: &Store,
    token: &str,
    name: &str,
    password: &str,
    now: Timestamp,
) -> Result<Person, IdentityError> {
    let (inv, _, existing) = open_invitation(store, token, now)?;
    // Hash (or check) before the write transaction: argon2 is deliberately slow.
    let new_account = if existing {
        let p = store
            .read(|tx| person_by_email(tx, &inv.email))?
            .ok_or(IdentityError::LinkUnknown)?;
        if !verify_password_hash(&p.password_hash, password) {
            return Err(IdentityError::BadCredentials);
        }
        if p.disabled_at.is_some() {
            return Err(IdentityError::Disabled);
        }
        None
    } else {
        let name = check_name("name", name, 200)?;
        check_strength(password, &inv.email)?;
        // Whoever held the link chose this password: the address is not proven.
        Some((name, hash_password(password), true))
    };
    store.write(|tx| join_in(tx, token, new_account, now))
}

/// Accepts an invitation as someone an identity provider has signed in with `email`, an
/// address it verified: refused ([`IdentityError::InvitationForOther`]) unless the invitation
/// is for that address. An existing account joins without its password (the provider proved
/// the address the account is known by; a disabled one is refused); a new one is made with
/// `name` (the email's local part when the provider gave none) and `password_hash`, a
/// password nobody knows. The link is used up in the same transaction.
pub fn accept_invitation_verified(
    store: &Store,
    token: &str,
    email: &str,
    name: Option<&str>,
    password_hash: String,
    now: Timestamp,
) -> Result<Person, IdentityError> {
    let (inv, _, existing) = open_invitation(store, token, now)?;
    let email = normalize_email(email)?;
    if inv.email != email {
        return Err(IdentityError::InvitationForOther {
            invited: inv.email,
            signed_in: email,
        });
    }
    let new_account = if existing {
        let p = store
            .read(|tx| person_by_email(tx, &inv.email))?
            .ok_or(IdentityError::LinkUnknown)?;
        if p.disabled_at.is_some() {
            return Err(IdentityError::Disabled);
        }
        None
    } else {
        let name = name
            .and_then(|n| check_name("name", n, 200).ok())
            .unwrap_or_else(|| email.split('@').next().unwrap_or_default().to_owned());
        Some((name, password_hash, false))
    };
    store.write(|tx| join_in(tx, token, new_account, now))
}

/// Ends every way into an account the caller's modules keep above this one: the connector's
/// grants and personal tokens, and the portal sessions (`oauth::revoke_person_credentials_in`).
pub type EndCredentials = fn(&mut WriteTx, u64, Timestamp) -> Result<(), StoreError>;

/// The owner of an address an identity provider verified claims the account known by it, if
/// it is [`Person::claimable`]: in one transaction its password becomes `password_hash` (one
/// nobody knows), its second factor is cleared, `end` ends every session, connection and token
/// of it, and `account.claim` is audited in each of its organisations. Whoever set the
/// password through a link is shut out before the owner is let in. Returns the person as they
/// are now (unchanged when there was nothing to claim).
pub fn claim(
    store: &Store,
    person_id: u64,
    password_hash: String,
    end: EndCredentials,
    now: Timestamp,
) -> Result<Person, IdentityError> {
    store.write(|tx| {
        let mut person: Person = tx
            .get(PEOPLE, &key::id(person_id))?
            .ok_or_else(|| IdentityError::UnknownPerson(format!("#{person_id}")))?;
        if !person.claimable {
            return Ok(person);
        }
        person.password_hash = password_hash;
        person.totp = None;
        person.claimable = false;
        tx.put(PEOPLE, &key::id(person.id), &person)?;
        end(tx, person.id, now)?;
        let actor = Actor::person(person.id, &person.email);
        for org_id in super::org_ids_of(tx, person.id)? {
            audit::admin_in(tx, org_id, &actor, "account.claim", &person.email, now)?;
        }
        Ok(person)
    })
}

/// The write of an accepted invitation: the account (the existing one, or a new one from
/// `new_account`: name, password hash, and whether it is [`Person::claimable`]) becomes a
/// member with the invited role, and the link is used up.
fn join_in(
    tx: &mut WriteTx,
    token: &str,
    new_account: Option<(String, String, bool)>,
    now: Timestamp,
) -> Result<Person, IdentityError> {
    let (k, mut inv) = live_invitation(tx, token, now)?;
    let known = tx.get::<u64>(PEOPLE_BY_EMAIL, inv.email.as_bytes())?;
    let person: Person = match (known, new_account) {
        (Some(id), None) => tx
            .get(PEOPLE, &key::id(id))?
            .ok_or(IdentityError::LinkUnknown)?,
        (None, Some((name, password_hash, claimable))) => {
            super::create_person_in(tx, inv.email.clone(), name, password_hash, claimable, now)?
        }
        // The account appeared or vanished since the page was shown: show it again.
        _ => return Err(IdentityError::DuplicateEmail(inv.email.clone())),
    };
    let mk = key::pair(inv.org_id, person.id);
    if tx.get::<Membership>(MEMBERSHIPS, &mk)?.is_none() {
        let m = Membership {
            org_id: inv.org_id,
            person_id: person.id,
            role: inv.role,
            may_connect: false,
            created_at: now,
        };
        tx.put(MEMBERSHIPS, &mk, &m)?;
        tx.put(
            MEMBERSHIPS_BY_PERSON,
            &key::pair(person.id, inv.org_id),
            &(),
        )?;
    }
    inv.used_at = Some(now);
    tx.put(INVITATIONS, &k, &inv)?;
    Ok(person)
}

/// Issues a password-reset link for a person (valid [`RESET_LIFETIME_SECS`], once), in the
/// caller's transaction — which also ends the person's sessions and grants
/// (`oauth::issue_reset`). With `within` (an organisation's admin in the portal) the person
/// must be a member of that organisation and of no other: a reset sets the password of the
/// whole account, so an admin of one organisation cannot take over someone's account in
/// another ([`IdentityError::MemberElsewhere`]); the operator (`None`) resets anyone.
/// Returns the person and the token.
pub fn issue_reset_in(
    tx: &mut WriteTx,
    email: &str,
    within: Option<u64>,
    now: Timestamp,
) -> Result<(Person, String), IdentityError> {
    let email = normalize_email(email)?;
    let person: Person = match tx.get::<u64>(PEOPLE_BY_EMAIL, email.as_bytes())? {
        Some(id) => tx.get(PEOPLE, &key::id(id))?,
        None => None,
    }
    .ok_or_else(|| IdentityError::UnknownPerson(email.clone()))?;
    if let Some(org_id) = within {
        membership_of(tx, org_id, person.id)
            .map_err(|_| IdentityError::NotMember(email.clone()))?;
        if super::org_ids_of(tx, person.id)?
            .iter()
            .any(|o| *o != org_id)
        {
            return Err(IdentityError::MemberElsewhere(email));
        }
    }
    let token = new_secret(RESET_PREFIX);
    let link = ResetLink {
        person_id: person.id,
        created_at: now,
        expires_at: after(now, RESET_LIFETIME_SECS),
        used_at: None,
    };
    tx.put(RESET_LINKS, &hash_secret(&token), &link)?;
    Ok((person, token))
}

fn live_reset(
    tx: &impl Read,
    token: &str,
    now: Timestamp,
) -> Result<([u8; 32], ResetLink, Person), IdentityError> {
    let k = token_key(token, RESET_PREFIX).ok_or(IdentityError::LinkUnknown)?;
    let link = usable(
        tx.get::<ResetLink>(RESET_LINKS, &k)?,
        |l| l.used_at,
        |l| l.expires_at,
        now,
    )?;
    let person: Person = tx
        .get(PEOPLE, &key::id(link.person_id))?
        .ok_or(IdentityError::LinkUnknown)?;
    Ok((k, link, person))
}

/// The person a reset link may still be used for.
pub fn open_reset(store: &Store, token: &str, now: Timestamp) -> Result<Person, IdentityError> {
    store.read(|tx| live_reset(tx, token, now).map(|(_, _, p)| p))
}

/// Uses a reset link in the caller's transaction (which also ends every session and grant of
/// the person: `oauth::use_reset`): `password_hash` (from [`new_password_hash`], made before
/// the transaction) becomes the password, the second factor is cleared (the next login enrols
/// a new one), and the link is used up.
///
/// [`new_password_hash`]: super::new_password_hash
pub fn use_reset_in(
    tx: &mut WriteTx,
    token: &str,
    password_hash: String,
    now: Timestamp,
) -> Result<Person, IdentityError> {
    let (k, mut link, mut person) = live_reset(tx, token, now)?;
    person.password_hash = password_hash;
    person.totp = None;
    // The link may have been handed over by an admin, who could have used it themselves.
    person.claimable = true;
    tx.put(PEOPLE, &key::id(person.id), &person)?;
    link.used_at = Some(now);
    tx.put(RESET_LINKS, &k, &link)?;
    Ok(person)
}
