//! Organisations, people, memberships, passwords, second factor and terms — and the one
//! question every connector call asks again: may this person still act in this organisation?

pub mod login;
mod members;
pub mod oidc;
mod password;
pub mod sessions;
mod totp;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::audit::{self, Actor};
use crate::store::{
    MEMBERSHIPS, MEMBERSHIPS_BY_PERSON, ORG_SLUGS, ORGS, PEOPLE, PEOPLE_BY_EMAIL, Read, ReadTx,
    Store, StoreError, WriteTx, key,
};

pub use login::LoginGuard;
pub use members::{
    EndCredentials, INVITATION_LIFETIME_SECS, INVITATION_PREFIX, Invitation, MemberChange,
    RESET_LIFETIME_SECS, RESET_PREFIX, ResetLink, accept_invitation, accept_invitation_verified,
    check_removable, claim, invite, issue_reset_in, member_by_email, open_invitation, open_reset,
    remove_member_in, set_member, use_reset_in,
};
pub use password::{check_strength, hash_password, verify_password_hash};
pub use totp::{TotpEnrolment, code_at};

/// Why an identity operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("password refused: {0}")]
    WeakPassword(String),
    #[error("a person with email {0} already exists")]
    DuplicateEmail(String),
    #[error("an organisation with slug `{0}` already exists")]
    DuplicateOrg(String),
    #[error("unknown organisation `{0}`")]
    UnknownOrg(String),
    #[error("unknown person `{0}`")]
    UnknownPerson(String),
    #[error("wrong email or password")]
    BadCredentials,
    #[error("wrong or already used code")]
    BadSecondFactor,
    #[error("`{0}` is not a member of this organisation")]
    NotMember(String),
    #[error("`{0}` is a member of this organisation already")]
    AlreadyMember(String),
    #[error(
        "`{0}` also belongs to another organisation: only the server's operator can reset their password (kennis user reset)"
    )]
    MemberElsewhere(String),
    #[error("an organisation keeps at least one admin: make someone else admin first")]
    LastAdmin,
    #[error("this account is disabled; ask an administrator")]
    Disabled,
    #[error("this invitation is for {invited}, but the sign-in was as {signed_in}")]
    InvitationForOther { invited: String, signed_in: String },
    #[error("this link is not valid")]
    LinkUnknown,
    #[error("this link has been used already")]
    LinkUsed,
    #[error("this link has expired")]
    LinkExpired,
    #[error("too many attempts; retry in {} seconds", crate::ratelimit::retry_after_secs(*retry_after))]
    TooManyAttempts { retry_after: std::time::Duration },
    #[error("the server is busy checking other logins; retry in {} seconds", crate::ratelimit::retry_after_secs(*retry_after))]
    Busy { retry_after: std::time::Duration },
    #[error("the check was interrupted")]
    Interrupted,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A fresh secret: `prefix` + 256 random bits, base64url without padding.
pub fn new_secret(prefix: &str) -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// SHA-256 of a secret: the only form in which secrets are stored and looked up.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes()).into()
}

/// Who in an organisation may connect an assistant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ConnectorAccess {
    #[default]
    AllMembers,
    SelectedMembers,
    Nobody,
}

impl ConnectorAccess {
    /// The name the command line and forms use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllMembers => "all_members",
            Self::SelectedMembers => "selected_members",
            Self::Nobody => "nobody",
        }
    }

    /// Whether a member with the right to connect `may_connect` may connect under this policy.
    pub fn allows(self, may_connect: bool) -> bool {
        match self {
            Self::AllMembers => true,
            Self::SelectedMembers => may_connect,
            Self::Nobody => false,
        }
    }
}

impl std::str::FromStr for ConnectorAccess {
    type Err = IdentityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all_members" => Ok(Self::AllMembers),
            "selected_members" => Ok(Self::SelectedMembers),
            "nobody" => Ok(Self::Nobody),
            other => Err(IdentityError::InvalidInput(format!(
                "connector access `{other}` is not one of all_members, selected_members, nobody"
            ))),
        }
    }
}

/// Whether an organisation's members may make personal access tokens (and use those they
/// have): `allow` (default) or `deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PersonalTokens {
    #[default]
    Allow,
    Deny,
}

impl PersonalTokens {
    /// The name the command line, forms and audit records use (`allow`, `deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
        }
    }
}

impl std::str::FromStr for PersonalTokens {
    type Err = IdentityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Self::Allow),
            "deny" => Ok(Self::Deny),
            other => Err(IdentityError::InvalidInput(format!(
                "personal tokens `{other}` is not allow or deny"
            ))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    #[default]
    Member,
}

impl Role {
    /// The name the command line and forms use (`admin`, `member`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = IdentityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Self::Admin),
            "member" => Ok(Self::Member),
            other => Err(IdentityError::InvalidInput(format!(
                "role `{other}` is not admin or member"
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Org {
    pub id: u64,
    pub name: String,
    pub slug: String,
    pub connector_access: ConnectorAccess,
    pub require_second_factor: bool,
    /// Personal access tokens allowed (organisations made before they existed: allowed).
    #[serde(default)]
    pub personal_tokens: PersonalTokens,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Person {
    pub id: u64,
    pub email: String,
    pub name: String,
    /// argon2id PHC string; never the password.
    pub password_hash: String,
    pub totp: Option<totp::TotpState>,
    pub accepted_terms: Option<String>,
    /// The portal language the person chose (`en`, `nl`); `None` follows the browser.
    #[serde(default)]
    pub language: Option<String>,
    /// The last completed login (password and second factor).
    #[serde(default)]
    pub last_login: Option<Timestamp>,
    pub created_at: Timestamp,
    /// Since when the person may not sign in (`kennis user disable`); `None`: they may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<Timestamp>,
    /// The password was set through a link that may have passed through other hands (an
    /// invitation link opened as a new account, a reset link): nobody has proven that the
    /// address is the account holder's. The address's owner claims the account by signing in
    /// with an identity provider that verified it ([`oidc`]): its password and second factor
    /// are replaced and every session, connection and token ends before they are let in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub claimable: bool,
}

impl Person {
    pub fn has_second_factor(&self) -> bool {
        self.totp.as_ref().is_some_and(|t| t.confirmed)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Membership {
    pub org_id: u64,
    pub person_id: u64,
    pub role: Role,
    pub may_connect: bool,
    pub created_at: Timestamp,
}

/// Why a person may not (or no longer) act through the connector. The text is the reason
/// the connector's 401 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessDenied {
    #[error("not a member")]
    NotMember,
    #[error("connecting not allowed")]
    ConnectingNotAllowed,
    #[error("second factor required")]
    SecondFactorRequired,
    #[error("terms not accepted")]
    TermsNotAccepted,
    #[error("account disabled")]
    Disabled,
    /// The organisation switched personal access tokens off (`personal_tokens = deny`).
    #[error("personal access tokens not allowed")]
    PersonalTokensOff,
}

/// What ends an [`AccessDenied`], for the operator who made a token that is refused.
pub fn access_remedy(why: &AccessDenied) -> &'static str {
    match why {
        AccessDenied::NotMember => "the person is not a member of the organisation",
        AccessDenied::ConnectingNotAllowed => {
            "the organisation lets selected members connect: `kennis member set ORG EMAIL --may-connect true`, or `kennis org set ORG --connector-access all_members`"
        }
        AccessDenied::SecondFactorRequired => {
            "the organisation asks for a second factor: the person sets one up when they sign in to the portal"
        }
        AccessDenied::TermsNotAccepted => {
            "the person has not accepted the current terms: they sign in to the portal once and accept them"
        }
        AccessDenied::Disabled => "the account is disabled: `kennis user enable EMAIL`",
        AccessDenied::PersonalTokensOff => {
            "the organisation does not allow personal access tokens: `kennis org set ORG --personal-tokens allow`"
        }
    }
}

/// Sets (or with `None` clears) the portal language a person chose.
pub fn set_language(
    store: &Store,
    person_id: u64,
    language: Option<&str>,
) -> Result<(), IdentityError> {
    update_person(store, person_id, |p| {
        p.language = language.map(str::to_owned);
        Ok(())
    })
}

/// The name that stands for an erased person (`kennis user delete`) in the records that stay.
pub fn pseudonym(person_id: u64) -> String {
    format!("deleted-{person_id}")
}

/// Normalises an email address for uniqueness checks: trimmed, lower case.
pub fn normalize_email(email: &str) -> Result<String, IdentityError> {
    let email = email.trim().to_lowercase();
    let bad = || IdentityError::InvalidInput(format!("`{email}` is not an email address"));
    let (local, domain) = email.split_once('@').ok_or_else(bad)?;
    if local.is_empty()
        || domain.len() < 3
        || !domain.contains('.')
        || domain.starts_with('.')
        || domain.ends_with('.')
        || domain.contains('@')
        || email.len() > 254
        || email.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(bad());
    }
    Ok(email)
}

/// A URL-safe slug: lower-case letters and digits separated by single dashes.
pub fn slugify(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    let mut slug = String::new();
    for c in name.nfkd().filter(|c| c.is_ascii() || c.is_alphanumeric()) {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') && !slug.is_empty() && c.is_ascii() {
            slug.push('-');
        }
    }
    slug.trim_end_matches('-')
        .chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_owned()
}

pub(crate) fn check_name(field: &str, name: &str, max: usize) -> Result<String, IdentityError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > max || name.chars().any(char::is_control) {
        return Err(IdentityError::InvalidInput(format!(
            "{field} must be 1 to {max} characters without control characters"
        )));
    }
    Ok(name.to_owned())
}

/// Creates an organisation (the operator's: audited as `operator`).
pub fn create_org(store: &Store, name: &str, now: Timestamp) -> Result<Org, IdentityError> {
    let name = check_name("organisation name", name, 100)?;
    let slug = slugify(&name);
    if slug.is_empty() {
        return Err(IdentityError::InvalidInput(
            "organisation name needs at least one letter or digit".into(),
        ));
    }
    store.write(|tx| {
        if tx.get::<u64>(ORG_SLUGS, slug.as_bytes())?.is_some() {
            return Err(IdentityError::DuplicateOrg(slug.clone()));
        }
        let org = Org {
            id: tx.next_id("org")?,
            name,
            slug: slug.clone(),
            connector_access: ConnectorAccess::default(),
            require_second_factor: true,
            personal_tokens: PersonalTokens::default(),
            created_at: now,
        };
        tx.put(ORGS, &key::id(org.id), &org)?;
        tx.put(ORG_SLUGS, slug.as_bytes(), &org.id)?;
        audit::admin_in(tx, org.id, &Actor::Operator, "org.create", &org.slug, now)?;
        Ok(org)
    })
}

pub fn list_orgs(store: &Store) -> Result<Vec<Org>, IdentityError> {
    Ok(store
        .read(|tx| tx.scan::<Org>(ORGS, b""))?
        .into_iter()
        .map(|r| r.1)
        .collect())
}

pub fn org_by_slug(tx: &impl Read, slug: &str) -> Result<Option<Org>, StoreError> {
    match tx.get::<u64>(ORG_SLUGS, slug.as_bytes())? {
        Some(id) => tx.get(ORGS, &key::id(id)),
        None => Ok(None),
    }
}

pub fn find_org(store: &Store, slug: &str) -> Result<Org, IdentityError> {
    store
        .read(|tx| org_by_slug(tx, slug))?
        .ok_or_else(|| IdentityError::UnknownOrg(slug.to_owned()))
}

/// Changes an organisation's connector policy; `None` leaves a setting as it is. Audited
/// (`org.set`) with the settings as they now are.
pub fn set_org_policy(
    store: &Store,
    by: &Actor,
    slug: &str,
    access: Option<ConnectorAccess>,
    require_second_factor: Option<bool>,
    now: Timestamp,
) -> Result<Org, IdentityError> {
    store.write(|tx| {
        let id: u64 = tx
            .get(ORG_SLUGS, slug.as_bytes())?
            .ok_or_else(|| IdentityError::UnknownOrg(slug.to_owned()))?;
        let mut org: Org = tx
            .get(ORGS, &key::id(id))?
            .ok_or_else(|| IdentityError::UnknownOrg(slug.to_owned()))?;
        if let Some(a) = access {
            org.connector_access = a;
        }
        if let Some(r) = require_second_factor {
            org.require_second_factor = r;
        }
        tx.put(ORGS, &key::id(id), &org)?;
        let target = format!(
            "connector_access={} require_second_factor={}",
            org.connector_access.as_str(),
            org.require_second_factor
        );
        audit::admin_in(tx, id, by, "org.set", &target, now)?;
        Ok(org)
    })
}

/// Allows or denies an organisation's personal access tokens. Audited (`org.set`,
/// `personal_tokens=…`).
pub fn set_personal_tokens(
    store: &Store,
    by: &Actor,
    slug: &str,
    setting: PersonalTokens,
    now: Timestamp,
) -> Result<Org, IdentityError> {
    store.write(|tx| {
        let mut org =
            org_by_slug(tx, slug)?.ok_or_else(|| IdentityError::UnknownOrg(slug.to_owned()))?;
        org.personal_tokens = setting;
        tx.put(ORGS, &key::id(org.id), &org)?;
        let target = format!("personal_tokens={}", setting.as_str());
        audit::admin_in(tx, org.id, by, "org.set", &target, now)?;
        Ok(org)
    })
}

/// A person to be added.
pub struct NewPerson<'a> {
    pub email: &'a str,
    pub name: Option<&'a str>,
    pub password: &'a str,
}

pub fn add_person(
    store: &Store,
    new: NewPerson<'_>,
    now: Timestamp,
) -> Result<Person, IdentityError> {
    let email = normalize_email(new.email)?;
    let name = match new.name {
        Some(n) => check_name("name", n, 200)?,
        None => email.split('@').next().unwrap_or_default().to_owned(),
    };
    check_strength(new.password, &email)?;
    // Hash before the write transaction: argon2 is deliberately slow.
    let password_hash = hash_password(new.password);
    store.write(|tx| {
        if tx.get::<u64>(PEOPLE_BY_EMAIL, email.as_bytes())?.is_some() {
            return Err(IdentityError::DuplicateEmail(email.clone()));
        }
        Ok(create_person_in(
            tx,
            email.clone(),
            name,
            password_hash,
            false,
            now,
        )?)
    })
}

/// Stores a new person (no second factor, no terms yet) under a normalised `email` that the
/// caller checked is free, in the caller's write transaction; `claimable`: the password came
/// through a link ([`Person::claimable`]).
pub(crate) fn create_person_in(
    tx: &mut WriteTx,
    email: String,
    name: String,
    password_hash: String,
    claimable: bool,
    now: Timestamp,
) -> Result<Person, StoreError> {
    let person = Person {
        id: tx.next_id("person")?,
        email,
        name,
        password_hash,
        totp: None,
        accepted_terms: None,
        language: None,
        last_login: None,
        created_at: now,
        disabled_at: None,
        claimable,
    };
    tx.put(PEOPLE, &key::id(person.id), &person)?;
    tx.put(PEOPLE_BY_EMAIL, person.email.as_bytes(), &person.id)?;
    Ok(person)
}

pub fn list_people(store: &Store) -> Result<Vec<Person>, IdentityError> {
    Ok(store
        .read(|tx| tx.scan::<Person>(PEOPLE, b""))?
        .into_iter()
        .map(|r| r.1)
        .collect())
}

pub fn person_by_email(tx: &ReadTx, email: &str) -> Result<Option<Person>, StoreError> {
    let Ok(email) = normalize_email(email) else {
        return Ok(None);
    };
    match tx.get::<u64>(PEOPLE_BY_EMAIL, email.as_bytes())? {
        Some(id) => tx.get(PEOPLE, &key::id(id)),
        None => Ok(None),
    }
}

pub fn find_person(store: &Store, email: &str) -> Result<Person, IdentityError> {
    store
        .read(|tx| person_by_email(tx, email))?
        .ok_or_else(|| IdentityError::UnknownPerson(email.trim().to_owned()))
}

/// Changes a person in one transaction, looked up by id.
fn update_person<T>(
    store: &Store,
    person_id: u64,
    f: impl FnOnce(&mut Person) -> Result<T, IdentityError>,
) -> Result<T, IdentityError> {
    update_person_in(store, person_id, |_, p| f(p))
}

/// [`update_person`] whose change may also write in the same transaction.
fn update_person_in<T>(
    store: &Store,
    person_id: u64,
    f: impl FnOnce(&mut WriteTx, &mut Person) -> Result<T, IdentityError>,
) -> Result<T, IdentityError> {
    store.write(|tx| {
        let mut person: Person = tx
            .get(PEOPLE, &key::id(person_id))?
            .ok_or_else(|| IdentityError::UnknownPerson(format!("#{person_id}")))?;
        let out = f(tx, &mut person)?;
        tx.put(PEOPLE, &key::id(person_id), &person)?;
        Ok(out)
    })
}

/// A new password's hash for the person with `email`, after the strength check. Argon2 is
/// deliberately slow: make it before the write transaction that stores it.
pub fn new_password_hash(password: &str, email: &str) -> Result<String, IdentityError> {
    check_strength(password, email)?;
    Ok(hash_password(password))
}

/// Sets a person's password hash in the caller's transaction (which also ends the person's
/// sessions and grants: `oauth::set_password`). Returns the person as stored.
pub fn set_password_in(
    tx: &mut WriteTx,
    person_id: u64,
    password_hash: String,
) -> Result<Person, IdentityError> {
    let mut person: Person = tx
        .get(PEOPLE, &key::id(person_id))?
        .ok_or_else(|| IdentityError::UnknownPerson(format!("#{person_id}")))?;
    person.password_hash = password_hash;
    tx.put(PEOPLE, &key::id(person_id), &person)?;
    Ok(person)
}

/// The organisations a person belongs to, by id (in the caller's transaction).
pub fn org_ids_of(tx: &impl Read, person_id: u64) -> Result<Vec<u64>, StoreError> {
    Ok(tx
        .scan::<()>(MEMBERSHIPS_BY_PERSON, &key::id(person_id))?
        .iter()
        .filter_map(|(k, ())| key::id_at(k, 8))
        .collect())
}

/// Checks an email and password. Unknown emails cost the same work as known ones, so timing
/// does not tell which addresses exist.
pub fn verify_login(store: &Store, email: &str, password: &str) -> Result<Person, IdentityError> {
    let person = store.read(|tx| person_by_email(tx, email))?;
    match person {
        // A disabled person learns it only with the right password.
        Some(p) if verify_password_hash(&p.password_hash, password) => match p.disabled_at {
            Some(_) => Err(IdentityError::Disabled),
            None => Ok(p),
        },
        Some(_) => Err(IdentityError::BadCredentials),
        None => {
            password::burn_equivalent_time(password);
            Err(IdentityError::BadCredentials)
        }
    }
}

/// Starts (or restarts) second-factor enrolment: a new secret, not yet confirmed. Not
/// audited: for seeding a person (demo, tests); the operator's command is [`reset_totp_by`].
pub fn reset_totp(store: &Store, email: &str) -> Result<TotpEnrolment, IdentityError> {
    let person = find_person(store, email)?;
    let (state, enrolment) = totp::new_secret(&person.email)?;
    update_person(store, person.id, |p| {
        p.totp = Some(state);
        Ok(())
    })?;
    Ok(enrolment)
}

/// [`reset_totp`] as an admin action: audited (`user.totp_reset`) in each of the person's
/// organisations, in the same transaction.
pub fn reset_totp_by(
    store: &Store,
    by: &Actor,
    email: &str,
    now: Timestamp,
) -> Result<TotpEnrolment, IdentityError> {
    let person = find_person(store, email)?;
    let (state, enrolment) = totp::new_secret(&person.email)?;
    update_person_in(store, person.id, |tx, p| {
        p.totp = Some(state);
        for org_id in org_ids_of(tx, p.id)? {
            audit::admin_in(tx, org_id, by, "user.totp_reset", &p.email, now)?;
        }
        Ok(())
    })?;
    Ok(enrolment)
}

/// The enrolment (otpauth URI and secret) of a second factor not confirmed yet, so the portal
/// can show the same QR code again until the person confirms it with a code.
pub fn pending_enrolment(person: &Person) -> Option<TotpEnrolment> {
    let t = person.totp.as_ref().filter(|t| !t.confirmed)?;
    totp::enrolment_for(&t.secret, &person.email).ok()
}

/// Marks an enrolment confirmed without a code: for the demo person, whose secret is printed.
pub fn confirm_totp_unchecked(store: &Store, person_id: u64) -> Result<(), IdentityError> {
    update_person(store, person_id, |p| match &mut p.totp {
        Some(t) => {
            t.confirmed = true;
            Ok(())
        }
        None => Err(IdentityError::InvalidInput(
            "no second factor to confirm".into(),
        )),
    })
}

/// Checks a TOTP code (confirming enrolment on first success). A code is accepted once: the
/// time step it belongs to is stored and no earlier or equal step is accepted again.
pub fn verify_totp(
    store: &Store,
    person_id: u64,
    code: &str,
    now: Timestamp,
) -> Result<(), IdentityError> {
    update_person(store, person_id, |p| {
        let state = p.totp.as_mut().ok_or(IdentityError::BadSecondFactor)?;
        let step = totp::matching_step(state, code, now).ok_or(IdentityError::BadSecondFactor)?;
        state.last_step = Some(step);
        state.confirmed = true;
        p.last_login = Some(now);
        Ok(())
    })
}

pub fn accept_terms(store: &Store, person_id: u64, version: &str) -> Result<(), IdentityError> {
    update_person(store, person_id, |p| {
        p.accepted_terms = Some(version.to_owned());
        Ok(())
    })
}

/// Adds a person to an organisation, or updates role and `may_connect` if already a member
/// (the operator's: audited as `operator`, `member.add`). Demoting the organisation's last
/// admin this way is refused as in [`set_member`].
pub fn add_member(
    store: &Store,
    org_slug: &str,
    email: &str,
    role: Role,
    may_connect: bool,
    now: Timestamp,
) -> Result<(Membership, bool), IdentityError> {
    store.write(|tx| {
        let org_id: u64 = tx
            .get(ORG_SLUGS, org_slug.as_bytes())?
            .ok_or_else(|| IdentityError::UnknownOrg(org_slug.to_owned()))?;
        let email_key =
            normalize_email(email).map_err(|_| IdentityError::UnknownPerson(email.to_owned()))?;
        let person_id: u64 = tx
            .get(PEOPLE_BY_EMAIL, email_key.as_bytes())?
            .ok_or_else(|| IdentityError::UnknownPerson(email.to_owned()))?;
        let k = key::pair(org_id, person_id);
        let existing: Option<Membership> = tx.get(MEMBERSHIPS, &k)?;
        if let Some(e) = &existing {
            members::keep_an_admin(tx, e, Some(role))?;
        }
        let created = existing.is_none();
        let m = Membership {
            org_id,
            person_id,
            role,
            may_connect,
            created_at: existing.map(|e| e.created_at).unwrap_or(now),
        };
        tx.put(MEMBERSHIPS, &k, &m)?;
        tx.put(MEMBERSHIPS_BY_PERSON, &key::pair(person_id, org_id), &())?;
        let target = format!(
            "{email_key} role={} may_connect={may_connect}",
            role.as_str()
        );
        audit::admin_in(tx, org_id, &Actor::Operator, "member.add", &target, now)?;
        Ok((m, created))
    })
}

/// `kennis member add`: makes the person a member with `role` (default member) and
/// `may_connect` (default false). For someone who is a member already it changes nothing: a
/// repeat with the same (or no) role and right to connect answers the membership as it is,
/// and one asking for something else is refused with a pointer to `member set`, so that a
/// repeated command never demotes an admin or takes the right to connect away by default.
pub fn join(
    store: &Store,
    org_slug: &str,
    email: &str,
    role: Option<Role>,
    may_connect: Option<bool>,
    now: Timestamp,
) -> Result<(Membership, bool), IdentityError> {
    let current = store.read(|tx| {
        let Some(org_id) = tx.get::<u64>(ORG_SLUGS, org_slug.as_bytes())? else {
            return Ok(None);
        };
        let Ok(email_key) = normalize_email(email) else {
            return Ok(None);
        };
        let Some(person_id) = tx.get::<u64>(PEOPLE_BY_EMAIL, email_key.as_bytes())? else {
            return Ok(None);
        };
        tx.get::<Membership>(MEMBERSHIPS, &key::pair(org_id, person_id))
    })?;
    match current {
        Some(m)
            if role.is_none_or(|r| r == m.role)
                && may_connect.is_none_or(|c| c == m.may_connect) =>
        {
            Ok((m, false))
        }
        Some(_) => Err(IdentityError::InvalidInput(format!(
            "`{email}` is a member of `{org_slug}` already; change their role or right to \
             connect with `kennis member set {org_slug} {email} --role R --may-connect true|false`"
        ))),
        None => add_member(
            store,
            org_slug,
            email,
            role.unwrap_or_default(),
            may_connect.unwrap_or(false),
            now,
        ),
    }
}

/// A person's organisations with their memberships.
pub fn organisations_of(tx: &ReadTx, person_id: u64) -> Result<Vec<(Org, Membership)>, StoreError> {
    let mut out = Vec::new();
    for (k, ()) in tx.scan::<()>(MEMBERSHIPS_BY_PERSON, &key::id(person_id))? {
        let Some(org_id) = key::id_at(&k, 8) else {
            continue;
        };
        let m: Option<Membership> = tx.get(MEMBERSHIPS, &key::pair(org_id, person_id))?;
        let org: Option<Org> = tx.get(ORGS, &key::id(org_id))?;
        if let (Some(org), Some(m)) = (org, m) {
            out.push((org, m));
        }
    }
    Ok(out)
}

/// One organisation by id.
pub fn org(tx: &impl Read, org_id: u64) -> Result<Option<Org>, StoreError> {
    tx.get(ORGS, &key::id(org_id))
}

/// One person by id.
pub fn person(tx: &impl Read, person_id: u64) -> Result<Option<Person>, StoreError> {
    tx.get(PEOPLE, &key::id(person_id))
}

/// A member of the organisation with their membership; `None` when they are not one.
pub fn member(
    tx: &impl Read,
    org_id: u64,
    person_id: u64,
) -> Result<Option<(Membership, Person)>, StoreError> {
    let m: Option<Membership> = tx.get(MEMBERSHIPS, &key::pair(org_id, person_id))?;
    Ok(m.zip(person(tx, person_id)?))
}

/// The organisation's members with their memberships, by person id.
pub fn members(tx: &impl Read, org_id: u64) -> Result<Vec<(Membership, Person)>, StoreError> {
    let mut out = Vec::new();
    for (_, m) in tx.scan::<Membership>(MEMBERSHIPS, &key::id(org_id))? {
        if let Some(p) = person(tx, m.person_id)? {
            out.push((m, p));
        }
    }
    Ok(out)
}

/// The check every connector call repeats: is the person still a member, may they connect,
/// have they a second factor where the organisation asks for one, and have they accepted the
/// current terms? Reads only; one snapshot.
pub fn connector_access(
    tx: &ReadTx,
    org_id: u64,
    person_id: u64,
    terms_version: &str,
) -> Result<Result<(Org, Person, Membership), AccessDenied>, StoreError> {
    let m: Option<Membership> = tx.get(MEMBERSHIPS, &key::pair(org_id, person_id))?;
    let org: Option<Org> = tx.get(ORGS, &key::id(org_id))?;
    let person: Option<Person> = tx.get(PEOPLE, &key::id(person_id))?;
    let (Some(m), Some(org), Some(person)) = (m, org, person) else {
        return Ok(Err(AccessDenied::NotMember));
    };
    if person.disabled_at.is_some() {
        return Ok(Err(AccessDenied::Disabled));
    }
    if !org.connector_access.allows(m.may_connect) {
        return Ok(Err(AccessDenied::ConnectingNotAllowed));
    }
    if org.require_second_factor && !person.has_second_factor() {
        return Ok(Err(AccessDenied::SecondFactorRequired));
    }
    if person.accepted_terms.as_deref() != Some(terms_version) {
        return Ok(Err(AccessDenied::TermsNotAccepted));
    }
    Ok(Ok((org, person, m)))
}
