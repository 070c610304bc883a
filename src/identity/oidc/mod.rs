//! Sign-in with an OpenID Connect provider (`[[oidc]]` tables), beside the password login:
//! the authorization code flow with PKCE (S256), `state` and `nonce`.
//!
//! - **Start** ([`Oidc::start`]): a random seed, sealed with the server key into the flow
//!   cookie together with the provider, where to go afterwards and the invitation being
//!   accepted (if any), valid [`FLOW_LIFETIME_SECS`]. The `state`, the `nonce` and the PKCE
//!   verifier are HMACs of that seed under the server key: nothing is stored, and none of
//!   them can be made without the key.
//! - **Finish** ([`Oidc::finish`], the redirect URI `<public_url>/login/oidc/<id>/callback`),
//!   in this order: the per-address limits; the flow cookie (sealed by this server, not
//!   expired, for this provider) and `state` (the cookie's); `iss`, when the answer names one
//!   (RFC 9207), the provider's; an error the provider reports;
//!   the code exchanged at the token endpoint; the ID token checked (`provider`: signature
//!   against the provider's JWKS, `iss`, `aud`, `exp`, `nonce`); the email — from the ID
//!   token, else from the userinfo endpoint for the same `sub` — must be verified by the
//!   provider (`email_verified: true`; Entra ID, which never sends it for work accounts, may
//!   say so with its `xms_edov` claim instead); an account with that email whose password
//!   came through a link is claimed ([`super::claim`]: whoever chose that password is shut
//!   out); then the person with that email
//!   (case-insensitively), who must exist and not be disabled — or, with an invitation, the
//!   invitation is accepted for that address if it is the invited one. No account is ever
//!   made for an unknown email. A new session starts, past the second factor only when the
//!   provider is trusted for it (`skip_second_factor`); terms and the organisation picker
//!   follow as after a password.
//! - **Limits**, per client address as for the password login ([`super::login`]): starts and
//!   callbacks [`ATTEMPTS_PER_WINDOW`] each, failed callbacks [`FAILURES_PER_WINDOW`]
//!   (reserved before the work, given back when it succeeds or when the provider could not
//!   be reached).
//! - **Caches**: a provider's discovery document and keys for an hour; an ID token whose key
//!   is not among the cached ones fetches the keys again (at most once a minute per
//!   provider), so a provider's key rotation needs no restart.

pub mod provider;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine;
use hmac::{Hmac, Mac};
use jiff::{SignedDuration, Timestamp};
use jsonwebtoken::jwk::Jwk;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use subtle::ConstantTimeEq;

use self::provider::{Discovery, Expected, IdTokenError};
use super::login::{ATTEMPTS_PER_WINDOW, FAILURES_PER_WINDOW, LoginGuard};
use super::sessions::{self, Session};
use super::{EndCredentials, IdentityError, Person};
use crate::clock::SharedClock;
use crate::config::{Config, OidcProvider};
use crate::ratelimit::{Limiter, WINDOW};
use crate::store::Store;

/// A started sign-in must come back within this many seconds.
pub const FLOW_LIFETIME_SECS: i64 = 10 * 60;
/// A discovery document and a set of keys are used this long before they are fetched again.
pub const FRESH: SignedDuration = SignedDuration::from_hours(1);
/// Keys are fetched again for an unknown key id at most this often.
pub const KEYS_REFETCH_GAP: SignedDuration = SignedDuration::from_mins(1);
/// The flow cookie stays below browsers' limit of about 4 KB; a longer place to return to
/// is replaced by the portal's start page.
const MAX_FLOW: usize = 3800;

/// Why a sign-in with a provider was refused. The texts are for the log and the page; what
/// the page shows of [`OidcError::Unavailable`] is one sentence without the detail.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("there is no sign-in provider `{0}`")]
    UnknownProvider(String),
    #[error("this sign-in was not started here, was started again, or took too long")]
    State,
    #[error("the provider ended the sign-in: {0}")]
    Refused(String),
    #[error("the provider `{provider}` cannot be used: {reason}")]
    Unavailable { provider: String, reason: String },
    #[error("the provider's ID token was refused: {0}")]
    IdToken(String),
    #[error("the provider gave no email address")]
    NoEmail,
    #[error("the provider has not verified the email address {0}")]
    Unverified(String),
    #[error("there is no account for {0} here")]
    UnknownEmail(String),
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

/// The sign-in providers, their cached discovery documents and keys, and the per-address
/// limits of starts and callbacks. One per service (`App`).
pub struct Oidc {
    providers: HashMap<String, Arc<ProviderState>>,
    loopback: bool,
    public_url: String,
    server_key: [u8; 32],
    clock: SharedClock,
    starts: Limiter<IpAddr>,
    callbacks: Limiter<IpAddr>,
    failures: Limiter<IpAddr>,
}

struct ProviderState {
    config: OidcProvider,
    cache: Mutex<Cache>,
    /// One fetch of the discovery document or the keys at a time.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Cache {
    discovery: Option<(Arc<Discovery>, Timestamp)>,
    keys: Option<(Arc<Vec<Jwk>>, Timestamp)>,
    /// When the keys were last fetched again for an unknown key id.
    refetched: Option<Timestamp>,
}

/// Where a started sign-in sends the browser, and the flow cookie's value.
#[derive(Debug)]
pub struct Started {
    pub location: String,
    pub flow: String,
}

/// The parameters the provider sends back to the redirect URI.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct Callback {
    pub state: Option<String>,
    pub code: Option<String>,
    pub error: Option<String>,
    /// The issuer the answer names (RFC 9207); when present it must be the provider's.
    pub iss: Option<String>,
}

/// Where a sign-in may land: the store, the password hashers (for an account an invitation
/// makes, whose password nobody knows), and what a claim ends above this module
/// ([`super::claim`]: the connections and tokens, `oauth::revoke_person_credentials_in`).
#[derive(Clone, Copy)]
pub struct Accounts<'a> {
    pub store: &'a Store,
    pub login: &'a LoginGuard,
    pub end: EndCredentials,
}

/// A finished sign-in: the new session's cookie token, the session, the person, and where to
/// go next (the second factor, terms and the picker come first as usual).
#[derive(Debug)]
pub struct SignedIn {
    pub token: String,
    pub session: Session,
    pub person: Person,
    pub next: String,
}

/// What the flow cookie carries (sealed).
#[derive(Debug, Serialize, Deserialize)]
struct Flow {
    /// Provider id.
    p: String,
    /// Random seed of `state`, `nonce` and the PKCE verifier.
    s: String,
    /// Where to go afterwards.
    n: String,
    /// The invitation token being accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    i: Option<String>,
    /// Expiry, Unix seconds.
    e: i64,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn too_many(wait: std::time::Duration) -> OidcError {
    OidcError::Identity(IdentityError::TooManyAttempts { retry_after: wait })
}

impl Oidc {
    pub fn new(
        config: &Config,
        public_url: &str,
        server_key: [u8; 32],
        clock: SharedClock,
    ) -> Oidc {
        Oidc {
            providers: config
                .oidc
                .iter()
                .map(|p| {
                    (
                        p.id.clone(),
                        Arc::new(ProviderState {
                            config: p.clone(),
                            cache: Mutex::new(Cache::default()),
                            fetching: tokio::sync::Mutex::new(()),
                        }),
                    )
                })
                .collect(),
            loopback: config.oidc_allow_http_loopback,
            public_url: public_url.to_owned(),
            server_key,
            starts: Limiter::new(ATTEMPTS_PER_WINDOW, WINDOW, clock.clone()),
            callbacks: Limiter::new(ATTEMPTS_PER_WINDOW, WINDOW, clock.clone()),
            failures: Limiter::new(FAILURES_PER_WINDOW, WINDOW, clock.clone()),
            clock,
        }
    }

    /// The redirect URI to register at the provider: `<public_url>/login/oidc/<id>/callback`.
    pub fn redirect_uri(&self, id: &str) -> String {
        format!("{}/login/oidc/{id}/callback", self.public_url)
    }

    fn provider(&self, id: &str) -> Result<Arc<ProviderState>, OidcError> {
        self.providers
            .get(id)
            .cloned()
            .ok_or_else(|| OidcError::UnknownProvider(id.chars().take(64).collect()))
    }

    #[allow(clippy::expect_used, reason = "HMAC takes keys of any length")]
    fn mac(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut mac =
            Hmac::<sha2::Sha256>::new_from_slice(&self.server_key).expect("any key length");
        for p in parts {
            mac.update(p);
            mac.update(b"\0");
        }
        mac.finalize().into_bytes().to_vec()
    }

    /// `state`, `nonce` or the PKCE verifier of a flow's seed (43 characters of base64url).
    fn derive(&self, what: &str, seed: &str) -> String {
        b64(&self.mac(&[b"kennis-oidc", what.as_bytes(), seed.as_bytes()]))
    }

    fn seal(&self, flow: &Flow) -> String {
        let body = b64(serde_json::to_string(flow).unwrap_or_default().as_bytes());
        let tag = b64(&self.mac(&[b"kennis-oidc-flow", body.as_bytes()]));
        format!("{body}.{tag}")
    }

    /// The flow a cookie carries, if this server sealed it and it has not expired.
    fn unseal(&self, value: &str, now: Timestamp) -> Option<Flow> {
        let (body, tag) = value.split_once('.')?;
        let expected = b64(&self.mac(&[b"kennis-oidc-flow", body.as_bytes()]));
        if !bool::from(expected.as_bytes().ct_eq(tag.as_bytes())) {
            return None;
        }
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .ok()?;
        let flow: Flow = serde_json::from_slice(&json).ok()?;
        (now.as_second() < flow.e).then_some(flow)
    }

    /// Starts a sign-in with provider `id`: where to send the browser (the provider's
    /// authorization endpoint) and the flow cookie. `next` is a path on this site (the portal
    /// checked it); `invite` the token of an invitation being accepted, checked here first.
    pub async fn start(
        &self,
        store: &Store,
        id: &str,
        next: &str,
        invite: Option<&str>,
        ip: IpAddr,
    ) -> Result<Started, OidcError> {
        let p = self.provider(id)?;
        self.starts.check(&ip).map_err(too_many)?;
        let now = self.clock.now();
        if let Some(token) = invite {
            super::open_invitation(store, token, now)?;
        }
        let d = self.discovery(&p).await?;
        let seed = b64(&rand::random::<[u8; 32]>());
        let mut flow = Flow {
            p: p.config.id.clone(),
            s: seed.clone(),
            n: next.to_owned(),
            i: invite.map(str::to_owned),
            e: now.as_second().saturating_add(FLOW_LIFETIME_SECS),
        };
        let mut sealed = self.seal(&flow);
        if sealed.len() > MAX_FLOW {
            "/portal".clone_into(&mut flow.n);
            sealed = self.seal(&flow);
        }
        let verifier = self.derive("pkce", &seed);
        let challenge = {
            use sha2::Digest;
            b64(&sha2::Sha256::digest(verifier.as_bytes()))
        };
        let mut location = d.authorization_endpoint.clone();
        location
            .query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &p.config.client_id)
            .append_pair("redirect_uri", &self.redirect_uri(&p.config.id))
            .append_pair("scope", &p.config.scopes)
            .append_pair("state", &self.derive("state", &seed))
            .append_pair("nonce", &self.derive("nonce", &seed))
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        Ok(Started {
            location: location.into(),
            flow: sealed,
        })
    }

    /// Finishes a sign-in at the redirect URI (see the module's order of checks): the new
    /// session, or why not. `flow` is the flow cookie's value.
    pub async fn finish(
        &self,
        accounts: Accounts<'_>,
        id: &str,
        flow: Option<&str>,
        callback: Callback,
        ip: IpAddr,
    ) -> Result<SignedIn, OidcError> {
        let p = self.provider(id)?;
        self.callbacks.check(&ip).map_err(too_many)?;
        self.failures.check(&ip).map_err(too_many)?;
        let judged = self.judge(accounts, &p, flow, callback).await;
        // The provider being unreachable or the hashers busy is not the caller's failure.
        let not_theirs = matches!(
            judged,
            Err(OidcError::Unavailable { .. } | OidcError::Identity(IdentityError::Busy { .. }))
        );
        if judged.is_ok() || not_theirs {
            self.failures.refund(&ip);
        }
        if let Err(e) = &judged {
            tracing::info!(provider = %p.config.id, error = %e, "sign-in with a provider refused");
        }
        judged
    }

    async fn judge(
        &self,
        accounts: Accounts<'_>,
        p: &ProviderState,
        flow: Option<&str>,
        callback: Callback,
    ) -> Result<SignedIn, OidcError> {
        let Accounts { store, login, end } = accounts;
        let now = self.clock.now();
        let flow = flow
            .and_then(|f| self.unseal(f, now))
            .filter(|f| f.p == p.config.id)
            .ok_or(OidcError::State)?;
        let state = self.derive("state", &flow.s);
        let state_ok = callback
            .state
            .as_deref()
            .is_some_and(|s| bool::from(s.as_bytes().ct_eq(state.as_bytes())));
        if !state_ok {
            return Err(OidcError::State);
        }
        if callback
            .iss
            .as_ref()
            .is_some_and(|iss| *iss != p.config.issuer)
        {
            return Err(OidcError::IdToken(
                "the answer names another issuer (iss)".into(),
            ));
        }
        if let Some(error) = callback.error {
            // Only the error code, as the provider's word for it (access_denied, …).
            let code: String = error
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                .take(64)
                .collect();
            return Err(OidcError::Refused(code));
        }
        let code = callback
            .code
            .filter(|c| !c.is_empty() && c.len() <= 4096)
            .ok_or_else(|| OidcError::Refused("no code".into()))?;
        let cfg = &p.config;
        let d = self.discovery(p).await?;
        let secret = crate::config::read_secret(
            "client secret",
            cfg.client_secret_env.as_deref(),
            cfg.client_secret_file
                .as_ref()
                .map(|f| f.to_string_lossy())
                .as_deref(),
        )
        .map_err(|reason| OidcError::Unavailable {
            provider: cfg.id.clone(),
            reason,
        })?;
        let tokens = provider::exchange_code(
            cfg,
            &d,
            secret.as_deref(),
            &code,
            &self.redirect_uri(&cfg.id),
            &self.derive("pkce", &flow.s),
        )
        .await?;
        let nonce = self.derive("nonce", &flow.s);
        let expected = Expected {
            issuer: &cfg.issuer,
            client_id: &cfg.client_id,
            nonce: &nonce,
            now,
        };
        let claims = self.verify(p, &d, &tokens.id_token, &expected).await?;
        // The person's claims: the ID token's, or — when it carries no email — the
        // userinfo endpoint's for the same subject.
        let person_claims = if claims.contains_key("email") {
            claims
        } else {
            let (Some(url), Some(access)) = (&d.userinfo_endpoint, &tokens.access_token) else {
                return Err(OidcError::NoEmail);
            };
            let info = provider::userinfo(cfg, url, access).await?;
            if info.get("sub") != claims.get("sub") {
                return Err(OidcError::IdToken(
                    "the userinfo answer is for another subject".into(),
                ));
            }
            info
        };
        let email = person_claims
            .get("email")
            .and_then(Value::as_str)
            .ok_or(OidcError::NoEmail)?;
        let verified = email_verified(&person_claims);
        let email = super::normalize_email(email).map_err(|_| OidcError::NoEmail)?;
        if !verified {
            return Err(OidcError::Unverified(email));
        }
        let name = person_claims
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        // The provider proved the address: an account whose password came through a link is
        // claimed (whoever set that password is shut out before the owner is let in). A claim,
        // like an account an invitation makes, needs a password nobody knows.
        let known = store
            .read(|tx| super::person_by_email(tx, &email))
            .map_err(IdentityError::from)?;
        let claiming = known
            .as_ref()
            .is_some_and(|p| p.claimable && p.disabled_at.is_none());
        let password_hash = if flow.i.is_some() || claiming {
            Some(
                login
                    .hash(|| super::hash_password(&super::new_secret("")))
                    .await?,
            )
        } else {
            None
        };
        let (store, skip) = (store.clone(), cfg.skip_second_factor);
        let (token, session, person) = tokio::task::spawn_blocking(move || {
            if let (true, Some(p), Some(hash)) = (claiming, &known, &password_hash) {
                super::claim(&store, p.id, hash.clone(), end, now)?;
            }
            let person = match (&flow.i, password_hash) {
                (Some(invite), Some(hash)) => super::accept_invitation_verified(
                    &store,
                    invite,
                    &email,
                    name.as_deref(),
                    hash,
                    now,
                )?,
                _ => store
                    .read(|tx| super::person_by_email(tx, &email))
                    .map_err(IdentityError::from)?
                    .ok_or(OidcError::UnknownEmail(email))?,
            };
            if person.disabled_at.is_some() {
                return Err(OidcError::Identity(IdentityError::Disabled));
            }
            if person.claimable {
                // A reset link was used since the check above: claim it at the next try.
                return Err(OidcError::Identity(IdentityError::Busy {
                    retry_after: std::time::Duration::from_secs(1),
                }));
            }
            let (token, session) =
                sessions::create_with(&store, person.id, now, skip).map_err(IdentityError::from)?;
            if skip {
                super::update_person(&store, person.id, |p| {
                    p.last_login = Some(now);
                    Ok(())
                })?;
            }
            Ok((token, session, person))
        })
        .await
        .map_err(|_| OidcError::Identity(IdentityError::Interrupted))??;
        Ok(SignedIn {
            token,
            session,
            person,
            next: flow.n,
        })
    }

    /// The provider's discovery document, from the cache while it is fresh.
    async fn discovery(&self, p: &ProviderState) -> Result<Arc<Discovery>, OidcError> {
        let fresh = |c: &Cache, now: Timestamp| {
            c.discovery
                .as_ref()
                .filter(|(_, at)| now < at.saturating_add(FRESH).unwrap_or(*at))
                .map(|(d, _)| d.clone())
        };
        let hit = fresh(&self.cache(p), self.clock.now());
        if let Some(d) = hit {
            return Ok(d);
        }
        let _one = p.fetching.lock().await;
        let hit = fresh(&self.cache(p), self.clock.now());
        if let Some(d) = hit {
            return Ok(d);
        }
        let d = Arc::new(provider::discover(&p.config, self.loopback).await?);
        self.cache(p).discovery = Some((d.clone(), self.clock.now()));
        Ok(d)
    }

    fn cache<'a>(&self, p: &'a ProviderState) -> std::sync::MutexGuard<'a, Cache> {
        p.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The provider's keys: the cached ones while fresh; for an unknown key id (`again`)
    /// fetched again, unless that was done less than [`KEYS_REFETCH_GAP`] ago (then the
    /// keys it fetched).
    async fn keys(
        &self,
        p: &ProviderState,
        d: &Discovery,
        again: bool,
    ) -> Result<Arc<Vec<Jwk>>, OidcError> {
        let now = self.clock.now();
        let cached = |c: &Cache| -> Option<Arc<Vec<Jwk>>> {
            let (keys, at) = c.keys.as_ref()?;
            let usable = if again {
                c.refetched
                    .is_some_and(|r| now < r.saturating_add(KEYS_REFETCH_GAP).unwrap_or(r))
            } else {
                now < at.saturating_add(FRESH).unwrap_or(*at)
            };
            usable.then(|| keys.clone())
        };
        let hit = cached(&self.cache(p));
        if let Some(k) = hit {
            return Ok(k);
        }
        let _one = p.fetching.lock().await;
        let hit = cached(&self.cache(p));
        if let Some(k) = hit {
            return Ok(k);
        }
        let keys = Arc::new(provider::fetch_keys(&p.config, d).await?);
        let mut c = self.cache(p);
        c.keys = Some((keys.clone(), now));
        if again {
            c.refetched = Some(now);
        }
        Ok(keys)
    }

    /// Checks the ID token with the cached keys, and once more with freshly fetched ones when
    /// its key is not among them.
    async fn verify(
        &self,
        p: &ProviderState,
        d: &Discovery,
        token: &str,
        expected: &Expected<'_>,
    ) -> Result<Map<String, Value>, OidcError> {
        let refused = |e: IdTokenError| match e {
            IdTokenError::UnknownKey => {
                OidcError::IdToken("it is signed with a key the provider does not publish".into())
            }
            IdTokenError::Refused(why) => OidcError::IdToken(why),
        };
        let keys = self.keys(p, d, false).await?;
        match provider::verify_id_token(token, &keys, expected) {
            Err(IdTokenError::UnknownKey) => {
                let keys = self.keys(p, d, true).await?;
                provider::verify_id_token(token, &keys, expected).map_err(refused)
            }
            other => other.map_err(refused),
        }
    }
}

/// Whether the provider says it verified the email address: `email_verified: true`, or —
/// Entra ID, which sends no `email_verified` for work accounts — `xms_edov: true` (the email's
/// domain owner is verified) when `email_verified` is absent.
fn email_verified(claims: &Map<String, Value>) -> bool {
    match provider::truthy(claims.get("email_verified")) {
        Some(v) => v,
        None => provider::truthy(claims.get("xms_edov")) == Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oidc() -> Oidc {
        let mut config = Config::for_data_dir("/nonexistent");
        config.oidc = vec![OidcProvider {
            id: "idp".into(),
            name: "IdP".into(),
            issuer: "https://id.example".into(),
            client_id: "kennis".into(),
            client_secret_env: None,
            client_secret_file: None,
            scopes: "openid email".into(),
            skip_second_factor: false,
        }];
        Oidc::new(
            &config,
            "https://kennis.example",
            [7; 32],
            crate::clock::ManualClock::new("2026-06-01T09:00:00Z".parse().unwrap()),
        )
    }

    #[test]
    fn the_flow_cookie_is_sealed_and_expires() {
        let o = oidc();
        let now: Timestamp = "2026-06-01T09:00:00Z".parse().unwrap();
        let flow = Flow {
            p: "idp".into(),
            s: "seed".into(),
            n: "/authorize?x=1".into(),
            i: None,
            e: now.as_second() + 600,
        };
        let sealed = o.seal(&flow);
        assert_eq!(o.unseal(&sealed, now).unwrap().n, "/authorize?x=1");
        let later = now.saturating_add(SignedDuration::from_secs(600)).unwrap();
        assert!(o.unseal(&sealed, later).is_none(), "expired");
        // Any change to the body or the tag breaks the seal.
        let (body, tag) = sealed.split_once('.').unwrap();
        let other = b64(br#"{"p":"idp","s":"seed","n":"//evil","e":99999999999}"#);
        assert!(o.unseal(&format!("{other}.{tag}"), now).is_none());
        assert!(o.unseal(&format!("{body}.{}", &tag[1..]), now).is_none());
        assert!(o.unseal("", now).is_none());
        assert!(o.unseal("....", now).is_none());
        // Another server key does not open it.
        let mut other_server = oidc();
        other_server.server_key = [8; 32];
        assert!(other_server.unseal(&sealed, now).is_none());
    }

    #[test]
    fn state_nonce_and_verifier_differ_and_fit_pkce() {
        let o = oidc();
        let (s, n, v) = (
            o.derive("state", "a"),
            o.derive("nonce", "a"),
            o.derive("pkce", "a"),
        );
        assert!(s != n && n != v && s != v);
        assert_eq!(v.len(), 43, "a PKCE verifier is 43 to 128 characters");
        assert_ne!(o.derive("state", "b"), s);
        assert_eq!(
            o.redirect_uri("idp"),
            "https://kennis.example/login/oidc/idp/callback"
        );
    }

    #[test]
    fn email_is_verified_only_when_the_provider_says_so() {
        let c = |v: Value| v.as_object().unwrap().clone();
        assert!(email_verified(&c(
            serde_json::json!({"email_verified": true})
        )));
        assert!(!email_verified(&c(
            serde_json::json!({"email_verified": false})
        )));
        assert!(!email_verified(&c(serde_json::json!({}))));
        assert!(email_verified(&c(serde_json::json!({"xms_edov": true}))));
        assert!(!email_verified(&c(
            serde_json::json!({"email_verified": false, "xms_edov": true})
        )));
    }
}
