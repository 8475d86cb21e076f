//! A scripted container runtime: images, containers and the image filesystem as a trace (or a
//! test) sets them. Removing an image drops it from the list and adds its size to the
//! available bytes and its scripted inodes to the free inodes. Used by replay and by fast
//! tests of the GC layer. A container filesystem, once set, is reported beside the image
//! filesystem (a split image filesystem); nothing on it changes when an image is removed.
//! Further image filesystems, when set, are reported after the first; an image attributed to
//! one (`image_fs_of`) frees its bytes and inodes there. It is also an agent's runtime
//! ([`AgentRuntime`]), for in-process tests of the whole agent: no socket, so tokio's paused
//! time drives every loop; its event stream answers as containerd 1.6 does (Unimplemented).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::model::{ImageFsStats, ImageList, PullCredentials, RuntimeContainer, RuntimeImage};
use crate::runtime::{AgentRuntime, CriError, ImageRuntime, NoEvents, RpcCode};

/// A scripted container filesystem: (capacity, available, (inodes, free inodes)).
pub type ContainerFs = (u64, u64, Option<(u64, u64)>);

/// The script's images, shared with the lists ListImages hands out
/// ([`ImageRuntime::list_image_list`]): a change while a detect holds one copies them first
/// (`Arc::make_mut`, through `DerefMut`), so a 100k-image replay holds one list, not the
/// script's and a copy.
///
/// RemoveImage while a list is held copies nothing: it hides the removed positions instead
/// (the GC holds its cycle's list through every removal of its walk; a copy of 100k images
/// was 25 MiB of `replay_peak_rss_100k_mib`). The runtime's own calls read past the hidden
/// positions; [`ScriptedRuntime::state`] drops them before anyone else reads, in place once
/// no list shares the images any more. Invariant: `hidden` is sorted, without duplicates,
/// and each position is below the list's length.
#[derive(Clone, Debug, Default)]
pub struct ScriptImages {
    list: Arc<Vec<RuntimeImage>>,
    hidden: Vec<usize>,
}

impl ScriptImages {
    /// The images not removed, with their positions.
    fn live(&self) -> impl Iterator<Item = (usize, &RuntimeImage)> {
        let mut hidden = self.hidden.iter().copied().peekable();
        self.list.iter().enumerate().filter(move |(at, _)| {
            while hidden.next_if(|h| h < at).is_some() {}
            hidden.peek() != Some(at)
        })
    }

    /// Drops the hidden positions (a copy only if a list still shares the images).
    fn compact(&mut self) {
        if self.hidden.is_empty() {
            return;
        }
        let hidden = std::mem::take(&mut self.hidden);
        let mut at = 0;
        Arc::make_mut(&mut self.list).retain(|_| {
            let keep = hidden.binary_search(&at).is_err();
            at += 1;
            keep
        });
    }

    /// Removes the images `hit` picks, hiding them while a list shares the images and
    /// dropping them in place otherwise; returns the sizes removed.
    fn remove(&mut self, hit: impl Fn(&RuntimeImage) -> bool) -> Vec<u64> {
        if Arc::strong_count(&self.list) == 1 {
            self.compact();
            let mut sizes = Vec::new();
            Arc::make_mut(&mut self.list).retain(|i| {
                let gone = hit(i);
                if gone {
                    sizes.push(i.size);
                }
                !gone
            });
            return sizes;
        }
        let found: Vec<(usize, u64)> = self
            .live()
            .filter(|(_, i)| hit(i))
            .map(|(at, i)| (at, i.size))
            .collect();
        self.hidden.extend(found.iter().map(|(at, _)| *at));
        self.hidden.sort_unstable();
        found.into_iter().map(|(_, size)| size).collect()
    }
}

impl PartialEq for ScriptImages {
    fn eq(&self, other: &ScriptImages) -> bool {
        self.live().map(|(_, i)| i).eq(other.live().map(|(_, i)| i))
    }
}

impl std::ops::Deref for ScriptImages {
    type Target = Vec<RuntimeImage>;

    fn deref(&self) -> &Vec<RuntimeImage> {
        debug_assert!(
            self.hidden.is_empty(),
            "read through ScriptedRuntime::state, which drops the hidden images first"
        );
        &self.list
    }
}

impl std::ops::DerefMut for ScriptImages {
    fn deref_mut(&mut self) -> &mut Vec<RuntimeImage> {
        self.compact();
        Arc::make_mut(&mut self.list)
    }
}

impl From<Vec<RuntimeImage>> for ScriptImages {
    fn from(images: Vec<RuntimeImage>) -> ScriptImages {
        ScriptImages {
            list: Arc::new(images),
            hidden: Vec::new(),
        }
    }
}

impl FromIterator<RuntimeImage> for ScriptImages {
    fn from_iter<I: IntoIterator<Item = RuntimeImage>>(images: I) -> ScriptImages {
        ScriptImages::from(images.into_iter().collect::<Vec<_>>())
    }
}

/// The scripted runtime's state.
#[derive(Clone, Debug, Default)]
pub struct ScriptState {
    /// Shared with the lists ListImages hands out ([`ImageRuntime::list_image_list`]): a
    /// change while a detect holds one copies them first (`Arc::make_mut`), so a 100k-image
    /// replay holds one list, not the script's and a copy.
    pub images: ScriptImages,
    /// The containers ListContainers reports.
    pub containers: Vec<RuntimeContainer>,
    /// (capacity, available); `None` reports capacity 0.
    pub fs: Option<(u64, u64)>,
    /// The image filesystem's (inodes, free inodes); `None` reports no inode counts.
    pub fs_inodes: Option<(u64, u64)>,
    /// The inodes each image's removal frees, by image id (0 when not given).
    pub image_inodes: BTreeMap<String, u64>,
    /// A separate container filesystem: (capacity, available, (inodes, free)). `None`: the
    /// containers' writable layers share the image filesystem.
    pub container_fs: Option<ContainerFs>,
    /// Further image filesystems, reported after the first (mountpoints `/scripted-1`,
    /// `/scripted-2`, ...): (capacity, available, (inodes, free)).
    pub other_image_fs: Vec<ContainerFs>,
    /// Which image filesystem an image lives on, by image id: 0 (the default) the first, N
    /// the Nth of `other_image_fs`. Its removal frees its size and inodes there.
    pub image_fs_of: BTreeMap<String, usize>,
    /// The device each image filesystem reports, by filesystem (0 the first, N the Nth of
    /// `other_image_fs`); none when not given. Two with one device are one filesystem.
    pub fs_device: BTreeMap<usize, u64>,
    /// Image ids whose removal fails.
    pub remove_fails: BTreeSet<String>,
    /// Image ids removed, in order.
    pub removed: Vec<String>,
    /// When set, every call fails with this message (a runtime that is down).
    pub down: Option<String>,
    /// When set, only ImageFsInfo fails, with this message (the kubelet's cadvisor failure).
    pub fs_error: Option<String>,
}

/// A runtime driven by a script. Cloning shares the state.
#[derive(Clone, Debug, Default)]
pub struct ScriptedRuntime {
    state: Arc<Mutex<ScriptState>>,
}

impl ScriptedRuntime {
    /// A runtime with no images, no containers and no filesystem (capacity 0).
    pub fn new() -> ScriptedRuntime {
        ScriptedRuntime::default()
    }

    /// The state, to read or change (the images a RemoveImage hid while a list shared them
    /// dropped first: see [`ScriptImages`]).
    pub fn state(&self) -> MutexGuard<'_, ScriptState> {
        let mut state = self.lock();
        state.images.compact();
        state
    }

    /// The state as it is, hidden images included: the runtime's own calls, which read past
    /// them, so a GC's walk copies nothing.
    fn lock(&self) -> MutexGuard<'_, ScriptState> {
        match self.state.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn check_up(&self, method: &'static str) -> Result<(), CriError> {
        match &self.lock().down {
            Some(message) => Err(CriError::Rpc {
                method,
                code: RpcCode::Unavailable,
                message: message.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl ImageRuntime for ScriptedRuntime {
    async fn list_images(&self) -> Result<Vec<RuntimeImage>, CriError> {
        self.check_up("ListImages")?;
        Ok(self.lock().images.live().map(|(_, i)| i.clone()).collect())
    }

    async fn list_image_list(&self) -> Result<ImageList, CriError> {
        self.check_up("ListImages")?;
        Ok(ImageList::from(Arc::clone(&self.state().images.list)))
    }

    async fn image_status(
        &self,
        image: &str,
        _runtime_handler: &str,
    ) -> Result<Option<RuntimeImage>, CriError> {
        self.check_up("ImageStatus")?;
        Ok(self
            .lock()
            .images
            .live()
            .map(|(_, i)| i)
            .find(|i| i.id.as_str() == image || i.repo_tags.iter().any(|t| t == image))
            .cloned())
    }

    async fn pull_image(
        &self,
        image: &str,
        _runtime_handler: &str,
        _credentials: Option<&PullCredentials>,
    ) -> Result<String, CriError> {
        self.check_up("PullImage")?;
        let state = self.lock();
        match state
            .images
            .live()
            .map(|(_, i)| i)
            .find(|i| i.repo_tags.iter().any(|t| t == image))
        {
            Some(found) => Ok(found.id.0.clone()),
            None => Err(CriError::Rpc {
                method: "PullImage",
                code: RpcCode::NotFound,
                message: format!("failed to pull and unpack image {image:?}: not found"),
            }),
        }
    }

    async fn remove_image(&self, image: &str, runtime_handler: &str) -> Result<(), CriError> {
        self.check_up("RemoveImage")?;
        let mut state = self.lock();
        if state.remove_fails.contains(image) {
            return Err(CriError::Rpc {
                method: "RemoveImage",
                code: RpcCode::Unknown,
                message: format!("failed to remove image {image:?}: scripted failure"),
            });
        }
        let sizes = state
            .images
            .remove(|i| i.id.as_str() == image && i.runtime_handler == runtime_handler);
        let freed = sizes
            .iter()
            .fold(0u64, |sum, size| sum.saturating_add(*size));
        let hits = sizes.len() as u64;
        let inodes = state
            .image_inodes
            .get(image)
            .copied()
            .unwrap_or(0)
            .saturating_mul(hits);
        let credit = |(total, free): &mut (u64, u64), n: u64| {
            *free = free.saturating_add(n).min(*total).max(*free);
        };
        match state.image_fs_of.get(image).copied().unwrap_or(0) {
            0 => {
                if let Some(fs_inodes) = state.fs_inodes.as_mut() {
                    credit(fs_inodes, inodes);
                }
                if let Some(fs) = state.fs.as_mut() {
                    credit(fs, freed);
                }
            }
            n => {
                if let Some((capacity, available, fs_inodes)) = state.other_image_fs.get_mut(n - 1)
                {
                    let mut bytes = (*capacity, *available);
                    credit(&mut bytes, freed);
                    *available = bytes.1;
                    if let Some(fs_inodes) = fs_inodes.as_mut() {
                        credit(fs_inodes, inodes);
                    }
                }
            }
        }
        state.removed.push(image.to_owned());
        Ok(())
    }

    async fn image_fs_stats(&self) -> Result<ImageFsStats, CriError> {
        self.check_up("ImageFsInfo")?;
        if let Some(message) = self.lock().fs_error.clone() {
            return Err(CriError::Rpc {
                method: "ImageFsInfo",
                code: RpcCode::Unknown,
                message,
            });
        }
        let state = self.lock();
        let (capacity, available) = state.fs.unwrap_or((0, 0));
        let (inodes, inodes_free) = state.fs_inodes.unwrap_or((0, 0));
        let mut stats = ImageFsStats::new(
            "/scripted",
            capacity.saturating_sub(available),
            capacity,
            available,
        )
        .with_inodes(inodes, inodes_free);
        stats.device = state.fs_device.get(&0).copied();
        if state.container_fs.is_some() {
            stats.container_filesystems = vec!["/scripted-containers".to_owned()];
        }
        let others = state
            .other_image_fs
            .iter()
            .enumerate()
            .map(|(n, (capacity, available, inodes))| {
                let (inodes, free) = inodes.unwrap_or((0, 0));
                let mut fs = ImageFsStats::new(
                    format!("/scripted-{}", n + 1),
                    capacity.saturating_sub(*available),
                    *capacity,
                    *available,
                )
                .with_inodes(inodes, free);
                fs.device = state.fs_device.get(&(n + 1)).copied();
                fs
            })
            .collect();
        Ok(stats.with_other_image_fs(others))
    }

    async fn list_containers(&self) -> Result<Vec<RuntimeContainer>, CriError> {
        self.check_up("ListContainers")?;
        Ok(self.lock().containers.clone())
    }
}

impl AgentRuntime for ScriptedRuntime {
    type Events = NoEvents;

    async fn container_events(&self) -> Result<NoEvents, CriError> {
        Err(CriError::Rpc {
            method: "GetContainerEvents",
            code: RpcCode::Unimplemented,
            message: "method GetContainerEvents not implemented".to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ImageId;

    fn image(id: &str) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(id),
            size: 1,
            ..RuntimeImage::default()
        }
    }

    /// ListImages hands out the script's images themselves, not a copy; a change to the
    /// script afterwards copies them first, so the list a detect holds never changes under it.
    #[tokio::test]
    async fn list_images_shares_the_scripts_images_and_a_later_change_copies_them() {
        let runtime = ScriptedRuntime::new();
        runtime.state().images = vec![image("sha256:a"), image("sha256:b")].into();
        let listed = runtime.list_image_list().await.expect("listed");
        let shared = listed.shared_images().expect("an owned list");
        assert!(Arc::ptr_eq(shared, &runtime.state().images.list));
        runtime
            .state()
            .images
            .retain(|i| i.id.as_str() != "sha256:a");
        assert!(!Arc::ptr_eq(shared, &runtime.state().images.list));
        assert_eq!(
            listed.to_images(),
            vec![image("sha256:a"), image("sha256:b")]
        );
        assert_eq!(*runtime.state().images, vec![image("sha256:b")]);
    }

    /// A GC holds its cycle's list through every RemoveImage of its walk: a removal then
    /// hides the image from the runtime's own calls without copying the images, the held
    /// list stays as it was listed, and once no list shares them the script drops the image
    /// in place.
    #[tokio::test]
    async fn remove_image_while_a_list_is_held_hides_the_image_without_a_copy() {
        let runtime = ScriptedRuntime::new();
        let (a, b, c) = (image("sha256:a"), image("sha256:b"), image("sha256:c"));
        runtime.state().images = vec![a.clone(), b.clone(), c.clone()].into();
        runtime.state().fs = Some((10, 0));
        let listed = runtime.list_image_list().await.expect("listed");
        runtime.remove_image("sha256:b", "").await.expect("removed");
        assert!(Arc::ptr_eq(
            listed.shared_images().expect("an owned list"),
            &runtime.lock().images.list
        ));
        assert_eq!(
            runtime.image_status("sha256:b", "").await.expect("status"),
            None
        );
        assert_eq!(
            runtime.image_status("sha256:c", "").await.expect("status"),
            Some(c.clone())
        );
        assert_eq!(
            runtime.list_images().await.expect("list"),
            vec![a.clone(), c.clone()]
        );
        // A second removal of the hidden image frees nothing more.
        runtime.remove_image("sha256:b", "").await.expect("removed");
        assert_eq!(runtime.image_fs_stats().await.expect("fs").available, 1);
        assert_eq!(listed.to_images(), vec![a.clone(), b, c.clone()]);
        drop(listed);
        let before = Arc::as_ptr(&runtime.lock().images.list);
        assert_eq!(*runtime.state().images, vec![a, c]);
        assert_eq!(
            Arc::as_ptr(&runtime.state().images.list),
            before,
            "dropped in place"
        );
        assert_eq!(runtime.state().removed, vec!["sha256:b", "sha256:b"]);
    }
}
