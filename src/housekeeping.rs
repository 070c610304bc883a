//! Removes records nobody can use any more — expired authorization codes, access and refresh
//! tokens, and portal sessions — so the store does not grow for ever on a server that is never
//! looked after. Runs when the server starts and then every hour.
//!
//! Records are kept for a day past their expiry: a code or refresh token that comes back soon
//! after it expired still meets its record (and its replay detection) rather than nothing.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use tokio::sync::watch;

use crate::app::App;
use crate::store::{OAUTH_CODES, OAUTH_TOKENS, SESSIONS, Store, StoreError, Table};

/// How long an expired record is kept.
pub const KEEP_AFTER_EXPIRY: SignedDuration = SignedDuration::from_hours(24);
/// How often the purge runs.
pub const INTERVAL: Duration = Duration::from_secs(3600);
/// Deletions per write transaction, so a large purge never holds the writer for long.
const CHUNK: usize = 1000;

/// The one field every purged record has.
#[derive(Deserialize)]
struct Expiring {
    expires_at: Timestamp,
}

/// What one purge removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    pub codes: usize,
    pub tokens: usize,
    pub sessions: usize,
}

fn purge_table(store: &Store, table: Table, now: Timestamp) -> Result<usize, StoreError> {
    let cutoff = now - KEEP_AFTER_EXPIRY;
    let expired: Vec<Vec<u8>> = store.read(|tx| {
        Ok::<_, StoreError>(
            tx.scan::<Expiring>(table, b"")?
                .into_iter()
                .filter(|(_, r)| r.expires_at < cutoff)
                .map(|(k, _)| k)
                .collect(),
        )
    })?;
    for chunk in expired.chunks(CHUNK) {
        store.write(|tx| {
            for k in chunk {
                tx.delete(table, k)?;
            }
            Ok::<_, StoreError>(())
        })?;
    }
    Ok(expired.len())
}

/// Removes every code, token and session that expired more than a day before `now`.
pub fn purge_expired(store: &Store, now: Timestamp) -> Result<Purged, StoreError> {
    Ok(Purged {
        codes: purge_table(store, OAUTH_CODES, now)?,
        tokens: purge_table(store, OAUTH_TOKENS, now)?,
        sessions: purge_table(store, SESSIONS, now)?,
    })
}

/// Purges now and then every [`INTERVAL`] until `stop` turns true.
pub fn start(app: &Arc<App>, mut stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    let app = app.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(INTERVAL);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            let purged = app
                .blocking(|app| purge_expired(&app.store, app.clock.now()))
                .await;
            match purged {
                Ok(p) if p != Purged::default() => tracing::info!(
                    codes = p.codes,
                    tokens = p.tokens,
                    sessions = p.sessions,
                    "removed expired records"
                ),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "could not remove expired records"),
            }
        }
    })
}
