//! Bearer checks that passed, kept for as long as nothing they read has changed.
//!
//! Every connector call checks its token against the store: the token (or a personal token's
//! hash and record), its grant, and the person's membership, organisation and person records
//! ([`crate::identity::connector_access`]). At thousands of calls a second that read was about
//! a tenth of the server's work, always with the same answer. A passed check is kept here,
//! tagged with the store's count of committed writes to those tables ([`Store::watch`]) taken
//! before the check read them. A kept check is used only while the count still stands there:
//! a revocation, a removal, a changed setting, a second factor removed, a new token — any
//! committed write to one of the tables — sends every call back to the store, so a revoked
//! token fails on the next call exactly as before. Expiry is compared on every use; refusals
//! are never kept (they go to the store and count against the address).

use dashmap::DashMap;
use jiff::Timestamp;

use crate::store::{
    ChangeCount, MEMBERSHIPS, OAUTH_GRANTS, OAUTH_TOKENS, ORGS, PAT_HASHES, PATS, PEOPLE, Store,
    Table,
};

/// Who acts through a valid access token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessContext {
    /// The grant; 0 for a personal access token.
    pub grant_id: u64,
    /// The personal access token acting, if one does (then `grant_id` is 0).
    pub token_id: Option<u64>,
    pub org_id: u64,
    pub person_id: u64,
    pub client_id: String,
    pub scopes: Vec<String>,
}

/// Every table a bearer check reads.
pub const CHECKED_TABLES: [Table; 7] = [
    OAUTH_TOKENS,
    OAUTH_GRANTS,
    PAT_HASHES,
    PATS,
    MEMBERSHIPS,
    ORGS,
    PEOPLE,
];

/// The most checks kept; past it the cache starts over (a check costs one read to redo).
pub const MAX_KEPT: usize = 10_000;

pub struct BearerCache {
    changes: ChangeCount,
    kept: DashMap<[u8; 32], Kept>,
}

struct Kept {
    changes: u64,
    expires_at: Timestamp,
    access: AccessContext,
}

/// The store's count of changes, taken before a check reads the store.
#[derive(Debug, Clone, Copy)]
struct Before(u64);

impl BearerCache {
    pub fn new(store: &Store) -> BearerCache {
        BearerCache {
            changes: store.watch(&CHECKED_TABLES),
            kept: DashMap::new(),
        }
    }

    /// A bearer check of the token with this `hash` at `now`: the kept outcome while nothing
    /// it read has changed and the token has not expired, else `read` (the check against the
    /// store: the acting person and the token's expiry), kept when it passes. The count is
    /// taken before `read` runs, so a write that `read` missed leaves what it kept behind.
    pub fn check<E>(
        &self,
        hash: [u8; 32],
        now: Timestamp,
        read: impl FnOnce() -> Result<(AccessContext, Timestamp), E>,
    ) -> Result<AccessContext, E> {
        if let Some(kept) = self.get(&hash, now) {
            return Ok(kept);
        }
        let before = self.before_check();
        let (access, expires_at) = read()?;
        self.keep(hash, before, expires_at, &access);
        Ok(access)
    }

    fn before_check(&self) -> Before {
        Before(self.changes.get())
    }

    /// The kept outcome for a token's hash, if nothing it read has changed since and the
    /// token has not expired by `now`.
    fn get(&self, hash: &[u8; 32], now: Timestamp) -> Option<AccessContext> {
        let kept = self.kept.get(hash)?;
        (kept.changes == self.changes.get() && now < kept.expires_at).then(|| kept.access.clone())
    }

    /// Keeps a passed check of a token valid until `expires_at`, read after `before`.
    fn keep(&self, hash: [u8; 32], before: Before, expires_at: Timestamp, access: &AccessContext) {
        if before.0 != self.changes.get() {
            // Something changed while the check read: keep nothing from it.
            return;
        }
        if self.kept.len() >= MAX_KEPT {
            self.kept.clear();
        }
        self.kept.insert(
            hash,
            Kept {
                changes: before.0,
                expires_at,
                access: access.clone(),
            },
        );
    }

    /// How many checks are kept (tests, metrics).
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::key;

    fn access() -> AccessContext {
        AccessContext {
            grant_id: 1,
            token_id: None,
            org_id: 2,
            person_id: 3,
            client_id: "c".into(),
            scopes: vec!["kennisbank".into()],
        }
    }

    #[test]
    fn a_write_to_any_checked_table_drops_what_was_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let cache = BearerCache::new(&store);
        let now = Timestamp::from_second(1_000_000).unwrap();
        let later = Timestamp::from_second(1_000_600).unwrap();
        for (i, table) in CHECKED_TABLES.iter().enumerate() {
            let hash = [i as u8; 32];
            let before = cache.before_check();
            cache.keep(hash, before, later, &access());
            assert_eq!(cache.get(&hash, now), Some(access()));
            // A write elsewhere leaves it.
            store
                .write(|tx| tx.put(crate::store::AUDIT, &key::id(i as u64), &1u8))
                .unwrap();
            assert_eq!(cache.get(&hash, now), Some(access()));
            // A refused write changes nothing, so it leaves it too.
            let refused: Result<(), crate::store::StoreError> = store.write(|tx| {
                tx.put(*table, b"x", &1u8)?;
                Err(crate::store::StoreError::Db("refused".into()))
            });
            assert!(refused.is_err());
            assert_eq!(cache.get(&hash, now), Some(access()));
            store.write(|tx| tx.delete(*table, b"nothing")).unwrap();
            assert_eq!(cache.get(&hash, now), None, "{}", i);
        }
    }

    #[test]
    fn expiry_is_compared_on_every_use_and_a_racing_write_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let cache = BearerCache::new(&store);
        let now = Timestamp::from_second(1_000_000).unwrap();
        let expires = Timestamp::from_second(1_000_060).unwrap();
        cache.keep([1; 32], cache.before_check(), expires, &access());
        assert!(cache.get(&[1; 32], now).is_some());
        assert!(cache.get(&[1; 32], expires).is_none());
        assert!(cache.get(&[2; 32], now).is_none());
        // A check that read while a revocation committed keeps nothing.
        let before = cache.before_check();
        store
            .write(|tx| tx.put(OAUTH_GRANTS, b"g", &"revoked"))
            .unwrap();
        cache.keep([3; 32], before, expires, &access());
        assert!(cache.get(&[3; 32], now).is_none());
        assert!(cache.get(&[1; 32], now).is_none());
    }

    #[test]
    fn the_cache_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let cache = BearerCache::new(&store);
        let expires = Timestamp::from_second(2_000_000).unwrap();
        for i in 0..(MAX_KEPT + 5) {
            let mut hash = [0u8; 32];
            hash[..8].copy_from_slice(&(i as u64).to_be_bytes());
            cache.keep(hash, cache.before_check(), expires, &access());
        }
        assert!(cache.len() <= MAX_KEPT);
        assert!(!cache.is_empty());
    }
}
