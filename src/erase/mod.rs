//! Removing for good: an organisation with everything of it (`kennis org delete`), and a person
//! (`kennis user disable | enable | delete`). Both begin with one transaction that makes what
//! goes invisible at once and records the removal in [`ERASING`]; the rest is deleted in
//! batches, each step idempotent, so a crash anywhere leaves a consistent store and the same
//! command (or the next start, [`finish_pending`]) finishes it.

mod org;
mod person;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::identity::IdentityError;
use crate::kb::KbError;
use crate::kb::index::SearchIndex;
use crate::progress::Report;
use crate::store::{ERASING, Read, Store, StoreError, Table, WriteTx, key};

pub use org::{OrgRemoved, TABLES, delete_org};
pub use person::{
    PersonErased, delete_person, disable_person, enable_person, person_label, pseudonym,
};

/// Why a removal was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum EraseError {
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("search index: {0}")]
    Index(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<KbError> for EraseError {
    fn from(e: KbError) -> Self {
        match e {
            KbError::Store(s) => EraseError::Store(s),
            other => EraseError::Index(other.to_string()),
        }
    }
}

/// Records deleted per write transaction, so a large removal never holds the writer long.
const BATCH: usize = 1000;
/// Records read per write transaction when looking for the ones to delete.
const SCAN: usize = 5000;

/// The key of a removal in [`ERASING`]: `o` or `p`, then the id.
fn erasing_key(kind: u8, id: u64) -> Vec<u8> {
    let mut k = vec![kind];
    k.extend_from_slice(&key::id(id));
    k
}

/// The key right after `k` in key order.
fn after(k: &[u8]) -> Vec<u8> {
    let mut next = k.to_vec();
    next.push(0);
    next
}

/// The owner every organisation-bound record names.
#[derive(Deserialize)]
struct Owner {
    #[serde(default)]
    org_id: Option<u64>,
}

/// Deletes every key of `table` starting with `prefix`, a batch per transaction; returns how
/// many.
fn sweep_prefix(store: &Store, table: Table, prefix: &[u8]) -> Result<u64, StoreError> {
    let mut removed = 0u64;
    loop {
        let n = store.write(|tx| {
            let keys = tx.scan_keys(table, prefix, BATCH)?;
            for k in &keys {
                tx.delete(table, k)?;
            }
            Ok::<_, StoreError>(keys.len())
        })?;
        removed += n as u64;
        if n < BATCH {
            return Ok(removed);
        }
    }
}

/// Goes through `table` in key order, a batch per write transaction; `change` sees each record
/// and may delete or rewrite it in that transaction, answering whether it did. Returns how
/// many records it changed.
fn sweep<R: DeserializeOwned>(
    store: &Store,
    table: Table,
    mut change: impl FnMut(&mut WriteTx, &[u8], R) -> Result<bool, StoreError>,
) -> Result<u64, StoreError> {
    let mut from: Vec<u8> = Vec::new();
    let mut changed = 0u64;
    loop {
        let (n, last, seen) = store.write(|tx| {
            let rows = tx.range::<R>(table, &from, SCAN)?;
            let seen = rows.len();
            let last = rows.last().map(|(k, _)| k.clone());
            let mut n = 0u64;
            for (k, r) in rows {
                if change(tx, &k, r)? {
                    n += 1;
                }
            }
            Ok::<_, StoreError>((n, last, seen))
        })?;
        changed += n;
        match last {
            Some(k) if seen >= SCAN => from = after(&k),
            _ => return Ok(changed),
        }
    }
}

/// Finishes every removal an interruption left unfinished (at the server's start); `close` as
/// for [`delete_org`].
pub fn finish_pending(
    store: &Store,
    index: &SearchIndex,
    close: &dyn Fn(u64),
    progress: Report<'_>,
) -> Result<usize, EraseError> {
    let pending: Vec<Vec<u8>> = store.read(|tx| tx.scan_keys(ERASING, b"", usize::MAX))?;
    for k in &pending {
        let id = key::id_at(k, 1).unwrap_or_default();
        match k.first() {
            Some(b'o') => {
                org::finish(store, index, id, &|_| {}, close, progress)?;
            }
            Some(b'p') => {
                person::finish(store, id)?;
            }
            _ => {}
        }
    }
    Ok(pending.len())
}

/// Whether a removal of this kind and id is under way.
fn pending<R: DeserializeOwned>(
    tx: &impl Read,
    kind: u8,
    id: u64,
) -> Result<Option<R>, StoreError> {
    tx.get(ERASING, &erasing_key(kind, id))
}
