//! The service manager's side of the agent: READY=1 once the first detect is done, each
//! reload (SIGHUP's, or the configuration file watch's) framed by RELOADING=1 and READY=1, and
//! the watch itself: the file's (or the warm set directory's files') inode, size and
//! modification time, read off the async workers at the watch period. Runs until aborted at
//! shutdown. Invariant: the watch stats only warm set files of a directory, at most one more
//! than the cap of them (issue 41), however many other names it holds.

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::notify::{
    Notifier, reloading_message as notify_reloading_message, status as notify_status,
};
use super::{Agent, DetectState};

/// Tells the service manager (`NOTIFY_SOCKET`) about readiness and reloads, and reloads the
/// configuration on each SIGHUP (`Agent::reload`, which logs and counts the result). READY=1
/// goes out once the first detect has succeeded (the database is open since the start); a
/// reload after that is framed by RELOADING=1 and READY=1. With `config_watch` (the file and
/// the period), a change of the file's size, modification time or inode reloads it the same
/// way. Runs until aborted at shutdown.
pub async fn serve_service_manager(
    agent: Arc<Agent>,
    notifier: Arc<Notifier>,
    mut hangup: tokio::signal::unix::Signal,
    config_watch: Option<(Vec<std::path::PathBuf>, Duration)>,
) {
    let mut detect = agent.detect_state();
    let mut ready = false;
    let mut watch = match config_watch {
        Some((file, period)) => {
            let seen = file_fingerprint(&file).await;
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            Some((file, seen, ticks))
        }
        None => None,
    };
    loop {
        if !ready {
            let state = detect.borrow_and_update().clone();
            match state {
                DetectState::Done => {
                    ready = true;
                    notifier.say(&format!(
                        "READY=1\n{}",
                        notify_status("Running: first detect done")
                    ));
                }
                DetectState::Failing(e) => {
                    notifier.say(&notify_status(&format!(
                        "First detect failed, retrying: {e}"
                    )));
                }
                // NotYet, and any state added later: nothing to tell yet.
                _ => {}
            }
        }
        tokio::select! {
            changed = detect.changed(), if !ready => {
                if changed.is_err() {
                    return;
                }
            }
            changed = file_changed(&mut watch), if watch.is_some() => {
                if !changed {
                    continue;
                }
                info!("The configuration file or the warm set directory changed: reloading it");
                reload_and_tell(&agent, &notifier, ready).await;
            }
            signal = hangup.recv() => {
                if signal.is_none() {
                    return;
                }
                info!("SIGHUP received: reloading the configuration");
                reload_and_tell(&agent, &notifier, ready).await;
            }
        }
    }
}

/// A file's (inode, size, modification time in seconds and nanoseconds).
type Fingerprint = (u64, u64, i64, i64);

/// The watched paths, their fingerprints when last seen, and the checks' ticks.
type ConfigWatch = (
    Vec<std::path::PathBuf>,
    Vec<Option<Vec<(std::ffi::OsString, Fingerprint)>>>,
    tokio::time::Interval,
);

/// Each path's fingerprint, read off the async workers: a file's (inode, size, modification
/// time), following symlinks (a ConfigMap volume swaps its `..data` link); a directory's, that
/// of each of its warm set files, followed ([`dir_fingerprint`]). `None` when it cannot be
/// read (a missing file's appearing is then a change).
async fn file_fingerprint(
    paths: &[std::path::PathBuf],
) -> Vec<Option<Vec<(std::ffi::OsString, Fingerprint)>>> {
    use std::os::unix::fs::MetadataExt;
    fn of(m: &std::fs::Metadata) -> Fingerprint {
        (m.ino(), m.size(), m.mtime(), m.mtime_nsec())
    }
    let paths = paths.to_vec();
    tokio::task::spawn_blocking(move || {
        paths
            .iter()
            .map(|path| {
                let meta = std::fs::metadata(path).ok()?;
                if !meta.is_dir() {
                    return Some(vec![(std::ffi::OsString::new(), of(&meta))]);
                }
                let names = std::fs::read_dir(path)
                    .ok()?
                    .filter_map(Result::ok)
                    .map(|e| e.file_name());
                Some(dir_fingerprint(names, |name| {
                    std::fs::metadata(path.join(name)).ok().map(|m| of(&m))
                }))
            })
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// A watched directory's fingerprint from its entries' names: `stat`'s of each warm set file
/// (the names the reload reads, `crate::warm::is_warm_file_name`; a ConfigMap's visible
/// names follow its `..data` link, so its swap changes them), at most one more than
/// `MAX_WARM_FILES` of them (past it the reload refuses the directory anyway), sorted. Other
/// names are never stat'ed (issue 41: stat-ing 100,000 junk files every second took 40 % of a
/// CPU).
fn dir_fingerprint(
    names: impl Iterator<Item = std::ffi::OsString>,
    mut stat: impl FnMut(&std::ffi::OsStr) -> Option<Fingerprint>,
) -> Vec<(std::ffi::OsString, Fingerprint)> {
    let mut entries: Vec<(std::ffi::OsString, Fingerprint)> = names
        .filter(|name| crate::warm::is_warm_file_name(name))
        .take(crate::warm::MAX_WARM_FILES + 1)
        .filter_map(|name| {
            let fingerprint = stat(&name)?;
            Some((name, fingerprint))
        })
        .collect();
    entries.sort();
    entries
}

/// Waits for the watch's next tick and says whether the file changed since it was last seen.
async fn file_changed(watch: &mut Option<ConfigWatch>) -> bool {
    let Some((file, seen, ticks)) = watch else {
        return std::future::pending().await;
    };
    ticks.tick().await;
    let now = file_fingerprint(file).await;
    if now == *seen {
        return false;
    }
    *seen = now;
    true
}

/// One reload (SIGHUP's or the file watch's), framed for the service manager once ready.
async fn reload_and_tell(agent: &Agent, notifier: &Notifier, ready: bool) {
    if ready {
        notifier.say(&notify_reloading_message());
    }
    let status = match agent.reload().await {
        Ok(_) => "Running: configuration reloaded".to_owned(),
        Err(e) => format!(
            "Running: reload failed, configuration kept: {}",
            e.one_line()
        ),
    };
    let status = notify_status(&status);
    if ready {
        notifier.say(&format!("READY=1\n{status}"));
    } else {
        notifier.say(&status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 41: a directory of 100,000 junk files beside its warm files was stat-ed whole
    /// every second. Only warm set files are stat-ed, at most one more than the cap of them;
    /// a changed warm file still changes the fingerprint.
    #[test]
    fn the_watch_stats_only_warm_set_files() {
        let mut names: Vec<std::ffi::OsString> =
            (0..10_000).map(|i| format!("junk-{i}").into()).collect();
        names.extend(["..data", "..2026_01_01", ".hidden.yaml"].map(Into::into));
        names.extend(["b.yaml", "a.json", "c.yml"].map(Into::into));
        let stats = std::cell::Cell::new(0);
        let mut size = 1;
        let fingerprint = |names: &[std::ffi::OsString], size: u64| {
            dir_fingerprint(names.iter().cloned(), |name| {
                stats.set(stats.get() + 1);
                Some((name.len() as u64, size, 0, 0))
            })
        };
        let first = fingerprint(&names, size);
        let shown: Vec<&str> = first
            .iter()
            .map(|(n, _)| n.to_str().expect("utf8"))
            .collect();
        assert_eq!(shown, ["a.json", "b.yaml", "c.yml"]);
        size += 1;
        assert_ne!(
            fingerprint(&names, size),
            first,
            "a changed warm file is seen"
        );
        let many: Vec<std::ffi::OsString> =
            (0..1000).map(|i| format!("w{i}.yaml").into()).collect();
        assert_eq!(
            fingerprint(&many, size).len(),
            crate::warm::MAX_WARM_FILES + 1
        );
        assert_eq!(stats.get(), 3 + 3 + crate::warm::MAX_WARM_FILES + 1);
    }
}
