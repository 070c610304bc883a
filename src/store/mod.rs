//! The redb store: table definitions, typed records, schema version and migrations, batched
//! appends and backups. This is the only module that opens transactions; domain modules pass
//! closures that receive a [`ReadTx`] or [`WriteTx`].
//!
//! Every table maps bytes to bytes. Records are serde JSON, stored compressed with a built-in
//! dictionary when that is smaller ([`record`]); keys are built by [`key`]. One uniform table
//! type keeps backups generic (they copy every table in [`ALL_TABLES`]); [`record::json`] turns
//! a stored value back into its JSON when debugging a data directory.

mod backup;
mod batch;
pub mod blob;
pub mod by_org;
mod group;
pub mod key;
pub mod memo;
mod migrate;
pub mod record;
mod rewrite;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use backup::{ACME_DIR, BackupManifest, BackupSummary, backup_to_dir, restore_from_dir};
pub use batch::BatchWriter;
pub use group::GroupCommit;
pub use migrate::{SCHEMA_VERSION, set_schema_version_for_tests};

/// A table of the store: byte keys to byte values.
pub type Table = TableDefinition<'static, &'static [u8], &'static [u8]>;

/// Schema version and other facts about the store itself.
pub const META: Table = Table::new("meta");
/// Named counters handing out ids (`org`, `person`, …).
pub const SEQUENCES: Table = Table::new("sequences");
/// Organisations by id.
pub const ORGS: Table = Table::new("orgs");
/// Organisation id by slug.
pub const ORG_SLUGS: Table = Table::new("org_slugs");
/// People by id.
pub const PEOPLE: Table = Table::new("people");
/// Person id by lower-cased email.
pub const PEOPLE_BY_EMAIL: Table = Table::new("people_by_email");
/// Memberships by (org id, person id).
pub const MEMBERSHIPS: Table = Table::new("memberships");
/// The same memberships by (person id, org id), to list a person's organisations.
pub const MEMBERSHIPS_BY_PERSON: Table = Table::new("memberships_by_person");
/// Audit records, appended through the batch writer, by (org id, time, sequence).
pub const AUDIT: Table = Table::new("audit");
/// Current document records by (org id, path).
pub const KB_DOCS: Table = Table::new("kb_docs");
/// Document versions by (org id, path, NUL, version).
pub const KB_VERSIONS: Table = Table::new("kb_versions");
/// Document content by BLAKE3 hash of the raw bytes, shared by every version with that
/// content: where in [`KB_CONTENT_DATA`] it is (content written before stop 46 is kept here
/// itself, compressed, as [`blob`] says).
pub const KB_CONTENT: Table = Table::new("kb_content");
/// Document content in the order it was written, under a number counting up, compressed and
/// in parts ([`blob`]): a large import appends to the table's last page instead of writing
/// into pages all over it, so its pages end full without the file being rewritten.
pub const KB_CONTENT_DATA: Table = Table::new("kb_content_data");
/// Text extracted from binary content (PDF, Office, …) by the content's BLAKE3 hash, stored
/// compressed like content (`kb::blob`).
pub const KB_TEXT: Table = Table::new("kb_text");
/// How the extraction of binary content went, by the content's BLAKE3 hash: text found (its
/// size) or the reason it failed. Content without a record here was not tried yet.
pub const KB_EXTRACTION: Table = Table::new("kb_extraction");
/// Deleted documents, each whole (record and versions), by (org id, trash sequence number).
pub const KB_TRASH: Table = Table::new("kb_trash");
/// The change log the search index follows, by sequence number.
pub const KB_CHANGES: Table = Table::new("kb_changes");
/// OAuth clients by client id.
pub const OAUTH_CLIENTS: Table = Table::new("oauth_clients");
/// Authorization codes by SHA-256 of the code.
pub const OAUTH_CODES: Table = Table::new("oauth_codes");
/// Connector grants by id.
pub const OAUTH_GRANTS: Table = Table::new("oauth_grants");
/// Access and refresh tokens by SHA-256 of the token.
pub const OAUTH_TOKENS: Table = Table::new("oauth_tokens");
/// When a grant was last used, by grant id; written through the batch writer, kept apart
/// from the grant so a late stamp can never overwrite a revocation.
pub const OAUTH_LAST_USED: Table = Table::new("oauth_last_used");
/// Personal access tokens by id.
pub const PATS: Table = Table::new("personal_tokens");
/// Personal access token ids by SHA-256 of the token.
pub const PAT_HASHES: Table = Table::new("personal_token_hashes");
/// When a personal access token was last used, by token id (batch writer, like grants).
pub const PAT_LAST_USED: Table = Table::new("personal_token_last_used");
/// Portal sessions by SHA-256 of the session token.
pub const SESSIONS: Table = Table::new("sessions");

/// Feature requests and runs by id (one sequence, `requests::SEQUENCE`).
pub const REQUESTS: Table = Table::new("requests");
/// Runs not yet final and feature requests with an agent job pending, by id: what recovery
/// after a crash looks at.
pub const ACTIVE_RUNS: Table = Table::new("active_runs");
/// What an agent job did (model messages, tool calls, tokens, timings) by request id.
pub const RUN_TRANSCRIPTS: Table = Table::new("run_transcripts");
/// Feature requests of an organisation by (org id, request id); values are `true`.
pub const FEATURE_REQUESTS: Table = Table::new("feature_requests");
/// Apps by (org id, app id), so every lookup is bound to an organisation.
pub const APPS: Table = Table::new("apps");
/// Attachment details by (request id, attachment id).
pub const ATTACHMENTS: Table = Table::new("attachments");
/// Attachment bytes by (request id, attachment id).
pub const ATTACHMENT_CONTENT: Table = Table::new("attachment_content");
/// Agents by id.
pub const AGENTS: Table = Table::new("agents");
/// Projects by id.
pub const PROJECTS: Table = Table::new("projects");
/// Event triggers by UUID bytes.
pub const TRIGGERS: Table = Table::new("triggers");
/// Agents, projects, triggers, connector grants and personal access tokens by (kind,
/// organisation id, their key); values are empty.
/// Derived from those tables (`store::by_org`): checked at every start.
pub const BY_ORG: Table = Table::new("by_org");
/// Per-slot state by (trigger UUID bytes, event key bytes); no key = empty key.
pub const TRIGGER_SLOTS: Table = Table::new("trigger_slots");
/// Runs of a trigger by (trigger UUID bytes, run id).
pub const TRIGGER_RUNS: Table = Table::new("trigger_runs");
/// Signed deliveries already seen by (trigger UUID bytes, delivery id).
pub const TRIGGER_DELIVERIES: Table = Table::new("trigger_deliveries");
/// Result callbacks of trigger runs (`requests::callback`) by run id: the URL, the webhook id
/// and every attempt.
pub const RUN_CALLBACKS: Table = Table::new("run_callbacks");
/// Callbacks waiting to be sent by (due time in Unix milliseconds, run id); values are `true`.
pub const RUN_CALLBACKS_DUE: Table = Table::new("run_callbacks_due");

/// Invitations to an organisation by the SHA-256 of their one-time token.
pub const INVITATIONS: Table = Table::new("invitations");
/// Admin-issued password-reset links by the SHA-256 of their one-time token.
pub const RESET_LINKS: Table = Table::new("reset_links");

/// Organisations and people whose removal has begun and not yet ended, by `o` or `p` and their
/// id: what an interrupted `org delete` or `user delete` (and the next start) finishes.
pub const ERASING: Table = Table::new("erasing");

/// `META` key: whether content may have lost its last reference since the last sweep
/// (`kb::trash::purge_orphaned_content`). Absent counts as due.
pub const CONTENT_SWEEP_DUE: &[u8] = b"content_sweep_due";

/// The tables of bytes rather than records (content, extracted text, attachments): kept as
/// their own formats say, never as records.
pub const BLOB_TABLES: &[Table] = &[KB_CONTENT, KB_CONTENT_DATA, KB_TEXT, ATTACHMENT_CONTENT];

/// The tables of [`blob`]s: written with [`WriteTx::put_blob`], read with [`Read::get_blob`]
/// (compressed, long values in parts).
pub const PARTED_TABLES: &[Table] = &[KB_CONTENT, KB_CONTENT_DATA, KB_TEXT];

/// Every table, in the order backups copy them.
pub const ALL_TABLES: &[Table] = &[
    META,
    SEQUENCES,
    ORGS,
    ORG_SLUGS,
    PEOPLE,
    PEOPLE_BY_EMAIL,
    MEMBERSHIPS,
    MEMBERSHIPS_BY_PERSON,
    INVITATIONS,
    RESET_LINKS,
    AUDIT,
    KB_DOCS,
    KB_VERSIONS,
    KB_CONTENT,
    KB_CONTENT_DATA,
    KB_TEXT,
    KB_EXTRACTION,
    KB_TRASH,
    KB_CHANGES,
    REQUESTS,
    ACTIVE_RUNS,
    RUN_TRANSCRIPTS,
    FEATURE_REQUESTS,
    APPS,
    ATTACHMENTS,
    ATTACHMENT_CONTENT,
    AGENTS,
    PROJECTS,
    TRIGGERS,
    TRIGGER_SLOTS,
    TRIGGER_RUNS,
    TRIGGER_DELIVERIES,
    BY_ORG,
    RUN_CALLBACKS,
    RUN_CALLBACKS_DUE,
    OAUTH_CLIENTS,
    OAUTH_CODES,
    OAUTH_GRANTS,
    OAUTH_TOKENS,
    OAUTH_LAST_USED,
    PATS,
    PAT_HASHES,
    PAT_LAST_USED,
    SESSIONS,
    ERASING,
];

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "kennis.redb";

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the database {path} is in use by another process (is a kennis server running on this data directory?)"
    )]
    Locked { path: PathBuf },
    #[error(
        "the data directory was written by a newer kennis (schema version {found}); this binary knows up to version {known}: upgrade kennis or restore a backup made by this version"
    )]
    NewerSchema { found: u32, known: u32 },
    #[error("database error: {0}")]
    Db(String),
    #[error("stored record in table `{table}` is unreadable: {message}")]
    Corrupt { table: String, message: String },
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("backup refused: {0}")]
    Backup(String),
    #[error("restore refused: {0}")]
    Restore(String),
}

macro_rules! db_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Db(e.to_string())
            }
        }
    )*};
}
db_error_from!(
    redb::Error,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

impl From<redb::DatabaseError> for StoreError {
    fn from(e: redb::DatabaseError) -> Self {
        StoreError::Db(e.to_string())
    }
}

/// The open database. Cheap to clone.
///
/// Transactions run under the read side of a lock whose write side only [`Store::compact`]
/// takes (redb compacts a file only while no transaction is open).
#[derive(Clone)]
pub struct Store {
    db: Arc<RwLock<Database>>,
    path: PathBuf,
    watches: Arc<RwLock<Vec<Watch>>>,
}

/// How many committed write transactions changed any of a set of tables ([`Store::watch`]).
/// What was read from those tables after the count was taken is still what they say for as
/// long as the count stays where it was: a cache tags what it keeps with the count taken
/// *before* its read, and the count moves only *after* a commit, so a write the read missed
/// always leaves the tag behind.
#[derive(Clone, Debug)]
pub struct ChangeCount(Arc<AtomicU64>);

impl ChangeCount {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct Watch {
    tables: Vec<String>,
    count: ChangeCount,
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Compaction {
    pub bytes_before: u64,
    pub bytes_after: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (or creates) `<data_dir>/kennis.redb` and brings its schema up to date.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        ensure_private_dir(data_dir)?;
        let path = data_dir.join(DB_FILE);
        Self::open_file(&path)
    }

    /// Opens (or creates) a database file and brings its schema up to date.
    pub fn open_file(path: &Path) -> Result<Store, StoreError> {
        let db = match Database::create(path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::Locked { path: path.into() });
            }
            Err(redb::DatabaseError::Storage(redb::StorageError::Io(e)))
                if e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                return Err(StoreError::Locked { path: path.into() });
            }
            Err(e) => return Err(e.into()),
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
                |source| StoreError::Io {
                    path: path.to_owned(),
                    source,
                },
            )?;
        }
        let store = Store {
            db: Arc::new(RwLock::new(db)),
            path: path.to_owned(),
            watches: Arc::default(),
        };
        let migrated = migrate::migrate(&store)?;
        by_org::check(&store)?;
        if migrated {
            // What the old schema kept and the new one does not is free space now.
            let c = store.compact(Duration::from_secs(1))?;
            tracing::info!(
                bytes_before = c.bytes_before,
                bytes_after = c.bytes_after,
                "compacted the store after migrating it"
            );
        }
        Ok(store)
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one read transaction (a consistent snapshot).
    pub fn read<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&ReadTx) -> Result<T, E>,
    ) -> Result<T, E> {
        let db = self.db();
        let txn = db.begin_read().map_err(StoreError::from)?;
        f(&ReadTx {
            txn,
            opened: RefCell::default(),
        })
    }

    /// Deletes `keys` of `table` in write transactions of at most `chunk` keys each, so a
    /// large purge never holds the single writer for long.
    pub fn delete_in_chunks(
        &self,
        table: Table,
        keys: &[Vec<u8>],
        chunk: usize,
    ) -> Result<(), StoreError> {
        for part in keys.chunks(chunk.max(1)) {
            self.write(|tx| {
                for k in part {
                    tx.delete(table, k)?;
                }
                Ok::<_, StoreError>(())
            })?;
        }
        Ok(())
    }

    /// Runs `f` in one write transaction; commits (durably) when it returns `Ok`, and discards
    /// every change when it returns `Err`, so a refused request leaves stored data untouched.
    pub fn write<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut WriteTx) -> Result<T, E>,
    ) -> Result<T, E> {
        let db = self.db();
        let txn = db.begin_write().map_err(StoreError::from)?;
        let (out, touched) = {
            let mut tx = WriteTx::new(&txn);
            let out = f(&mut tx)?;
            // Its tables close here, before the commit.
            (out, tx.touched)
        };
        let committed = txn.commit();
        // Also after a failed commit, whose outcome on disk may be unknown: a cache reads
        // again rather than trust what it kept.
        self.committed(&touched);
        committed.map_err(StoreError::from)?;
        Ok(out)
    }

    /// A count of the committed write transactions that change any of `tables` from now on.
    pub fn watch(&self, tables: &[Table]) -> ChangeCount {
        let count = ChangeCount(Arc::default());
        self.watches
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Watch {
                tables: tables.iter().map(|t| t.name().to_owned()).collect(),
                count: count.clone(),
            });
        count
    }

    /// Moves the count of every watch over one of `touched`, after their commit.
    fn committed(&self, touched: &[Table]) {
        if touched.is_empty() {
            return;
        }
        let watches = self.watches.read().unwrap_or_else(PoisonError::into_inner);
        for w in watches.iter() {
            if w.tables
                .iter()
                .any(|name| touched.iter().any(|t| t.name() == name))
            {
                w.count.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// The database, for the length of one transaction. A panic elsewhere leaves nothing of
    /// the lock's to repair (it only keeps compaction apart), so poisoning is ignored.
    pub(crate) fn db(&self) -> RwLockReadGuard<'_, Database> {
        self.db.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Size of the database file in bytes.
    pub fn file_size(&self) -> Result<u64, StoreError> {
        std::fs::metadata(&self.path)
            .map(|m| m.len())
            .map_err(|source| StoreError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Writes the store anew: every table is copied in key order into a fresh file (its pages
    /// fill), which then takes the old file's place. Nothing that was deleted survives in the
    /// data directory, not even in free pages (redb's own compaction moves pages but leaves
    /// freed ones as they were). Waits for open transactions to end without blocking new ones
    /// (up to `wait`), then holds every other transaction back while it works: about a second
    /// for 100 MB of documents.
    pub fn compact(&self, wait: Duration) -> Result<Compaction, StoreError> {
        let bytes_before = self.file_size()?;
        let deadline = Instant::now() + wait;
        let mut db = loop {
            match self.db.try_write() {
                Ok(db) => break db,
                Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    return Err(StoreError::Db(
                        "the database stayed busy; compaction was not started (try again when it is quieter)".into(),
                    ));
                }
            }
        };
        let fresh = rewrite::rewrite(&db, &self.path)?;
        // The old file is gone from the directory already; dropping it closes it.
        *db = fresh;
        drop(db);
        // The same records in a new file; caches need not know, but nothing is lost if they
        // read them again.
        self.committed(ALL_TABLES);
        Ok(Compaction {
            bytes_before,
            bytes_after: self.file_size()?,
        })
    }

    /// Gives back the file's unused tail (redb's own compaction): redb doubles the file as it
    /// grows, so a store written in one go — a [`compact`](Self::compact)ed one — may end in
    /// hundreds of megabytes the disk does not hold (a sparse hole) but the file's length
    /// counts. About a second per gigabyte; `kennis compact` and a large import do it.
    pub fn trim(&self) -> Result<Compaction, StoreError> {
        let bytes_before = self.file_size()?;
        let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
        db.compact()
            .map_err(|e| StoreError::Db(format!("the database file was not trimmed: {e}")))?;
        drop(db);
        Ok(Compaction {
            bytes_before,
            bytes_after: self.file_size()?,
        })
    }
}

/// Creates the directory if needed and restricts it to the owner: it holds secrets.
pub fn ensure_private_dir(dir: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: dir.to_owned(),
        source,
    };
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir).map_err(io)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                dir = %dir.display(),
                mode = format!("{mode:o}"),
                "the data directory was open to other users; it is now 0700 and its files 0600 (check who could read it)"
            );
        }
        make_private(dir)?;
    }
    Ok(())
}

/// Makes a directory tree private to this user: directories 0700, files 0600, whatever they
/// were before (symbolic links are left alone, and not followed).
#[cfg(unix)]
pub fn make_private(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| StoreError::Io { path, source }
    };
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).map_err(io(&d))?;
        for entry in std::fs::read_dir(&d).map_err(io(&d))? {
            let path = entry.map_err(io(&d))?.path();
            let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
                let mode = meta.permissions().mode() & 0o700 | 0o600;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                    .map_err(io(&path))?;
            }
        }
    }
    Ok(())
}

fn decode<R: DeserializeOwned>(table: &Table, bytes: &[u8]) -> Result<R, StoreError> {
    record::decode(table, bytes)
}

fn encode<R: Serialize>(record: &R) -> Vec<u8> {
    record::encode(record)
}

fn get_in<R: DeserializeOwned>(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    def: &Table,
    key: &[u8],
) -> Result<Option<R>, StoreError> {
    match t.get(key)? {
        Some(v) => Ok(Some(decode(def, v.value())?)),
        None => Ok(None),
    }
}

fn get_memo_in<R: DeserializeOwned + Clone>(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    def: &Table,
    key: &[u8],
    memo: &memo::Memo<R>,
) -> Result<Option<R>, StoreError> {
    match t.get(key)? {
        Some(v) => Ok(Some(memo.decode(def, key, v.value())?)),
        None => Ok(None),
    }
}

fn get_raw_in(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    key: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(t.get(key)?.map(|v| v.value().to_vec()))
}

fn scan_keys_in(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    prefix: &[u8],
    limit: usize,
) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut out = Vec::new();
    for entry in t.range::<&[u8]>(prefix..)? {
        let (k, _) = entry?;
        if !k.value().starts_with(prefix) || out.len() >= limit {
            break;
        }
        out.push(k.value().to_vec());
    }
    Ok(out)
}

/// Records with keys in `[from, ..)` up to `limit`, in key order.
fn range_in<R: DeserializeOwned>(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    def: &Table,
    from: &[u8],
    limit: usize,
) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
    let mut out = Vec::new();
    for entry in t.range::<&[u8]>(from..)? {
        if out.len() >= limit {
            break;
        }
        let (k, v) = entry?;
        out.push((k.value().to_vec(), decode(def, v.value())?));
    }
    Ok(out)
}

/// Records whose key starts with `prefix`, from key `from` on, in key order.
fn scan_in<R: DeserializeOwned>(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    def: &Table,
    prefix: &[u8],
    from: &[u8],
) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
    let mut out = Vec::new();
    for entry in t.range::<&[u8]>(from..)? {
        let (k, v) = entry?;
        if !k.value().starts_with(prefix) {
            break;
        }
        out.push((k.value().to_vec(), decode(def, v.value())?));
    }
    Ok(out)
}

mod sealed {
    /// A table opened in a write transaction.
    pub type WriteTable<'t> = redb::Table<'t, &'static [u8], &'static [u8]>;
    /// A table opened in a read transaction.
    pub type ReadTable = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

    /// The one primitive each transaction kind implements; keeps [`super::Read`] closed: runs
    /// `read` on the table if this is a read transaction, `write` if it is a write transaction
    /// (the same code, see `with_table!`, on redb's two table types).
    pub trait Open {
        fn with<T>(
            &self,
            table: super::Table,
            read: impl FnOnce(&ReadTable) -> Result<T, super::StoreError>,
            write: impl FnOnce(&WriteTable<'_>) -> Result<T, super::StoreError>,
        ) -> Result<T, super::StoreError>;
    }
}

/// Runs `$body` with `$t` bound to `$table` opened in transaction `$tx`, whichever kind it is.
macro_rules! with_table {
    ($tx:expr, $table:expr, $t:ident => $body:expr) => {
        sealed::Open::with($tx, $table, |$t| $body, |$t| $body)
    };
}

/// What both transaction kinds can read. Domain helpers take `tx: &impl Read`, so one helper
/// serves a read transaction and a write transaction alike (a write reuses the read helpers
/// instead of reading tables raw). The methods are implemented once, here; [`ReadTx`] and
/// [`WriteTx`] also offer them directly, so callers need not import the trait.
pub trait Read: sealed::Open {
    fn get<R: DeserializeOwned>(&self, table: Table, key: &[u8]) -> Result<Option<R>, StoreError> {
        with_table!(self, table, t => get_in(t, &table, key))
    }

    /// [`get`](Read::get) for a record read again and again: decoded once while its bytes
    /// stay the same ([`memo`]).
    fn get_memo<R: DeserializeOwned + Clone>(
        &self,
        table: Table,
        key: &[u8],
        memo: &memo::Memo<R>,
    ) -> Result<Option<R>, StoreError> {
        with_table!(self, table, t => get_memo_in(t, &table, key, memo))
    }

    /// Every record whose key starts with `prefix`, in key order.
    fn scan<R: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &[u8],
    ) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
        with_table!(self, table, t => scan_in(t, &table, prefix, prefix))
    }

    /// Records whose key starts with `prefix` and is at least `from` (which should start with
    /// `prefix`), in key order: e.g. one organisation's records since a time.
    fn scan_from<R: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &[u8],
        from: &[u8],
    ) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
        with_table!(self, table, t => scan_in(t, &table, prefix, from))
    }

    /// Up to `limit` records from key `from` on.
    fn range<R: DeserializeOwned>(
        &self,
        table: Table,
        from: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
        with_table!(self, table, t => range_in(t, &table, from, limit))
    }

    /// Raw bytes stored under `key` (content tables).
    fn get_raw(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        with_table!(self, table, t => get_raw_in(t, key))
    }

    /// The bytes kept under `key` in a table of [`blob`]s (content, extracted text), as
    /// [`WriteTx::put_blob`] was given them.
    fn get_blob(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let at = match with_table!(self, table, t => blob::read_in(t, &table, key))? {
            None => return Ok(None),
            Some(blob::Held::Bytes(bytes)) => return Ok(Some(bytes)),
            Some(blob::Held::At(at)) => at,
        };
        // Kept elsewhere: in the table of rows, where the location says.
        let rows = blob::rows_table(&table).ok_or_else(|| blob::misplaced(&table))?;
        match with_table!(self, rows, t => blob::read_in(t, &rows, &at))? {
            Some(blob::Held::Bytes(bytes)) => Ok(Some(bytes)),
            _ => Err(blob::misplaced(&rows)),
        }
    }

    /// Up to `limit` keys starting with `prefix`.
    fn scan_keys(
        &self,
        table: Table,
        prefix: &[u8],
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        with_table!(self, table, t => scan_keys_in(t, prefix, limit))
    }

    /// How many records the table holds.
    fn count(&self, table: Table) -> Result<u64, StoreError> {
        with_table!(self, table, t => Ok(t.len()?))
    }

    /// The table's greatest key.
    fn last_key(&self, table: Table) -> Result<Option<Vec<u8>>, StoreError> {
        with_table!(self, table, t => Ok(t.last()?.map(|(k, _)| k.value().to_vec())))
    }
}

/// The [`Read`] methods as inherent methods of a transaction type, forwarding to the trait's
/// single implementation, so call sites need not import [`Read`].
macro_rules! inherent_reads {
    ($ty:ty) => {
        impl $ty {
            pub fn get<R: DeserializeOwned>(
                &self,
                table: Table,
                key: &[u8],
            ) -> Result<Option<R>, StoreError> {
                Read::get(self, table, key)
            }

            /// Every record whose key starts with `prefix`, in key order.
            pub fn scan<R: DeserializeOwned>(
                &self,
                table: Table,
                prefix: &[u8],
            ) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
                Read::scan(self, table, prefix)
            }

            /// Records whose key starts with `prefix` and is at least `from`, in key order.
            pub fn scan_from<R: DeserializeOwned>(
                &self,
                table: Table,
                prefix: &[u8],
                from: &[u8],
            ) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
                Read::scan_from(self, table, prefix, from)
            }

            /// Up to `limit` records from key `from` on.
            pub fn range<R: DeserializeOwned>(
                &self,
                table: Table,
                from: &[u8],
                limit: usize,
            ) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
                Read::range(self, table, from, limit)
            }

            /// Raw bytes stored under `key` (content tables).
            pub fn get_raw(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
                Read::get_raw(self, table, key)
            }

            /// The bytes kept under `key` in a table of blobs (content, extracted text).
            pub fn get_blob(
                &self,
                table: Table,
                key: &[u8],
            ) -> Result<Option<Vec<u8>>, StoreError> {
                Read::get_blob(self, table, key)
            }

            /// Up to `limit` keys starting with `prefix`.
            pub fn scan_keys(
                &self,
                table: Table,
                prefix: &[u8],
                limit: usize,
            ) -> Result<Vec<Vec<u8>>, StoreError> {
                Read::scan_keys(self, table, prefix, limit)
            }

            /// How many records the table holds.
            pub fn count(&self, table: Table) -> Result<u64, StoreError> {
                Read::count(self, table)
            }

            /// The table's greatest key.
            pub fn last_key(&self, table: Table) -> Result<Option<Vec<u8>>, StoreError> {
                Read::last_key(self, table)
            }
        }
    };
}

/// A read transaction.
pub struct ReadTx {
    txn: redb::ReadTransaction,
    /// The tables opened so far, by name: opening one looks it up in the database's table of
    /// tables, which costs more than a read (a search reads one table per candidate).
    opened: RefCell<Vec<(Box<str>, Rc<sealed::ReadTable>)>>,
}

impl sealed::Open for ReadTx {
    fn with<T>(
        &self,
        table: Table,
        read: impl FnOnce(&sealed::ReadTable) -> Result<T, StoreError>,
        _: impl FnOnce(&sealed::WriteTable<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let t = kept(&self.opened, table.name(), || {
            Ok(Rc::new(self.txn.open_table(table)?))
        })?;
        read(&t)
    }
}

/// The table called `name` among those a transaction has `opened`, or else `open`'s, kept
/// there for the transaction's next use.
fn kept<T: Clone>(
    opened: &RefCell<Vec<(Box<str>, T)>>,
    name: &str,
    open: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    if let Some((_, t)) = opened.borrow().iter().find(|(n, _)| &**n == name) {
        return Ok(t.clone());
    }
    let t = open()?;
    opened.borrow_mut().push((name.into(), t.clone()));
    Ok(t)
}

impl Read for ReadTx {}
inherent_reads!(ReadTx);

/// A write transaction; it reads what it has written so far. Its tables stay open until it
/// ends: opening one looks it up in the database's table of tables and closing it writes its
/// root back there, which together cost more than an insert (a group commit writes the same
/// few tables hundreds of times).
pub struct WriteTx<'t> {
    txn: &'t redb::WriteTransaction,
    opened: RefCell<Vec<(Box<str>, Shared<'t>)>>,
    /// The tables it changed, for [`Store::watch`].
    touched: Vec<Table>,
}

/// A table kept open by a [`WriteTx`], lent to one operation at a time.
type Shared<'t> = Rc<RefCell<sealed::WriteTable<'t>>>;

impl sealed::Open for WriteTx<'_> {
    fn with<T>(
        &self,
        table: Table,
        _: impl FnOnce(&sealed::ReadTable) -> Result<T, StoreError>,
        write: impl FnOnce(&sealed::WriteTable<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let t = self.table(table)?;
        let t = t.try_borrow().map_err(|_| in_use(&table))?;
        write(&t)
    }
}

impl Read for WriteTx<'_> {}
inherent_reads!(WriteTx<'_>);

/// A table asked for while the same transaction is changing it: a mistake in the store's own
/// code, reported rather than a panic.
fn in_use(table: &Table) -> StoreError {
    StoreError::Db(format!("table {} is already in use", table.name()))
}

/// `table`, kept open by a [`WriteTx`], lent for one change.
fn lend<'a, 't>(
    t: &'a Shared<'t>,
    table: &Table,
) -> Result<std::cell::RefMut<'a, sealed::WriteTable<'t>>, StoreError> {
    t.try_borrow_mut().map_err(|_| in_use(table))
}

impl<'t> WriteTx<'t> {
    fn new(txn: &'t redb::WriteTransaction) -> WriteTx<'t> {
        WriteTx {
            txn,
            opened: RefCell::new(Vec::new()),
            touched: Vec::new(),
        }
    }

    /// `table`, opened once per transaction.
    fn table(&self, table: Table) -> Result<Shared<'t>, StoreError> {
        kept(&self.opened, table.name(), || {
            Ok(Rc::new(RefCell::new(self.txn.open_table(table)?)))
        })
    }

    /// Runs `f` on `table`, opened for writing, after noting it as changed.
    fn change<T>(
        &mut self,
        table: Table,
        f: impl FnOnce(&mut sealed::WriteTable<'t>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.touch(table);
        let t = self.table(table)?;
        f(&mut *lend(&t, &table)?)
    }

    /// Stores raw bytes (content tables).
    pub fn put_raw(&mut self, table: Table, key: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        self.change(table, |t| {
            t.insert(key, bytes)?;
            Ok(())
        })
    }

    fn touch(&mut self, table: Table) {
        if !self.touched.iter().any(|t| t.name() == table.name()) {
            self.touched.push(table);
        }
    }

    /// Keeps `bytes` under `key` in a table of [`blob`]s: compressed when that saves space, in
    /// parts when long, in place of whatever was there.
    pub fn put_blob(&mut self, table: Table, key: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        self.put_encoded(table, key, &blob::Encoded::of(bytes))
    }

    /// [`put_blob`](Self::put_blob) with the value in its stored form already.
    pub fn put_encoded(
        &mut self,
        table: Table,
        key: &[u8],
        value: &blob::Encoded,
    ) -> Result<(), StoreError> {
        self.change_blobs(table, |t, rows| blob::write(t, rows, key, value))
    }

    /// Removes a value [`put_blob`](Self::put_blob) kept, with its parts; whether there was one.
    pub fn delete_blob(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        self.change_blobs(table, |t, rows| blob::remove(t, rows, key))
    }

    /// Runs `f` on a table of blobs opened for writing, and its table of rows if it has one.
    fn change_blobs<T>(
        &mut self,
        table: Table,
        f: impl FnOnce(
            &mut blob::BlobTable<'t>,
            Option<&mut blob::BlobTable<'t>>,
        ) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.touch(table);
        let rows = match blob::rows_table(&table) {
            Some(r) => {
                self.touch(r);
                Some((r, self.table(r)?))
            }
            None => None,
        };
        let mut rows = match &rows {
            Some((r, t)) => Some(lend(t, r)?),
            None => None,
        };
        let t = self.table(table)?;
        f(&mut *lend(&t, &table)?, rows.as_deref_mut())
    }

    pub fn put<R: Serialize>(
        &mut self,
        table: Table,
        key: &[u8],
        record: &R,
    ) -> Result<(), StoreError> {
        let value = encode(record);
        self.change(table, |t| {
            t.insert(key, value.as_slice())?;
            Ok(())
        })
    }

    pub fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        self.change(table, |t| Ok(t.remove(key)?.is_some()))
    }

    /// The next value of the named counter, starting at 1.
    pub fn next_id(&mut self, sequence: &str) -> Result<u64, StoreError> {
        let t = self.table(SEQUENCES)?;
        next_in(&mut *lend(&t, &SEQUENCES)?, sequence)
    }
}

/// The next value of the named counter in the table of sequences.
fn next_in(t: &mut sealed::WriteTable<'_>, sequence: &str) -> Result<u64, StoreError> {
    let current = match t.get(sequence.as_bytes())? {
        Some(v) => decode::<u64>(&SEQUENCES, v.value())?,
        None => 0,
    };
    let next = current + 1;
    t.insert(sequence.as_bytes(), encode(&next).as_slice())?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_write_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let r: Result<(), StoreError> = store.write(|tx| {
            tx.put(ORGS, b"x", &"value")?;
            Err(StoreError::Backup("refuse".into()))
        });
        assert!(r.is_err());
        let got: Option<String> = store.read(|tx| tx.get(ORGS, b"x")).unwrap();
        assert_eq!(got, None);
    }

    #[test]
    fn a_write_transaction_reads_its_own_writes_through_the_tables_it_keeps_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let long = vec![b'k'; 3 * 1024 * 1024];
        store
            .write(|tx| {
                // Written, read, scanned, written again and deleted in one transaction: every
                // operation sees the ones before it on the one handle the transaction keeps.
                tx.put(ORGS, b"a1", &"first")?;
                assert_eq!(tx.get::<String>(ORGS, b"a1")?.as_deref(), Some("first"));
                tx.put(ORGS, b"a2", &"second")?;
                assert_eq!(tx.scan::<String>(ORGS, b"a")?.len(), 2);
                assert_eq!(tx.count(ORGS)?, 2);
                assert!(tx.delete(ORGS, b"a1")?);
                assert_eq!(tx.get::<String>(ORGS, b"a1")?, None);
                // A long blob lives in two tables (its parts in the rows' table).
                tx.put_blob(KB_CONTENT, b"doc", &long)?;
                assert_eq!(tx.get_blob(KB_CONTENT, b"doc")?.as_deref(), Some(&long[..]));
                assert_eq!(tx.next_id("seq")?, 1);
                assert_eq!(tx.next_id("seq")?, 2);
                Ok::<_, StoreError>(())
            })
            .unwrap();
        store
            .read(|tx| {
                assert_eq!(tx.get::<String>(ORGS, b"a2")?.as_deref(), Some("second"));
                assert_eq!(tx.get_blob(KB_CONTENT, b"doc")?.as_deref(), Some(&long[..]));
                Ok::<_, StoreError>(())
            })
            .unwrap();
        // A refused transaction takes back everything it did through its open tables.
        let r: Result<(), StoreError> = store.write(|tx| {
            tx.put(ORGS, b"a3", &"third")?;
            assert!(tx.delete_blob(KB_CONTENT, b"doc")?);
            tx.next_id("seq")?;
            Err(StoreError::Backup("refuse".into()))
        });
        assert!(r.is_err());
        store
            .read(|tx| {
                assert_eq!(tx.get::<String>(ORGS, b"a3")?, None);
                assert_eq!(tx.get_blob(KB_CONTENT, b"doc")?.as_deref(), Some(&long[..]));
                Ok::<_, StoreError>(())
            })
            .unwrap();
        assert_eq!(store.write(|tx| tx.next_id("seq")).unwrap(), 3);
    }

    #[test]
    fn sequences_count_from_one_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let ids: Vec<u64> = (0..3)
                .map(|_| store.write(|tx| tx.next_id("org")).unwrap())
                .collect();
            assert_eq!(ids, vec![1, 2, 3]);
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.write(|tx| tx.next_id("org")).unwrap(), 4);
    }

    #[test]
    fn second_open_of_the_same_file_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let _first = Store::open(dir.path()).unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    }

    #[test]
    fn compaction_leaves_no_deleted_bytes_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store
            .write(|tx| {
                for i in 0u64..2000 {
                    tx.put_raw(KB_CONTENT, &key::id(i), &[b'x'; 300])?;
                }
                tx.put_raw(KB_DOCS, b"k", b"QQZ-deleted-marker")?;
                tx.put_raw(KB_DOCS, b"l", b"kept-marker")
            })
            .unwrap();
        store.write(|tx| tx.delete(KB_DOCS, b"k")).unwrap();
        let c = store.compact(Duration::from_secs(1)).unwrap();
        let bytes = std::fs::read(store.path()).unwrap();
        let holds = |m: &[u8]| bytes.windows(m.len()).any(|w| w == m);
        assert!(!holds(b"QQZ-deleted-marker"));
        assert!(holds(b"kept-marker"));
        assert!(c.bytes_after <= c.bytes_before);
        // The store goes on working on the new file, and it survives a reopen.
        store
            .write(|tx| tx.put_raw(KB_DOCS, b"m", b"after"))
            .unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.read(|tx| tx.count(KB_CONTENT)).unwrap(), 2000);
        assert_eq!(
            store
                .read(|tx| tx.get_raw(KB_DOCS, b"m"))
                .unwrap()
                .as_deref(),
            Some(&b"after"[..])
        );
        assert!(!dir.path().join("kennis.redb.compact").exists());
    }

    #[test]
    fn compaction_keeps_records_of_either_dictionary_and_compresses_plain_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let doc = serde_json::json!({
            "org_id": 3, "path": "map/notitie.md", "version": 2, "size": 1200,
            "hash": "9f2c", "created_at": "2026-11-30T13:04:00.123456789Z", "created_by": null,
        });
        let v1 = record::written_with_v1(&doc);
        let plain = serde_json::to_vec(&doc).unwrap();
        store
            .write(|tx| {
                tx.put(KB_DOCS, b"v2", &doc)?;
                tx.put_raw(KB_DOCS, b"v1", &v1)?;
                tx.put_raw(KB_DOCS, b"plain", &plain)
            })
            .unwrap();
        let raw = |k: &[u8]| store.read(|tx| tx.get_raw(KB_DOCS, k)).unwrap().unwrap();
        let v2 = raw(b"v2");
        assert_eq!(v2[0], record::COMPACT_V2);
        store.compact(Duration::from_secs(1)).unwrap();
        for k in [&b"v2"[..], b"v1", b"plain"] {
            let back: Option<serde_json::Value> = store.read(|tx| tx.get(KB_DOCS, k)).unwrap();
            assert_eq!(back.as_ref(), Some(&doc), "{k:?}");
        }
        // Compressed records are copied as they are; plain ones are compressed, with the second.
        assert_eq!(raw(b"v2"), v2);
        assert_eq!(raw(b"v1"), v1);
        assert_eq!(raw(b"plain"), v2);
    }

    /// A record of the second dictionary whose frame is one stored (raw) block, which would
    /// compress again: the compaction must copy it, not compress it a second time (it did
    /// for every value not starting with the first dictionary's byte).
    #[test]
    fn compaction_does_not_compress_a_compressed_record_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let json = format!("\"{}\"", "a".repeat(200));
        let len = json.len();
        // zstd's frame format: magic, a single-segment header with a one-byte content size,
        // then one last raw block of the content.
        let mut stored = vec![record::COMPACT_V2, 0x28, 0xb5, 0x2f, 0xfd, 0x20, len as u8];
        stored.extend_from_slice(&(1 | (len as u32) << 3).to_le_bytes()[..3]);
        stored.extend_from_slice(json.as_bytes());
        store
            .write(|tx| tx.put_raw(KB_DOCS, b"raw", &stored))
            .unwrap();
        let read = || -> Option<String> { store.read(|tx| tx.get(KB_DOCS, b"raw")).unwrap() };
        assert_eq!(read(), Some("a".repeat(200)));
        store.compact(Duration::from_secs(1)).unwrap();
        let after = store.read(|tx| tx.get_raw(KB_DOCS, b"raw")).unwrap();
        assert_eq!(after.as_deref(), Some(stored.as_slice()));
        assert_eq!(read(), Some("a".repeat(200)));
    }

    #[test]
    fn scan_stops_at_prefix_end() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store
            .write(|tx| {
                tx.put(MEMBERSHIPS, &key::pair(1, 1), &1)?;
                tx.put(MEMBERSHIPS, &key::pair(1, 2), &2)?;
                tx.put(MEMBERSHIPS, &key::pair(2, 1), &3)
            })
            .unwrap();
        let rows: Vec<(Vec<u8>, u32)> = store.read(|tx| tx.scan(MEMBERSHIPS, &key::id(1))).unwrap();
        assert_eq!(rows.iter().map(|r| r.1).collect::<Vec<_>>(), vec![1, 2]);
    }
}
