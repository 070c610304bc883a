//! Password hashing (argon2id with the crate's recommended parameters) and a strength policy
//! that refuses the passwords an attacker would try first.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, SaltString, rand_core::OsRng};

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

thread_local! {
    /// This thread's argon2 working memory (~19 MiB), kept between verifications. Allocating
    /// it afresh for every login fragmented the heap: 200 parallel logins grew the process by
    /// hundreds of megabytes that were never given back. Logins verify on a few dedicated
    /// threads (`identity::login`), so this stays a few buffers.
    static BLOCKS: std::cell::RefCell<Vec<argon2::Block>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Checks `password` against a stored PHC hash, computing argon2 in this thread's reused
/// memory; the comparison is constant-time.
pub fn verify_password_hash(hash: &str, password: &str) -> bool {
    use subtle::ConstantTimeEq;
    let Ok(h) = PasswordHash::new(hash) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (h.salt, h.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        argon2::Algorithm::try_from(h.algorithm),
        argon2::Params::try_from(&h),
    ) else {
        return false;
    };
    let version = match h.version.map(argon2::Version::try_from) {
        None => argon2::Version::default(),
        Some(Ok(v)) => v,
        Some(Err(_)) => return false,
    };
    let mut salt_buf = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_buf) else {
        return false;
    };
    let mut out = vec![0u8; expected.len()];
    let blocks_needed = params.block_count();
    let argon = Argon2::new(algorithm, version, params);
    let computed = BLOCKS.with_borrow_mut(|blocks| {
        if blocks.len() != blocks_needed {
            *blocks = vec![argon2::Block::default(); blocks_needed];
        }
        argon
            .hash_password_into_with_memory(
                password.as_bytes(),
                salt,
                &mut out,
                blocks.as_mut_slice(),
            )
            .is_ok()
    });
    computed && bool::from(out.as_slice().ct_eq(expected.as_bytes()))
}

/// Does the work of one verification for an unknown account.
pub(super) fn burn_equivalent_time(password: &str) {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash_password("kennis: no such account"));
    let _ = verify_password_hash(dummy, password);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verification_in_reused_memory_accepts_only_the_password() {
        let h = hash_password("paard-batterij-niet");
        assert!(verify_password_hash(&h, "paard-batterij-niet"));
        assert!(
            verify_password_hash(&h, "paard-batterij-niet"),
            "second use of the buffer"
        );
        assert!(!verify_password_hash(&h, "paard-batterij-nie"));
        assert!(!verify_password_hash("not a hash", "paard-batterij-niet"));
        burn_equivalent_time("anything");
    }

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
