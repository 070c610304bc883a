//! Download links: `/files/<payload>.<signature>`, HMAC-SHA256 with the server key over the
//! organisation, path, version and expiry, so a link opens exactly one version of one document
//! for 15 minutes and cannot be altered to reach another.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

pub const LINK_LIFETIME: SignedDuration = SignedDuration::from_secs(15 * 60);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkClaims {
    #[serde(rename = "o")]
    pub org_id: u64,
    #[serde(rename = "p")]
    pub path: String,
    #[serde(rename = "v")]
    pub version: u64,
    /// Expiry, Unix seconds.
    #[serde(rename = "e")]
    pub expires: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("malformed download link")]
    Malformed,
    #[error("download link signature does not match")]
    BadSignature,
    #[error("download link has expired")]
    Expired,
}

#[allow(clippy::expect_used, reason = "HMAC takes keys of any length")]
fn mac(key: &[u8; 32]) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    m.update(b"kennis-download-v1:");
    m
}

/// The signed token and its expiry.
pub fn sign(
    key: &[u8; 32],
    org_id: u64,
    path: &str,
    version: u64,
    now: Timestamp,
) -> (String, Timestamp) {
    let expires_at = now + LINK_LIFETIME;
    let claims = LinkClaims {
        org_id,
        path: path.to_owned(),
        version,
        expires: expires_at.as_second(),
    };
    let payload = B64.encode(serde_json::to_vec(&claims).unwrap_or_default());
    let mut m = mac(key);
    m.update(payload.as_bytes());
    let sig = B64.encode(m.finalize().into_bytes());
    (format!("{payload}.{sig}"), expires_at)
}

/// Checks the signature (in constant time) and the expiry.
pub fn verify(key: &[u8; 32], token: &str, now: Timestamp) -> Result<LinkClaims, LinkError> {
    let (payload, sig) = token.split_once('.').ok_or(LinkError::Malformed)?;
    let sig = B64.decode(sig).map_err(|_| LinkError::Malformed)?;
    let mut m = mac(key);
    m.update(payload.as_bytes());
    m.verify_slice(&sig).map_err(|_| LinkError::BadSignature)?;
    let claims: LinkClaims = B64
        .decode(payload)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or(LinkError::Malformed)?;
    if now.as_second() >= claims.expires {
        return Err(LinkError::Expired);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_expire_and_resist_tampering() {
        let key = [7u8; 32];
        let now: Timestamp = "2026-05-01T10:00:00Z".parse().unwrap();
        let (token, exp) = sign(&key, 3, "a/b.md", 2, now);
        assert_eq!(exp, now + LINK_LIFETIME);
        assert_eq!(verify(&key, &token, now).unwrap().path, "a/b.md");
        assert_eq!(verify(&key, &token, exp), Err(LinkError::Expired));
        assert_eq!(
            verify(&[8u8; 32], &token, now),
            Err(LinkError::BadSignature)
        );
        // Another payload with the old signature.
        let (other, _) = sign(&key, 4, "a/b.md", 2, now);
        let forged = format!(
            "{}.{}",
            other.split('.').next().unwrap(),
            token.split('.').nth(1).unwrap()
        );
        assert_eq!(verify(&key, &forged, now), Err(LinkError::BadSignature));
        assert_eq!(verify(&key, "nonsense", now), Err(LinkError::Malformed));
    }
}
