//! Removes records nobody can use any more — expired authorization codes, access and refresh
//! tokens, portal sessions, invitation and password-reset links, stale metadata-document
//! (CIMD) clients, idle dynamically registered clients, and delivery records past the replay
//! window — so the store does not grow for ever on a server that is never looked after; and
//! applies the `[retention]` settings (finished runs, audit records and trashed documents past
//! theirs, then content no version refers to). Runs when the server starts and then every
//! hour; `/metrics` counts what it removed as `kennis_records_purged_total{kind}`.
//!
//! Records are kept for a day past their expiry: a code or refresh token that comes back soon
//! after it expired still meets its record (and its replay detection) rather than nothing, and
//! an expired invitation or reset link still gets "this link has expired" (410) rather than
//! "unknown link" (404) for that day. The client and delivery rules are in
//! [`crate::oauth::purge_clients`] and [`crate::triggers::purge_deliveries`].
//!
//! Beside it, every [`INDEX_IDLE`] the server looks at the search index: when nothing changed
//! it since the last look, its segments are merged into one if that is worth it
//! ([`kb::index::merge_worth`]) — what a large import leaves searches slower until then. Writes
//! go on during the merge; `kennis compact` does the same at once.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use tokio::sync::watch;

use crate::app::App;
use crate::config::Retention;
use crate::kb::index::SearchIndex;
use crate::kb::{self, KbError};
use crate::requests::{Kind, Request};
use crate::store::{
    ACTIVE_RUNS, AUDIT, INVITATIONS, OAUTH_CODES, OAUTH_TOKENS, REQUESTS, RESET_LINKS,
    RUN_CALLBACKS, RUN_TRANSCRIPTS, SESSIONS, Store, StoreError, TRIGGER_RUNS, Table, key,
};

/// How long an expired record is kept.
pub const KEEP_AFTER_EXPIRY: SignedDuration = SignedDuration::from_hours(24);
/// How often the purge runs.
pub const INTERVAL: Duration = Duration::from_secs(3600);
/// How long the search index must go without a change before its segments are merged.
pub const INDEX_IDLE: Duration = Duration::from_secs(600);
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
    store.delete_in_chunks(table, &expired, CHUNK)?;
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

/// Where retention counts from: `days` before `now`, or `None` for 0 (keep for ever).
fn retention_cutoff(now: Timestamp, days: u32) -> Option<Timestamp> {
    if days == 0 {
        return None;
    }
    now.checked_sub(SignedDuration::from_hours(i64::from(days) * 24))
        .ok()
}

/// What one retention purge removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    pub runs: usize,
    pub audit: usize,
    pub documents: usize,
    /// Stored contents no version refers to any more.
    pub contents: usize,
}

/// Removes runs (not feature requests) that reached a final status before `cutoff`, with their
/// transcripts and their entries in the trigger's run list.
pub fn purge_runs(store: &Store, cutoff: Timestamp) -> Result<usize, StoreError> {
    let mut purged = 0;
    let mut from = key::id(0).to_vec();
    loop {
        let batch: Vec<(Vec<u8>, Request)> = store.read(|tx| tx.range(REQUESTS, &from, CHUNK))?;
        let Some((last, _)) = batch.last() else {
            break;
        };
        from = last.clone();
        from.push(0);
        let expired =
            |r: &Request| r.kind == Kind::Run && r.status.is_final() && r.updated_at < cutoff;
        let done: Vec<u64> = batch
            .iter()
            .map(|(_, r)| r)
            .filter(|r| expired(r))
            .map(|r| r.id)
            .collect();
        if !done.is_empty() {
            purged += store.write(|tx| {
                let mut n = 0;
                for id in &done {
                    // Read again in this transaction: a run changed since is judged anew.
                    let Some(r) = tx.get::<Request>(REQUESTS, &key::id(*id))? else {
                        continue;
                    };
                    if !expired(&r) {
                        continue;
                    }
                    // A result callback still on its way keeps its run until it arrives or
                    // is given up; then its record goes with the run.
                    if let Some(cb) = crate::requests::callback::get(tx, r.id)? {
                        if cb.next_at.is_some() {
                            continue;
                        }
                        tx.delete(RUN_CALLBACKS, &key::id(r.id))?;
                    }
                    n += 1;
                    tx.delete(REQUESTS, &key::id(r.id))?;
                    tx.delete(RUN_TRANSCRIPTS, &key::id(r.id))?;
                    tx.delete(ACTIVE_RUNS, &key::id(r.id))?;
                    if let Some(trigger) = r.trigger_id {
                        let mut rk = trigger.as_bytes().to_vec();
                        rk.extend_from_slice(&key::id(r.id));
                        tx.delete(TRIGGER_RUNS, &rk)?;
                    }
                }
                Ok::<_, StoreError>(n)
            })?;
        }
        if batch.len() < CHUNK {
            break;
        }
    }
    Ok(purged)
}

/// Removes audit records made before `cutoff`. Each organisation's records are keyed by time
/// (`audit::record_key`), so only the oldest keys of each are read.
pub fn purge_audit(store: &Store, cutoff: Timestamp) -> Result<usize, StoreError> {
    let cutoff_ns = cutoff.as_nanosecond().max(0) as u64;
    let mut purged = 0;
    let mut org = 0u64;
    loop {
        // The next organisation with audit records.
        let next: Vec<(Vec<u8>, serde::de::IgnoredAny)> =
            store.read(|tx| tx.range(AUDIT, &key::id(org), 1))?;
        let Some(found) = next.first().and_then(|(k, _)| key::id_at(k, 0)) else {
            break;
        };
        org = found;
        loop {
            let keys = store.read(|tx| tx.scan_keys(AUDIT, &key::id(org), CHUNK))?;
            let expired: Vec<&Vec<u8>> = keys
                .iter()
                .take_while(|k| key::id_at(k, 8).is_some_and(|at| at < cutoff_ns))
                .collect();
            if !expired.is_empty() {
                store.write(|tx| {
                    for k in &expired {
                        tx.delete(AUDIT, k)?;
                    }
                    Ok::<_, StoreError>(())
                })?;
                purged += expired.len();
            }
            if expired.len() < CHUNK {
                break;
            }
        }
        match org.checked_add(1) {
            Some(n) => org = n,
            None => break,
        }
    }
    Ok(purged)
}

/// Applies the `[retention]` settings at `now`: finished runs, audit records and trashed
/// documents past theirs are removed; then, every round and whatever the settings, content no
/// version refers to any more (so content left by a crash after a trash purge goes the next
/// round, even when no more trash expires).
pub fn purge_retained(
    store: &Store,
    retention: &Retention,
    now: Timestamp,
) -> Result<Retained, KbError> {
    let mut out = Retained::default();
    if let Some(cutoff) = retention_cutoff(now, retention.runs_days) {
        out.runs = purge_runs(store, cutoff)?;
    }
    if let Some(cutoff) = retention_cutoff(now, retention.audit_days) {
        out.audit = purge_audit(store, cutoff)?;
    }
    if let Some(cutoff) = retention_cutoff(now, retention.trash_days) {
        out.documents = kb::trash::purge_trash(store, cutoff)?;
    }
    out.contents = kb::trash::purge_orphaned_content(store)?;
    Ok(out)
}

/// One retention round on the server's data, counted on `/metrics`
/// (`kennis_records_purged_total`).
pub fn retain(app: &App) -> Result<Retained, KbError> {
    let r = purge_retained(&app.store, &app.config.retention, app.clock.now())?;
    app.metrics.purged("run", r.runs);
    app.metrics.purged("audit", r.audit);
    app.metrics.purged("document", r.documents);
    app.metrics.purged("content", r.contents);
    Ok(r)
}

/// Looks at the search index now and then (module doc): merges its segments once no change
/// reached it between two looks.
#[derive(Debug, Default)]
pub struct IndexWatch {
    seen: Option<u64>,
}

impl IndexWatch {
    /// One look: how many segments were merged, or `None` (the index changed since the last
    /// look, this is the first, or a merge is not worth it).
    pub fn look(&mut self, index: &SearchIndex) -> Result<Option<usize>, KbError> {
        let now = index.visible();
        if self.seen.replace(now) != Some(now) {
            return Ok(None);
        }
        index.merge_segments()
    }
}

/// Looks at the search index every [`INDEX_IDLE`] until `stop` turns true ([`IndexWatch`]).
pub fn watch_index(app: &Arc<App>, stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    watch_index_every(app, stop, INDEX_IDLE)
}

/// [`watch_index`], looking every `period` instead (a test looks every few milliseconds).
#[doc(hidden)]
pub fn watch_index_every(
    app: &Arc<App>,
    mut stop: watch::Receiver<bool>,
    period: Duration,
) -> tokio::task::JoinHandle<()> {
    let app = app.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        let mut watch = IndexWatch::default();
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            let started = std::time::Instant::now();
            let looked = app.blocking(move |app| {
                let merged = watch.look(&app.kb_index);
                (watch, merged)
            });
            // A stop is not held up here; a merge under way finishes on its own thread (seconds
            // at 1 GB) before the process ends. Stopped harder, the index keeps its segments
            // (the merged one counts only once complete) and the next start looks again.
            let merged = tokio::select! {
                (w, merged) = looked => {
                    watch = w;
                    merged
                }
                _ = stop.wait_for(|s| *s) => break,
            };
            match merged {
                Ok(Some(segments)) => tracing::info!(
                    segments,
                    secs = started.elapsed().as_secs_f64(),
                    "merged the search index's segments into one"
                ),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "could not merge the search index's segments"),
            }
        }
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
            match app.blocking(retain).await {
                Ok(r) if r != Retained::default() => tracing::info!(
                    runs = r.runs,
                    audit = r.audit,
                    documents = r.documents,
                    contents = r.contents,
                    "removed records past their retention"
                ),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "could not apply the retention settings"),
            }
        }
    })
}
