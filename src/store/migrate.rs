//! Schema version and migrations, run at every start.

use redb::ReadableTable;

use super::{ALL_TABLES, KB_CONTENT, META, Store, StoreError, Table, blob, decode, encode};

/// The schema version this binary writes.
pub const SCHEMA_VERSION: u32 = 6;

/// Migrations from a version below this one leave space to give back (the file is compacted
/// after them); the later ones change nothing already written.
const LAST_FREEING: u32 = 4;

const VERSION_KEY: &[u8] = b"schema_version";

/// A step from version `n` to `n + 1`, run inside one write transaction.
type Migration = fn(&redb::WriteTransaction) -> Result<(), StoreError>;

/// `MIGRATIONS[n]` takes a store from version `n` to `n + 1`. Version 0 is an empty file.
const MIGRATIONS: &[Migration] = &[
    create_tables,
    compress_content,
    compact_records,
    content_in_parts,
    content_located,
    records_v2,
];

fn create_tables(txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    for table in ALL_TABLES {
        txn.open_table(*table)?;
    }
    Ok(())
}

/// Version 1 kept content as raw bytes and a folded copy of every text beside it; version 2
/// keeps content compressed (`blob`) and derives the folded text when searching.
fn compress_content(txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    const KB_FOLDED: Table = Table::new("kb_folded");
    txn.delete_table(KB_FOLDED)?;
    let mut content = txn.open_table(KB_CONTENT)?;
    let keys: Vec<Vec<u8>> = content
        .iter()?
        .map(|row| row.map(|(k, _)| k.value().to_vec()))
        .collect::<Result<_, _>>()?;
    for key in keys {
        let Some(raw) = content.get(key.as_slice())?.map(|v| v.value().to_vec()) else {
            continue;
        };
        content.insert(key.as_slice(), blob::encode(&raw).as_slice())?;
    }
    Ok(())
}

/// Version 3 writes records compressed ([`super::record`]), which a version-2 binary cannot
/// read: the version says so. Nothing is rewritten here (a large store would wait for it at
/// start); records written before stay JSON, readable as ever, until the next compaction
/// (`kennis compact`, or after an import) writes every one anew.
fn compact_records(_txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}

/// Version 4 keeps long content and extracted text in parts ([`blob`]), which a version-3
/// binary would read as damaged: the version says so. Values written before stay as they are,
/// readable as ever; the compaction that follows a migration (in [`Store::open`]) splits them.
fn content_in_parts(_txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}

/// Version 5 keeps new content in the order it is written and only its location under its
/// hash ([`blob`]), which a version-4 binary would read as damaged: the version says so.
/// Content written before stays under its hash, readable as ever.
fn content_located(_txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}

/// Version 6 compresses records with a second dictionary ([`super::record`]'s `COMPACT_V2`),
/// which a version-5 binary would read as damaged: the version says so. Records written
/// before keep the first dictionary, readable as ever.
fn records_v2(_txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}

/// Brings the store to [`SCHEMA_VERSION`], or refuses a store from a newer binary. Returns
/// whether an existing store was migrated (its file then has space to give back).
pub(super) fn migrate(store: &Store) -> Result<bool, StoreError> {
    let db = store.db();
    let txn = db.begin_write()?;
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
    let mut meta = txn.open_table(META)?;
    meta.insert(VERSION_KEY, encode(&SCHEMA_VERSION).as_slice())?;
    // A new store has no content left behind to sweep (a store from before is swept once).
    if found == 0 {
        meta.insert(super::CONTENT_SWEEP_DUE, encode(&false).as_slice())?;
    }
    drop(meta);
    txn.commit()?;
    Ok(found > 0 && found < LAST_FREEING)
}

/// Test hook: pretend a newer binary wrote this store.
#[doc(hidden)]
pub fn set_schema_version_for_tests(store: &Store, version: u32) -> Result<(), StoreError> {
    let db = store.db();
    let txn = db.begin_write()?;
    txn.open_table(META)?
        .insert(VERSION_KEY, encode(&version).as_slice())?;
    txn.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_store_owes_no_content_sweep_and_an_old_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let due = |store: &Store| {
            store
                .read(|tx| tx.get::<bool>(META, super::super::CONTENT_SWEEP_DUE))
                .unwrap()
        };
        assert_eq!(due(&store), Some(false));
        // A store migrated from version 2 never recorded it: absent, which counts as due.
        set_schema_version_for_tests(&store, 2).unwrap();
        store
            .write(|tx| tx.delete(META, super::super::CONTENT_SWEEP_DUE))
            .unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(due(&store), None);
    }

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
    fn version_1_content_is_compressed_and_the_folded_copy_dropped() {
        const KB_FOLDED: Table = Table::new("kb_folded");
        let dir = tempfile::tempdir().unwrap();
        let text = "Kozijnen van meranti, geschilderd in RAL 9010.\n".repeat(100);
        {
            // A version-1 file as the previous kennis wrote it.
            let db = redb::Database::create(dir.path().join(super::super::DB_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            for t in ALL_TABLES {
                txn.open_table(*t).unwrap();
            }
            txn.open_table(KB_CONTENT)
                .unwrap()
                .insert(&b"h1"[..], text.as_bytes())
                .unwrap();
            let mut folded = txn.open_table(KB_FOLDED).unwrap();
            folded
                .insert(&b"h1"[..], text.to_lowercase().as_bytes())
                .unwrap();
            // Enough of a folded copy that dropping it frees megabytes.
            for i in 0..2000u32 {
                folded
                    .insert(&i.to_be_bytes()[..], text.as_bytes())
                    .unwrap();
            }
            drop(folded);
            txn.open_table(META)
                .unwrap()
                .insert(VERSION_KEY, encode(&1u32).as_slice())
                .unwrap();
            txn.commit().unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let stored = store
            .read(|tx| tx.get_raw(KB_CONTENT, b"h1"))
            .unwrap()
            .unwrap();
        assert!(stored.len() < text.len() / 5, "compressed");
        assert_eq!(blob::decode(&stored).unwrap(), text.as_bytes());
        let db = store.db();
        let txn = redb::ReadableDatabase::begin_read(&*db).unwrap();
        assert!(
            txn.open_table(KB_FOLDED).is_err(),
            "the folded copy is gone"
        );
        let v: Option<u32> = store.read(|tx| tx.get(META, VERSION_KEY)).unwrap();
        assert_eq!(v, Some(SCHEMA_VERSION));
    }

    #[test]
    fn fresh_store_gets_current_version() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let v: Option<u32> = store.read(|tx| tx.get(META, VERSION_KEY)).unwrap();
        assert_eq!(v, Some(SCHEMA_VERSION));
    }

    #[test]
    fn version_3_content_is_split_into_parts_at_the_first_start() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..3000).map(|i| format!("regel {i} ")).collect();
        {
            let store = Store::open(dir.path()).unwrap();
            store
                .write(|tx| tx.put_raw(KB_CONTENT, b"h1", &blob::encode(text.as_bytes())))
                .unwrap();
            set_schema_version_for_tests(&store, 3).unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let rows = store
            .read(|tx| tx.scan_keys(KB_CONTENT, b"h1", usize::MAX))
            .unwrap();
        assert!(rows.len() > 2, "{rows:?}");
        let back = store.read(|tx| tx.get_blob(KB_CONTENT, b"h1")).unwrap();
        assert_eq!(back.as_deref(), Some(text.as_bytes()));
        let v: Option<u32> = store.read(|tx| tx.get(META, VERSION_KEY)).unwrap();
        assert_eq!(v, Some(SCHEMA_VERSION));
        // Content written now is located; the old value still reads beside it.
        store
            .write(|tx| tx.put_blob(KB_CONTENT, b"h2", text.as_bytes()))
            .unwrap();
        let located = store
            .read(|tx| tx.get_raw(KB_CONTENT, b"h2"))
            .unwrap()
            .unwrap();
        assert_eq!(located.len(), 9);
        for k in [&b"h1"[..], b"h2"] {
            let back = store.read(|tx| tx.get_blob(KB_CONTENT, k)).unwrap();
            assert_eq!(back.as_deref(), Some(text.as_bytes()));
        }
    }
}
