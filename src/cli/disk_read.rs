//! What `inspect disk` reads: containerd as it is (every namespace,
//! read-only, `cri::ContainerdView`) and what the image filesystem (the mountpoint CRI
//! ImageFsInfo reports) has in use.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use imagekeeper::cri::{ContainerdView, CriClient, CriConfig, ImageRuntime, filesystem_usage};
use imagekeeper::model::{ContainerdState, FilesystemUsage};

use super::Failure;

/// containerd at `address` and the image filesystem the CRI at `runtime_endpoint` names, each
/// call within `timeout`. A malformed endpoint is a usage failure (exit 2).
pub fn read_runtime(
    runtime_endpoint: &str,
    address: &str,
    timeout: Duration,
) -> Result<(ContainerdState, FilesystemUsage), Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        let cri = CriClient::connect(CriConfig {
            runtime_endpoint: runtime_endpoint.to_owned(),
            connect_timeout: Duration::from_secs(5),
            call_timeout: timeout,
            ..CriConfig::default()
        })
        .await
        .map_err(Failure::usage)?;
        let view = ContainerdView::connect(address, Duration::from_secs(5), timeout)
            .map_err(Failure::usage)?;
        let image_fs = cri
            .image_fs_stats()
            .await
            .with_context(|| format!("ImageFsInfo of {runtime_endpoint}"))?;
        let state = view
            .read()
            .await
            .with_context(|| format!("containerd at {address}"))?;
        let fs = filesystem_usage(Path::new(&image_fs.mountpoint))?;
        Ok::<_, Failure>((state, fs))
    })
}
