//! Work of a cycle that never awaits (matching pins and names, planning a detect, its write
//! transaction) run so that it does not hold an async worker: on a multi-thread runtime the
//! worker's other tasks (the probes' `/healthz`, the signal handler, the admin socket) move to
//! another worker while it runs; on a current-thread runtime (the simulator's, most tests')
//! it runs inline, exactly as before.
//!
//! Invariants: the work runs on the calling thread, to its end, with no await inside, so what
//! it borrows and the order of a cycle's steps are unchanged; nothing here spawns a task a
//! scheduler could interleave (the simulator's runs stay deterministic).

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `work` without holding an async worker: `tokio::task::block_in_place` on a
/// multi-thread runtime, inline elsewhere (a current-thread runtime has no other worker to
/// hand its tasks to, and no runtime at all has none to hold). `block_in_place` rather than
/// `spawn_blocking`: the work borrows the cycle's lists (a decoded ListImages response of
/// 10,000 images is not copied to be moved to another thread).
pub(crate) fn off_the_workers<T>(work: impl FnOnce() -> T) -> T {
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::off_the_workers;

    /// The one worker of a runtime runs a task that blocks in `off_the_workers` until a task
    /// spawned after it has run: it can only run if the worker was handed over. Without the
    /// hand-over the wait ends by its bound (a bound on a hang, not a measured time) and the
    /// test fails.
    #[test]
    fn blocking_work_leaves_the_worker_to_other_tasks() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .expect("a test runtime builds");
        let answered = runtime.block_on(async {
            let (started_tx, started_rx) = tokio::sync::oneshot::channel();
            let (probe_tx, probe_rx) = std::sync::mpsc::channel::<()>();
            let blocked = tokio::spawn(async move {
                let _ = started_tx.send(());
                off_the_workers(|| probe_rx.recv_timeout(std::time::Duration::from_secs(30)))
            });
            started_rx.await.expect("the blocking task started");
            // The probe: spawned while the only worker is inside the blocking work.
            tokio::spawn(async move { probe_tx.send(()) });
            blocked.await.expect("the blocking task ends")
        });
        assert!(answered.is_ok(), "a task spawned meanwhile never ran");
    }

    #[test]
    fn inline_without_a_multi_thread_runtime() {
        assert_eq!(off_the_workers(|| 7), 7);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a test runtime builds");
        assert_eq!(runtime.block_on(async { off_the_workers(|| 8) }), 8);
    }
}
