//! Backups are logical copies: every table is copied from one read transaction (an MVCC
//! snapshot, so the server keeps writing meanwhile) into a fresh redb file, beside a manifest
//! of BLAKE3 sums. A raw copy of a live redb file could be torn; this cannot.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableHandle};
use serde::{Deserialize, Serialize};

use super::{ALL_TABLES, DB_FILE, SCHEMA_VERSION, Store, StoreError};
use crate::progress::{Progress, Report};

/// Name of the manifest inside a backup directory; written last, so a half-written backup has
/// none and is refused by restore.
pub const MANIFEST: &str = "manifest.json";
/// Files of the data directory, besides the database, that a backup carries.
pub const EXTRA_FILES: &[&str] = &["secret.key"];
/// Directories of the data directory whose plain files a backup carries (one level; names in
/// the manifest are `dir/file`): the ACME account key and certificates, so a restored server
/// does not have to ask the CA again.
pub const EXTRA_DIRS: &[&str] = &[ACME_DIR];
/// The ACME cache directory inside the data directory.
pub const ACME_DIR: &str = "acme";

/// Whether a manifest name is a plain file name, or `dir/file` for one of [`EXTRA_DIRS`].
fn valid_name(name: &str) -> bool {
    let plain = |n: &str| !n.is_empty() && !n.contains(['/', '\\']) && !n.starts_with('.');
    match name.split_once('/') {
        None => plain(name),
        Some((dir, file)) => EXTRA_DIRS.contains(&dir) && plain(file),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackupManifest {
    pub format: String,
    pub schema_version: u32,
    pub created_at: String,
    pub files: Vec<ManifestFile>,
    pub tables: Vec<(String, u64)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ManifestFile {
    pub name: String,
    pub size: u64,
    pub blake3: String,
}

/// What a backup or restore did.
#[derive(Debug, Clone, Serialize)]
pub struct BackupSummary {
    pub path: PathBuf,
    pub records: u64,
    pub bytes: u64,
}

const FORMAT: &str = "kennis-backup-1";
const PROGRESS_EVERY: u64 = 2_000;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// `dest`, made if it is not there, or refused (worded by `refused`) when it is not empty.
fn require_empty_target(dest: &Path, refused: fn(String) -> StoreError) -> Result<(), StoreError> {
    if dest.exists() {
        let mut entries = std::fs::read_dir(dest).map_err(io_err(dest))?;
        if entries.next().is_some() {
            return Err(refused(format!(
                "{} is not empty; choose a new directory",
                dest.display()
            )));
        }
    }
    super::ensure_private_dir(dest)
}

/// Copies the store (and the data directory's [`EXTRA_FILES`]) into the new directory `dest`.
pub fn backup_to_dir(
    store: &Store,
    data_dir: &Path,
    dest: &Path,
    created_at: &str,
    progress: Report<'_>,
) -> Result<BackupSummary, StoreError> {
    require_empty_target(dest, StoreError::Backup)?;
    let db_path = dest.join(DB_FILE);
    let db = store.db();
    let snapshot = db.begin_read()?;
    let copy = Database::create(&db_path)?;
    let mut tables = Vec::new();
    let mut records = 0u64;
    let mut total = 0u64;
    for def in ALL_TABLES {
        total += snapshot.open_table(*def)?.len()?;
    }
    {
        let txn = copy.begin_write()?;
        for def in ALL_TABLES {
            let src = snapshot.open_table(*def)?;
            let mut dst = txn.open_table(*def)?;
            let mut n = 0u64;
            for row in src.iter()? {
                let (k, v) = row?;
                dst.insert(k.value(), v.value())?;
                n += 1;
                records += 1;
                if records.is_multiple_of(PROGRESS_EVERY) {
                    progress(Progress::step("copying records", records, total));
                }
            }
            tables.push((def.name().to_owned(), n));
        }
        drop(snapshot);
        progress(Progress::step("copying records", records, total));
        txn.commit()?;
    }
    drop(copy);
    let mut names = vec![DB_FILE.to_owned()];
    for extra in EXTRA_FILES {
        let from = data_dir.join(extra);
        if from.exists() {
            let to = dest.join(extra);
            std::fs::copy(&from, &to).map_err(io_err(&from))?;
            set_private(&to)?;
            names.push((*extra).to_owned());
        }
    }
    for dir in EXTRA_DIRS {
        let from_dir = data_dir.join(dir);
        let Ok(entries) = std::fs::read_dir(&from_dir) else {
            continue;
        };
        let mut files: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| valid_name(&format!("{dir}/{n}")))
            .collect();
        files.sort();
        if files.is_empty() {
            continue;
        }
        let to_dir = dest.join(dir);
        create_private_dir(&to_dir)?;
        for f in files {
            let from = from_dir.join(&f);
            let to = to_dir.join(&f);
            std::fs::copy(&from, &to).map_err(io_err(&from))?;
            set_private(&to)?;
            names.push(format!("{dir}/{f}"));
        }
    }
    let mut files = Vec::new();
    let mut bytes = 0;
    for name in names {
        let (size, sum) = hash_file(&dest.join(&name))?;
        bytes += size;
        files.push(ManifestFile {
            name,
            size,
            blake3: sum,
        });
    }
    let manifest = BackupManifest {
        format: FORMAT.into(),
        schema_version: SCHEMA_VERSION,
        created_at: created_at.into(),
        files,
        tables,
    };
    let manifest_path = dest.join(MANIFEST);
    write_synced(
        &manifest_path,
        &serde_json::to_vec_pretty(&manifest)
            .map_err(|e| StoreError::Backup(format!("the manifest: {e}")))?,
    )?;
    progress(Progress::note(format!(
        "backup complete: {records} records, {bytes} bytes"
    )));
    Ok(BackupSummary {
        path: dest.to_owned(),
        records,
        bytes,
    })
}

/// Verifies the backup in `src` against its manifest, then copies it into the new or empty
/// data directory `data_dir` under temporary names, verifies every copy against the manifest
/// again, and only then renames the copies into place. A backup that differs from its manifest
/// — before or while it is copied — is refused and leaves `data_dir` as it was.
pub fn restore_from_dir(
    src: &Path,
    data_dir: &Path,
    progress: Report<'_>,
) -> Result<BackupSummary, StoreError> {
    let manifest_path = src.join(MANIFEST);
    let text = std::fs::read(&manifest_path).map_err(|e| {
        StoreError::Restore(format!(
            "{} has no readable manifest ({e}); is it a complete kennis backup?",
            src.display()
        ))
    })?;
    let manifest: BackupManifest = serde_json::from_slice(&text)
        .map_err(|e| StoreError::Restore(format!("manifest is damaged: {e}")))?;
    if manifest.format != FORMAT {
        return Err(StoreError::Restore(format!(
            "unknown backup format `{}`",
            manifest.format
        )));
    }
    if manifest.schema_version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found: manifest.schema_version,
            known: SCHEMA_VERSION,
        });
    }
    if !manifest.files.iter().any(|f| f.name == DB_FILE) {
        return Err(StoreError::Restore(
            "manifest lists no database file".into(),
        ));
    }
    let mut bytes = 0;
    for f in &manifest.files {
        if !valid_name(&f.name) {
            return Err(StoreError::Restore(format!(
                "manifest names a bad file `{}`",
                f.name
            )));
        }
        progress(Progress::note(format!(
            "verifying {} ({} bytes)",
            f.name, f.size
        )));
        let (size, sum) = hash_file(&src.join(&f.name))?;
        if size != f.size || sum != f.blake3 {
            return Err(StoreError::Restore(format!(
                "{} does not match its manifest (damaged or altered backup)",
                f.name
            )));
        }
        bytes += size;
    }
    let existed = data_dir.exists();
    require_empty_target(data_dir, StoreError::Restore)?;
    let staged = match stage(src, data_dir, &manifest.files, progress) {
        Ok(staged) => staged,
        Err(e) => {
            // Nothing of the backup stays: the data directory is as it was (empty, or gone
            // again if this restore made it).
            if !existed {
                let _ = std::fs::remove_dir(data_dir);
            }
            return Err(e);
        }
    };
    for (tmp, to) in &staged {
        std::fs::rename(tmp, to).map_err(io_err(to))?;
    }
    // Opening it once runs the migrations and proves the file is a usable database.
    let store = Store::open(data_dir)?;
    let records = manifest.tables.iter().map(|t| t.1).sum();
    drop(store);
    progress(Progress::note(format!(
        "restore complete: {records} records"
    )));
    Ok(BackupSummary {
        path: data_dir.to_owned(),
        records,
        bytes,
    })
}

/// Copies every file of the backup into the data directory under a temporary name, then checks
/// each copy — what was actually written, not the backup it came from — against the manifest's
/// size and sum. Returns the `(temporary, final)` names to rename, or, when a copy differs
/// (the backup changed while it was read, or the copy was damaged), an error after removing
/// every temporary file and directory it made.
fn stage(
    src: &Path,
    data_dir: &Path,
    files: &[ManifestFile],
    progress: Report<'_>,
) -> Result<Vec<(PathBuf, PathBuf)>, StoreError> {
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut made_dirs: Vec<PathBuf> = Vec::new();
    let mut copy_one = |f: &ManifestFile,
                        staged: &mut Vec<(PathBuf, PathBuf)>,
                        made_dirs: &mut Vec<PathBuf>|
     -> Result<(), StoreError> {
        progress(Progress::note(format!("restoring {}", f.name)));
        let (dir, file) = match f.name.split_once('/') {
            Some((dir, file)) => {
                let dir = data_dir.join(dir);
                if !dir.exists() {
                    create_private_dir(&dir)?;
                    made_dirs.push(dir.clone());
                }
                (dir, file)
            }
            None => (data_dir.to_owned(), f.name.as_str()),
        };
        let tmp = dir.join(format!(".{file}.restoring"));
        staged.push((tmp.clone(), data_dir.join(&f.name)));
        std::fs::copy(src.join(&f.name), &tmp).map_err(io_err(&tmp))?;
        set_private(&tmp)?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io_err(&tmp))?;
        let (size, sum) = hash_file(&tmp)?;
        if size != f.size || sum != f.blake3 {
            return Err(StoreError::Restore(format!(
                "the copy of {} does not match its manifest ({size} bytes copied, {} expected): \
                 the backup changed or was damaged while it was restored; nothing was restored",
                f.name, f.size
            )));
        }
        Ok(())
    };
    for f in files {
        if let Err(e) = copy_one(f, &mut staged, &mut made_dirs) {
            for (tmp, _) in &staged {
                let _ = std::fs::remove_file(tmp);
            }
            for dir in made_dirs.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
            return Err(e);
        }
    }
    Ok(staged)
}

fn hash_file(path: &Path) -> Result<(u64, String), StoreError> {
    let mut file = std::fs::File::open(path).map_err(io_err(path))?;
    let mut hasher = blake3::Hasher::new();
    let size = std::io::copy(&mut file, &mut hasher).map_err(io_err(path))?;
    Ok((size, hasher.finalize().to_hex().to_string()))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(io_err(path))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(io_err(path))
}

fn create_private_dir(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(io_err(path))
}

fn set_private(path: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{ORGS, key};
    use super::*;

    fn filled_store(dir: &Path) -> Store {
        let store = Store::open(dir).unwrap();
        store
            .write(|tx| {
                for i in 0..100u64 {
                    tx.put(ORGS, &key::id(i), &format!("org {i}"))?;
                }
                Ok::<_, StoreError>(())
            })
            .unwrap();
        store
    }

    #[test]
    fn acme_cache_travels_with_the_backup_and_stays_private() {
        use std::os::unix::fs::PermissionsExt;
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let store = filled_store(data.path());
        let acme = data.path().join(ACME_DIR);
        std::fs::create_dir(&acme).unwrap();
        std::fs::write(acme.join("cert-abc.pem"), b"cert").unwrap();
        std::fs::write(acme.join("account-abc.pem"), b"key").unwrap();
        std::fs::write(acme.join(".cert-abc.pem.tmp"), b"half").unwrap();
        let dest = out.path().join("b");
        backup_to_dir(&store, data.path(), &dest, "now", &mut |_| {}).unwrap();
        let manifest: BackupManifest =
            serde_json::from_slice(&std::fs::read(dest.join(MANIFEST)).unwrap()).unwrap();
        let names: Vec<&str> = manifest.files.iter().map(|f| f.name.as_str()).collect();
        assert!(names.contains(&"acme/cert-abc.pem"), "{names:?}");
        assert!(names.contains(&"acme/account-abc.pem"), "{names:?}");
        assert!(!names.iter().any(|n| n.contains(".tmp")), "{names:?}");
        let target = out.path().join("restored");
        restore_from_dir(&dest, &target, &mut |_| {}).unwrap();
        let restored = target.join(ACME_DIR).join("account-abc.pem");
        assert_eq!(std::fs::read(&restored).unwrap(), b"key");
        let mode = std::fs::metadata(&restored).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A manifest naming a path outside the known directories is refused.
        assert!(!valid_name("../secret.key"));
        assert!(!valid_name("other/cert.pem"));
        assert!(!valid_name("acme/../x"));
        assert!(!valid_name("acme/.hidden"));
    }

    #[test]
    fn backup_restores_every_record() {
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let store = filled_store(data.path());
        let dest = out.path().join("b");
        backup_to_dir(&store, data.path(), &dest, "now", &mut |_| {}).unwrap();
        let target = out.path().join("restored");
        restore_from_dir(&dest, &target, &mut |_| {}).unwrap();
        let restored = Store::open(&target).unwrap();
        let rows: Vec<(Vec<u8>, String)> = restored.read(|tx| tx.scan(ORGS, b"")).unwrap();
        assert_eq!(rows.len(), 100);
    }

    #[test]
    fn flipped_byte_and_non_empty_target_are_refused() {
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let store = filled_store(data.path());
        let dest = out.path().join("b");
        backup_to_dir(&store, data.path(), &dest, "now", &mut |_| {}).unwrap();

        // A non-empty target is refused before anything is written into it.
        let busy = out.path().join("busy");
        std::fs::create_dir(&busy).unwrap();
        std::fs::write(busy.join("keep"), b"x").unwrap();
        assert!(restore_from_dir(&dest, &busy, &mut |_| {}).is_err());
        assert_eq!(std::fs::read_dir(&busy).unwrap().count(), 1);

        let db = dest.join(DB_FILE);
        let mut bytes = std::fs::read(&db).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x01;
        std::fs::write(&db, bytes).unwrap();
        let target = out.path().join("restored");
        let err = restore_from_dir(&dest, &target, &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not match"), "{err}");
        assert!(!target.join(DB_FILE).exists());
    }

    /// The backup is sound when it is verified, then its database is cut short while the
    /// restore copies it (a backup disk going bad, another process writing): the copy is
    /// checked against the manifest and refused, nothing is left in the data directory — an
    /// existing empty one stays empty, one the restore made is gone — and the same backup,
    /// made whole again, restores.
    #[test]
    fn a_backup_that_changes_while_it_is_copied_is_refused() {
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let store = filled_store(data.path());
        let acme = data.path().join(ACME_DIR);
        std::fs::create_dir(&acme).unwrap();
        std::fs::write(acme.join("cert-abc.pem"), b"cert").unwrap();
        std::fs::write(data.path().join("secret.key"), b"key").unwrap();
        let dest = out.path().join("b");
        backup_to_dir(&store, data.path(), &dest, "now", &mut |_| {}).unwrap();
        let db = dest.join(DB_FILE);
        let whole = std::fs::read(&db).unwrap();
        let manifest: BackupManifest =
            serde_json::from_slice(&std::fs::read(dest.join(MANIFEST)).unwrap()).unwrap();
        // The database is not the last file copied, so other files are staged before and after.
        assert_eq!(manifest.files[0].name, DB_FILE);
        assert!(manifest.files.len() >= 3);

        for target in [out.path().join("empty"), out.path().join("new")] {
            if target.ends_with("empty") {
                std::fs::create_dir(&target).unwrap();
            }
            let mut cut = |p: Progress| {
                if p == Progress::note(format!("restoring {DB_FILE}")) {
                    std::fs::write(&db, &whole[..whole.len() / 2]).unwrap();
                }
            };
            let err = restore_from_dir(&dest, &target, &mut cut)
                .unwrap_err()
                .to_string();
            assert!(err.contains("copy of kennis.redb does not match"), "{err}");
            assert!(err.contains("nothing was restored"), "{err}");
            if target.ends_with("empty") {
                assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
            } else {
                assert!(!target.exists());
            }
            std::fs::write(&db, &whole).unwrap();
        }

        // A file other than the first changed while copying: the staged database goes too.
        let cert = dest.join(ACME_DIR).join("cert-abc.pem");
        let target = out.path().join("later");
        let mut swap = |p: Progress| {
            if p == Progress::note("restoring acme/cert-abc.pem") {
                std::fs::write(&cert, b"CERT").unwrap();
            }
        };
        let err = restore_from_dir(&dest, &target, &mut swap).unwrap_err();
        assert!(err.to_string().contains("acme/cert-abc.pem"), "{err}");
        assert!(!target.exists());
        std::fs::write(&cert, b"cert").unwrap();

        let target = out.path().join("good");
        restore_from_dir(&dest, &target, &mut |_| {}).unwrap();
        let restored = Store::open(&target).unwrap();
        let rows: Vec<(Vec<u8>, String)> = restored.read(|tx| tx.scan(ORGS, b"")).unwrap();
        assert_eq!(rows.len(), 100);
        assert_eq!(
            std::fs::read(target.join(ACME_DIR).join("cert-abc.pem")).unwrap(),
            b"cert"
        );
    }
}
