//! Writing the store anew (`kennis compact`): every table copied in key order into a fresh
//! file beside the old one, which then takes the old one's name. Records still in plain JSON
//! are written compressed on the way ([`super::record`]), and long content written before
//! content was kept in parts is split into parts ([`super::blob`]). A crash before the rename
//! leaves the old file as it was (and a half-written `.compact` file the next compaction
//! replaces); after it, the new file is complete, because it was committed first.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};

use super::{BLOB_TABLES, PARTED_TABLES, StoreError, blob, record};

/// The fresh file while it is written.
fn fresh_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".compact");
    path.with_file_name(name)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Copies every table of `db` (the file at `path`) into a new file, puts it in `path`'s
/// place and returns it open. The caller holds every other transaction back meanwhile.
pub(super) fn rewrite(db: &Database, path: &Path) -> Result<Database, StoreError> {
    let fresh = fresh_path(path);
    if fresh.exists() {
        std::fs::remove_file(&fresh).map_err(io(&fresh))?;
    }
    let copy = Database::create(&fresh)?;
    let copied = (|| -> Result<(), StoreError> {
        let snapshot = db.begin_read()?;
        let txn = copy.begin_write()?;
        for handle in snapshot.list_tables()? {
            let name = handle.name().to_owned();
            let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new(&name);
            let records = !BLOB_TABLES.iter().any(|t| t.name() == name);
            let parted = PARTED_TABLES.iter().any(|t| t.name() == name);
            let src = snapshot.open_table(def)?;
            let mut dst = txn.open_table(def)?;
            for row in src.iter()? {
                let (k, v) = row?;
                let value = v.value();
                if parted {
                    blob::copy_in(&mut dst, k.value(), value)?;
                } else if records && !record::is_compact(value) {
                    dst.insert(k.value(), record::compact(value.to_vec()).as_slice())?;
                } else {
                    dst.insert(k.value(), value)?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    })();
    let placed = copied.and_then(|()| {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o600))
                .map_err(io(&fresh))?;
        }
        std::fs::rename(&fresh, path).map_err(io(path))?;
        if let Some(dir) = path.parent()
            && let Ok(d) = std::fs::File::open(dir)
        {
            // The rename itself is durable once the directory is.
            let _ = d.sync_all();
        }
        Ok(())
    });
    match placed {
        Ok(()) => Ok(copy),
        Err(e) => {
            drop(copy);
            let _ = std::fs::remove_file(&fresh);
            Err(e)
        }
    }
}
