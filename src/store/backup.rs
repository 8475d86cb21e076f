//! The copy of an older-schema file taken before its upgrade (`<db>.bak-v<N>`), under the
//! read-write open's lock and a pinned read transaction, before anything is written through
//! the handle. A backup never overwrites or removes a file: one already at the name is reused
//! only when it holds a database of the same schema version with the same tables and entries
//! (compared entry by entry, not byte by byte: redb rewrites the header at every read-write
//! open); anything else there is kept and the next name `<db>.bak-v<N>.<k>` is tried, up to
//! [`BACKUP_NAMES`] names, after which the upgrade is refused
//! ([`StoreError::BackupInTheWay`]) and the database left as it is. A new copy is written to
//! an `O_EXCL` temporary file (0600), opened once read-write so redb clears the recovery flag
//! the live handle set in the copied header, synced, hard-linked into place and its directory
//! synced before the upgrade commits.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use redb::{ReadableTable, ReadableTableMetadata, TableHandle};

use super::database::{builder, map_open_error, open_read_only_unchecked, refuse_panics};
use super::file::create_new_temporary;
use super::tables::{
    BACKOFF, EVICTION, EVICTION_PREFIX, IMAGES, JOURNAL, META, NAMES, PINS, PULLS, RUNTIME_LABELS,
    SIGNALS, USES, WARM,
};
use super::{BackupConflict, Store, StoreError};

/// How many backup names (`.bak-vN`, `.bak-vN.1`, ...) an upgrade tries before it refuses.
const BACKUP_NAMES: u32 = 100;

/// Backs up `store`'s file, of schema `version`, before its upgrade; `store` is the
/// read-write handle, whose lock keeps every other process from writing the file meanwhile,
/// and nothing has been written through it yet. A backup never overwrites or removes
/// anything: the names `<path>.bak-v<version>`, then `<path>.bak-v<version>.1`, `.2`, ... are
/// tried in turn; an existing one is reused when it is a regular file holding a database of
/// the same schema version with the same table contents as the file (a retry after an upgrade
/// that failed or crashed after its backup: redb rewrites the header at every read-write open,
/// so the bytes differ though the records do not); anything else there is kept and the next
/// name is tried. Only when every name is taken is the upgrade refused
/// ([`StoreError::BackupInTheWay`]), the database left as it is. A new backup is copied (0600)
/// under a pinned read transaction into a new temporary file made with `O_EXCL`, opened once
/// read-write so redb clears the recovery flag the live handle set in the copied header (the
/// backup opens read-only, like the file it copies), synced, hard-linked into place (which
/// fails if the name exists, a symlink included), and the directory is synced before the
/// upgrade commits.
pub(super) fn backup(store: &Store, version: i64) -> Result<PathBuf, StoreError> {
    let path = store.path.as_path();
    let mut last_detail: Option<BackupConflict> = None;
    let mut first = None;
    for n in 0..BACKUP_NAMES {
        let dest = backup_name(path, version, n);
        first.get_or_insert_with(|| dest.clone());
        match fs::symlink_metadata(&dest) {
            Ok(_) => match reusable_backup(store, version, &dest)? {
                Ok(()) => return Ok(dest),
                Err(detail) => {
                    tracing::warn!(
                        path = %path.display(),
                        backup = %dest.display(),
                        detail = %detail,
                        "Keeping a file at a backup name; trying the next name"
                    );
                    last_detail = Some(detail);
                    continue;
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(&dest)(e)),
        }
        match link_new_backup(store, &dest)? {
            Ok(()) => {}
            // Something appeared at the name meanwhile: keep it, try the next name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                last_detail = Some(BackupConflict::AppearedMeanwhile);
                continue;
            }
            Err(e) => return Err(io_error(&dest)(e)),
        }
        sync_parent_directory(&dest)?;
        tracing::info!(path = %path.display(), backup = %dest.display(), "Backed up the database before its upgrade");
        return Ok(dest);
    }
    Err(StoreError::BackupInTheWay {
        path: path.to_owned(),
        backup: first.unwrap_or_default(),
        detail: BackupConflict::AllNamesTaken {
            tried: BACKUP_NAMES,
            last: Box::new(last_detail.unwrap_or(BackupConflict::AppearedMeanwhile)),
        },
    })
}

/// The `n`th backup name of `path` at schema `version`: `<path>.bak-v<version>`, then
/// `<path>.bak-v<version>.<n>`.
fn backup_name(path: &Path, version: i64, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".bak-v{version}"));
    if n > 0 {
        name.push(format!(".{n}"));
    }
    PathBuf::from(name)
}

/// An I/O error's [`StoreError`], naming `path`.
fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Io { path, source }
}

/// Copies `store`'s file to a new temporary file beside it and hard-links that to `dest`: the
/// copy's errors, then the link's result (`AlreadyExists` when something took the name).
fn link_new_backup(store: &Store, dest: &Path) -> Result<io::Result<()>, StoreError> {
    let path = store.path.as_path();
    let tmp = create_new_temporary(path).map_err(io_error(path))?;
    // The temporary file is removed whatever happens, so its errors name the backup's final
    // path (a full disk there is what the operator must fix), never the temporary name that
    // is gone by the time they are read.
    let linked = copy_and_link(store, &tmp, dest);
    let _ = fs::remove_file(&tmp);
    linked
}

/// [`link_new_backup`]'s copy into `tmp`, the recovery flag's clearing and the sync, then the
/// link to `dest`; every error names `dest`.
fn copy_and_link(store: &Store, tmp: &Path, dest: &Path) -> Result<io::Result<()>, StoreError> {
    let path = store.path.as_path();
    {
        // Nothing writes the file while the copy is read: no write transaction of this
        // handle is begun yet, the lock excludes other processes, and the read transaction
        // pins the committed state besides.
        let _pin = store.begin_read()?;
        let mut from = fs::File::open(path).map_err(io_error(path))?;
        let mut to = fs::OpenOptions::new()
            .write(true)
            .open(tmp)
            .map_err(io_error(dest))?;
        io::copy(&mut from, &mut to).map_err(io_error(dest))?;
    }
    // The live handle's header says "recovery required"; a read-write open of the copy (the
    // temporary file, never a backup) clears it.
    drop(
        builder()
            .create(tmp)
            .map_err(|e| map_open_error(dest, e, false))?,
    );
    fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(io_error(dest))?;
    Ok(fs::hard_link(tmp, dest))
}

/// Syncs the directory holding `dest`, so the new link survives a crash.
fn sync_parent_directory(dest: &Path) -> Result<(), StoreError> {
    if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error(dir))?;
    }
    Ok(())
}

/// Whether the file at `dest` is a backup of `store`'s file at schema `version`: a regular
/// file (not a symlink) that opens read-only as a database of that schema version with the
/// same tables holding the same entries. `Err(detail)` says why not; an I/O error reading the
/// database itself is returned as such.
fn reusable_backup(
    store: &Store,
    version: i64,
    dest: &Path,
) -> Result<Result<(), BackupConflict>, StoreError> {
    let backup = match open_backup_of_schema(dest, version) {
        Ok(backup) => backup,
        Err(detail) => return Ok(Err(detail)),
    };
    let ours = store.begin_read()?;
    let theirs = match backup.begin_read() {
        Ok(txn) => txn,
        Err(e) => return Ok(Err(BackupConflict::ReadFailed(Box::new(e)))),
    };
    let ours_names = table_names(&ours).map_err(|e| store.redb_err(e))?;
    match table_names(&theirs) {
        Ok(n) if n == ours_names => {}
        Ok(found) => {
            return Ok(Err(BackupConflict::OtherTables {
                found,
                want: ours_names,
            }));
        }
        Err(e) => {
            return Ok(Err(BackupConflict::ReadFailed(Box::new(
                backup.redb_err(e),
            ))));
        }
    }
    Ok(same_contents(&backup, &ours, &theirs, &ours_names))
}

/// The file at `dest` opened read-only, when it is a regular file (not a symlink) holding a
/// database of schema `version`.
fn open_backup_of_schema(dest: &Path, version: i64) -> Result<Store, BackupConflict> {
    let meta = fs::symlink_metadata(dest).map_err(BackupConflict::Unreadable)?;
    if !meta.file_type().is_file() {
        return Err(BackupConflict::NotARegularFile);
    }
    let backup = refuse_panics(dest, || open_read_only_unchecked(dest))
        .map_err(|e| BackupConflict::NotADatabase(Box::new(e)))?;
    let found = backup
        .has_meta_table()
        .and_then(|has| match has {
            true => backup.meta(super::meta_keys::SCHEMA_VERSION),
            false => Ok(None),
        })
        .map_err(|e| BackupConflict::ReadFailed(Box::new(e)))?;
    match found {
        Some(v) if v == version => Ok(backup),
        found => Err(BackupConflict::OtherSchema {
            found,
            want: version,
        }),
    }
}

/// The names of the tables `txn` sees, sorted.
fn table_names(txn: &redb::ReadTransaction) -> Result<Vec<String>, redb::StorageError> {
    let mut names: Vec<String> = txn.list_tables()?.map(|t| t.name().to_owned()).collect();
    names.sort();
    Ok(names)
}

/// Whether every table of `names` holds the same entries in `ours` and in `theirs`, the
/// transaction of `backup`; `Err(detail)` names the first that does not, or is unknown.
fn same_contents(
    backup: &Store,
    ours: &redb::ReadTransaction,
    theirs: &redb::ReadTransaction,
    names: &[String],
) -> Result<(), BackupConflict> {
    for name in names {
        let Some(same) = same_named_table(ours, theirs, name) else {
            return Err(BackupConflict::UnknownTable {
                table: name.clone(),
            });
        };
        match same {
            Ok(true) => {}
            Ok(false) => {
                return Err(BackupConflict::OtherContents {
                    table: name.clone(),
                });
            }
            Err(e) => return Err(BackupConflict::ReadFailed(Box::new(backup.redb_err(e)))),
        }
    }
    Ok(())
}

/// [`same_table`] for the store's table named `name`; `None` when the store has no table of
/// that name.
fn same_named_table(
    ours: &redb::ReadTransaction,
    theirs: &redb::ReadTransaction,
    name: &str,
) -> Option<Result<bool, redb::Error>> {
    Some(match name {
        n if n == IMAGES.name() => same_table(ours, theirs, IMAGES),
        n if n == EVICTION.name() => same_table(ours, theirs, EVICTION),
        n if n == EVICTION_PREFIX.name() => same_table(ours, theirs, EVICTION_PREFIX),
        n if n == BACKOFF.name() => same_table(ours, theirs, BACKOFF),
        n if n == META.name() => same_table(ours, theirs, META),
        n if n == NAMES.name() => same_table(ours, theirs, NAMES),
        n if n == JOURNAL.name() => same_table(ours, theirs, JOURNAL),
        n if n == PINS.name() => same_table(ours, theirs, PINS),
        n if n == USES.name() => same_table(ours, theirs, USES),
        n if n == PULLS.name() => same_table(ours, theirs, PULLS),
        n if n == WARM.name() => same_table(ours, theirs, WARM),
        n if n == RUNTIME_LABELS.name() => same_table(ours, theirs, RUNTIME_LABELS),
        n if n == SIGNALS.name() => same_table(ours, theirs, SIGNALS),
        _ => return None,
    })
}

/// Whether table `def` holds the same entries (as bytes) in both transactions.
fn same_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    a: &redb::ReadTransaction,
    b: &redb::ReadTransaction,
    def: redb::TableDefinition<K, V>,
) -> Result<bool, redb::Error> {
    let (a, b) = (a.open_table(def)?, b.open_table(def)?);
    if a.len()? != b.len()? {
        return Ok(false);
    }
    for (x, y) in a.iter()?.zip(b.iter()?) {
        let ((xk, xv), (yk, yv)) = (x?, y?);
        if K::as_bytes(&xk.value()).as_ref() != K::as_bytes(&yk.value()).as_ref()
            || V::as_bytes(&xv.value()).as_ref() != V::as_bytes(&yv.value()).as_ref()
        {
            return Ok(false);
        }
    }
    Ok(true)
}
