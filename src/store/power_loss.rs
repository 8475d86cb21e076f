//! A simulated disk that loses power, for tests and fuzzing only (feature `fault-injection`).
//!
//! [`PowerLossDisk`] is a byte image behind redb's `StorageBackend` trait, as
//! [`PowerLossBackend`]. It keeps two things: the image as of the last `sync_data` (what a disk
//! is guaranteed to hold) and every write and length change made since, in order. After a set
//! number of mutating operations (writes, length changes and syncs) it "cuts power": that
//! operation and every one after it fail with an I/O error, and nothing more reaches the
//! image. [`PowerLossDisk::crash_image`] then builds what a real disk could hold after the cut:
//! the synced image plus a seeded random subset of the unsynced changes, each write torn into
//! 512-byte sectors that land or not independently. A new disk made from that image is what the
//! next open of the database sees. Byte-range locks always succeed: a disk is only ever open by
//! one redb handle at a time.

use std::io;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use redb::{BackendError, StorageBackend};

/// The unit in which an unsynced write lands or not on power loss.
pub const SECTOR_BYTES: u64 = 512;

/// One change not yet synced.
#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct State {
    /// The image as of the last sync.
    synced: Vec<u8>,
    /// The image as reads see it: `synced` with every pending change applied.
    current: Vec<u8>,
    /// Changes since the last sync, in order.
    pending: Vec<Pending>,
    /// Mutating operations so far.
    ops: u64,
    /// Power is cut when `ops` reaches this.
    cut_at: Option<u64>,
    cut: bool,
    syncs: u64,
}

impl State {
    /// Counts one mutating operation; fails once power is (or is now) cut.
    fn count_op(&mut self) -> io::Result<()> {
        if self.cut {
            return Err(power_off());
        }
        if self.cut_at.is_some_and(|at| self.ops >= at) {
            self.cut = true;
            return Err(power_off());
        }
        self.ops += 1;
        Ok(())
    }
}

fn power_off() -> io::Error {
    io::Error::other("simulated power loss: the disk is off")
}

/// A simulated disk. Cheap to clone: clones share the same image.
#[derive(Clone, Debug, Default)]
pub struct PowerLossDisk {
    state: Arc<Mutex<State>>,
}

impl PowerLossDisk {
    /// A disk holding `image` (fully synced) that cuts power at the `cut_after`-th mutating
    /// operation (0: the first one fails), or never with `None`.
    pub fn new(image: Vec<u8>, cut_after: Option<u64>) -> PowerLossDisk {
        let state = State {
            current: image.clone(),
            synced: image,
            cut_at: cut_after,
            ..State::default()
        };
        PowerLossDisk {
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a consistent image (every mutation is a single
        // assignment sequence); reading through the poison is fine for a test disk.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The backend to hand to redb.
    pub fn backend(&self) -> PowerLossBackend {
        PowerLossBackend { disk: self.clone() }
    }

    /// Arms the cut: power goes off at the `n`-th mutating operation from now (0: the next).
    pub fn cut_after(&self, n: u64) {
        let mut state = self.lock();
        state.cut_at = Some(state.ops.saturating_add(n));
    }

    /// Whether power has been cut.
    pub fn is_cut(&self) -> bool {
        self.lock().cut
    }

    /// Brings power back after a cut (a transient failure, such as a full disk that was
    /// cleared): later operations reach the image again, which holds whatever the failed ones
    /// left. No cut is armed afterwards.
    pub fn restore_power(&self) {
        let mut state = self.lock();
        state.cut = false;
        state.cut_at = None;
    }

    /// Cuts power now, if it was not already.
    pub fn cut_now(&self) {
        self.lock().cut = true;
    }

    /// Mutating operations that succeeded so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// `sync_data` calls that succeeded so far.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// Changes made since the last sync.
    pub fn unsynced(&self) -> usize {
        self.lock().pending.len()
    }

    /// The image as reads see it now (everything written, synced or not).
    pub fn current_image(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// What the disk could hold after losing power now: the synced image plus a subset of the
    /// unsynced changes chosen by `seed`. Some seeds keep none of them, some all, the rest a
    /// random share of sectors.
    pub fn crash_image(&self, seed: u64) -> Vec<u8> {
        let state = self.lock();
        let mut rng = fastrand::Rng::with_seed(seed);
        // One threshold for this crash: 0 keeps nothing, u64::MAX everything.
        let keep_below = match rng.u64(..) % 4 {
            0 => 0,
            1 => u64::MAX,
            _ => rng.u64(..),
        };
        let mut keep = move || keep_below == u64::MAX || rng.u64(..) < keep_below;
        let mut image = state.synced.clone();
        for change in &state.pending {
            match change {
                Pending::SetLen(len) => {
                    if keep() {
                        image.resize(to_usize(*len), 0);
                    }
                }
                Pending::Write { offset, data } => {
                    let end = offset + data.len() as u64;
                    let mut at = *offset;
                    while at < end {
                        let sector_end = ((at / SECTOR_BYTES) + 1) * SECTOR_BYTES;
                        let chunk_end = sector_end.min(end);
                        if keep() {
                            let (from, to) = (to_usize(at), to_usize(chunk_end));
                            if image.len() < to {
                                image.resize(to, 0);
                            }
                            let src = to_usize(at - offset)..to_usize(chunk_end - offset);
                            image[from..to].copy_from_slice(&data[src]);
                        }
                        at = chunk_end;
                    }
                }
            }
        }
        image
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("a simulated disk is in memory, so its offsets fit in usize")
}

/// redb's view of a [`PowerLossDisk`].
#[derive(Debug)]
pub struct PowerLossBackend {
    disk: PowerLossDisk,
}

impl PowerLossBackend {
    /// The disk this backend reads and writes.
    pub fn disk(&self) -> PowerLossDisk {
        self.disk.clone()
    }
}

fn range_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "read past the end of the disk",
    )
}

impl StorageBackend for PowerLossBackend {
    fn len(&self) -> Result<u64, io::Error> {
        let state = self.disk.lock();
        if state.cut {
            return Err(power_off());
        }
        Ok(state.current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let state = self.disk.lock();
        if state.cut {
            return Err(power_off());
        }
        let start = usize::try_from(offset).map_err(|_| range_error())?;
        let end = start.checked_add(out.len()).ok_or_else(range_error)?;
        let src = state.current.get(start..end).ok_or_else(range_error)?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut state = self.disk.lock();
        state.count_op()?;
        let new_len = usize::try_from(len).map_err(|_| io::Error::other("length too large"))?;
        state.current.resize(new_len, 0);
        state.pending.push(Pending::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let mut state = self.disk.lock();
        state.count_op()?;
        state.synced = state.current.clone();
        state.pending.clear();
        state.syncs += 1;
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut state = self.disk.lock();
        state.count_op()?;
        let start = usize::try_from(offset).map_err(|_| range_error())?;
        let end = start.checked_add(data.len()).ok_or_else(range_error)?;
        if state.current.len() < end {
            state.current.resize(end, 0);
        }
        state.current[start..end].copy_from_slice(data);
        state.pending.push(Pending::Write {
            offset,
            data: data.to_vec(),
        });
        Ok(())
    }

    fn try_lock_range(&self, _start: Bound<u64>, _end: Bound<u64>) -> Result<bool, BackendError> {
        Ok(true)
    }

    fn try_lock_shared_range(
        &self,
        _start: Bound<u64>,
        _end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        Ok(true)
    }

    fn lock_range(&self, _start: Bound<u64>, _end: Bound<u64>) -> Result<(), BackendError> {
        Ok(())
    }

    fn lock_shared_range(&self, _start: Bound<u64>, _end: Bound<u64>) -> Result<(), BackendError> {
        Ok(())
    }

    fn unlock_range(&self, _start: Bound<u64>, _end: Bound<u64>) -> Result<(), BackendError> {
        Ok(())
    }

    fn query_lock_range(&self, _start: Bound<u64>, _end: Bound<u64>) -> Result<bool, BackendError> {
        // Nobody else ever holds a lock on a simulated disk.
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_writes_are_kept_all_none_or_some_by_seed() {
        let disk = PowerLossDisk::new(vec![0; 2048], None);
        let b = disk.backend();
        b.write(0, &[1; 2048]).expect("write");
        b.sync_data().expect("sync");
        b.write(0, &[2; 2048]).expect("write");
        let mut seen_none = false;
        let mut seen_all = false;
        let mut seen_mixed = false;
        for seed in 0..64 {
            let img = disk.crash_image(seed);
            assert_eq!(img.len(), 2048);
            assert!(disk.crash_image(seed) == img, "seed {seed} does not replay");
            let sectors: Vec<u8> = img.chunks(512).map(|c| c[0]).collect();
            for (i, c) in img.chunks(512).enumerate() {
                assert!(
                    c.iter().all(|&b| b == sectors[i]),
                    "a sector is torn inside"
                );
            }
            match (
                sectors.iter().all(|&s| s == 1),
                sectors.iter().all(|&s| s == 2),
            ) {
                (true, _) => seen_none = true,
                (_, true) => seen_all = true,
                _ => seen_mixed = true,
            }
        }
        assert!(seen_none && seen_all && seen_mixed);
    }

    #[test]
    fn power_is_cut_at_the_chosen_operation_and_stays_off() {
        let disk = PowerLossDisk::new(Vec::new(), Some(2));
        let b = disk.backend();
        b.write(0, &[1; 10]).expect("first op");
        b.sync_data().expect("second op");
        let off = |r: Result<(), io::Error>, op: &str| {
            let e = r.expect_err(op);
            assert_eq!(e.kind(), io::ErrorKind::Other, "{op}: {e}");
            assert!(e.to_string().contains("simulated power loss"), "{op}: {e}");
        };
        off(b.write(0, &[2; 10]), "the write at the cut");
        assert!(disk.is_cut());
        off(b.read(0, &mut [0; 1]), "a read after the cut");
        off(b.sync_data(), "a sync after the cut");
        assert_eq!(disk.crash_image(1), vec![1; 10]);
    }
}
