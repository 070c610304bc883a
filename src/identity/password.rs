//! Password hashing (argon2id with the crate's recommended parameters) and a strength policy
//! that refuses the passwords an attacker would try first.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use argon2::Argon2;
use argon2::password_hash::{
    PasswordHash, PasswordHasher, PasswordVerifier, SaltString, rand_core::OsRng,
};

use super::IdentityError;

pub const MIN_LEN: usize = 10;
pub const MAX_LEN: usize = 1024;

/// Passwords so common that their length does not help.
const COMMON: &[&str] = &[
    "password",
    "passw0rd",
    "wachtwoord",
    "welkom",
    "welcome",
    "qwerty",
    "azerty",
    "letmein",
    "123456",
    "1234567890",
    "iloveyou",
    "admin",
    "kennis",
    "abc123",
    "monkey",
    "dragon",
];

pub fn check_strength(password: &str, email: &str) -> Result<(), IdentityError> {
    let weak = |why: &str| Err(IdentityError::WeakPassword(why.to_owned()));
    let n = password.chars().count();
    if password.trim().is_empty() {
        return weak("it is empty");
    }
    if n < MIN_LEN {
        return weak(&format!("it needs at least {MIN_LEN} characters"));
    }
    if n > MAX_LEN {
        return weak(&format!("it may have at most {MAX_LEN} characters"));
    }
    let lower = password.to_lowercase();
    let distinct: std::collections::HashSet<char> = lower.chars().collect();
    if distinct.len() < 4 {
        return weak("it repeats too few different characters");
    }
    let local = email.split('@').next().unwrap_or_default();
    if lower == email || (local.len() >= 4 && lower.contains(local)) {
        return weak("it contains the email address");
    }
    let stripped: String = lower.chars().filter(|c| c.is_alphabetic()).collect();
    if COMMON.iter().any(|c| {
        lower.starts_with(c)
            && (stripped.is_empty() || stripped == c.trim_matches(|ch: char| ch.is_ascii_digit()))
    }) {
        return weak("it is a common password with digits added");
    }
    if lower.chars().all(|c| c.is_ascii_digit()) && n < 16 {
        return weak("digits only need at least 16 characters");
    }
    Ok(())
}

#[allow(
    clippy::expect_used,
    reason = "argon2 with its default parameters and a fresh salt takes any password the forms accept (bodies are at most 64 KiB)"
)]
pub fn hash_password(password: &str) -> String {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("argon2 with default parameters")
        .to_string()
}

/// Constant-time comparison happens inside argon2's verifier.
pub fn verify_password_hash(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// Does the work of one verification for an unknown account.
pub(super) fn burn_equivalent_time(password: &str) {
    let _ = hash_password(password);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_passwords_are_refused_with_a_reason() {
        for p in [
            "",
            "   ",
            "short",
            "aaaaaaaaaaaa",
            "password123",
            "Wachtwoord2024",
            "1234567890",
            "annie.smit!!x",
        ] {
            assert!(
                check_strength(p, "annie.smit@example.org").is_err(),
                "{p:?} accepted"
            );
        }
        assert!(check_strength("paard-batterij-niet", "annie@example.org").is_ok());
    }

    #[test]
    fn hash_verifies_only_the_right_password() {
        let h = hash_password("correct horse battery");
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password_hash(&h, "correct horse battery"));
        assert!(!verify_password_hash(&h, "correct horse batterY"));
        assert!(!verify_password_hash("not a hash", "x"));
    }
}
