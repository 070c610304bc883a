//! Records decoded once while their stored bytes stay the same: a record read on every request
//! (a trigger, by each of its deliveries) is otherwise decompressed and parsed every time —
//! about a tenth of a delivery's CPU (stop 48). A [`Memo`] keeps a few decoded records beside
//! the exact bytes they were decoded from and hands out a copy only when the bytes just read
//! are those bytes, so it can never answer with a record that has changed: a change is new
//! bytes, decoded afresh. Nothing is invalidated, nothing is shared between tables. Only
//! small records are kept ([`MAX_KEPT`]): a run's record may hold a megabyte of result.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use serde::de::DeserializeOwned;

use super::{StoreError, Table, record};

/// A record whose JSON is longer than this is decoded every time, not kept: at most
/// `capacity` times this (and the stored bytes beside each) is held.
pub const MAX_KEPT: usize = 16 << 10;

/// Decoded records of one table, by key (a few: see [`Memo::new`]).
pub struct Memo<R> {
    entries: Mutex<Option<HashMap<Vec<u8>, Entry<R>>>>,
    capacity: usize,
}

struct Entry<R> {
    stored: Vec<u8>,
    record: R,
}

impl<R: DeserializeOwned + Clone> Memo<R> {
    /// Keeps at most `capacity` records; when that many are kept, they are all let go before
    /// the next is kept (records read on every request are back at once).
    pub const fn new(capacity: usize) -> Memo<R> {
        Memo {
            entries: Mutex::new(None),
            capacity,
        }
    }

    /// The record stored as `stored` under `key` in `table`: the copy kept when it was decoded
    /// from exactly these bytes, else decoded now (and kept).
    pub fn decode(&self, table: &Table, key: &[u8], stored: &[u8]) -> Result<R, StoreError> {
        // Whatever a panic left is as good as nothing: every entry is checked against the bytes.
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.as_ref().and_then(|e| e.get(key))
            && entry.stored == stored
        {
            return Ok(entry.record.clone());
        }
        // Decoded without the lock held: other keys need not wait for it.
        drop(entries);
        let (record, json_len) = record::decode_measured::<R>(table, stored)?;
        if json_len > MAX_KEPT {
            return Ok(record);
        }
        entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let map = entries.get_or_insert_with(HashMap::new);
        if map.len() >= self.capacity && !map.contains_key(key) {
            map.clear();
        }
        map.insert(
            key.to_vec(),
            Entry {
                stored: stored.to_vec(),
                record: record.clone(),
            },
        );
        Ok(record)
    }

    /// How many records are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.as_ref().map_or(0, HashMap::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Table = Table::new("memo_test");

    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Rec {
        name: String,
        n: u64,
    }

    fn stored(name: &str, n: u64) -> Vec<u8> {
        record::encode(&Rec {
            name: name.repeat(20),
            n,
        })
    }

    #[test]
    fn a_record_is_what_its_bytes_say_kept_or_not() {
        let memo: Memo<Rec> = Memo::new(2);
        let first = stored("kat", 1);
        let got = memo.decode(&T, b"a", &first).unwrap();
        assert_eq!(got.n, 1);
        assert_eq!(memo.decode(&T, b"a", &first).unwrap(), got);
        // New bytes under the same key: decoded afresh, never the kept copy.
        let changed = stored("kat", 2);
        assert_eq!(memo.decode(&T, b"a", &changed).unwrap().n, 2);
        assert_eq!(memo.decode(&T, b"a", &first).unwrap().n, 1);
        assert_eq!(memo.len(), 1);
        // Full: everything is let go before a third key is kept.
        memo.decode(&T, b"b", &stored("hond", 3)).unwrap();
        assert_eq!(memo.len(), 2);
        assert_eq!(memo.decode(&T, b"c", &stored("vis", 4)).unwrap().n, 4);
        assert_eq!(memo.len(), 1);
        assert_eq!(memo.decode(&T, b"b", &stored("hond", 3)).unwrap().n, 3);
        // Bytes that are no record are an error, and nothing is kept for them.
        assert!(memo.decode(&T, b"d", b"{not json").is_err());
        assert_eq!(memo.len(), 2);
        // A large record (it compresses to little) is decoded, and not kept.
        let large = stored(&"x".repeat(MAX_KEPT / 20 + 1), 5);
        assert!(large.len() < MAX_KEPT / 10);
        assert_eq!(memo.decode(&T, b"b", &large).unwrap().n, 5);
        assert_eq!(memo.len(), 2);
        assert_eq!(memo.decode(&T, b"b", &stored("hond", 3)).unwrap().n, 3);
    }
}
