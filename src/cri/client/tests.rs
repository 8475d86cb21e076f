//! Unit tests of the CRI client's endpoint parsing and configuration.

use super::*;

#[test]
fn unix_endpoint_and_bare_absolute_path_give_the_socket_path() {
    assert_eq!(
        socket_path("unix:///run/containerd/containerd.sock").expect("a unix:// endpoint is valid"),
        PathBuf::from("/run/containerd/containerd.sock")
    );
    assert_eq!(
        socket_path("/run/x.sock").expect("an absolute path is valid"),
        PathBuf::from("/run/x.sock")
    );
}

#[test]
fn tcp_and_relative_endpoints_are_invalid() {
    assert!(matches!(
        socket_path("tcp://127.0.0.1:1234"),
        Err(CriError::InvalidEndpoint { .. })
    ));
    assert!(matches!(
        socket_path("unix://relative.sock"),
        Err(CriError::InvalidEndpoint { .. })
    ));
    assert!(matches!(
        socket_path("x.sock"),
        Err(CriError::InvalidEndpoint { .. })
    ));
}

#[test]
fn default_config_is_containerd_with_kubelet_deadline() {
    let config = CriConfig::default();
    // The kubelet's default --container-runtime-endpoint, written out: comparing with
    // DEFAULT_RUNTIME_ENDPOINT would compare the constant with itself.
    assert_eq!(
        config.runtime_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(config.image_endpoint, None, "the image service shares it");
    assert_eq!(config.connect_timeout, Duration::from_secs(5));
    assert_eq!(config.call_timeout, Duration::from_secs(120));
    assert_eq!(
        config.pull_timeout, None,
        "PullImage has no client deadline"
    );
}
