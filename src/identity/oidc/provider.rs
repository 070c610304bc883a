//! Talking to one OpenID Connect provider: its discovery document, its signing keys (JWKS),
//! the token endpoint and — when the ID token carries no email, as providers that follow
//! OpenID Connect Core 5.4 to the letter do — the userinfo endpoint.
//!
//! Every fetch goes through [`crate::outbound`] as a client metadata document's does: the
//! host's addresses checked (public only; `http://127.0.0.1:<port>` with the test switch) and
//! the connection pinned to one, no redirects, no proxy, at most [`FETCH_TIMEOUT`] and
//! [`MAX_REPLY`] bytes. A reply of any shape is an error, never a panic.
//!
//! The ID token's signature and claims are checked with `jsonwebtoken` (9.x: `ring`, already
//! in the tree, and its `jwk` module; no hand-written signature checks, and without the heavier
//! `openidconnect` crate): asymmetric algorithms only, the key chosen from the provider's JWKS
//! by `kid`, `iss` the configured issuer, `aud` the client id (and `azp` the client id when
//! there are several audiences or one is named), `exp` (and `nbf` when present) against the
//! service's clock with [`LEEWAY_SECS`], `nonce` the one this sign-in sent.

use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use subtle::ConstantTimeEq;

use super::OidcError;
use crate::config::OidcProvider;
use crate::outbound::{self, FetchError};

/// One fetch, from resolving the name to the last byte.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest reply read (a discovery document, a JWKS, a token or userinfo answer).
pub const MAX_REPLY: usize = 256 * 1024;
/// Clock skew allowed when checking `exp` and `nbf`.
pub const LEEWAY_SECS: i64 = 60;

/// The signature algorithms accepted: asymmetric only (never `none`, never a shared secret).
pub const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// What kennis uses of a provider's discovery document, checked.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub authorization_endpoint: url::Url,
    pub token_endpoint: url::Url,
    pub jwks_uri: url::Url,
    pub userinfo_endpoint: Option<url::Url>,
    /// `client_secret_basic` or `client_secret_post` (with a secret), else `none`.
    pub basic_auth: bool,
}

#[derive(Deserialize)]
struct RawDiscovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    #[serde(default)]
    userinfo_endpoint: Option<String>,
    #[serde(default)]
    token_endpoint_auth_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    code_challenge_methods_supported: Option<Vec<String>>,
}

fn unusable(p: &OidcProvider, reason: impl Into<String>) -> OidcError {
    OidcError::Unavailable {
        provider: p.id.clone(),
        reason: reason.into(),
    }
}

/// The discovery document's URL: the issuer without a trailing slash, then
/// `/.well-known/openid-configuration`.
pub fn discovery_url(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

/// Fetches and checks the discovery document: its `issuer` must be the configured one exactly,
/// every endpoint https (or loopback with the test switch), and PKCE S256 supported when it
/// lists PKCE methods at all.
pub async fn discover(p: &OidcProvider, loopback: bool) -> Result<Discovery, OidcError> {
    let url = OidcProvider::usable_url(&discovery_url(&p.issuer), loopback)
        .ok_or_else(|| unusable(p, "the issuer is not a usable URL"))?;
    let body = expect_ok(p, "discovery", fetch(p, &url, Request::Get).await?)?;
    let raw: RawDiscovery = serde_json::from_slice(&body)
        .map_err(|e| unusable(p, format!("its discovery document is not valid: {e}")))?;
    if raw.issuer != p.issuer {
        return Err(unusable(
            p,
            format!(
                "its discovery document names issuer `{}`, not the configured `{}`",
                raw.issuer.chars().take(200).collect::<String>(),
                p.issuer
            ),
        ));
    }
    let endpoint = |name: &str, u: &str| {
        OidcProvider::usable_url(u, loopback).ok_or_else(|| {
            unusable(
                p,
                format!("its discovery document's {name} is not an https:// URL"),
            )
        })
    };
    if raw
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|m| !m.iter().any(|m| m == "S256"))
    {
        return Err(unusable(p, "it does not support PKCE with S256"));
    }
    let has_secret = p.client_secret_env.is_some() || p.client_secret_file.is_some();
    // Without a list, client_secret_basic is the default (OpenID Connect Discovery 3).
    let basic_auth = has_secret
        && raw
            .token_endpoint_auth_methods_supported
            .as_ref()
            .is_none_or(|m| {
                m.iter().any(|m| m == "client_secret_basic")
                    || !m.iter().any(|m| m == "client_secret_post")
            });
    Ok(Discovery {
        authorization_endpoint: endpoint("authorization_endpoint", &raw.authorization_endpoint)?,
        token_endpoint: endpoint("token_endpoint", &raw.token_endpoint)?,
        jwks_uri: endpoint("jwks_uri", &raw.jwks_uri)?,
        userinfo_endpoint: raw
            .userinfo_endpoint
            .as_deref()
            .map(|u| endpoint("userinfo_endpoint", u))
            .transpose()?,
        basic_auth,
    })
}

/// The provider's signing keys. Keys kennis cannot use (encryption keys, unknown key types)
/// are left out rather than spoiling the set.
pub async fn fetch_keys(p: &OidcProvider, d: &Discovery) -> Result<Vec<Jwk>, OidcError> {
    let body = expect_ok(p, "jwks_uri", fetch(p, &d.jwks_uri, Request::Get).await?)?;
    #[derive(Deserialize)]
    struct RawSet {
        keys: Vec<Value>,
    }
    let raw: RawSet = serde_json::from_slice(&body)
        .map_err(|e| unusable(p, format!("its JWKS is not valid: {e}")))?;
    Ok(raw
        .keys
        .into_iter()
        .filter_map(|k| serde_json::from_value::<Jwk>(k).ok())
        .filter(|k| {
            k.common
                .public_key_use
                .as_ref()
                .is_none_or(|u| *u == PublicKeyUse::Signature)
        })
        .collect())
}

/// What the token endpoint answered.
pub struct Tokens {
    pub id_token: String,
    pub access_token: Option<String>,
}

/// Exchanges the authorization code (with the PKCE verifier) at the token endpoint.
pub async fn exchange_code(
    p: &OidcProvider,
    d: &Discovery,
    secret: Option<&str>,
    code: &str,
    redirect_uri: &str,
    verifier: &str,
) -> Result<Tokens, OidcError> {
    let mut form = vec![
        ("grant_type".to_owned(), "authorization_code".to_owned()),
        ("code".to_owned(), code.to_owned()),
        ("redirect_uri".to_owned(), redirect_uri.to_owned()),
        ("code_verifier".to_owned(), verifier.to_owned()),
    ];
    let mut basic = None;
    match secret {
        // RFC 6749 2.3.1: both parts form-encoded before Basic.
        Some(s) if d.basic_auth => basic = Some((form_encode(&p.client_id), form_encode(s))),
        Some(s) => {
            form.push(("client_id".to_owned(), p.client_id.clone()));
            form.push(("client_secret".to_owned(), s.to_owned()));
        }
        None => form.push(("client_id".to_owned(), p.client_id.clone())),
    }
    let (status, body) = fetch(p, &d.token_endpoint, Request::Form { form, basic }).await?;
    let json: Map<String, Value> = serde_json::from_slice(&body).unwrap_or_default();
    if !(200..300).contains(&status) {
        let error = json
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no error code");
        return Err(unusable(
            p,
            format!(
                "its token endpoint answered {status} ({})",
                error.chars().take(100).collect::<String>()
            ),
        ));
    }
    let id_token = json
        .get("id_token")
        .and_then(Value::as_str)
        .ok_or_else(|| unusable(p, "its token endpoint gave no id_token"))?
        .to_owned();
    let access_token = json
        .get("access_token")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Tokens {
        id_token,
        access_token,
    })
}

/// The userinfo endpoint's claims (JSON only; a signed userinfo answer is not read).
pub async fn userinfo(
    p: &OidcProvider,
    url: &url::Url,
    access_token: &str,
) -> Result<Map<String, Value>, OidcError> {
    let body = expect_ok(
        p,
        "userinfo_endpoint",
        fetch(p, url, Request::Bearer(access_token.to_owned())).await?,
    )?;
    serde_json::from_slice(&body)
        .map_err(|e| unusable(p, format!("its userinfo answer is not a JSON object: {e}")))
}

fn form_encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

enum Request {
    Get,
    Bearer(String),
    Form {
        form: Vec<(String, String)>,
        basic: Option<(String, String)>,
    },
}

fn expect_ok(
    p: &OidcProvider,
    what: &str,
    (status, body): (u16, Vec<u8>),
) -> Result<Vec<u8>, OidcError> {
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        Err(unusable(p, format!("its {what} answered {status}")))
    }
}

/// One bounded request (`crate::outbound::fetch_configured`: the provider is the operator's
/// choice, so it may be inside the operator's network; no redirect, 10 s, 256 KiB): the status
/// and the body.
async fn fetch(
    p: &OidcProvider,
    url: &url::Url,
    request: Request,
) -> Result<(u16, Vec<u8>), OidcError> {
    let reply = outbound::fetch_configured(FETCH_TIMEOUT, MAX_REPLY as u64, |client| {
        let builder = match request {
            Request::Get => client.get(url.clone()),
            Request::Bearer(token) => client.get(url.clone()).bearer_auth(token),
            Request::Form { form, basic } => {
                let body = form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(form)
                    .finish();
                let b = client
                    .post(url.clone())
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded",
                    )
                    .body(body);
                match basic {
                    Some((user, secret)) => b.basic_auth(user, Some(secret)),
                    None => b,
                }
            }
        };
        builder.header(reqwest::header::ACCEPT, "application/json")
    })
    .await
    .map_err(|e| match e {
        FetchError::Refused(r) | FetchError::Failed(r) => unusable(p, format!("{url}: {r}")),
    })?;
    if reply.status.is_redirection() {
        return Err(unusable(
            p,
            format!(
                "{url} answers with a redirect ({}), and redirects are not followed",
                reply.status
            ),
        ));
    }
    Ok((reply.status.as_u16(), reply.body))
}

/// Why an ID token was not accepted.
#[derive(Debug, PartialEq, Eq)]
pub enum IdTokenError {
    /// No key of the set fits the token (its `kid` is unknown): fetch the keys again.
    UnknownKey,
    /// Refused, with the reason for the log.
    Refused(String),
}

/// What the checks expect of an ID token.
pub struct Expected<'a> {
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub nonce: &'a str,
    pub now: Timestamp,
}

/// Whether a key may check a token signed with `alg`: the right key type, and the key's own
/// `alg`, when it names one, the same.
fn fits(key: &Jwk, alg: Algorithm) -> bool {
    let kind = matches!(
        (&key.algorithm, alg),
        (
            AlgorithmParameters::RSA(_),
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
        ) | (
            AlgorithmParameters::EllipticCurve(_),
            Algorithm::ES256 | Algorithm::ES384
        ) | (AlgorithmParameters::OctetKeyPair(_), Algorithm::EdDSA)
    );
    kind && key
        .common
        .key_algorithm
        .is_none_or(|k| Algorithm::from_str(&k.to_string()).ok() == Some(alg))
}

/// Checks an ID token against the provider's keys and what this sign-in expects; returns its
/// claims.
pub fn verify_id_token(
    token: &str,
    keys: &[Jwk],
    expected: &Expected<'_>,
) -> Result<Map<String, Value>, IdTokenError> {
    let refused = |m: String| IdTokenError::Refused(m);
    if token.len() > MAX_REPLY {
        return Err(refused("it is too large".into()));
    }
    let header = jsonwebtoken::decode_header(token)
        .map_err(|e| refused(format!("it is not a signed JWT: {e}")))?;
    if !ALGORITHMS.contains(&header.alg) {
        return Err(refused(format!(
            "it is signed with {:?}, which is not accepted",
            header.alg
        )));
    }
    let candidates: Vec<&Jwk> = keys
        .iter()
        .filter(|k| fits(k, header.alg))
        .filter(|k| {
            header
                .kid
                .as_deref()
                .is_none_or(|kid| k.common.key_id.as_deref() == Some(kid))
        })
        .collect();
    if candidates.is_empty() {
        return Err(IdTokenError::UnknownKey);
    }
    let mut validation = Validation::new(header.alg);
    validation.set_issuer(&[expected.issuer]);
    validation.set_audience(&[expected.client_id]);
    validation.set_required_spec_claims(&["iss", "aud", "sub"]);
    // Time is checked below against the service's clock, not the system's.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    let mut last = String::from("no key verifies its signature");
    for key in candidates {
        let Ok(decoding) = DecodingKey::from_jwk(key) else {
            continue;
        };
        match jsonwebtoken::decode::<Map<String, Value>>(token, &decoding, &validation) {
            Ok(data) => return check_claims(data.claims, expected),
            // Another key of the same id may still fit (a set without `kid`s).
            Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => {
                last = "its signature does not verify with the provider's keys".into();
            }
            Err(e) => return Err(refused(describe_jwt(&e))),
        }
    }
    Err(refused(last))
}

fn describe_jwt(e: &jsonwebtoken::errors::Error) -> String {
    match e.kind() {
        ErrorKind::InvalidIssuer => "its issuer (iss) is not the provider's".into(),
        ErrorKind::InvalidAudience => "its audience (aud) is not this client".into(),
        ErrorKind::MissingRequiredClaim(c) => format!("it has no `{c}`"),
        other => format!("it is not valid: {other:?}"),
    }
}

/// A NumericDate claim as whole seconds (a fraction is cut).
fn seconds(claims: &Map<String, Value>, name: &str) -> Option<i64> {
    let v = claims.get(name)?;
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && f.abs() < 1e15)
            .map(|f| f as i64)
    })
}

fn check_claims(
    claims: Map<String, Value>,
    expected: &Expected<'_>,
) -> Result<Map<String, Value>, IdTokenError> {
    let refused = |m: &str| Err(IdTokenError::Refused(m.to_owned()));
    let now = expected.now.as_second();
    let Some(exp) = seconds(&claims, "exp") else {
        return refused("it has no expiry (exp)");
    };
    if now > exp.saturating_add(LEEWAY_SECS) {
        return refused("it has expired");
    }
    if seconds(&claims, "nbf").is_some_and(|nbf| now.saturating_add(LEEWAY_SECS) < nbf) {
        return refused("it is not valid yet (nbf)");
    }
    let several_audiences = claims
        .get("aud")
        .and_then(Value::as_array)
        .is_some_and(|a| a.len() > 1);
    match claims.get("azp") {
        Some(Value::String(azp)) if azp == expected.client_id => {}
        None if !several_audiences => {}
        _ => return refused("its authorized party (azp) is not this client"),
    }
    let nonce_ok = claims
        .get("nonce")
        .and_then(Value::as_str)
        .is_some_and(|n| bool::from(n.as_bytes().ct_eq(expected.nonce.as_bytes())));
    if !nonce_ok {
        return refused("its nonce is not the one this sign-in sent");
    }
    if claims
        .get("sub")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return refused("it has no subject (sub)");
    }
    Ok(claims)
}

/// A boolean claim that some providers send as a string (`"true"`).
pub fn truthy(v: Option<&Value>) -> Option<bool> {
    match v? {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn expected(now: i64) -> Expected<'static> {
        Expected {
            issuer: "https://id.example",
            client_id: "kennis",
            nonce: "n-1",
            now: Timestamp::from_second(now).unwrap(),
        }
    }

    #[test]
    fn claims_are_checked_against_the_clock_nonce_and_party() {
        let ok = json_claims(1000, "n-1");
        assert!(check_claims(ok.clone(), &expected(1000)).is_ok());
        assert!(check_claims(ok.clone(), &expected(1000 + LEEWAY_SECS)).is_ok());
        assert_eq!(
            check_claims(ok.clone(), &expected(1001 + LEEWAY_SECS)),
            Err(IdTokenError::Refused("it has expired".into()))
        );
        assert!(check_claims(json_claims(1000, "n-2"), &expected(900)).is_err());
        let mut no_nonce = ok.clone();
        no_nonce.remove("nonce");
        assert!(check_claims(no_nonce, &expected(900)).is_err());
        let mut several = ok.clone();
        several.insert("aud".into(), serde_json::json!(["kennis", "other"]));
        assert!(check_claims(several.clone(), &expected(900)).is_err());
        several.insert("azp".into(), "kennis".into());
        assert!(check_claims(several, &expected(900)).is_ok());
        let mut other_party = ok.clone();
        other_party.insert("azp".into(), "other".into());
        assert!(check_claims(other_party, &expected(900)).is_err());
        let mut early = ok.clone();
        early.insert("nbf".into(), 2000.into());
        assert!(check_claims(early, &expected(900)).is_err());
        let mut fractional = ok;
        fractional.insert("exp".into(), serde_json::json!(1000.5));
        assert!(check_claims(fractional, &expected(1000)).is_ok());
    }

    fn json_claims(exp: i64, nonce: &str) -> Map<String, Value> {
        claims(serde_json::json!({
            "iss": "https://id.example", "aud": "kennis", "sub": "u1", "exp": exp, "nonce": nonce
        }))
    }

    #[test]
    fn unsigned_and_symmetric_tokens_are_refused_before_any_key_is_tried() {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let body = b64(
            r#"{"iss":"https://id.example","aud":"kennis","sub":"u","exp":9999999999,"nonce":"n-1"}"#,
        );
        for header in [r#"{"alg":"none"}"#, r#"{"alg":"HS256"}"#] {
            let token = format!("{}.{body}.", b64(header));
            assert!(matches!(
                verify_id_token(&token, &[], &expected(0)),
                Err(IdTokenError::Refused(_))
            ));
        }
        let token = format!("{}.{body}.sig", b64(r#"{"alg":"RS256","kid":"k"}"#));
        assert_eq!(
            verify_id_token(&token, &[], &expected(0)),
            Err(IdTokenError::UnknownKey)
        );
        for junk in ["", "a.b", "a.b.c.d", "....", "\u{0}.\u{0}.\u{0}"] {
            assert!(verify_id_token(junk, &[], &expected(0)).is_err());
        }
    }

    #[test]
    fn email_verified_may_be_a_string() {
        assert_eq!(truthy(Some(&Value::Bool(true))), Some(true));
        assert_eq!(truthy(Some(&"TRUE".into())), Some(true));
        assert_eq!(truthy(Some(&"false".into())), Some(false));
        assert_eq!(truthy(Some(&1.into())), None);
        assert_eq!(truthy(None), None);
    }

    #[test]
    fn discovery_url_drops_one_trailing_slash() {
        assert_eq!(
            discovery_url("https://id.example/realms/acme/"),
            "https://id.example/realms/acme/.well-known/openid-configuration"
        );
    }
}
