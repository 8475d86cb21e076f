//! Giving the allocator's free memory back to the system after each cycle of the agent's loops.
//!
//! A cycle allocates and frees its working set (a detect's batch, a ListImages answer, a GC's
//! walk); glibc's heap keeps the freed pages resident, so a 2,000-image agent idled on about
//! 2 MB of free heap between cycles (`malloc_stats`: 4.7 MB of heap, 2.7 MB in use; one
//! `malloc_trim(0)` took its resident set from 19.4 to 18.1 MiB). [`release_free_memory`] hands
//! back every free page of the heap (`malloc_trim(0)`: `MADV_DONTNEED` of whole free pages, the
//! top of the heap trimmed), once a cycle has ended, and once a cluster signals' watch has
//! read a whole (re)list (its pages, parsed objects and all, are freed by then).
//!
//! Invariants: it moves no live allocation and frees nothing in use (the allocator's own call,
//! under its own locks); the loops call it between cycles, never within one, the watches after
//! a list, never per change; with an allocator
//! other than glibc's it does nothing.

/// Returns the heap's free pages to the system (glibc `malloc_trim(0)`); a no-op elsewhere.
pub(crate) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only touches chunks the allocator holds free,
    // under its own arena locks; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// The process's resident anonymous memory (`RssAnon`), in KiB.
    fn rss_anon_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("RssAnon in /proc/self/status")
    }

    #[test]
    fn freed_heap_memory_stays_resident_until_the_release_gives_it_back() {
        // 16 MiB in 4 KiB blocks (below the mmap threshold: heap memory), touched, then freed
        // behind a block kept alive after them, so the allocator cannot shrink its heap's
        // top on its own: the freed pages stay resident until they are released. RssAnon is
        // the process's: nextest runs this test in a process of its own.
        let blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8 | 1; 4096]).collect();
        let plug = vec![1u8; 4096];
        std::hint::black_box((&blocks, &plug));
        drop(blocks);
        let before = rss_anon_kib();
        release_free_memory();
        let after = rss_anon_kib();
        assert!(
            before.saturating_sub(after) >= 8 * 1024,
            "RssAnon {before} KiB before the release, {after} KiB after: at least 8 MiB of the \
             16 MiB freed should have gone back"
        );
        assert_eq!(plug[4095], 1, "the block kept alive is intact");
    }
}
