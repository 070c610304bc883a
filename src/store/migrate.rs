//! Schema version and migrations, run at every start.

use redb::ReadableTable;

use super::{ALL_TABLES, META, Store, StoreError, decode, encode};

/// The schema version this binary writes.
pub const SCHEMA_VERSION: u32 = 1;

const VERSION_KEY: &[u8] = b"schema_version";

/// A step from version `n` to `n + 1`, run inside one write transaction.
type Migration = fn(&redb::WriteTransaction) -> Result<(), StoreError>;

/// `MIGRATIONS[n]` takes a store from version `n` to `n + 1`. Version 0 is an empty file.
const MIGRATIONS: &[Migration] = &[create_tables];

fn create_tables(txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    for table in ALL_TABLES {
        txn.open_table(*table)?;
    }
    Ok(())
}

/// Brings the store to [`SCHEMA_VERSION`], or refuses a store from a newer binary.
pub(super) fn migrate(store: &Store) -> Result<(), StoreError> {
    let txn = store.db().begin_write()?;
    let found: u32 = {
        let meta = txn.open_table(META)?;
        match meta.get(VERSION_KEY)? {
            Some(v) => decode(&META, v.value())?,
            None => 0,
        }
    };
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (version, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tracing::info!(from = version, to = version + 1, "migrating the store");
        step(&txn)?;
    }
    // Tables added to ALL_TABLES since the file was made start empty; opening creates them, so
    // a read transaction never meets a missing table.
    create_tables(&txn)?;
    txn.open_table(META)?
        .insert(VERSION_KEY, encode(&SCHEMA_VERSION).as_slice())?;
    txn.commit()?;
    Ok(())
}

/// Test hook: pretend a newer binary wrote this store.
#[doc(hidden)]
pub fn set_schema_version_for_tests(store: &Store, version: u32) -> Result<(), StoreError> {
    let txn = store.db().begin_write()?;
    txn.open_table(META)?
        .insert(VERSION_KEY, encode(&version).as_slice())?;
    txn.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_schema_is_refused_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            set_schema_version_for_tests(&store, SCHEMA_VERSION + 1).unwrap();
        }
        let err = Store::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("newer kennis"), "{err}");
    }

    #[test]
    fn fresh_store_gets_current_version() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let v: Option<u32> = store.read(|tx| tx.get(META, VERSION_KEY)).unwrap();
        assert_eq!(v, Some(SCHEMA_VERSION));
    }
}
