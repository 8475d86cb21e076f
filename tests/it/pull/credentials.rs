//! Credentials from operator files that are not regular files, and a provider config
//! directory the agent reloads: a FIFO on the node's docker config search path or given as
//! `--pull-secret` never hangs a pull, and an edit in place of any file of a provider config
//! directory is reported as waiting for a restart.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use imagekeeper::agent::{Agent, ConfigSource};
use imagekeeper::clock::ManualClock;
use imagekeeper::config::FlagValues;
use imagekeeper::cri::{CriClient, FakeRuntime};
use imagekeeper::model::{ImageId, RuntimeImage, UnixNanos};
use imagekeeper::pull::{
    CredentialSources, ImageManager, NodeCredentials, PullAuth, PullConfig, PullPolicy,
};

use super::{NOW, pod};
use crate::support::agent::AgentFixture;
use crate::support::bin;

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: a valid C string and a mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Pulls with a FIFO at `<kubelet root>/config.json`, more of them at once than the runtime
/// has workers: each used to block a worker for good in open(2) (then GC, /healthz and the
/// admin socket stopped). Now all complete, anonymously. The runtime runs on its own thread
/// and the test waits for it at most a bound: without the fix it would hang, and the bound
/// turns that into a failure.
#[test]
fn pulls_complete_with_a_fifo_at_the_node_config_path() {
    const PULLS: usize = 6;
    let root = tempfile::tempdir().expect("temp dir");
    mkfifo(&root.path().join("config.json"));
    let root_dir = root.path().to_owned();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let pulled = runtime.block_on(async move {
            let fake = FakeRuntime::start().await.expect("fake runtime");
            for i in 0..PULLS {
                fake.add_pullable(
                    format!("reg.example.com/app{i}:1"),
                    RuntimeImage {
                        id: ImageId::new(format!("sha256:{i:04}")),
                        repo_tags: vec![format!("reg.example.com/app{i}:1")],
                        size: 10,
                        ..RuntimeImage::default()
                    },
                );
            }
            let client = CriClient::connect(fake.client_config())
                .await
                .expect("connect");
            let (_dir, store) = crate::support::temp_store(UnixNanos::from_secs(NOW));
            let store = Arc::new(store);
            let sources = CredentialSources {
                node: Some(NodeCredentials {
                    config_json_dirs: vec![root_dir.clone()],
                    dockercfg_dirs: vec![root_dir],
                }),
                plugins: None,
            };
            let manager = Arc::new(
                ImageManager::new(
                    &PullConfig::default(),
                    Arc::new(client),
                    store,
                    Arc::new(ManualClock::new(UnixNanos::from_secs(NOW))),
                )
                .expect("valid config")
                .with_credential_sources(Arc::new(sources)),
            );
            let pulls: Vec<_> = (0..PULLS)
                .map(|i| {
                    let manager = manager.clone();
                    tokio::spawn(async move {
                        manager
                            .ensure_image_exists_with(
                                &pod(),
                                &format!("reg.example.com/app{i}:1"),
                                PullPolicy::Always,
                                PullAuth::Keyring(&[]),
                                "",
                            )
                            .await
                    })
                })
                .collect();
            let mut refs = Vec::new();
            for pull in pulls {
                refs.push(pull.await.expect("joined").expect("the pull succeeds"));
            }
            (refs, fake.pulls())
        });
        let _ = tx.send(pulled);
    });
    let (refs, pulls) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the pulls complete (a FIFO on the search path must not hang them)");
    assert_eq!(refs.len(), PULLS);
    assert_eq!(pulls.len(), PULLS);
    assert!(pulls.iter().all(|p| p.credentials.is_none()), "{pulls:?}");
}

/// `imagekeeper pull --pull-secret FIFO` used to wait for a writer forever; it is bad input
/// now, exit 2 naming the file (the guard of `bin::output` bounds the run).
#[test]
fn a_fifo_given_as_pull_secret_is_refused_at_once_with_exit_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("secret.yaml");
    mkfifo(&fifo);
    let out = bin::output(bin::imagekeeper().args([
        "pull",
        "busybox",
        "--pull-secret",
        &fifo.display().to_string(),
        "--db",
        &dir.path().join("db.redb").display().to_string(),
        "--admin-socket",
        &dir.path().join("no-agent.sock").display().to_string(),
        "--container-runtime-endpoint",
        "unix:///nonexistent/imagekeeper-test/containerd.sock",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--pull-secret {}: {}: not a regular file (a FIFO)",
            fifo.display(),
            fifo.display()
        )),
        "{stderr}"
    );
}

/// A provider config directory: the agent loads every file, and a reload after an edit in
/// place of one of them says the plugins wait for a restart (the snapshot covers the whole
/// directory).
#[tokio::test]
async fn a_reload_reports_an_edit_in_place_of_a_provider_config_directory() {
    let AgentFixture { fake, dir, .. } = AgentFixture::builder().image_fs_used(1000).start().await;
    let bin_dir = dir.path().join("plugins");
    std::fs::create_dir(&bin_dir).expect("bin dir");
    for name in ["a", "b"] {
        let plugin = bin_dir.join(name);
        std::fs::write(&plugin, "#!/bin/sh\nexit 1\n").expect("plugin");
        std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let providers = dir.path().join("providers.d");
    std::fs::create_dir(&providers).expect("providers dir");
    let provider_config = |name: &str, glob: &str| {
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: {name}\n  matchImages: ['{glob}']\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
        )
    };
    std::fs::write(
        providers.join("a.yaml"),
        provider_config("a", "*.example.com"),
    )
    .expect("a");
    std::fs::write(
        providers.join("b.yaml"),
        provider_config("b", "*.example.org"),
    )
    .expect("b");
    let file = dir.path().join("imagekeeper.toml");
    std::fs::write(
        &file,
        format!(
            "imageGCHighThresholdPercent = 100\nkubeletRootDir = \"\"\nimageCredentialProviderConfig = {:?}\nimageCredentialProviderBinDir = {:?}\n",
            providers.display().to_string(),
            bin_dir.display().to_string()
        ),
    )
    .expect("write config");
    let source = ConfigSource {
        file: Some(file),
        flags: FlagValues {
            db: Some(dir.path().join("records.redb")),
            container_runtime_endpoint: Some(fake.endpoint()),
            admin_socket: Some(dir.path().join("admin.sock")),
            ..FlagValues::default()
        },
    };
    let start = source.resolve().expect("valid start configuration");
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(1_800_000_000)));
    let agent = Agent::start(start, clock)
        .await
        .expect("agent starts with a provider config directory")
        .with_config_source(source);

    let report = agent.reload().await.expect("reload");
    assert!(report.needs_restart.is_empty(), "{report:?}");

    std::fs::write(
        providers.join("b.yaml"),
        provider_config("b", "*.other.org"),
    )
    .expect("edit b in place");
    let report = agent.reload().await.expect("reload");
    assert!(report.changed.is_empty(), "{report:?}");
    assert_eq!(report.needs_restart, ["imageCredentialProviderConfig"]);
}
