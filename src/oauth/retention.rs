//! Which OAuth clients housekeeping removes (docs/security.md, retention):
//!
//! - a **metadata-document (CIMD) client** once its stored document is past its cache time
//!   (`metadata_fresh_until`) by more than the keep period housekeeping passes in — the next
//!   authorization fetches the document again anyway;
//! - a **dynamically registered (DCR) client** once [`CLIENT_IDLE`] (90 days) have passed
//!   since it was registered and since any grant of it was made, last used, revoked or held a
//!   token.
//!
//! Neither goes while one of its grants is live (not revoked, with a token that has not
//! expired) or one of its authorization codes has not expired: `/token` authenticates the
//! client, so its record must stay for the code's exchange and the grant's refresh to work.
//! Grants themselves are kept (the connections page names a removed client by its id).

use std::collections::{HashMap, HashSet};

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;

use super::Client;
use super::grants::Grant;
use crate::store::{OAUTH_CLIENTS, OAUTH_CODES, OAUTH_GRANTS, OAUTH_TOKENS, Store, StoreError};

/// A DCR client with no grant activity for this long is removed.
pub const CLIENT_IDLE: SignedDuration = SignedDuration::from_hours(90 * 24);

/// The two fields of a token record purging needs.
#[derive(Deserialize)]
struct TokenTimes {
    grant_id: u64,
    expires_at: Timestamp,
}

/// The two fields of an authorization code purging needs.
#[derive(Deserialize)]
struct CodeTimes {
    client_id: String,
    expires_at: Timestamp,
}

/// What [`purge_clients`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PurgedClients {
    pub cimd: usize,
    pub dcr: usize,
}

/// Removes CIMD clients whose document went stale more than `keep` before `now`, and DCR
/// clients idle for [`CLIENT_IDLE`]; never a client with a live grant.
pub fn purge_clients(
    store: &Store,
    now: Timestamp,
    keep: SignedDuration,
) -> Result<PurgedClients, StoreError> {
    let stale = store.read(|tx| {
        // Per grant: the latest token expiry (a grant's tokens show it was in use until then).
        let mut token_until: HashMap<u64, Timestamp> = HashMap::new();
        for (_, t) in tx.scan::<TokenTimes>(OAUTH_TOKENS, b"")? {
            let e = token_until.entry(t.grant_id).or_insert(t.expires_at);
            *e = (*e).max(t.expires_at);
        }
        let mut live: HashSet<String> = HashSet::new();
        let mut last_active: HashMap<String, Timestamp> = HashMap::new();
        // A client in the middle of an authorization (its code not yet expired) stays too.
        for (_, c) in tx.scan::<CodeTimes>(OAUTH_CODES, b"")? {
            if c.expires_at > now {
                live.insert(c.client_id);
            }
        }
        for (_, g) in tx.scan::<Grant>(OAUTH_GRANTS, b"")? {
            let tokens = token_until.get(&g.id).copied();
            if g.revoked_at.is_none() && tokens.is_some_and(|t| t > now) {
                live.insert(g.client_id.clone());
            }
            let used = super::grant_last_used(tx, g.id)?;
            let mut latest = g.created_at;
            for t in [
                used,
                g.revoked_at,
                tokens.map(|t| match g.revoked_at {
                    Some(r) => t.min(r),
                    None => t,
                }),
            ]
            .into_iter()
            .flatten()
            {
                latest = latest.max(t);
            }
            let e = last_active.entry(g.client_id).or_insert(latest);
            *e = (*e).max(latest);
        }
        let mut stale = Vec::new();
        for (k, c) in tx.scan::<Client>(OAUTH_CLIENTS, b"")? {
            if live.contains(&c.client_id) {
                continue;
            }
            let gone = match c.metadata_fresh_until {
                Some(fresh) => fresh.saturating_add(keep).unwrap_or(fresh) < now,
                None => {
                    let active = last_active
                        .get(&c.client_id)
                        .map_or(c.created_at, |t| c.created_at.max(*t));
                    active.saturating_add(CLIENT_IDLE).unwrap_or(active) < now
                }
            };
            if gone {
                stale.push((k, c.metadata_fresh_until));
            }
        }
        Ok::<_, StoreError>(stale)
    })?;
    let mut purged = PurgedClients::default();
    if stale.is_empty() {
        return Ok(purged);
    }
    // Checked again in the write: a client whose document was fetched anew, or that was
    // granted access, since the read stays.
    store.write(|tx| {
        let granted: HashSet<String> = tx
            .scan::<Grant>(OAUTH_GRANTS, b"")?
            .into_iter()
            .filter(|(_, g)| g.created_at >= now)
            .map(|(_, g)| g.client_id)
            .collect();
        for (k, fresh_until) in &stale {
            let Some(c) = tx.get::<Client>(OAUTH_CLIENTS, k)? else {
                continue;
            };
            if granted.contains(&c.client_id) || c.metadata_fresh_until != *fresh_until {
                continue;
            }
            tx.delete(OAUTH_CLIENTS, k)?;
            match fresh_until {
                Some(_) => purged.cimd += 1,
                None => purged.dcr += 1,
            }
        }
        Ok::<_, StoreError>(())
    })?;
    Ok(purged)
}
