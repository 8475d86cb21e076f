//! The node's own registry credentials (`pkg/credentialprovider/config.go`,
//! `ReadDockerConfigFile`): the first `config.json` found on the search path (the kubelet
//! root dir, the working dir, `$HOME/.docker`, `/.docker`), else the first legacy
//! `.dockercfg` (the kubelet root dir, the working dir, `$HOME`, `/`).
//!
//! Invariant: the files are read at each lookup (the kubelet caches them for 5 minutes; here
//! an edited file takes effect at the next pull), as operator files (`crate::operator_file`:
//! regular files only, at most 1 MiB, nesting bounded) and off the async workers. A file that
//! cannot be read or parsed (a FIFO, a device, an oversized file) is skipped with a warning
//! that names the file, never its content, and the search goes on.

use std::path::{Path, PathBuf};

use super::{CredentialsError, DockerConfig, docker_config};
use crate::operator_file::{self, Follow};

/// Where the node's docker config files are looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCredentials {
    /// Directories holding `config.json`, in search order.
    pub config_json_dirs: Vec<PathBuf>,
    /// Directories holding `.dockercfg`, in search order.
    pub dockercfg_dirs: Vec<PathBuf>,
}

impl NodeCredentials {
    /// The kubelet's search path with `kubelet_root_dir` as its preferred path
    /// (`SetPreferredDockercfgPath(rootDirectory)`); `None` leaves it out.
    pub fn kubelet_search_path(kubelet_root_dir: Option<&Path>) -> NodeCredentials {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let working = std::env::current_dir().ok();
        let mut json = Vec::new();
        let mut cfg = Vec::new();
        if let Some(root) = kubelet_root_dir {
            json.push(root.to_owned());
            cfg.push(root.to_owned());
        }
        if let Some(w) = working {
            json.push(w.clone());
            cfg.push(w);
        }
        if let Some(h) = home {
            json.push(h.join(".docker"));
            cfg.push(h);
        }
        json.push(PathBuf::from("/.docker"));
        cfg.push(PathBuf::from("/"));
        NodeCredentials {
            config_json_dirs: json,
            dockercfg_dirs: cfg,
        }
    }

    /// The node's docker config now, read on tokio's blocking pool (no async worker waits
    /// on a file).
    pub async fn read_async(&self) -> DockerConfig {
        let node = self.clone();
        tokio::task::spawn_blocking(move || node.read())
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "Reading the node's docker config did not complete; skipping it");
                DockerConfig::default()
            })
    }

    /// The node's docker config now (empty when no file is found). Blocking: from async
    /// code use [`Self::read_async`].
    pub fn read(&self) -> DockerConfig {
        for dir in &self.config_json_dirs {
            if let Some(config) =
                read_one(&dir.join("config.json"), docker_config::parse_config_json)
            {
                return config;
            }
        }
        for dir in &self.dockercfg_dirs {
            if let Some(config) = read_one(&dir.join(".dockercfg"), docker_config::parse_dockercfg)
            {
                return config;
            }
        }
        DockerConfig::default()
    }
}

fn read_one(
    path: &Path,
    parse: fn(&str, &[u8]) -> Result<DockerConfig, CredentialsError>,
) -> Option<DockerConfig> {
    let bytes = match operator_file::read_text(path, Follow::Yes) {
        Ok(text) => text.into_bytes(),
        Err(e) if e.is_not_found() => return None,
        Err(e) => {
            // The error names the file (a FIFO, a device, too large, unreadable...).
            tracing::warn!(error = %e, "Reading the node's docker config failed; skipping it");
            return None;
        }
    };
    match parse(&path.display().to_string(), &bytes) {
        Ok(config) => Some(config),
        Err(e) => {
            tracing::warn!(error = %e, "The node's docker config is invalid; skipping it");
            None
        }
    }
}
