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
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScriptImages(Arc<Vec<RuntimeImage>>);

impl std::ops::Deref for ScriptImages {
    type Target = Vec<RuntimeImage>;

    fn deref(&self) -> &Vec<RuntimeImage> {
        &self.0
    }
}

impl std::ops::DerefMut for ScriptImages {
    fn deref_mut(&mut self) -> &mut Vec<RuntimeImage> {
        Arc::make_mut(&mut self.0)
    }
}

impl From<Vec<RuntimeImage>> for ScriptImages {
    fn from(images: Vec<RuntimeImage>) -> ScriptImages {
        ScriptImages(Arc::new(images))
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

    /// The state, to read or change.
    pub fn state(&self) -> MutexGuard<'_, ScriptState> {
        match self.state.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn check_up(&self, method: &'static str) -> Result<(), CriError> {
        match &self.state().down {
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
        Ok(self.state().images.to_vec())
    }

    async fn list_image_list(&self) -> Result<ImageList, CriError> {
        self.check_up("ListImages")?;
        Ok(ImageList::from(Arc::clone(&self.state().images.0)))
    }

    async fn image_status(
        &self,
        image: &str,
        _runtime_handler: &str,
    ) -> Result<Option<RuntimeImage>, CriError> {
        self.check_up("ImageStatus")?;
        Ok(self
            .state()
            .images
            .iter()
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
        let state = self.state();
        match state
            .images
            .iter()
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
        let mut state = self.state();
        if state.remove_fails.contains(image) {
            return Err(CriError::Rpc {
                method: "RemoveImage",
                code: RpcCode::Unknown,
                message: format!("failed to remove image {image:?}: scripted failure"),
            });
        }
        let mut freed = 0u64;
        let mut hits = 0u64;
        state.images.retain(|i| {
            let hit = i.id.as_str() == image && i.runtime_handler == runtime_handler;
            if hit {
                freed = freed.saturating_add(i.size);
                hits += 1;
            }
            !hit
        });
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
        if let Some(message) = self.state().fs_error.clone() {
            return Err(CriError::Rpc {
                method: "ImageFsInfo",
                code: RpcCode::Unknown,
                message,
            });
        }
        let state = self.state();
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
        Ok(self.state().containers.clone())
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
        assert!(Arc::ptr_eq(shared, &runtime.state().images.0));
        runtime
            .state()
            .images
            .retain(|i| i.id.as_str() != "sha256:a");
        assert!(!Arc::ptr_eq(shared, &runtime.state().images.0));
        assert_eq!(
            listed.to_images(),
            vec![image("sha256:a"), image("sha256:b")]
        );
        assert_eq!(*runtime.state().images, vec![image("sha256:b")]);
    }
}
