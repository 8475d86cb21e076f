//! Unit tests of the CRI conversions: status codes to errors, proto messages to model
//! values and back, and the redacted `Debug` of credentials.

use super::super::client::MountSpec;
use super::*;

fn sample_image() -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new("sha256:0410e513415e62ba17f2362099aa7f44c71c379344c08ff9a565f145be9dfa26"),
        repo_tags: vec!["registry.local/pause:1.0".into()],
        repo_digests: vec!["registry.local/pause@sha256:937f".into()],
        size: 1_088_964,
        pinned: true,
        runtime_handler: "kata".into(),
    }
}

/// Only mounts with `image` set are image volumes; each gives its image id and, when the
/// runtime reports it, its digest (KEP-5365); empty names and repeats are left out.
#[test]
fn image_volumes_are_the_mounts_with_an_image() {
    let mount = |host: &str, image: Option<(&str, &str)>| proto::Mount {
        container_path: "/data".into(),
        host_path: host.into(),
        image: image.map(|(id, digest)| proto::ImageSpec {
            image: id.into(),
            image_ref: digest.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let status = proto::ContainerStatus {
        mounts: vec![
            mount("/var/lib/kubelet/pods/x/volumes/secret", None),
            mount("", Some(("sha256:aaa", "registry.local/a@sha256:d1"))),
            mount("", Some(("sha256:bbb", ""))),
            mount("", Some(("sha256:aaa", ""))),
            mount("", Some(("", ""))),
        ],
        ..Default::default()
    };
    let report = container_status_from_proto(status);
    assert_eq!(
        report.image_volumes,
        ["sha256:aaa", "registry.local/a@sha256:d1", "sha256:bbb"]
    );
}

/// A mount with `image` set goes out as CRI Mount field 9 (an ImageSpec naming the image,
/// no host path); a bind mount carries none.
#[test]
fn an_image_mount_sets_the_mount_image_spec_and_a_bind_mount_does_not() {
    let spec = ContainerSpec {
        name: "c".into(),
        image: "registry.local/app:1".into(),
        mounts: vec![
            MountSpec {
                container_path: "/model".into(),
                readonly: true,
                image: Some("sha256:aaa".into()),
                ..MountSpec::default()
            },
            MountSpec {
                container_path: "/data".into(),
                host_path: "/srv/data".into(),
                ..MountSpec::default()
            },
        ],
        ..ContainerSpec::default()
    };
    let config = container_config(&spec, &SandboxSpec::default());
    let images: Vec<Option<&str>> = config
        .mounts
        .iter()
        .map(|m| m.image.as_ref().map(|i| i.image.as_str()))
        .collect();
    assert_eq!(images, [Some("sha256:aaa"), None]);
    assert_eq!(config.mounts[0].host_path, "");
    assert!(config.mounts[0].readonly);
    assert_eq!(config.mounts[1].host_path, "/srv/data");
}

#[test]
fn image_round_trips_through_proto() {
    let image = sample_image();
    assert_eq!(image_from_proto(image_to_proto(&image)), image);
}

#[test]
fn image_without_spec_has_the_default_runtime_handler() {
    let mut proto_image = image_to_proto(&sample_image());
    proto_image.spec = None;
    assert_eq!(image_from_proto(proto_image).runtime_handler, "");
}

#[test]
fn container_round_trips_through_proto_in_every_state() {
    for state in [
        ContainerState::Created,
        ContainerState::Running,
        ContainerState::Exited,
        ContainerState::Unknown,
    ] {
        let container = RuntimeContainer {
            id: "c1".into(),
            pod_sandbox_id: "p1".into(),
            image: "registry.local/busybox:1.35".into(),
            image_id: ImageId::new("sha256:ee91"),
            state,
            runtime_handler: "".into(),
        };
        assert_eq!(
            container_from_proto(container_to_proto(&container)),
            container
        );
    }
}

#[test]
fn container_image_id_falls_back_to_image_ref() {
    let container = proto::Container {
        image_ref: "sha256:aaaa".into(),
        ..Default::default()
    };
    assert_eq!(
        container_from_proto(container).image_id.as_str(),
        "sha256:aaaa"
    );
    let container = proto::Container {
        image_ref: "registry.local/x@sha256:bbbb".into(),
        image_id: "sha256:cccc".into(),
        ..Default::default()
    };
    assert_eq!(
        container_from_proto(container).image_id.as_str(),
        "sha256:cccc"
    );
}

#[test]
fn unknown_container_state_value_is_unknown() {
    assert_eq!(container_state_from_proto(42), ContainerState::Unknown);
}

#[test]
fn credentials_round_trip_and_auth_config_debug_is_redacted() {
    let credentials = PullCredentials {
        username: "alice".into(),
        password: "hunter2".into(),
        auth: "YWxpY2U6aHVudGVyMg==".into(),
        server_address: "registry.local".into(),
        identity_token: "id-token-secret".into(),
        registry_token: "registry-token-secret".into(),
    };
    let auth = auth_config_from_credentials(&credentials);
    let shown = format!("{auth:?}");
    for secret in [
        "alice",
        "hunter2",
        "YWxpY2U6aHVudGVyMg==",
        "id-token-secret",
        "registry-token-secret",
    ] {
        assert!(!shown.contains(secret), "{secret} leaked in {shown}");
    }
    let request = proto::PullImageRequest {
        image: Some(image_spec("registry.local/x:1", "")),
        auth: Some(auth.clone()),
        sandbox_config: None,
    };
    assert!(!format!("{request:?}").contains("hunter2"));
    assert_eq!(credentials_from_auth_config(auth), credentials);
}

#[test]
fn every_rpc_code_round_trips_through_tonic() {
    for code in 0..=16 {
        let tonic_code = tonic::Code::from_i32(code);
        assert_eq!(
            rpc_code_to_tonic(rpc_code_from_tonic(tonic_code)),
            tonic_code
        );
    }
}

#[test]
fn status_keeps_code_and_message() {
    let err = error_from_status(
        "PullImage",
        "unix:///x",
        tonic::Status::not_found("image \"x\" not found"),
    );
    assert_eq!(err.code(), Some(RpcCode::NotFound));
    assert_eq!(
        err.to_string(),
        "rpc error: code = NotFound desc = image \"x\" not found"
    );
}

#[test]
fn image_fs_round_trips_and_empty_info_is_an_error() {
    let stats = image_fs_from_proto(image_fs_to_proto(
        &ImageFsStats::new("/var/lib/x", 1234, 0, 0),
        1,
    ))
    .expect("one image fs was given");
    assert_eq!(stats.mountpoint, "/var/lib/x");
    assert_eq!(stats.used_bytes, 1234);
    assert_eq!(stats.inodes_used, None);
    assert!(stats.container_filesystems.is_empty());
    // A split image filesystem (KEP-4191): every entry is read, the first image
    // filesystem is the one described, the others and the container filesystems named.
    let mut split = ImageFsStats::new("/var/lib/images", 10, 0, 0);
    split.inodes_used = Some(77);
    split.other_image_filesystems = vec!["/mnt/more".into()];
    split.container_filesystems = vec!["/var/lib/containers".into()];
    let got = image_fs_from_proto(image_fs_to_proto(&split, 1)).expect("two image fs");
    let mut more = ImageFsStats::new("/mnt/more", 0, 0, 0);
    assert_eq!(got.other_image_fs, [more.clone()]);
    let mut read = split.clone();
    read.other_image_fs = vec![more.clone()];
    assert_eq!(got, read);
    // A further image filesystem's own usage is read too (the caller adds statvfs).
    more.used_bytes = 5;
    more.inodes_used = Some(3);
    split.other_image_fs = vec![more];
    let got = image_fs_from_proto(image_fs_to_proto(&split, 1)).expect("two image fs");
    assert_eq!(got, split);
    let empty = proto::ImageFsInfoResponse::default();
    assert!(matches!(
        image_fs_from_proto(empty),
        Err(CriError::NoImageFilesystem)
    ));
}

#[test]
fn version_round_trips() {
    let version = RuntimeVersion {
        version: "0.1.0".into(),
        runtime_name: "containerd".into(),
        runtime_version: "1.6.20".into(),
        runtime_api_version: "v1".into(),
    };
    assert_eq!(version_from_proto(version_to_proto(&version)), version);
}

#[test]
fn host_network_sandbox_has_node_network_and_no_hostname() {
    let config = sandbox_config(&SandboxSpec {
        name: "pod".into(),
        uid: "uid".into(),
        namespace: "ns".into(),
        log_directory: "/tmp/logs".into(),
        host_network: true,
        ..SandboxSpec::default()
    });
    assert_eq!(config.hostname, "");
    let options = config
        .linux
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options)
        .expect("sandbox_config always sets namespace options");
    assert_eq!(options.network, i32::from(proto::NamespaceMode::Node));
}
