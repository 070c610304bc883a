//! Removes records nobody can use any more — expired authorization codes, access and refresh
//! tokens, portal sessions, invitation and password-reset links, stale metadata-document
//! (CIMD) clients, idle dynamically registered clients, and delivery records past the replay
//! window — so the store does not grow for ever on a server that is never looked after. Runs
//! when the server starts and then every hour; `/metrics` counts what it removed as
//! `kennis_records_purged_total{kind}`.
//!
//! Records are kept for a day past their expiry: a code or refresh token that comes back soon
//! after it expired still meets its record (and its replay detection) rather than nothing, and
//! an expired invitation or reset link still gets "this link has expired" (410) rather than
//! "unknown link" (404) for that day. The client and delivery rules are in
//! [`crate::oauth::purge_clients`] and [`crate::triggers::purge_deliveries`].

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use tokio::sync::watch;

use crate::app::App;
use crate::store::{
    INVITATIONS, OAUTH_CODES, OAUTH_TOKENS, RESET_LINKS, SESSIONS, Store, StoreError, Table,
};

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
    pub invitations: usize,
    pub reset_links: usize,
    pub cimd_clients: usize,
    pub dcr_clients: usize,
    pub deliveries: usize,
}

impl Purged {
    /// Each count with its `kind` label of `kennis_records_purged_total`.
    pub fn by_kind(&self) -> [(&'static str, usize); 8] {
        [
            ("code", self.codes),
            ("token", self.tokens),
            ("session", self.sessions),
            ("invitation", self.invitations),
            ("reset_link", self.reset_links),
            ("cimd_client", self.cimd_clients),
            ("dcr_client", self.dcr_clients),
            ("delivery", self.deliveries),
        ]
    }
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

/// Removes every code, token, session, invitation and reset link that expired more than a
/// day before `now`, the clients and delivery records whose time is up (module doc).
pub fn purge_expired(store: &Store, now: Timestamp) -> Result<Purged, StoreError> {
    let clients = crate::oauth::purge_clients(store, now, KEEP_AFTER_EXPIRY)?;
    Ok(Purged {
        codes: purge_table(store, OAUTH_CODES, now)?,
        tokens: purge_table(store, OAUTH_TOKENS, now)?,
        sessions: purge_table(store, SESSIONS, now)?,
        invitations: purge_table(store, INVITATIONS, now)?,
        reset_links: purge_table(store, RESET_LINKS, now)?,
        cimd_clients: clients.cimd,
        dcr_clients: clients.dcr,
        deliveries: crate::triggers::purge_deliveries(store, now)?,
    })
}

/// One round of housekeeping on the server's store and clock, counted in `/metrics`.
pub fn run_once(app: &App) -> Result<Purged, StoreError> {
    let purged = purge_expired(&app.store, app.clock.now())?;
    for (kind, n) in purged.by_kind() {
        app.metrics.purged(kind, n);
    }
    Ok(purged)
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
            let purged = app.blocking(run_once).await;
            match purged {
                Ok(p) if p != Purged::default() => tracing::info!(
                    codes = p.codes,
                    tokens = p.tokens,
                    sessions = p.sessions,
                    invitations = p.invitations,
                    reset_links = p.reset_links,
                    cimd_clients = p.cimd_clients,
                    dcr_clients = p.dcr_clients,
                    deliveries = p.deliveries,
                    "removed expired records"
                ),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "could not remove expired records"),
            }
        }
    })
}
