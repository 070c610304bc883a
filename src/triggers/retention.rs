//! Which delivery records housekeeping removes. A delivery id is remembered (in
//! `TRIGGER_DELIVERIES`, with the run it created) so that a repeat answers `duplicate`:
//!
//! - a Standard Webhooks delivery is signed with its time and refused more than
//!   [`TOLERANCE_SECS`] away from it, so its record is useless once that window has passed;
//!   records of unsigned deliveries (with the secret; the sender's `webhook-id` or
//!   `X-GitHub-Delivery`) serve the sender's retries. Both are removed [`DELIVERY_KEEP`] (a day)
//!   after the run they created — the window, with a margin for clocks and retries;
//! - a GitHub-signed delivery carries no signed time, so its record is the only thing that
//!   stops a replay: it is kept for as long as its trigger exists;
//! - every record of a deleted trigger goes (no delivery reaches it any more).

use jiff::{SignedDuration, Timestamp};
use uuid::Uuid;

use super::{TOLERANCE_SECS, live};
use crate::requests;
use crate::store::{Store, StoreError, TRIGGER_DELIVERIES};

/// How long after its run a delivery record is kept (a day; at least twice the replay window).
pub const DELIVERY_KEEP: SignedDuration = SignedDuration::from_hours(24);
const _: () = assert!(DELIVERY_KEEP.as_secs() >= 2 * TOLERANCE_SECS);

/// The prefix of GitHub-signed delivery ids (`Signature::delivery_id`).
const GITHUB_SIGNED: &str = "github-sig:";

/// Removes the delivery records past the replay window (see the module doc).
pub fn purge_deliveries(store: &Store, now: Timestamp) -> Result<usize, StoreError> {
    let cutoff = now - DELIVERY_KEEP;
    let stale: Vec<Vec<u8>> = store.read(|tx| {
        let mut stale = Vec::new();
        for (k, run_id) in tx.scan::<u64>(TRIGGER_DELIVERIES, b"")? {
            let (Some(trigger), Some(delivery)) = (k.get(..16), k.get(16..)) else {
                stale.push(k);
                continue;
            };
            let Ok(trigger) = Uuid::from_slice(trigger) else {
                stale.push(k);
                continue;
            };
            if live(tx, trigger)?.is_none() {
                stale.push(k);
                continue;
            }
            if delivery.starts_with(GITHUB_SIGNED.as_bytes()) {
                continue;
            }
            let old = requests::get(tx, run_id)?.is_none_or(|run| run.created_at < cutoff);
            if old {
                stale.push(k);
            }
        }
        Ok::<_, StoreError>(stale)
    })?;
    for chunk in stale.chunks(1000) {
        store.write(|tx| {
            for k in chunk {
                tx.delete(TRIGGER_DELIVERIES, k)?;
            }
            Ok::<_, StoreError>(())
        })?;
    }
    Ok(stale.len())
}
