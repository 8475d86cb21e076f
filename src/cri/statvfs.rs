//! Capacity and free space of a filesystem through `statvfs(3)`, the way the kubelet gets them
//! through cAdvisor. The CRI ImageFsInfo call reports only what images use; the filesystem's
//! size and free space come from here.
//!
//! Invariants: capacity is `f_blocks * f_frsize` and available is `f_bavail * f_frsize` (space
//! for unprivileged users), both saturating; inodes are `f_files` and `f_ffree` (at most
//! `f_files`); this is the only `unsafe` in the crate, one call. [`device`] names the
//! filesystem a path is on (`st_dev`), so two mountpoints on one filesystem are told apart
//! from two filesystems.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Size and free space of one filesystem, in bytes, and its inodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsSpace {
    pub capacity: u64,
    pub available: u64,
    /// `f_files`: the filesystem's inodes (0 on a filesystem that does not count them).
    pub inodes: u64,
    /// `f_ffree`: free inodes.
    pub inodes_free: u64,
    /// `f_bfree × f_frsize`: free bytes, the blocks reserved for root included (`capacity -
    /// free` is what the filesystem has in use).
    pub free: u64,
    /// `f_frsize`: the fragment size every file's allocation is a multiple of.
    pub block_size: u64,
}

/// statvfs of the filesystem holding `path`.
pub fn fs_space(path: &Path) -> io::Result<FsSpace> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a valid NUL-terminated string and `stat` points to writable memory
    // of the right type; statvfs writes only into it.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled the struct (it was zeroed beforehand anyway).
    let stat = unsafe { stat.assume_init() };
    // The field types are u64 on 64-bit Linux but narrower on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let (blocks, bfree, bavail, frsize, files, ffree) = (
        u64::from(stat.f_blocks),
        u64::from(stat.f_bfree),
        u64::from(stat.f_bavail),
        u64::from(stat.f_frsize),
        u64::from(stat.f_files),
        u64::from(stat.f_ffree),
    );
    Ok(FsSpace {
        capacity: blocks.saturating_mul(frsize),
        available: bavail.saturating_mul(frsize),
        inodes: files,
        inodes_free: ffree.min(files),
        free: bfree.min(blocks).saturating_mul(frsize),
        block_size: frsize,
    })
}

/// The device the filesystem holding `path` is on (`st_dev` of stat(2), following links).
pub fn device(path: &Path) -> io::Result<u64> {
    Ok(std::fs::metadata(path)?.dev())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statvfs_of_a_temp_dir_has_room_and_available_within_capacity() {
        let dir = tempfile::tempdir().expect("a temp dir can be made in tests");
        let space = fs_space(dir.path()).expect("statvfs of an existing dir succeeds");
        assert!(space.capacity > 0);
        assert!(space.available <= space.capacity);
        assert!(space.inodes_free <= space.inodes);
        assert!(space.available <= space.free && space.free <= space.capacity);
        assert!(space.block_size > 0);
    }

    #[test]
    fn two_paths_on_one_filesystem_have_one_device() {
        let dir = tempfile::tempdir().expect("a temp dir can be made in tests");
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).expect("a subdirectory can be made in a temp dir");
        let a = device(dir.path()).expect("stat of an existing dir succeeds");
        assert_eq!(device(&sub).expect("stat of an existing dir succeeds"), a);
        assert!(device(Path::new("/nonexistent/imagekeeper/statvfs")).is_err());
    }

    #[test]
    fn statvfs_of_a_missing_path_is_not_found() {
        let err = fs_space(Path::new("/nonexistent/imagekeeper/statvfs")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
