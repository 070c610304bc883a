//! Second factor: RFC 6238 TOTP (SHA-1, 6 digits, 30 s), the form every authenticator app
//! understands. The seed must be kept to verify codes, so it is stored; codes are single use.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use totp_rs::{Algorithm, Secret, TOTP};

use super::IdentityError;

pub const STEP_SECONDS: u64 = 30;
const ISSUER: &str = "kennis";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TotpState {
    /// Base32 seed.
    pub secret: String,
    pub confirmed: bool,
    /// The time step of the last accepted code; no code of this or an earlier step is accepted.
    pub last_step: Option<u64>,
}

/// What a person needs to add the second factor to an authenticator app.
#[derive(Debug, Clone, Serialize)]
pub struct TotpEnrolment {
    pub otpauth_uri: String,
    pub secret: String,
}

fn totp_for(secret_b32: &str, account: &str) -> Result<TOTP, IdentityError> {
    let bytes = Secret::Encoded(secret_b32.to_owned())
        .to_bytes()
        .map_err(|_| {
            IdentityError::InvalidInput("stored second-factor secret is damaged".into())
        })?;
    TOTP::new(
        Algorithm::SHA1,
        6,
        1,
        STEP_SECONDS,
        bytes,
        Some(ISSUER.to_owned()),
        account.to_owned(),
    )
    .map_err(|e| IdentityError::InvalidInput(format!("second factor: {e}")))
}

pub(super) fn new_secret(account: &str) -> Result<(TotpState, TotpEnrolment), IdentityError> {
    let raw: [u8; 20] = rand::random();
    let secret = Secret::Raw(raw.to_vec()).to_encoded().to_string();
    let totp = totp_for(&secret, account)?;
    let enrolment = TotpEnrolment {
        otpauth_uri: totp.get_url(),
        secret: secret.clone(),
    };
    Ok((
        TotpState {
            secret,
            confirmed: false,
            last_step: None,
        },
        enrolment,
    ))
}

/// The enrolment of an existing seed, to show again until it is confirmed.
pub(super) fn enrolment_for(secret: &str, account: &str) -> Result<TotpEnrolment, IdentityError> {
    let totp = totp_for(secret, account)?;
    Ok(TotpEnrolment {
        otpauth_uri: totp.get_url(),
        secret: secret.to_owned(),
    })
}

/// The code for a seed at a time; for tests and the demo.
pub fn code_at(secret_b32: &str, at: Timestamp) -> String {
    totp_for(secret_b32, "x")
        .map(|t| t.generate(at.as_second().max(0) as u64))
        .unwrap_or_default()
}

/// The time step (now, or one either side for clock drift) whose code equals `code` and that
/// is later than the last accepted one.
pub(super) fn matching_step(state: &TotpState, code: &str, now: Timestamp) -> Option<u64> {
    let code = code.trim().replace(' ', "");
    if code.len() != 6 || !code.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let totp = totp_for(&state.secret, "x").ok()?;
    let current = now.as_second().max(0) as u64 / STEP_SECONDS;
    let mut found = None;
    for step in current.saturating_sub(1)..=current + 1 {
        let expected = totp.generate(step * STEP_SECONDS);
        if bool::from(expected.as_bytes().ct_eq(code.as_bytes()))
            && state.last_step.is_none_or(|l| step > l)
        {
            found = Some(step);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_is_accepted_once_and_drift_is_bounded() {
        let (mut state, enrol) = new_secret("a@example.org").unwrap();
        assert!(enrol.otpauth_uri.starts_with("otpauth://totp/"));
        let now: Timestamp = "2026-03-01T12:00:10Z".parse().unwrap();
        let code = code_at(&state.secret, now);
        let step = matching_step(&state, &code, now).unwrap();
        state.last_step = Some(step);
        assert_eq!(
            matching_step(&state, &code, now),
            None,
            "replayed code accepted"
        );
        let far = now
            .checked_add(jiff::SignedDuration::from_secs(300))
            .unwrap();
        assert_eq!(
            matching_step(&state, &code_at(&state.secret, now), far),
            None
        );
        assert_eq!(matching_step(&state, "12345", now), None);
    }
}
