//! Signed deliveries, for senders that cannot set an `Authorization` header and should not put
//! the secret in the URL: Standard Webhooks (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 HMAC-SHA256>` over `id.timestamp.body`, 5-minute window) and
//! GitHub (`X-Hub-Signature-256: sha256=<hex HMAC-SHA256>` over the body).
//!
//! The HMAC key must be known to the server, but the trigger secret is stored only as a hash;
//! so the signing secret is derived from the server key and that hash. It is shown with the
//! secret (`whsec_…`), changes when the secret is renewed, and cannot be computed from a copy
//! of the database alone. Standard Webhooks senders use it as is (key = the base64 part);
//! GitHub senders paste the whole `whsec_…` string as the webhook secret.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use jiff::Timestamp;
use sha2::Sha256;

use super::{Trigger, TriggerError};

/// Replay window of Standard Webhooks deliveries.
pub const TOLERANCE_SECS: i64 = 300;
const PREFIX: &str = "whsec_";

/// The signature headers of a delivery, as sent.
#[derive(Debug, Clone)]
pub enum Signature {
    Standard {
        id: String,
        timestamp: String,
        signatures: String,
    },
    GitHub {
        signature: String,
    },
}

impl Signature {
    /// The id a signed delivery is remembered by, derived from what the signature covers so
    /// that a captured delivery cannot be replayed under another key or delivery id to start
    /// more runs: Standard Webhooks sign their `webhook-id`; GitHub signs only the body, so
    /// its delivery is known by its signature (the same body, the same signature) and the
    /// unsigned `X-GitHub-Delivery` header is not used. Repeats answer `duplicate`, whatever
    /// event key they name — and whatever the letter case of the hex: the signature is known
    /// by its decoded bytes (written back as `sha256=<lower-case hex>`, so the id of a
    /// delivery sent the usual way is what it always was).
    pub fn delivery_id(&self) -> String {
        match self {
            Signature::Standard { id, .. } => id.clone(),
            Signature::GitHub { signature } => {
                use sha2::Digest;
                let canonical = match github_bytes(signature) {
                    Some(bytes) => format!("sha256={}", hex::encode(bytes)),
                    None => signature.trim().to_owned(),
                };
                format!(
                    "github-sig:{}",
                    hex::encode(Sha256::digest(canonical.as_bytes()))
                )
            }
        }
    }
}

/// The bytes of a GitHub `sha256=<hex>` signature (hex in either case); `None` when it is
/// not one.
fn github_bytes(signature: &str) -> Option<Vec<u8>> {
    hex::decode(signature.trim().strip_prefix("sha256=")?).ok()
}

/// Whether a Standard Webhooks id is one kennis gives its own run callbacks.
fn is_callback_id(id: &str) -> bool {
    id.trim()
        .starts_with(crate::requests::callback::WEBHOOK_ID_PREFIX)
}

/// Whether a Standard Webhooks timestamp (seconds) lies within [`TOLERANCE_SECS`] of `now`.
/// Checked arithmetic: a timestamp far in the future or past, or beyond what `i64` holds, is
/// simply outside the window.
fn within_window(timestamp: &str, now: Timestamp) -> bool {
    let Ok(ts) = timestamp.trim().parse::<i64>() else {
        return false;
    };
    now.as_second()
        .checked_sub(ts)
        .is_some_and(|d| d.unsigned_abs() <= TOLERANCE_SECS.unsigned_abs())
}

#[allow(clippy::expect_used, reason = "HMAC takes keys of any length")]
pub(super) fn key_bytes(server_key: &[u8; 32], trigger: &Trigger) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(server_key).expect("any key length");
    mac.update(b"kennis trigger signing key\0");
    mac.update(trigger.id.as_bytes());
    mac.update(trigger.secret_hash.as_bytes());
    mac.finalize().into_bytes().into()
}

/// The trigger's signing secret, `whsec_<base64>`.
pub fn signing_secret(server_key: &[u8; 32], trigger: &Trigger) -> String {
    format!(
        "{PREFIX}{}",
        STANDARD.encode(key_bytes(server_key, trigger))
    )
}

#[allow(clippy::expect_used, reason = "HMAC takes keys of any length")]
fn mac_with(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("any key length")
}

/// The Standard Webhooks signature of a message kennis sends (a run's callback):
/// `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` with the key the receiver gets by
/// base64-decoding the signing secret after `whsec_`.
pub fn sign_standard(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = mac_with(key);
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// Checks a signed delivery; any fault is `InvalidToken` (401), like a wrong secret.
pub fn verify(
    server_key: &[u8; 32],
    trigger: &Trigger,
    sig: &Signature,
    body: &[u8],
    now: Timestamp,
) -> Result<(), TriggerError> {
    match sig {
        Signature::Standard {
            id,
            timestamp,
            signatures,
        } => {
            // A run's callback, signed with this same key, is kennis's message to a
            // receiver and never a delivery (whoever got one cannot start runs with it).
            if !within_window(timestamp, now) || is_callback_id(id) {
                return Err(TriggerError::InvalidToken);
            }
            let key = key_bytes(server_key, trigger);
            let ok = signatures.split_whitespace().any(|s| {
                let Some(b64) = s.strip_prefix("v1,") else {
                    return false;
                };
                let Ok(given) = STANDARD.decode(b64) else {
                    return false;
                };
                let mut mac = mac_with(&key);
                mac.update(id.as_bytes());
                mac.update(b".");
                mac.update(timestamp.trim().as_bytes());
                mac.update(b".");
                mac.update(body);
                // verify_slice compares in constant time.
                mac.verify_slice(&given).is_ok()
            });
            ok.then_some(()).ok_or(TriggerError::InvalidToken)
        }
        Signature::GitHub { signature } => {
            let given = github_bytes(signature).ok_or(TriggerError::InvalidToken)?;
            let mut mac = mac_with(signing_secret(server_key, trigger).as_bytes());
            mac.update(body);
            mac.verify_slice(&given)
                .map_err(|_| TriggerError::InvalidToken)
        }
    }
}

/// A delivery id is kept to recognise repeats: 1 to 200 visible ASCII characters.
pub fn validate_delivery_id(id: Option<&str>) -> Result<Option<String>, TriggerError> {
    match id {
        None => Ok(None),
        Some(s) if !s.is_empty() && s.len() <= 200 && s.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(Some(s.to_owned()))
        }
        Some(_) => Err(TriggerError::InvalidKey(
            "the delivery id must be 1 to 200 visible ASCII characters".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_far_away_or_too_big_are_outside_the_window() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        assert!(within_window("1800000000", now));
        assert!(within_window(" 1799999700 ", now));
        assert!(within_window("1800000300", now));
        assert!(!within_window("1800000301", now));
        assert!(!within_window("1799999699", now));
        for far in [
            i64::MIN.to_string(),
            i64::MAX.to_string(),
            "-1".to_owned(),
            "-9223372036854775807".to_owned(),
            "99999999999999999999999".to_owned(),
            "1e10".to_owned(),
            "".to_owned(),
        ] {
            assert!(!within_window(&far, now), "{far}");
        }
        // The earliest and latest instants jiff knows, too.
        assert!(!within_window("0", Timestamp::MAX));
        assert!(!within_window(&i64::MIN.to_string(), Timestamp::MIN));
    }

    #[test]
    fn a_github_signature_is_known_by_its_bytes() {
        let lower = Signature::GitHub {
            signature: format!("sha256={}", "ab".repeat(32)),
        };
        let upper = Signature::GitHub {
            signature: format!("sha256={}", "AB".repeat(32)),
        };
        let mixed = Signature::GitHub {
            signature: format!(" sha256={} ", "aB".repeat(32)),
        };
        assert_eq!(lower.delivery_id(), upper.delivery_id());
        assert_eq!(lower.delivery_id(), mixed.delivery_id());
        let other = Signature::GitHub {
            signature: format!("sha256={}", "ac".repeat(32)),
        };
        assert_ne!(lower.delivery_id(), other.delivery_id());
    }

    #[test]
    fn a_callback_signature_verifies_with_the_shown_signing_secret() {
        let trigger = Trigger {
            id: uuid::Uuid::new_v4(),
            org_id: 1,
            name: "t".into(),
            instructions: "i".into(),
            agent_id: 1,
            project_id: 1,
            cooldown_secs: 0,
            secret_hash: "ab".repeat(32),
            paused: false,
            deleted: false,
            created_at: Timestamp::UNIX_EPOCH,
            updated_at: Timestamp::UNIX_EPOCH,
            callback_url: None,
        };
        let server_key = [7u8; 32];
        let now = Timestamp::from_second(1_780_000_000).unwrap();
        let body = br#"{"type":"run.finished"}"#;
        let key = key_bytes(&server_key, &trigger);
        let sig = sign_standard(&key, "msg_1", now.as_second(), body);
        // The key a receiver takes from the shown secret: base64 after `whsec_`.
        let shown = signing_secret(&server_key, &trigger);
        let decoded = STANDARD
            .decode(shown.strip_prefix(PREFIX).unwrap())
            .unwrap();
        assert_eq!(decoded, key);
        // kennis's own check of incoming Standard Webhooks deliveries accepts it too.
        let standard = Signature::Standard {
            id: "msg_1".into(),
            timestamp: now.as_second().to_string(),
            signatures: sig.clone(),
        };
        assert!(verify(&server_key, &trigger, &standard, body, now).is_ok());
        assert!(verify(&server_key, &trigger, &standard, b"{}", now).is_err());
        assert!(sig.starts_with("v1,"));
        // … but not under the id of a callback kennis sent: a callback starts no run.
        let id = format!("{}3f0c", crate::requests::callback::WEBHOOK_ID_PREFIX);
        let callback = Signature::Standard {
            timestamp: now.as_second().to_string(),
            signatures: sign_standard(&key, &id, now.as_second(), body),
            id,
        };
        assert!(verify(&server_key, &trigger, &callback, body, now).is_err());
    }
}
