//! The schema upgrades under power loss: the v1 to v6 fixtures on a simulated disk are opened
//! (which upgrades them one transaction per step, 1 → 2 → 3 → 4 → 5 → 6 → 7) with power cut at every
//! disk operation of the upgrade and a few crash images each; after recovery the disk holds
//! the file of one schema version, whole, never a mix, and every record, backoff entry and
//! meta value is intact (and the eviction order with it).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::open::schema_on_disk;
use super::power_loss::PowerLossDisk;
use super::power_loss_harness::Model;
use super::{CommitMode, Store};
use crate::model::UnixNanos;

const V1_TABLES: [&str; 4] = ["backoff", "eviction", "images", "meta"];
const V2_TABLES: [&str; 6] = ["backoff", "eviction", "images", "journal", "meta", "names"];
const V3_TABLES: [&str; 6] = [
    "backoff",
    "eviction_prefix",
    "images",
    "journal",
    "meta",
    "names",
];
const V4_TABLES: [&str; 7] = [
    "backoff",
    "eviction_prefix",
    "images",
    "journal",
    "meta",
    "names",
    "pins",
];

const V5_TABLES: [&str; 10] = [
    "backoff",
    "eviction_prefix",
    "images",
    "journal",
    "meta",
    "names",
    "pins",
    "pulls",
    "uses",
    "warm",
];

const V6_TABLES: [&str; 11] = [
    "backoff",
    "eviction_prefix",
    "images",
    "journal",
    "meta",
    "names",
    "pins",
    "pulls",
    "runtime_labels",
    "uses",
    "warm",
];

const V7_TABLES: [&str; 12] = [
    "backoff",
    "eviction_prefix",
    "images",
    "journal",
    "meta",
    "names",
    "pins",
    "pulls",
    "runtime_labels",
    "signals",
    "uses",
    "warm",
];

fn fixture(version: i64) -> Vec<u8> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("migrations/fixtures/v{version}.redb"));
    std::fs::read(path).expect("the fixture")
}

fn open(disk: &PowerLossDisk) -> Result<Store, super::StoreError> {
    Store::open_with_backend(
        disk.backend(),
        Path::new("<power-loss disk>"),
        UnixNanos(1),
        CommitMode::Durable,
    )
}

/// The model without the schema version, which the upgrade changes.
fn content(model: &Model) -> Model {
    let mut m = model.clone();
    m.meta.remove(super::meta_keys::SCHEMA_VERSION);
    m
}

/// The keys in eviction order.
fn eviction_order(store: &Store) -> Vec<crate::model::RecordKey> {
    store
        .eviction_order()
        .expect("scan")
        .map(|r| r.expect("entry").key)
        .collect()
}

#[test]
fn a_crash_during_the_upgrade_from_v1_leaves_one_whole_schema_never_a_mix() {
    crash_during_upgrade(1, 4);
}

#[test]
fn a_crash_during_the_upgrade_from_v2_leaves_one_whole_schema_never_a_mix() {
    crash_during_upgrade(2, 2);
}

#[test]
fn a_crash_during_the_upgrade_from_v3_leaves_one_whole_schema_never_a_mix() {
    crash_during_upgrade(3, 2);
}

#[test]
fn a_crash_during_the_upgrade_from_v4_leaves_one_whole_schema_never_a_mix() {
    crash_during_upgrade(4, 2);
}

#[test]
fn a_crash_during_the_upgrade_from_v5_leaves_one_whole_schema_never_a_mix() {
    crash_during_upgrade(5, 2);
}

#[test]
fn a_crash_during_the_upgrade_from_v6_leaves_one_whole_schema_never_a_mix() {
    crash_during_upgrade(6, 2);
}

/// The tables each upgrade adds are empty, and the fixture's own kept: pins from v4, the
/// histories from v5, the runtime labels and their adoption from v6 (before it, the adoption
/// is left to the agent); the signals table is empty.
fn check_upgraded_tables(from: i64, want: &Model) {
    if from < 4 {
        assert!(want.pins.is_empty(), "the upgrade adds an empty pins table");
    } else {
        assert_eq!(want.pins.len(), 2, "the v4 fixture's pins are kept");
    }
    if from < 5 {
        assert!(
            want.uses.is_empty() && want.pulls.is_empty() && want.warm.is_empty(),
            "the upgrade to 5 adds empty uses, pulls and warm tables"
        );
    } else {
        assert_eq!(
            (want.uses.len(), want.pulls.len()),
            (1, 1),
            "the v5 fixture's histories are kept"
        );
    }
    if from < 6 {
        assert!(
            want.runtime_labels.is_empty(),
            "the upgrade to 6 adds an empty runtime_labels table"
        );
        assert!(
            !want
                .meta
                .contains_key(super::meta_keys::RUNTIME_LABELS_ADOPTED),
            "the upgrade leaves the adoption to the agent's first reconcile"
        );
    } else {
        assert_eq!(
            want.runtime_labels.len(),
            1,
            "the v6 fixture's label is kept"
        );
        assert!(
            want.meta
                .contains_key(super::meta_keys::RUNTIME_LABELS_ADOPTED),
            "the v6 fixture's adoption is kept"
        );
    }
    assert!(
        want.signals.is_empty(),
        "the upgrade to 7 adds an empty signals table"
    );
}

fn crash_during_upgrade(from: i64, records: usize) {
    // The fixture's content, read through an upgrade without a cut.
    let clean = PowerLossDisk::new(fixture(from), None);
    let before = clean.ops();
    let store = open(&clean).expect("upgrade");
    let want = Model::read(&store).expect("read");
    assert_eq!(want.records.len(), records);
    let want_order = eviction_order(&store);
    let mut by_times: Vec<_> = want.records.iter().collect();
    by_times.sort_by_key(|(k, r)| (r.last_used, r.first_detected, (*k).clone()));
    let sorted: Vec<_> = by_times.into_iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(want_order, sorted);
    assert_eq!(
        store.meta(super::meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(super::CURRENT_SCHEMA_VERSION)
    );
    check_upgraded_tables(from, &want);
    drop(store);
    let upgrade_ops = clean.ops() - before;
    assert!(upgrade_ops > 0);

    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for cut in 0..=upgrade_ops {
        for seed in 0..4u64 {
            let disk = PowerLossDisk::new(fixture(from), Some(cut));
            let outcome = open(&disk);
            disk.cut_now();
            drop(outcome);
            let after = PowerLossDisk::new(disk.crash_image(seed * 7919 + cut), None);
            let (version, tables) = schema_on_disk(&after)
                .unwrap_or_else(|e| panic!("cut {cut} seed {seed}: recovery failed: {e}"));
            let case = format!("cut {cut} seed {seed}: version {version:?}, tables {tables:?}");
            match version {
                Some(1) => assert_eq!(tables, V1_TABLES, "{case}"),
                Some(2) => assert_eq!(tables, V2_TABLES, "{case}"),
                Some(3) => assert_eq!(tables, V3_TABLES, "{case}"),
                Some(4) => assert_eq!(tables, V4_TABLES, "{case}"),
                Some(5) => assert_eq!(tables, V5_TABLES, "{case}"),
                Some(6) => assert_eq!(tables, V6_TABLES, "{case}"),
                Some(7) => assert_eq!(tables, V7_TABLES, "{case}"),
                _ => panic!("{case}"),
            }
            assert!(version >= Some(from), "{case}");
            *seen.entry(version.unwrap_or(0)).or_default() += 1;
            // Either way the content is whole, and an open (upgrading an older one) checks
            // clean and walks the same eviction order.
            let mut store = open(&after).unwrap_or_else(|e| panic!("{case}: reopen: {e}"));
            let found = Model::read(&store).expect("read");
            assert_eq!(content(&found), content(&want), "{case}");
            assert_eq!(eviction_order(&store), want_order, "{case}");
            assert!(store.check().expect("check").is_empty(), "{case}");
        }
    }
    // Every version from the fixture's to the current one occurs: the cuts land before,
    // between and after the upgrade's commits.
    let versions: Vec<i64> = seen.keys().copied().collect();
    assert_eq!(
        versions,
        (from..=super::CURRENT_SCHEMA_VERSION).collect::<Vec<_>>(),
        "{seen:?}"
    );
}

/// A v2 database file in a new directory, and the directory.
fn v2_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db.redb");
    std::fs::write(&db, fixture(2)).expect("write");
    (dir, db)
}

/// `<db><suffix>`.
fn with_suffix(db: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// The schema version and the number of image records of the file at `path`, read-only.
fn version_and_records(path: &Path) -> (Option<i64>, u64) {
    let store = super::database::open_read_only_unchecked(path).expect("opens read-only");
    let version = store.meta(super::meta_keys::SCHEMA_VERSION).expect("meta");
    let txn = store.begin_read().expect("read");
    let records =
        redb::ReadableTableMetadata::len(&txn.open_table(super::tables::IMAGES).expect("images"))
            .expect("len");
    (version, records)
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn an_upgrade_that_failed_after_its_backup_is_retried_and_reuses_the_backup() {
    let (dir, db) = v2_file();
    // The backup as an earlier attempt wrote it (the file's bytes), then that attempt's
    // read-write open, whose write transaction aborted (a failed migration): redb rewrote the
    // header, so the file's bytes no longer equal the backup's, though its records do.
    let bak = with_suffix(&db, ".bak-v2");
    std::fs::write(&bak, fixture(2)).expect("backup");
    {
        let redb = redb::Database::create(&db).expect("read-write open");
        redb.begin_write().expect("begin").abort().expect("abort");
    }
    assert_ne!(std::fs::read(&db).expect("read"), fixture(2));

    let store = Store::open(&db, UnixNanos(1)).expect("the retry upgrades");
    assert_eq!(
        store.meta(super::meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(super::CURRENT_SCHEMA_VERSION)
    );
    assert_eq!(store.len().expect("len"), 2);
    drop(store);
    // The backup is reused as it was, and no other is written.
    assert_eq!(std::fs::read(&bak).expect("backup"), fixture(2));
    assert_eq!(version_and_records(&bak), (Some(2), 2));
    assert_eq!(names_in(dir.path()), ["db.redb", "db.redb.bak-v2"]);
}

#[test]
fn a_different_file_at_the_backup_name_is_kept_and_the_backup_takes_the_next_name() {
    let (dir, db) = v2_file();
    // A v1 file, a v2 file with other records, and a symlink hold the first names.
    let taken = with_suffix(&db, ".bak-v2");
    std::fs::write(&taken, fixture(1)).expect("v1");
    let other = with_suffix(&db, ".bak-v2.1");
    {
        std::fs::write(&other, fixture(2)).expect("v2");
        let store = Store::open(&other, UnixNanos(1)).expect("upgrade the other copy");
        drop(store);
    }
    let other_bytes = std::fs::read(&other).expect("read");
    std::os::unix::fs::symlink(&db, with_suffix(&db, ".bak-v2.2")).expect("symlink");

    let store = Store::open(&db, UnixNanos(1)).expect("upgrade");
    assert_eq!(
        store.meta(super::meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(super::CURRENT_SCHEMA_VERSION)
    );
    drop(store);
    assert_eq!(std::fs::read(&taken).expect("read"), fixture(1));
    assert_eq!(std::fs::read(&other).expect("read"), other_bytes);
    let bak = with_suffix(&db, ".bak-v2.3");
    assert_eq!(version_and_records(&bak), (Some(2), 2));
    assert_eq!(
        std::fs::symlink_metadata(&bak)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    // The new backup is found again on a retry of the same v2 file (here: a second v2 copy
    // beside the same backups) and reused.
    std::fs::write(&db, fixture(2)).expect("v2 again");
    drop(Store::open(&db, UnixNanos(1)).expect("upgrade again"));
    assert_eq!(
        names_in(dir.path()),
        [
            "db.redb",
            "db.redb.bak-v2",
            "db.redb.bak-v2.1",
            "db.redb.bak-v2.1.bak-v2",
            "db.redb.bak-v2.2",
            "db.redb.bak-v2.3"
        ]
    );
}

#[test]
fn an_upgrade_beside_a_running_writer_fails_already_open_and_leaves_no_backup() {
    let (dir, db) = v2_file();
    // An old agent still running: it holds the file read-write.
    let running = redb::Database::create(&db).expect("the old agent's handle");
    match Store::open(&db, UnixNanos(1)) {
        Err(super::StoreError::AlreadyOpen { .. }) => {}
        Err(e) => panic!("expected AlreadyOpen, got {e}"),
        Ok(_) => panic!("expected AlreadyOpen, it opened"),
    }
    assert_eq!(names_in(dir.path()), ["db.redb"]);
    // Once it exits, the upgrade proceeds and backs the file up.
    drop(running);
    let store = Store::open(&db, UnixNanos(1)).expect("upgrade");
    assert_eq!(store.len().expect("len"), 2);
    drop(store);
    assert_eq!(
        version_and_records(&with_suffix(&db, ".bak-v2")),
        (Some(2), 2)
    );
    assert_eq!(names_in(dir.path()), ["db.redb", "db.redb.bak-v2"]);
}

/// Set in the child process of [`an_upgrade_beside_a_running_agent_process_leaves_no_backup`]:
/// the database it holds open read-write, as an older agent still running would.
const WRITER_ENV: &str = "IMAGEKEEPER_UPGRADE_TEST_WRITER_DB";
/// The test whose process becomes the writer child when [`WRITER_ENV`] is set.
const WRITER_TEST: &str =
    "store::upgrade_tests::an_upgrade_beside_a_running_agent_process_leaves_no_backup";

/// A second process (an older agent still running) holds the v2 file read-write; redb's
/// read-only handles do not exclude it, so the read-only identify succeeds beside it. The
/// upgrade fails `AlreadyOpen` and leaves no backup (before the fix: a copy of the live file,
/// which every later open then found in the way). Once that process exits, the upgrade
/// proceeds and backs the file up.
#[test]
fn an_upgrade_beside_a_running_agent_process_leaves_no_backup() {
    use std::io::{BufRead, Read, Write};
    use std::process::{Command, Stdio};
    if let Some(db) = std::env::var_os(WRITER_ENV) {
        // The child: holds the file open read-write (the store's redb settings) until its
        // stdin closes.
        let held = super::database::builder()
            .create(Path::new(&db))
            .expect("the writer's open");
        println!("open");
        std::io::stdout().flush().expect("flush");
        let mut rest = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut rest);
        drop(held);
        return;
    }
    let (dir, db) = v2_file();
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([WRITER_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(WRITER_ENV, &db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the writer");
    let stdin = child.stdin.take().expect("stdin");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    // Blocks until the child has the file open (libtest prints "test <name> ... " before
    // the child's "open"), or fails when it exits first.
    loop {
        match lines.next() {
            Some(Ok(line)) if line.ends_with("open") => break,
            Some(Ok(_)) => {}
            other => panic!("the writer exited before opening the file: {other:?}"),
        }
    }
    match Store::open(&db, UnixNanos(1)) {
        Err(super::StoreError::AlreadyOpen { .. }) => {}
        Err(e) => panic!("expected AlreadyOpen, got {e}"),
        Ok(_) => panic!("expected AlreadyOpen, it opened"),
    }
    assert_eq!(names_in(dir.path()), ["db.redb"]);
    drop(stdin);
    assert!(child.wait().expect("wait").success());
    let store = Store::open(&db, UnixNanos(1)).expect("the upgrade after the writer exited");
    assert_eq!(
        store.meta(super::meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(super::CURRENT_SCHEMA_VERSION)
    );
    assert_eq!(store.len().expect("len"), 2);
    drop(store);
    assert_eq!(
        version_and_records(&with_suffix(&db, ".bak-v2")),
        (Some(2), 2)
    );
    assert_eq!(names_in(dir.path()), ["db.redb", "db.redb.bak-v2"]);
}

const FSIZE_ENV: &str = "IMAGEKEEPER_TEST_FSIZE_DB";
const FSIZE_TEST: &str =
    "store::upgrade_tests::a_backup_that_cannot_be_written_names_the_backup_not_its_temporary_file";

/// A backup whose copy fails (a full disk; here the file size limit, which fails the copy's
/// writes the same way, with the signal ignored) names the backup's final path, which the
/// operator can act on, not the temporary file that is removed before the error is read; and
/// leaves neither behind. Run in a child process of this test binary, as the limit is the
/// whole process's.
#[test]
fn a_backup_that_cannot_be_written_names_the_backup_not_its_temporary_file() {
    use std::process::Command;
    if let Some(db) = std::env::var_os(FSIZE_ENV) {
        let db = std::path::PathBuf::from(db);
        let limit = libc::rlimit {
            rlim_cur: 64 * 1024,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: plain libc calls with valid arguments, in a process that only runs this.
        unsafe {
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        }
        let err = match Store::open(&db, UnixNanos(1)) {
            Err(e) => e,
            Ok(_) => panic!("the upgrade's backup cannot be written under the size limit"),
        };
        let message = err.to_string();
        let backup = with_suffix(&db, ".bak-v2");
        match &err {
            super::StoreError::Io { path, .. } => assert_eq!(path, &backup, "{message}"),
            other => panic!("expected an I/O error naming the backup, got {other:?}"),
        }
        assert!(!message.contains(".creating-"), "{message}");
        println!("checked");
        return;
    }
    let (dir, db) = v2_file();
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([FSIZE_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(FSIZE_ENV, &db)
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("checked"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(names_in(dir.path()), ["db.redb"]);
    assert_eq!(version_and_records(&db), (Some(2), 2));
}

/// A process killed while it copied the upgrade's backup leaves a full-size
/// `<db>.creating-<pid>-<hex>-<n>`; the next open removes it when that pid is dead (or is its
/// own: a container's pid 1 restarted), and removes nothing else: another database's
/// temporary, a name that only looks like one, a directory, a live process's file.
#[test]
fn temporaries_of_dead_processes_are_removed_at_open_and_nothing_else() {
    let (dir, db) = v2_file();
    // Above the kernel's PID_MAX_LIMIT (4194304): no process has this pid.
    let dead = 4_194_305u32;
    let own = std::process::id();
    // A live process other than this one: our parent (the test runner or the shell).
    let live = std::os::unix::process::parent_id();
    let stale = [
        format!("db.redb.creating-{dead}-1f2e-0"),
        format!("db.redb.creating-{own}-abc-3"),
    ];
    let kept = [
        format!("db.redb.creating-{live}-1f2e-0"),
        format!("other.redb.creating-{dead}-1f2e-0"),
        format!("db.redb.creating-{dead}-xyz-0"),
        format!("db.redb.creating-{dead}-1f2e-0-1"),
        format!("db.redb.creating-{dead}-1f2e"),
        "db.redb.creating-".to_owned(),
        format!("db.redb.bak-v2.creating-{dead}-1f2e-0"),
    ];
    for name in stale.iter().chain(&kept) {
        std::fs::write(dir.path().join(name), fixture(2)).expect("write");
    }
    let dir_lookalike = format!("db.redb.creating-{dead}-aa-1");
    std::fs::create_dir(dir.path().join(&dir_lookalike)).expect("mkdir");
    let store = Store::open(&db, UnixNanos(1)).expect("opens and upgrades");
    drop(store);
    let mut want: Vec<String> = kept.to_vec();
    want.extend([
        "db.redb".to_owned(),
        "db.redb.bak-v2".to_owned(),
        dir_lookalike,
    ]);
    want.sort();
    assert_eq!(names_in(dir.path()), want);
}
